"""``sim-5k``: ``quartermaster simulate`` at cluster scale (docs/benchmarks.md).

The trace ``bench.cycle5k.write_simulate_trace`` writes: the ``cycle-5k`` deep tree
(5,000 ClusterQueues under one root, cohort depth 4) and 200,000 single-pod workloads
arriving uniformly over 600 s, running 60-600 s, priority 50/100/200, 1/2/5 cpu. It is
written to a temporary directory one line at a time, then run through the real
``quartermaster simulate -o json`` (trace loading, the simulated run, the summary), so
``cpuSeconds`` is that command's CPU time and ``peakRssMiB`` its process's peak (the
generator holds nothing). ``QM_SIM5K_WORKLOADS`` sets another number of workloads
(e.g. 20000 for a quick look; the target is for 200,000).
``QM_SIM5K_PARK_UNTIL_FEASIBLE=1`` runs it with a ``--config`` file that sets
``parkUntilFeasible: true`` (deficit-bounded parking, our extension), reported as
``parkUntilFeasible``.

Figures: cpuSeconds (the command: reading the trace, the run, the summary),
runCpuSeconds (the simulated run), cycleCpuSeconds (of it, inside the engine's
``schedule()``; the rest is the simulator's own), cycles (with ``nominations``: cycles
without any head cost the engine a pass over every ClusterQueue all the same),
makespanOverLowerBound, peakRssMiB. Compare with itself over time
and with the target (≤ 60 CPU s, ≤ 500 MiB at 200,000); there is no peer figure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

WORKLOADS = 200_000


def run() -> dict[str, Any]:
    from admission.cli.main import main
    from bench.cycle5k import write_simulate_trace

    workloads = int(os.environ.get("QM_SIM5K_WORKLOADS", WORKLOADS))
    bounded = os.environ.get("QM_SIM5K_PARK_UNTIL_FEASIBLE", "") not in ("", "0")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sim-5k.yaml"
        write_simulate_trace(str(path), workloads=workloads)
        args = ["simulate", str(path), "-o", "json"]
        if bounded:
            config = Path(tmp) / "config.yaml"
            config.write_text(
                "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
                "parkUntilFeasible: true\n",
                encoding="utf-8",
            )
            args += ["--config", str(config)]
        out = io.StringIO()
        t0 = time.process_time()
        with contextlib.redirect_stdout(out):
            code = main(args)
        cpu = time.process_time() - t0
    if code != 0:
        raise RuntimeError(f"simulate exited {code}")
    summary = json.loads(out.getvalue())
    engine = summary["engine"]
    return {
        "parkUntilFeasible": bounded,
        "workloads": summary["workloads"],
        "clusterQueues": len(summary["clusterQueueClasses"]),
        "cpuSeconds": round(cpu, 3),
        "runCpuSeconds": engine["cpuSeconds"],
        "cycleCpuSeconds": engine["cycleCpuSeconds"],
        "cycles": engine["cycles"],
        "nominations": engine["nominations"],
        "admissions": engine["admissions"],
        "preemptions": engine["preemptions"],
        "makespanMs": summary["makespanMs"],
        "makespanOverLowerBound": summary.get("makespanOverLowerBound"),
    }
