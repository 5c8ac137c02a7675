"""Small clusters the engine tests build straight from the model: ClusterQueues, a cache, workloads.

The engine's regression and property tests build the cache and scheduler directly from
``queues.model`` objects, so that what they pin down is the engine and not a driver;
these builders give them one-flavor CPU queues, a cache holding them and workloads of a
given size and priority, and read a tree's usage to compare two trees.
"""

from __future__ import annotations

from admission.engine.cache import Cache
from queues.model import (
    Admission,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from queues.tree import CohortTree


def cq(name: str, cpu: int, *, cohort: str | None = None, **preemption: str) -> ClusterQueue:
    return ClusterQueue(
        name=name,
        cohort=cohort,
        namespace_selector=LabelSelector(),
        resource_groups=[
            ResourceGroup(
                covered_resources=["cpu"],
                flavors=[FlavorQuotas("default", {"cpu": ResourceQuota(nominal=cpu * 1000)})],
            )
        ],
        preemption=PreemptionPolicy(**preemption),
    )


def make_cache(*cqs: ClusterQueue) -> Cache:
    return Cache(
        flavors={"default": ResourceFlavor("default")},
        cluster_queues={c.name: c for c in cqs},
        cohorts={},
        local_queues={
            f"ns-{c.name}/lq": LocalQueue(namespace=f"ns-{c.name}", name="lq", cluster_queue=c.name)
            for c in cqs
        },
    )


def workload(
    name: str,
    cq_name: str,
    cpu: int,
    *,
    priority: int = 0,
    created: float = 0.0,
    admitted: bool = False,
    active: bool = True,
) -> Workload:
    wl = Workload(
        namespace=f"ns-{cq_name}",
        name=name,
        uid=name,
        queue_name="lq",
        priority=priority,
        creation_time=created,
        active=active,
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": cpu * 1000})],
    )
    if admitted:
        wl.admission = Admission(
            cluster_queue=cq_name,
            pod_set_assignments=[
                PodSetAssignment(
                    name="main",
                    flavors={"cpu": "default"},
                    resource_usage={"cpu": cpu * 1000},
                    count=1,
                )
            ],
        )
        wl.admission_time = created
    return wl


def used(cache: Cache, cq_name: str) -> int:
    return cache.tree.queues[cq_name].usage.get(("default", "cpu"), 0)


def usage_of_tree(tree: CohortTree) -> dict[str, dict]:
    nodes = {**tree.queues, **tree.cohorts}
    return {name: dict(node.usage) for name, node in nodes.items()}


def tree_usage(cache: Cache) -> dict[str, dict]:
    return usage_of_tree(cache.tree)


def _queued_workload(i: int, prio: int, lq: int) -> Workload:
    return Workload(
        namespace="ns",
        name=f"w{i}",
        uid=f"u{i:03d}",
        queue_name=f"lq{lq}",
        priority=prio,
        creation_time=float(i % 5),
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": 1000 * (i % 3 + 1)})],
    )
