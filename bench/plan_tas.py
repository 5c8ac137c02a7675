"""``plan-tas``: ``plan`` over a 5,000-node GPU cluster with a 4-level topology and
10,000 pending topology-aware workloads, until quiescent.

Topology: 5 superblocks × 10 blocks × 5 racks × 20 hosts (hostname lowest), 8 GPUs
per host. Ten ClusterQueues in one cohort share one TAS flavor with quota for every
GPU. Gangs of 1-32 pods of 8 GPUs require a rack (≤ 20 pods) or a block, or prefer a
rack. The objects go through the real ``quartermaster plan`` pipeline (load, parse,
schedule, report). The placement cost is measured by timing every call of
``admission.engine.tas.placement.place_flavor`` (CPU time), so the report says what share
of the run placement takes and what one placement costs.

``gang10k`` is a second, separate run over the same nodes: one gang of 10,000 pods of
4 GPUs (two per host, every host) in a ClusterQueue with quota for all of them. It
reports what placing and writing such an assignment costs: the placement's CPU time,
the v1beta2 ``topologyAssignment``'s slices and JSON bytes (Kueue 0.19's
hostname-prefix encoding: one slice per rack-prefix run of hosts), and that it reads
back to 10,000 pods on 5,000 hosts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from typing import Any

SUPERBLOCKS, BLOCKS, RACKS, HOSTS = 5, 10, 5, 20
WORKLOADS, QUEUES = 10_000, 10
LEVELS = (
    "example.com/superblock",
    "example.com/block",
    "example.com/rack",
    "kubernetes.io/hostname",
)


KUEUE = "kueue.x-k8s.io/v1beta2"
GANG_PODS = 10_000


def tas_documents(
    levels: tuple[str, ...], hosts: Iterable[tuple[str, ...]], allocatable: dict[str, str]
) -> list[dict[str, Any]]:
    """The Topology ``gpu`` over ``levels``, the TAS flavor ``tas`` on ``pool: gpu``, and a
    Node per host: each host is its domain value at every level, the hostname last."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": KUEUE,
            "kind": "Topology",
            "metadata": {"name": "gpu"},
            "spec": {"levels": [{"nodeLabel": lv} for lv in levels]},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "gpu"},
        },
    ]
    for domains in hosts:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": domains[-1],
                    "labels": {"pool": "gpu", **dict(zip(levels, domains, strict=True))},
                },
                "status": {"allocatable": dict(allocatable)},
            }
        )
    return docs


def cluster_documents() -> list[dict]:
    """The Topology, the TAS flavor and the 5,000 Nodes."""
    hosts = (
        (f"s{s}", f"s{s}-b{b}", f"s{s}-b{b}-r{r}", f"s{s}-b{b}-r{r}-h{h:02d}")
        for s in range(SUPERBLOCKS)
        for b in range(BLOCKS)
        for r in range(RACKS)
        for h in range(HOSTS)
    )
    return tas_documents(LEVELS, hosts, {"cpu": "96", "nvidia.com/gpu": "8", "pods": "110"})


def _queue(name: str, gpus: int, cohort: str | None) -> dict:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "tas",
                        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}],
                    }
                ],
            }
        ],
    }
    if cohort is not None:
        spec = {"cohortName": cohort, **spec}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def _workload(
    name: str,
    ns: str,
    uid: str,
    created: str,
    count: int,
    gpus: int,
    request: dict,
    priority: int | None,
) -> dict:
    spec: dict[str, Any] = {"queueName": "lq"}
    if priority is not None:
        spec["priority"] = priority
    spec["podSets"] = [
        {
            "name": "main",
            "count": count,
            "topologyRequest": request,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "trainer",
                            "resources": {"requests": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ]
                }
            },
        }
    ]
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": created},
        "spec": spec,
    }


def scenario_documents(seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    docs = cluster_documents()
    docs.insert(2, {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "all"}, "spec": {}})
    nodes = SUPERBLOCKS * BLOCKS * RACKS * HOSTS
    per_queue = nodes * 8 // QUEUES
    for q in range(QUEUES):
        docs.append(_queue(f"cq-{q}", per_queue, "all"))
        docs.append(
            {
                "apiVersion": KUEUE,
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
        created = f"2026-01-01T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z"
        priority = rng.choice([50, 100, 200])
        docs.append(
            _workload(
                f"wl-{i}", f"team-{i % QUEUES}", f"uid-{i:06d}", created, size, 8, request, priority
            )
        )
    return docs


def gang_documents() -> list[dict]:
    """The same nodes, one ClusterQueue with every GPU, one gang of 10,000 pods of 4 GPUs."""
    docs = cluster_documents()
    docs.append(_queue("cq", SUPERBLOCKS * BLOCKS * RACKS * HOSTS * 8, None))
    docs.append(
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "team"},
            "spec": {"clusterQueue": "cq"},
        }
    )
    docs.append(
        _workload(
            "gang",
            "team",
            "uid-gang",
            "2026-01-01T00:00:00Z",
            GANG_PODS,
            4,
            {"preferred": LEVELS[1]},
            None,
        )
    )
    return docs


def run_gang() -> dict:
    """The 10,000-pod gang: placement CPU time and the wire form it is written in."""
    import json

    from admission.engine.tas import admission as engine_topology
    from bench.plan50k import run_plan
    from queues.api.topology_assignment import from_v1beta2

    cpu_in_placement = 0.0
    original = engine_topology.place_flavor

    def timed(*args: Any, **kwargs: Any) -> Any:
        nonlocal cpu_in_placement
        t = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            cpu_in_placement += time.process_time() - t

    engine_topology.place_flavor = timed  # type: ignore[assignment]
    try:
        doc, cpu = run_plan(gang_documents(), "plan-tas-gang")
    finally:
        engine_topology.place_flavor = original  # type: ignore[assignment]
    [a] = doc["admitted"]
    [psa] = a["podSetAssignments"]
    wire = psa["topologyAssignment"]
    ta = from_v1beta2(wire)
    return {
        "cpuSeconds": round(cpu, 3),
        "pods": sum(c for _, c in ta.domains),
        "hosts": len(ta.domains),
        "placementCpuSeconds": round(cpu_in_placement, 3),
        "assignmentSlices": len(wire["slices"]),
        "assignmentJsonBytes": len(json.dumps(wire, separators=(",", ":"))),
    }


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
        "gang10k": run_gang(),
    }


def _values(sl: dict) -> list[str]:
    lv = sl["valuesPerLevel"][-1]
    if "universal" in lv:
        return [lv["universal"]]
    ind = lv["individual"]
    return [ind.get("prefix", "") + r + ind.get("suffix", "") for r in ind["roots"]]
