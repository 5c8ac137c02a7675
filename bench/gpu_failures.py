"""``gpu-failures``: GPU-hours lost to node failures under Kueue's policy and ours.

The cluster (``admission.sim.failure_cluster``): 256 nodes × 8 H100s, 4 blocks × 8
racks × 8 nodes, 3 blocks topology-aware and 1 plain, offered 90 % of its GPU-hours
over 30 days by the bundled gang mix. Nodes fail at Meta's Llama 3 rate scaled per GPU
(about one failure a day on 2,048 GPUs) and are repaired in about two hours
(``admission.sim.failure_model``). The same workloads and the very same failures run
under both policies (``admission.sim.failure_policy``), for ``SEEDS`` failure
schedules; the figures are their totals (GPU-hours) and pooled percentiles. A second
set of runs adds one flaky node that fails again after every ~4 h of uptime.

``variants`` are two variants of ours, not its defaults (``admission.sim.failure_policy``):
``oursHoldForSpare`` holds a TAS gang with no spare node for 30 minutes before evicting
it, ``oursQuarantine`` has a node that failed two distinct workloads cordoned for a day.

Top-level ``ours`` and ``kueue`` are the Meta-rate runs, with
``readmissionsOntoFlakyNode`` taken from the flaky-node runs (``flakyNode`` has those in
full). Simulated time only: the figures do not depend on the machine (CPU seconds do).
"""

from __future__ import annotations

import time
from typing import Any

SEEDS = (1, 2, 3, 4)
FLAKY_NODE = "b0-r0-n0"  # a node of the topology-aware pool
DAYS = 30.0
HORIZON_DAYS = 60  # outages are drawn this far; a run stops once every workload is done


def _sum(runs: list[Any]) -> Any:
    import dataclasses

    from admission.sim.failure_report import FailureStats

    total = FailureStats()
    for st in runs:
        for f in dataclasses.fields(FailureStats):
            name = f.name
            value = getattr(st, name)
            if name == "gpus":
                total.gpus = value
            elif isinstance(value, int):
                setattr(total, name, getattr(total, name) + value)
            elif isinstance(value, list):
                getattr(total, name).extend(value)
            elif isinstance(value, dict):
                for k, v in value.items():
                    total.evictions[k] = total.evictions.get(k, 0) + v
    return total


def run_set(flaky: str | None) -> dict[str, dict[str, Any]]:
    """Every policy over the seeds' failure schedules (plus ``flaky`` failing often)."""
    from admission.sim import failure_cluster, failure_policy
    from admission.sim.failure_model import FailureModel
    from admission.sim.failure_run import FailureRun
    from admission.sim.scenario import US_PER_S

    horizon = HORIZON_DAYS * 86_400 * US_PER_S
    out: dict[str, dict[str, Any]] = {}
    policies = (
        failure_policy.ours(),
        failure_policy.kueue(),
        failure_policy.ours_hold(),
        failure_policy.ours_quarantine(),
    )
    for policy in policies:
        runs = []
        for seed in SEEDS:
            cluster = failure_cluster.build(days=DAYS)
            outages = FailureModel(seed=seed, flaky_node=flaky).schedule(cluster.node_gpus, horizon)
            runs.append(FailureRun(cluster, outages, policy, flaky_node=flaky).run())
        out[policy.name] = _sum(runs).as_json()
        out[policy.name]["gpuHoursLostPerSeed"] = [st.as_json()["gpuHoursLost"] for st in runs]
    return out


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def run() -> dict[str, Any]:
    from admission.sim.failure_model import META_RATE_PER_GPU_HOUR, REPAIR_SECONDS
    from admission.sim.failure_policy import BACKOFF_LIMIT_COUNT, BAD_NODE_MEMORY_SECONDS

    t0 = time.process_time()
    meta = run_set(None)
    flaky = run_set(FLAKY_NODE)
    for name in ("ours", "kueue"):
        for key in ("readmissionsOntoFlakyNode", "readmissionsOntoFlakyNodeAnyTime"):
            meta[name][key] = flaky[name][key]
    ours, kueue = meta["ours"], meta["kueue"]
    keep = ("gpuHoursLost", "gpuHoursLostBy", "goodput", "jobsDeactivated", "recoverySeconds")
    variants = {
        name: {
            "metaRate": {k: meta[name][k] for k in keep},
            "flakyNode": {
                **{k: flaky[name][k] for k in keep},
                "readmissionsOntoFlakyNode": flaky[name]["readmissionsOntoFlakyNode"],
                "nodesQuarantined": flaky[name]["nodesQuarantined"],
            },
        }
        for name in ("oursHoldForSpare", "oursQuarantine")
    }

    def infra(p: dict[str, Any]) -> float:
        return float(p["gpuHoursLostBy"]["failures"] + p["gpuHoursLostBy"]["restarts"])

    lost_ratio = _ratio(ours["gpuHoursLost"], kueue["gpuHoursLost"])
    return {
        "cluster": "256 nodes x 8 GPUs (4 blocks x 8 racks x 8 nodes; 3 blocks TAS, 1 plain)",
        "days": DAYS,
        "seeds": list(SEEDS),
        "failuresPerGpuHour": round(META_RATE_PER_GPU_HOUR, 8),
        "repairSeconds": REPAIR_SECONDS,
        "badNodeMemorySeconds": BAD_NODE_MEMORY_SECONDS,
        "kueueBackoffLimitCount": BACKOFF_LIMIT_COUNT,
        "ours": ours,
        "kueue": kueue,
        "flakyNode": {"ours": flaky["ours"], "kueue": flaky["kueue"]},
        "variants": variants,
        "lostRatioOursOverKueue": lost_ratio,
        "infraLostRatioOursOverKueue": _ratio(infra(ours), infra(kueue)),
        "targets": {
            "lostAtMostHalfOfKueue": lost_ratio is not None and lost_ratio <= 0.5,
            "noDeactivationByInfra": ours["jobsDeactivatedAfterInfraEvictions"] == 0
            and flaky["ours"]["jobsDeactivatedAfterInfraEvictions"] == 0,
            "noReadmissionOntoFlakyNode": ours["readmissionsOntoFlakyNode"] == 0,
            "goodputAtLeast097": (ours["goodput"] or 0) >= 0.97,
        },
        "cpuSeconds": round(time.process_time() - t0, 3),
    }
