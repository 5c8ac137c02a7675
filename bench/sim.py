"""``sim-baseline`` and ``sim-large``: Kueue's scheduler-performance scenarios on the
simulated clock (docs/benchmarks.md).

The generator configs are Kueue's, shipped in ``admission/scenarios/kueue-perf/`` (or
read from ``$QM_KUEUE_PERF_DIR``). ``cpuSeconds`` covers parsing, the lower
bound and the simulation; Kueue's published numbers ride along under ``kueue`` so a
run can be compared at a glance (their wall time is real time against envtest, ours
is simulated time).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

KUEUE = {
    "baseline": {
        "wallMs": 351_116,
        "usagePercent": 55.9,
        "averageTimeToAdmissionMs": {"large": 16_501, "medium": 76_768, "small": 215_468},
    },
    "large-scale": {
        "wallMs": 1_179_411,
        "usagePercent": 38.64,
        "averageTimeToAdmissionMs": {"large": 105_604, "medium": 256_413, "small": 700_379},
    },
}


def scenario_dir() -> Path:
    env = os.environ.get("QM_KUEUE_PERF_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "admission" / "scenarios" / "kueue-perf"


def run_scenario(name: str) -> dict[str, Any]:
    from admission.cli.simulate import load_scenario, simulate_summary

    path = scenario_dir() / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: Kueue's {name} generator config not found (set QM_KUEUE_PERF_DIR)"
        )
    t0 = time.process_time()
    scenario = load_scenario(str(path))
    summary, _ = simulate_summary(scenario)
    cpu = time.process_time() - t0
    classes = summary["workloadClasses"]
    return {
        "makespanMs": summary["makespanMs"],
        "lowerBoundMs": summary["lowerBoundMs"],
        "makespanOverLowerBound": summary.get("makespanOverLowerBound"),
        "averageTimeToAdmissionMs": {c: v["averageTimeToAdmissionMs"] for c, v in classes.items()},
        "p95TimeToAdmissionMs": {c: v["p95TimeToAdmissionMs"] for c, v in classes.items()},
        "totalEvictions": {c: v["totalEvictions"] for c, v in classes.items()},
        "usagePercent": summary["clusterQueueClasses"]["cq"]["usagePercent"],
        "cycles": summary["engine"]["cycles"],
        "preemptions": summary["engine"]["preemptions"],
        "cpuSeconds": round(cpu, 3),
        "kueue": KUEUE[name],
    }


def run_baseline() -> dict[str, Any]:
    return run_scenario("baseline")


def run_large() -> dict[str, Any]:
    return run_scenario("large-scale")
