"""``plan-tas``: ``plan`` over a 5,000-node GPU cluster with a 4-level topology and
10,000 pending topology-aware workloads, until quiescent.

Topology: 5 superblocks × 10 blocks × 5 racks × 20 hosts (hostname lowest), 8 GPUs
per host. Ten ClusterQueues in one cohort share one TAS flavor with quota for every
GPU. Gangs of 1-32 pods of 8 GPUs require a rack (≤ 20 pods) or a block, or prefer a
rack. The objects go through the real ``quartermaster plan`` pipeline (load, parse,
schedule, report). The placement cost is measured by timing every call of
``admission.engine.tas.placement.place_flavor`` (CPU time), so the report says what share
of the run placement takes and what one placement costs.
"""

from __future__ import annotations

import random
import time
from typing import Any

SUPERBLOCKS, BLOCKS, RACKS, HOSTS = 5, 10, 5, 20
WORKLOADS, QUEUES = 10_000, 10
LEVELS = (
    "example.com/superblock",
    "example.com/block",
    "example.com/rack",
    "kubernetes.io/hostname",
)


def scenario_documents(seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    kueue = "kueue.x-k8s.io/v1beta2"
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": kueue,
            "kind": "Topology",
            "metadata": {"name": "gpu"},
            "spec": {"levels": [{"nodeLabel": lv} for lv in LEVELS]},
        },
        {
            "apiVersion": kueue,
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "gpu"},
        },
        {"apiVersion": kueue, "kind": "Cohort", "metadata": {"name": "all"}, "spec": {}},
    ]
    nodes = SUPERBLOCKS * BLOCKS * RACKS * HOSTS
    for s in range(SUPERBLOCKS):
        for b in range(BLOCKS):
            for r in range(RACKS):
                for h in range(HOSTS):
                    name = f"s{s}-b{b}-r{r}-h{h:02d}"
                    docs.append(
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "metadata": {
                                "name": name,
                                "labels": {
                                    "pool": "gpu",
                                    LEVELS[0]: f"s{s}",
                                    LEVELS[1]: f"s{s}-b{b}",
                                    LEVELS[2]: f"s{s}-b{b}-r{r}",
                                    LEVELS[3]: name,
                                },
                            },
                            "status": {
                                "allocatable": {"cpu": "96", "nvidia.com/gpu": "8", "pods": "110"}
                            },
                        }
                    )
    per_queue = nodes * 8 // QUEUES
    for q in range(QUEUES):
        docs.append(
            {
                "apiVersion": kueue,
                "kind": "ClusterQueue",
                "metadata": {"name": f"cq-{q}"},
                "spec": {
                    "cohortName": "all",
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "tas",
                                    "resources": [
                                        {"name": "nvidia.com/gpu", "nominalQuota": str(per_queue)}
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
                "metadata": {"name": "lq", "namespace": f"team-{q}"},
                "spec": {"clusterQueue": f"cq-{q}"},
            }
        )
    for i in range(WORKLOADS):
        size = rng.choice([1, 2, 4, 8, 8, 16, 16, 32])
        kind = rng.choice(["required-rack", "required-block", "preferred-rack"])
        if kind == "required-rack" and size > HOSTS:
            kind = "required-block"
        level = LEVELS[2] if kind.endswith("rack") else LEVELS[1]
        request = {"required": level} if kind.startswith("required") else {"preferred": level}
        docs.append(
            {
                "apiVersion": kueue,
                "kind": "Workload",
                "metadata": {
                    "name": f"wl-{i}",
                    "namespace": f"team-{i % QUEUES}",
                    "uid": f"uid-{i:06d}",
                    "creationTimestamp": f"2026-01-01T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z",
                },
                "spec": {
                    "queueName": "lq",
                    "priority": rng.choice([50, 100, 200]),
                    "podSets": [
                        {
                            "name": "main",
                            "count": size,
                            "topologyRequest": request,
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "c",
                                            "image": "trainer",
                                            "resources": {"requests": {"nvidia.com/gpu": "8"}},
                                        }
                                    ]
                                }
                            },
                        }
                    ],
                },
            }
        )
    return docs


def run() -> dict:
    from admission.engine.tas import placement as topology_placement
    from bench.plan50k import run_plan

    calls = 0
    cpu_in_placement = 0.0
    original = topology_placement.place_flavor

    def timed(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls, cpu_in_placement
        t = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            calls += 1
            cpu_in_placement += time.process_time() - t

    import admission.engine.tas.admission as engine_topology

    engine_topology.place_flavor = timed  # type: ignore[assignment]
    try:
        doc, cpu = run_plan(scenario_documents(), "plan-tas")
    finally:
        engine_topology.place_flavor = original  # type: ignore[assignment]
    admitted = doc["admitted"]
    in_one = 0
    for a in admitted:
        hosts = {
            v
            for p in a["podSetAssignments"]
            for sl in p.get("topologyAssignment", {}).get("slices", [])
            for v in _values(sl)
        }
        racks = {h.rsplit("-h", 1)[0] for h in hosts}
        in_one += len(racks) == 1
    return {
        "cpuSeconds": round(cpu, 3),
        "nodes": SUPERBLOCKS * BLOCKS * RACKS * HOSTS,
        "workloads": WORKLOADS,
        "admissions": len(admitted),
        "pending": len(doc["pending"]),
        "cycles": doc["cycles"],
        "placements": calls,
        "placementCpuSeconds": round(cpu_in_placement, 3),
        "placementShareOfRun": round(cpu_in_placement / cpu, 3) if cpu else None,
        "placementMsEach": round(1000 * cpu_in_placement / calls, 3) if calls else None,
        "gpusAdmitted": sum(
            int(p["resourceUsage"].get("nvidia.com/gpu", "0"))
            for a in admitted
            for p in a["podSetAssignments"]
        ),
        "admittedInsideOneRack": in_one,
    }


def _values(sl: dict) -> list[str]:
    lv = sl["valuesPerLevel"][-1]
    if "universal" in lv:
        return [lv["universal"]]
    ind = lv["individual"]
    return [ind.get("prefix", "") + r + ind.get("suffix", "") for r in ind["roots"]]
