"""Regression tests for engine correctness bugs (issue 12), one section per bug.

Each test failed before its fix; they build the cache and scheduler directly from the
model so that the bug, not a driver, is what they pin down.
"""

from __future__ import annotations

import pytest

from admission.cache import Cache
from admission.fair_sharing import FairPreemptor
from admission.preemption import Preemptor
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


# -- bug 4: a search interrupted by an exception leaves the tree as it was -------------


def tree_usage(cache: Cache) -> dict[str, dict]:
    nodes = {**cache.tree.queues, **cache.tree.cohorts}
    return {name: dict(node.usage) for name, node in nodes.items()}


def fail_on_call(n: int):  # noqa: ANN201 - a replacement for Preemptor._fits
    """A ``_fits`` that answers truthfully n-1 times, then raises."""
    calls = [0]
    real = Preemptor._fits

    def fits(cq, requests, allow_borrowing):  # noqa: ANN001, ANN202
        calls[0] += 1
        if calls[0] >= n:
            raise RuntimeError("injected in the middle of the search")
        return real(cq, requests, allow_borrowing)

    return staticmethod(fits)


def borrowed_cohort() -> Cache:
    """cq-b borrows all of cq-a's idle quota with four 5-cpu workloads."""
    cache = make_cache(
        cq(
            "cq-a",
            10,
            cohort="co",
            within_cluster_queue="LowerPriority",
            reclaim_within_cohort="Any",
        ),
        cq("cq-b", 10, cohort="co"),
    )
    for i in range(4):
        cache.add_workload(workload(f"b{i}", "cq-b", 5, created=i, admitted=True))
    return cache


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4])
def test_classical_search_interrupted_by_an_exception_restores_the_tree(
    monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    cache = borrowed_cohort()
    cache.add_workload(workload("a", "cq-a", 10, priority=5, created=10))
    before = tree_usage(cache)
    monkeypatch.setattr(Preemptor, "_fits", fail_on_call(fail_at))
    with pytest.raises(RuntimeError, match="injected"):
        Scheduler(cache).schedule()
    assert tree_usage(cache) == before
    assert "ns-cq-a/a" in cache.queues["cq-a"]  # the interrupted head is queued again
    monkeypatch.undo()
    # The engine still works from the intact tree: two victims, no phantom quota.
    result = Scheduler(cache).schedule()
    assert len(result.preempted) == 2


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_fair_sharing_search_interrupted_by_an_exception_restores_the_tree(
    monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    cache = borrowed_cohort()
    pre = FairPreemptor(cache, strategies=["LessThanOrEqualToFinalShare", "LessThanInitialShare"])
    wl = workload("a", "cq-a", 10, priority=5, created=10)
    node = cache.tree.queues["cq-a"]
    fr = ("default", "cpu")
    before = tree_usage(cache)
    monkeypatch.setattr(Preemptor, "_fits", fail_on_call(fail_at))
    with pytest.raises(RuntimeError, match="injected"):
        pre.minimal_targets(wl, node, {fr}, {fr: 10000})
    assert tree_usage(cache) == before
    monkeypatch.undo()
    assert len(pre.minimal_targets(wl, node, {fr}, {fr: 10000})) == 2
    assert tree_usage(cache) == before


def test_scratch_restores_values_and_nests() -> None:
    cache = borrowed_cohort()
    tree = cache.tree
    before = tree_usage(cache)
    usage = {("default", "cpu"): 3000}
    with pytest.raises(ZeroDivisionError):
        with tree.scratch():
            tree.add_usage("cq-a", usage)
            with tree.scratch():
                tree.remove_usage("cq-b", {("default", "cpu"): 20000})
                assert tree.queues["cq-b"].usage == {}
            assert tree.queues["cq-b"].usage == {("default", "cpu"): 20000}
            assert tree.queues["cq-a"].usage == usage
            _ = 1 / 0
    assert tree_usage(cache) == before


# -- bug 6: an admitted workload re-read with another priority --------------------------


def test_priority_change_of_an_admitted_workload_is_visible_to_preemption() -> None:
    """Kueue's cache replaces an updated workload (delete old, add new), so preemption
    compares against the new priority. Re-reading must not charge twice either."""
    cache = make_cache(cq("cq", 10, within_cluster_queue="LowerPriority"))
    cache.add_workload(workload("running", "cq", 10, priority=10, admitted=True))
    cache.add_workload(workload("new", "cq", 5, priority=5, created=1))
    assert not Scheduler(cache).schedule().preempted  # 10 > 5: protected
    # The running workload's priority is lowered (a WorkloadPriorityClass edit, say).
    cache.add_workload(workload("running", "cq", 10, priority=0, admitted=True))
    assert used(cache, "cq") == 10000
    assert cache.prio_usage["cq"] == {0: {("default", "cpu"): 10000}, 10: {}}
    cache.requeue_all()
    result = Scheduler(cache).schedule()
    assert [p.workload.key for p in result.preempted] == ["ns-cq/running"]


def test_re_reading_an_admitted_workload_keeps_its_eviction() -> None:
    cache = make_cache(cq("cq", 10))
    cache.add_workload(workload("running", "cq", 4, admitted=True))
    cache.evicting["ns-cq/running"] = "ns-cq/preemptor"
    cache.add_workload(workload("running", "cq", 4, admitted=True))
    assert cache.evicting == {"ns-cq/running": "ns-cq/preemptor"}
    assert used(cache, "cq") == 4000
