"""``throughput-1300``: one admission per ClusterQueue per cycle against scheduling refill,
on a cluster in the shape of a production GPU cluster that reported it (docs/benchmarks.md).

The cluster: 1,300 nodes × 8 GPUs (13 blocks × 5 racks × 20 hosts, a block / rack /
hostname Topology on one TAS flavor), 40 ClusterQueues in 8 cohorts of 5, each with a
nominal quota of 256 GPUs and no borrowing limit, Kueue's preemption defaults
(``reclaimWithinCohort: Any``, ``withinClusterQueue: LowerPriority``) and fair sharing on.

The load, over ``ARRIVAL_MINUTES`` simulated minutes: every ClusterQueue receives a steady
trickle of mixed gangs (1-16 pods of 8 GPUs, required rack, required block or preferred
rack, 10-40 minutes, one every ``GANG_INTERVAL_S`` on average: about 70 % of the GPUs);
the busiest one (``cq-0-0``) also receives a steady stream of small jobs (one pod of 1
GPU, 2-6 minutes, ``SMALL_PER_MINUTE``) that its quota and its cohort's can run, but faster than one
admission per cycle drains it when cycles are as slow as the reported cluster's. The
drain probe is the same cluster with the gangs for ``DRAIN_MINUTES`` and, instead of the
stream, ``DRAIN_BACKLOG`` small jobs in the busiest queue at t=0: how long until the last
of them is admitted. Arrival times, sizes and runtimes come from a fixed seed.

Each row runs the simulator once with Kueue's behaviour (``refillOff``) and once with
``schedulingRefill: {enable: true}`` (``refillOn``), on the same scenario, with the API
model of Kueue's harness budget (50 QPS, burst 100, 5 ms a write). The headline rows
charge every cycle the CPU time ``schedule()`` took (``cycle_cost="measured"``, a refill
cycle's rounds included); ``atReportedCycleRate`` charges every cycle the reported
cluster's 2.4 s (25 cycles a minute) whatever it does, so refill rounds cost nothing
beyond their cycle there: it shows what refill changes where cycles are that slow.
A row reports: ``admissionsPerMinute`` (admissions ÷ simulated minutes from the first
arrival to the last admission), the busiest ClusterQueue's peak depth and the minutes
it held at least ``BACKLOG``, p50 and p90 wait (creation to first admission) of the
busiest queue and of the shallow ones (every other queue, together), ``cycleCpuMs``
p50/p99 (the measured CPU time of ``schedule()``, whatever the row charges), cycles per
simulated minute, ``requestsPerAdmission`` (the model's writes, admissions and
evictions, per admission) and ``backlogDrainS`` / ``backlogDrainNoApiS`` (the drain
probe with the API model and without it). ``drainSpeedup`` is refill off's drain time ÷
refill on's, ``busiestOverShallowP50Wait`` refill on's busiest p50 wait ÷ its shallow p50.

The figures reported from the production cluster (Kueue v0.18, fair sharing and TAS
on, ~1,300 nodes) are printed under ``reportedElsewhere`` for context only: they come
from a different machine, cluster and load, not from this run.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.plan_tas import tas_documents

BLOCKS, RACKS, HOSTS, GPUS = 13, 5, 20, 8
COHORTS, QUEUES_PER_COHORT, NOMINAL_GPUS = 8, 5, 256
ARRIVAL_MINUTES = 60
GANG_INTERVAL_S = 360  # a gang into every queue every 6 minutes on average
SMALL_PER_MINUTE = 33.0  # into the busiest queue
DRAIN_BACKLOG, DRAIN_MINUTES = 500, 10
KUEUE_CYCLE_S = 60 / 25  # the reported cluster's cycle
BUSY = "cq-0-0"
BACKLOG = 50  # depth from which the busiest queue counts as draining a backlog
LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
REPORTED = {  # the production cluster's own figures: context, not this run
    "cyclesPerMinute": 25,
    "admissionsPerMinute": 9.6,
    "busiestQueueDepth": 536,
    "busiestQueueP50WaitS": 64 * 60,
    "busiestQueueP90WaitS": 78 * 60,
    "shallowQueueP50WaitS": 12,
}


def _queue_docs() -> list[dict[str, Any]]:
    kueue = "kueue.x-k8s.io/v1beta2"
    hosts = (
        (f"b{b}", f"b{b}-r{r}", f"b{b}-r{r}-h{h:02d}")
        for b in range(BLOCKS)
        for r in range(RACKS)
        for h in range(HOSTS)
    )
    docs = tas_documents(LEVELS, hosts, {"nvidia.com/gpu": str(GPUS), "pods": "110"})
    for c in range(COHORTS):
        docs.append({"apiVersion": kueue, "kind": "Cohort", "metadata": {"name": f"co-{c}"}})
        for q in range(QUEUES_PER_COHORT):
            cq = f"cq-{c}-{q}"
            docs.append(
                {
                    "apiVersion": kueue,
                    "kind": "ClusterQueue",
                    "metadata": {"name": cq},
                    "spec": {
                        "cohortName": f"co-{c}",
                        "namespaceSelector": {},
                        "preemption": {
                            "reclaimWithinCohort": "Any",
                            "withinClusterQueue": "LowerPriority",
                        },
                        "resourceGroups": [
                            {
                                "coveredResources": ["nvidia.com/gpu"],
                                "flavors": [
                                    {
                                        "name": "tas",
                                        "resources": [
                                            {
                                                "name": "nvidia.com/gpu",
                                                "nominalQuota": str(NOMINAL_GPUS),
                                            }
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                }
            )
            docs.append(
                {
                    "apiVersion": kueue,
                    "kind": "LocalQueue",
                    "metadata": {"name": "lq", "namespace": cq},
                    "spec": {"clusterQueue": cq},
                }
            )
    return docs


def _gang(rng: random.Random) -> dict[str, Any]:
    count = rng.choice([1, 2, 2, 4, 4, 8, 8, 16])
    kind = rng.choice(["required-rack", "required-block", "preferred-rack"])
    level = LEVELS[1] if kind.endswith("rack") else LEVELS[0]
    request = {"required": level} if kind.startswith("required") else {"preferred": level}
    return {
        "name": "main",
        "count": count,
        "requests": {"nvidia.com/gpu": GPUS},
        "topologyRequest": request,
    }


def trace_entries(
    seed: int = 1,
    *,
    minutes: float = ARRIVAL_MINUTES,
    small_per_minute: float = SMALL_PER_MINUTE,
    burst: int = 0,
) -> list[dict[str, Any]]:
    """The workloads: a trickle of gangs into every queue and a stream of small jobs
    into the busiest one over ``minutes`` (see the module docstring); ``burst`` more
    small jobs arrive in the busiest queue at t=0 (the drain probe)."""
    rng = random.Random(seed)
    horizon = minutes * 60
    entries: list[dict[str, Any]] = []
    for c in range(COHORTS):
        for q in range(QUEUES_PER_COHORT):
            cq = f"cq-{c}-{q}"
            t = rng.uniform(0, 60)
            k = 0
            while t < horizon:
                entries.append(
                    {
                        "name": f"gang-{k}",
                        "namespace": cq,
                        "localQueue": "lq",
                        "arrival": round(t, 3),
                        "runtime": rng.randint(10, 40) * 60,
                        "priority": 100,
                        "class": "gang",
                        "podSets": [_gang(rng)],
                    }
                )
                k += 1
                t += rng.expovariate(1 / GANG_INTERVAL_S)

    def small(name: str, at: float) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": BUSY,
            "localQueue": "lq",
            "arrival": round(at, 3),
            "runtime": rng.randint(2, 6) * 60,
            "priority": 100,
            "class": "small",
            "podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
        }

    entries += [small(f"backlog-{k}", 0.0) for k in range(burst)]
    t, k = 0.0, 0
    while small_per_minute and t < horizon:
        entries.append(small(f"small-{k}", t))
        k += 1
        t += rng.expovariate(small_per_minute / 60)
    return entries


def scenario(seed: int = 1, **load: Any) -> Any:
    """The cluster with the workloads of ``trace_entries(seed, **load)``."""
    from admission.sim.trace import load_trace

    docs: list[Any] = [
        *_queue_docs(),
        {"name": "throughput-1300", "trace": trace_entries(seed, **load)},
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "throughput-1300.yaml"
        path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
        return load_trace(str(path), docs)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _simulate(
    refill: bool, cycle_seconds: float | None, seed: int, *, api: bool = True, **load: Any
) -> Any:
    """Run the scenario once: (result, CPU ms of every cycle, busiest-queue depth per
    simulated second as (µs, depth), CPU seconds of the run)."""
    from admission.config.load import parse_config
    from admission.engine.scheduler import Scheduler
    from admission.sim.api_model import ApiModel
    from admission.sim.simulator import Simulator

    doc: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "fairSharing": {},
    }
    if refill:
        doc["schedulingRefill"] = {"enable": True}
    config = parse_config(doc, source="throughput-1300")
    sc = scenario(seed, **load)
    cycle_ms: list[float] = []
    original = Scheduler.schedule

    def timed(self: Scheduler) -> Any:
        t = time.thread_time()
        try:
            return original(self)
        finally:
            cycle_ms.append((time.thread_time() - t) * 1000)

    depth: list[tuple[int, int]] = []
    sim: Simulator

    def sample(_now: float) -> None:
        q = sim.cache.queues.get(BUSY)
        depth.append((sim.now_us, len(q) if q is not None else 0))

    sim = Simulator(
        sc,
        config=config,
        cycle_cost="measured" if cycle_seconds is None else "fixed",
        cycle_latency=cycle_seconds or 0.001,
        api=ApiModel(qps=50, burst=100, latency=0.005) if api else None,
        samples=False,
        sample_interval=1.0,
        on_sample=sample,
    )
    Scheduler.schedule = timed  # type: ignore[method-assign]
    t0 = time.process_time()
    try:
        result = sim.run()
    finally:
        Scheduler.schedule = original  # type: ignore[method-assign]
    return result, cycle_ms, depth, time.process_time() - t0


def run_mode(refill: bool, seed: int = 1, cycle_seconds: float | None = None) -> dict[str, Any]:
    """One row: the steady scenario with refill off or on, cycles costing their measured
    CPU time (or ``cycle_seconds`` each), and the drain probe under the same costs."""
    from admission.sim.scenario import US_PER_S

    result, cycle_ms, depth, cpu = _simulate(refill, cycle_seconds, seed)
    waits: dict[bool, list[float]] = {True: [], False: []}
    admitted_at: list[int] = []
    for r in result.records:
        if r.first_admitted_us is None:
            continue
        busy = r.sim.workload.namespace == BUSY
        waits[busy].append((r.first_admitted_us - r.sim.arrival_us) / US_PER_S)
        admitted_at.append(r.first_admitted_us)
    first_arrival = min(r.sim.arrival_us for r in result.records)
    minutes = (max(admitted_at) - first_arrival) / US_PER_S / 60
    admissions = result.stats["admissions"]
    backlog_s = sum(1 for _, d in depth if d >= BACKLOG)  # one sample a simulated second
    drain_s, drain_cpu = [], 0.0
    for api in (True, False):
        drain, _, _, spent = _simulate(
            refill,
            cycle_seconds,
            seed,
            api=api,
            minutes=DRAIN_MINUTES,
            small_per_minute=0,
            burst=DRAIN_BACKLOG,
        )
        drain_cpu += spent
        probe = [
            r.first_admitted_us
            for r in drain.records
            if r.sim.workload.name.startswith("backlog-") and r.first_admitted_us is not None
        ]
        drained = len(probe) == DRAIN_BACKLOG
        drain_s.append(round(max(probe) / US_PER_S, 3) if drained else None)
    return {
        "admissionsPerMinute": round(admissions / minutes, 1),
        "admissions": admissions,
        "preemptions": result.stats["preemptions"],
        "notAdmitted": sum(1 for r in result.records if r.first_admitted_us is None),
        "simulatedMinutes": round(minutes, 1),
        "busiestQueuePeakDepth": max((d for _, d in depth), default=0),
        "busiestQueueBacklogMinutes": round(backlog_s / 60, 1),
        "busiestQueueP50WaitS": _round(_pct(waits[True], 0.5)),
        "busiestQueueP90WaitS": _round(_pct(waits[True], 0.9)),
        "shallowQueueP50WaitS": _round(_pct(waits[False], 0.5)),
        "shallowQueueP90WaitS": _round(_pct(waits[False], 0.9)),
        "cycles": len(cycle_ms),
        "cyclesPerMinute": round(len(cycle_ms) / minutes, 1),
        "cycleCpuMs": {
            "p50": _round(_pct(cycle_ms, 0.5)),
            "p99": _round(_pct(cycle_ms, 0.99)),
            "mean": _round(statistics.fmean(cycle_ms)) if cycle_ms else None,
        },
        "requestsPerAdmission": round(result.api_writes / admissions, 3) if admissions else None,
        "backlogDrainS": drain_s[0],
        "backlogDrainNoApiS": drain_s[1],
        "cpuSeconds": round(cpu + drain_cpu, 1),
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _verdict(off: dict[str, Any], on: dict[str, Any]) -> dict[str, Any]:
    a, b = off["backlogDrainS"], on["backlogDrainS"]
    c, d = off["backlogDrainNoApiS"], on["backlogDrainNoApiS"]
    busy, shallow = on["busiestQueueP50WaitS"], on["shallowQueueP50WaitS"]
    return {
        "drainSpeedup": round(a / b, 1) if a and b else None,
        "drainSpeedupNoApi": round(c / d, 1) if c and d else None,
        "busiestOverShallowP50Wait": round(busy / shallow, 2) if shallow else None,
    }


def run() -> dict[str, Any]:
    load = [round(x, 2) for x in os.getloadavg()]
    off, on = run_mode(False), run_mode(True)
    slow_off = run_mode(False, cycle_seconds=KUEUE_CYCLE_S)
    slow_on = run_mode(True, cycle_seconds=KUEUE_CYCLE_S)
    return {
        "refillOff": off,
        "refillOn": on,
        **_verdict(off, on),
        "atReportedCycleRate": {
            "cycleSeconds": round(KUEUE_CYCLE_S, 2),
            "refillOff": slow_off,
            "refillOn": slow_on,
            **_verdict(slow_off, slow_on),
        },
        "loadAverage": {"before": load, "after": [round(x, 2) for x in os.getloadavg()]},
        "reportedElsewhere": REPORTED,
    }
