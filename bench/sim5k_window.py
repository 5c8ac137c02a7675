"""A window of the ``sim-5k`` run: its CPU, and a digest of every cycle's decisions.

The whole 200k run does not fit in a measurement, so changes to its cost are compared
on a window of it: ``python -m bench.sim5k_window TRACE.yaml --from-cycle 57117
--max-cycles 60000 [--config FILE]`` runs the trace (``python -m bench.cycle5k
TRACE.yaml 200000`` writes it; cycle 57,117 is about when the deep tree is full) as
``quartermaster simulate`` does, and prints one JSON object: the CPU seconds and
simulated seconds of the window, the engine's counts in it, and ``digest``, a hash of
every cycle's admissions (workload, ClusterQueue, admission), preemptions (victim,
ClusterQueue, preemptor, reason, message) and pending statuses, in order. Two trees
that decide the same give the same digest; ``--digests FILE`` writes the per-cycle
hashes, to find the first cycle where two runs part.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import time
from typing import Any


def run_window(
    trace: str, *, config: str | None, from_cycle: int, max_cycles: int
) -> tuple[dict[str, Any], list[str]]:
    from admission.cli.simulate import load_scenario
    from admission.config.load import load_config
    from admission.engine.scheduler import Scheduler
    from admission.sim.simulator import Simulator

    scenario = load_scenario(trace, trace_path=None, seed=None)
    sim = Simulator(
        scenario,
        config=load_config(config),
        copy_workloads=False,
        samples=False,
        max_cycles=max_cycles,
    )
    digests: list[str] = []
    start: dict[str, Any] = {}
    plain = Scheduler.schedule

    def schedule(sched: Scheduler) -> Any:
        if sched.cycle_count == from_cycle:
            start.update(cpu=time.process_time(), at_us=sim.now_us, stats=dict(sched.stats))
        r = plain(sched)
        h = hashlib.sha256()
        for d in r.admitted:
            h.update(f"A{d.workload.key}|{d.cluster_queue}|{d.admission}\n".encode())
        for p in r.preempted:
            h.update(
                f"P{p.workload.key}|{p.cluster_queue}|{p.by}|{p.reason}|{p.message}|"
                f"{p.notice_deadline}\n".encode()
            )
        for key in sorted(r.pending):
            h.update(f"W{key}|{r.pending[key]!r}\n".encode())
        h.update(f"C{r.changed}|{r.heads}\n".encode())
        digests.append(h.hexdigest()[:16])
        return r

    Scheduler.schedule = schedule  # type: ignore[method-assign,assignment]
    try:
        result = sim.run()
    finally:
        Scheduler.schedule = plain  # type: ignore[method-assign]
    if not start:
        raise SystemExit(f"the run ended before cycle {from_cycle}")
    stats = sim.scheduler.stats
    out = {
        "fromCycle": from_cycle,
        "toCycle": sim.scheduler.cycle_count,
        "windowCpuSeconds": round(time.process_time() - start["cpu"], 2),
        "simulatedSeconds": [start["at_us"] / 1e6, result.stopped_at_us / 1e6],
        "window": {k: stats[k] - start["stats"].get(k, 0) for k in sorted(stats)},
        "finished": sum(1 for r in result.records if r.finished_us is not None),
        "maxRssMiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "digest": hashlib.sha256("".join(digests).encode()).hexdigest()[:16],
    }
    return out, digests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--config")
    ap.add_argument("--from-cycle", type=int, required=True)
    ap.add_argument("--max-cycles", type=int, required=True)
    ap.add_argument("--digests", help="write the per-cycle hashes here, one a line")
    args = ap.parse_args()
    out, digests = run_window(
        args.trace, config=args.config, from_cycle=args.from_cycle, max_cycles=args.max_cycles
    )
    if args.digests:
        with open(args.digests, "w", encoding="utf-8") as f:
            f.write("\n".join(digests) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
