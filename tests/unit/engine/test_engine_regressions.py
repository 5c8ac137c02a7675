"""Regression tests for how the engine accounts for workloads in its cache, one section per bug.

A deactivated workload that still holds quota stays charged, a re-read admitted workload
keeps its new priority and its eviction, admissions carry the wall clock, a workload seen
before its LocalQueue loses its misconfigured reason, and a capacity event wakes what its
tree parked. Each test failed before its fix; they build the cache and scheduler directly
from the model so that the bug, not a driver, is what they pin down.
"""

from __future__ import annotations

import time

import pytest

from admission.engine.cache import Cache
from admission.engine.scheduler import Scheduler
from queues.model import LocalQueue, ResourceFlavor
from queues.pending import PendingQueue
from tests.unit.engine._support import cq, make_cache, used, workload

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


# -- bug 8 (engine part): the default clock is the wall clock ---------------------------


def test_default_scheduler_clock_stamps_admissions_with_the_current_time() -> None:
    cache = make_cache(cq("cq", 10))
    cache.add_workload(workload("a", "cq", 1))
    before = time.time()
    (admitted,) = Scheduler(cache).schedule().admitted
    assert admitted.workload.admission_time is not None
    assert admitted.workload.admission_time >= before  # was 0.0: 1970, oldest of all


# -- a workload seen before its LocalQueue (a restart's informer order) ------------------


def test_a_workload_routed_once_its_local_queue_arrives_loses_the_misconfigured_reason() -> None:
    """serve's informers may deliver Workloads before the LocalQueues: the workload is
    unroutable ("LocalQueue lq doesn't exist") until they come. Once routed, that reason
    must be gone (it was kept, written as the pending reason of every queued workload
    of a restarted replica's backlog, and held ~250 B per workload)."""
    cache = Cache(
        flavors={"default": ResourceFlavor("default")},
        cluster_queues={"cq": cq("cq", 10)},
        cohorts={},
        local_queues={},
    )
    wl = workload("early", "cq", 1)
    cache.add_workload(wl)
    status = cache.status_of(wl, "cq")
    assert status is not None and "doesn't exist" in status.message
    cache.update_objects(
        local_queues={"ns-cq/lq": LocalQueue(namespace="ns-cq", name="lq", cluster_queue="cq")}
    )
    assert "ns-cq/early" in cache.queues["cq"]
    assert cache.status_of(wl, "cq") is None


# -- a capacity event visits what its tree parked, once ----------------------------------


def test_a_capacity_event_wakes_what_its_tree_parked_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kueue's requeue on a capacity event: every parked workload of the tree where
    quota was freed may be nominated again; other trees' stay parked. The cache only
    visits the queues that parked something since the tree's last event."""
    cache = make_cache(cq("a1", 4, cohort="a"), cq("a2", 4, cohort="a"), cq("b1", 4, cohort="b"))
    for name, cq_name in (("x", "a1"), ("y", "a2"), ("z", "b1")):
        cache.add_workload(workload(name, cq_name, 8))
    for name, cq_name in (("x", "a1"), ("y", "a2"), ("z", "b1")):
        wl = cache.queues[cq_name].pop_head()
        assert wl is not None and wl.name == name
        cache.requeue(wl, cq_name, park=True)
    assert all(q.active_count() == 0 for q in cache.queues.values())
    visited: list[str] = []
    names = {id(q): name for name, q in cache.queues.items()}
    wake = PendingQueue.requeue_inadmissible

    def spy(self: PendingQueue) -> int:
        visited.append(names[id(self)])
        return wake(self)

    monkeypatch.setattr(PendingQueue, "requeue_inadmissible", spy)
    cache.capacity_event("a2")
    assert sorted(visited) == ["a1", "a2"]
    assert cache.queues["a1"].active_count() == cache.queues["a2"].active_count() == 1
    assert cache.queues["b1"].active_count() == 0  # another tree: still parked
    cache.capacity_event("a1")  # nothing parked in tree a since: no queue visited
    assert sorted(visited) == ["a1", "a2"]
    wl = cache.queues["a1"].pop_head()
    assert wl is not None
    cache.requeue(wl, "a1", park=True)  # parked again: the next event wakes it
    cache.capacity_event("a2")
    assert sorted(visited) == ["a1", "a1", "a2"]
    assert cache.queues["a1"].active_count() == 1
