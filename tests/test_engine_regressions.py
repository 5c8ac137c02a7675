"""Regression tests for engine correctness bugs (issue 12), one section per bug.

Each test failed before its fix; they build the cache and scheduler directly from the
model so that the bug, not a driver, is what they pin down.
"""

from __future__ import annotations

from admission.cache import Cache
from admission.scheduler import Scheduler
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


# -- bug 1: a deactivated workload that still holds quota ------------------------------


def test_inactive_workload_holding_quota_is_charged_when_the_cache_is_rebuilt() -> None:
    """A podsReady timeout deactivates a gang whose pods still terminate: it keeps its
    QuotaReserved admission with spec.active=false. A cache rebuilt from that state
    (restart, leader change) must charge it, as the running cache does."""
    cache = make_cache(cq("cq", 10))
    cache.add_workload(workload("terminating", "cq", 6, admitted=True, active=False))
    assert used(cache, "cq") == 6000
    assert "ns-cq/terminating" in cache.admitted
    # ... so a newcomer that needs more than what is left waits.
    cache.add_workload(workload("new", "cq", 6, created=1))
    result = Scheduler(cache).schedule()
    assert not result.admitted
    # The eviction finishes: the quota is released and the inactive workload not queued.
    cache.evicted("ns-cq/terminating")
    assert used(cache, "cq") == 0
    assert "ns-cq/terminating" not in cache.queues["cq"]


def test_inactive_workload_without_quota_is_neither_charged_nor_queued() -> None:
    cache = make_cache(cq("cq", 10))
    cache.add_workload(workload("parked", "cq", 6, active=False))
    assert used(cache, "cq") == 0
    assert len(cache.queues["cq"]) == 0
