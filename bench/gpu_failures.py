"""``gpu-failures``: GPU-hours lost to node failures under Kueue's policy and ours.

The cluster (``admission.sim.failure_cluster``): 256 nodes × 8 H100s, 4 blocks × 8
racks × 8 nodes, 3 blocks topology-aware and 1 plain, offered 90 % of its GPU-hours
over 30 days by the bundled gang mix. Nodes fail at Meta's Llama 3 rate scaled per GPU
(about one failure a day on 2,048 GPUs) and are repaired in about two hours
(``admission.sim.failure_model``). The same workloads and the very same failures run
under both policies (``admission.sim.failure_policy``), for ``SEEDS`` failure
schedules; the figures are their totals (GPU-hours) and pooled percentiles. A second
set of runs adds one flaky node that fails again after every ~4 h of uptime.

``ours`` runs the product's ``nodeFailures`` defaults (``queues.node_health``: 30 s
NotReady delay, fail-fast replacement, bad-node memory 24 h, flaky report at 2 workloads
in 24 h). ``variants`` change one setting each (``admission.sim.failure_policy``):
``oursAvoidNodesFor1h`` remembers bad nodes for an hour, less than a repair, ``oursHoldForSpare`` is
``failFast: false`` (a TAS gang with no spare node held 30 minutes before its eviction),
``oursQuarantine`` has a node reported flaky at 2 workloads in 24 h cordoned for a day.
Re-admissions onto the flaky node are counted within ours' memory window for every
policy (and within 24 h, and at any time).

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
        failure_policy.ours_avoid(3600.0),
        failure_policy.ours_hold(),
        failure_policy.ours_quarantine(),
    )
    window = policies[0].bad_node_memory_seconds  # ours' memory: counted so for every policy
    for policy in policies:
        runs = []
        for seed in SEEDS:
            cluster = failure_cluster.build(days=DAYS)
            outages = FailureModel(seed=seed, flaky_node=flaky).schedule(cluster.node_gpus, horizon)
            run = FailureRun(
                cluster, outages, policy, flaky_node=flaky, flaky_window_seconds=window
            )
            runs.append(run.run())
        out[policy.name] = _sum(runs).as_json()
        out[policy.name]["gpuHoursLostPerSeed"] = [st.as_json()["gpuHoursLost"] for st in runs]
    return out


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def run() -> dict[str, Any]:
    from admission.sim.failure_model import META_RATE_PER_GPU_HOUR, REPAIR_SECONDS
    from admission.sim.failure_policy import BACKOFF_LIMIT_COUNT, PRODUCT

    t0 = time.process_time()
    meta = run_set(None)
    flaky = run_set(FLAKY_NODE)
    for name in ("ours", "kueue"):
        for key in (
            "readmissionsOntoFlakyNode",
            "readmissionsOntoFlakyNodeWithin24h",
            "readmissionsOntoFlakyNodeAnyTime",
        ):
            meta[name][key] = flaky[name][key]
    ours, kueue = meta["ours"], meta["kueue"]
    keep = ("gpuHoursLost", "gpuHoursLostBy", "goodput", "jobsDeactivated", "recoverySeconds")
    variants = {
        name: {
            "metaRate": {k: meta[name][k] for k in keep},
            "flakyNode": {
                **{k: flaky[name][k] for k in keep},
                "readmissionsOntoFlakyNodeWithin24h": flaky[name][
                    "readmissionsOntoFlakyNodeWithin24h"
                ],
                "flakyNodeReports": flaky[name]["flakyNodeReports"],
                "nodesQuarantined": flaky[name]["nodesQuarantined"],
            },
        }
        for name in ("oursAvoidNodesFor1h", "oursHoldForSpare", "oursQuarantine")
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
        "badNodeMemorySeconds": PRODUCT.avoid_for,
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
