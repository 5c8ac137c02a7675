"""Regression tests for engine correctness bugs (issue 12), one section per bug.

Each test failed before its fix; they build the cache and scheduler directly from the
model so that the bug, not a driver, is what they pin down.
"""

from __future__ import annotations

import gc
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.engine.cache import Cache
from admission.engine.preemption.classical import Preemptor
from admission.engine.preemption.fair_sharing import FairPreemptor, parse_strategies
from admission.engine.scheduler import Scheduler
from admission.engine.snapshot import Snapshot
from queues.model import (
    Admission,
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    Namespace,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from queues.pending import PendingQueue
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


def usage_of_tree(tree: CohortTree) -> dict[str, dict]:
    nodes = {**tree.queues, **tree.cohorts}
    return {name: dict(node.usage) for name, node in nodes.items()}


def tree_usage(cache: Cache) -> dict[str, dict]:
    return usage_of_tree(cache.tree)


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


@pytest.mark.parametrize("fail_at", [1, 2, 3])  # the cycle's one search calls _fits 3 times
def test_classical_search_interrupted_by_an_exception_restores_the_tree(
    monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    cache = borrowed_cohort()
    cache.add_workload(workload("a", "cq-a", 10, priority=5, created=10))
    before = tree_usage(cache)
    monkeypatch.setattr(Preemptor, "_fits", fail_on_call(fail_at))
    try:  # failing while nominated, the head waits on its inactive queue (engine.faults)
        Scheduler(cache).schedule()
        assert "injected" in cache.inactive["cq-a"].message
    except RuntimeError as err:  # failing later, the cycle is abandoned
        assert "injected" in str(err)
    assert tree_usage(cache) == before
    assert "ns-cq-a/a" in cache.queues["cq-a"]  # the interrupted head is queued again
    monkeypatch.undo()
    cache._refresh_derived()  # the objects change: the queue is tried again
    cache.requeue_all()
    # The engine still works from the intact tree: two victims, no phantom quota.
    result = Scheduler(cache).schedule()
    assert len(result.preempted) == 2


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_fair_sharing_search_interrupted_by_an_exception_restores_the_tree(
    monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    """A search runs several times on one cycle's snapshot: an exception in one must
    leave the snapshot as the search found it (and the live tree is never touched)."""
    cache = borrowed_cohort()
    pre = FairPreemptor(
        cache, strategies=parse_strategies(["LessThanOrEqualToFinalShare", "LessThanInitialShare"])
    )
    wl = workload("a", "cq-a", 10, priority=5, created=10)
    snap = Snapshot(cache.tree)
    node = snap.tree.queues["cq-a"]
    fr = ("default", "cpu")
    before = tree_usage(cache)
    monkeypatch.setattr(Preemptor, "_fits", fail_on_call(fail_at))
    with pytest.raises(RuntimeError, match="injected"):
        pre.minimal_targets(snap, wl, node, {fr}, {fr: 10000})
    assert tree_usage(cache) == before
    assert usage_of_tree(snap.tree) == before
    monkeypatch.undo()
    assert len(pre.minimal_targets(snap, wl, node, {fr}, {fr: 10000})) == 2
    assert usage_of_tree(snap.tree) == before


def live_state(cache: Cache) -> dict[str, object]:
    """Everything a cycle may change in the cache."""
    return {
        "tree": tree_usage(cache),
        "admitted": dict(cache.admitted),
        "usage_of": {k: dict(v) for k, v in cache.usage_of.items()},
        "evicting": dict(cache.evicting),
        "preemptors": set(cache.preemptors),
        "status": dict(cache.status),
        "queued": {
            name: sorted(wl.key for wl in q.workloads()) for name, q in cache.queues.items()
        },
        "admissions": {k: wl.admission for k, wl in cache.workloads.items()},
    }


def mid_cycle_world() -> Cache:
    """One cycle with three heads: cq-a's must preempt two of cq-b's borrowers (it is
    processed first: highest priority), cq-c's and cq-d's fit (cq-d's is processed last)."""
    cache = make_cache(
        cq(
            "cq-a",
            10,
            cohort="co",
            within_cluster_queue="LowerPriority",
            reclaim_within_cohort="Any",
        ),
        cq("cq-b", 10, cohort="co"),
        cq("cq-c", 10),
        cq("cq-d", 10),
    )
    for i in range(4):
        cache.add_workload(workload(f"b{i}", "cq-b", 5, created=i, admitted=True))
    cache.add_workload(workload("a", "cq-a", 10, priority=5, created=10))
    cache.add_workload(workload("c", "cq-c", 5, priority=3, created=11))
    cache.add_workload(workload("d", "cq-d", 5, priority=1, created=12))
    return cache


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_an_exception_in_the_middle_of_a_cycle_changes_nothing_in_the_cache(
    monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    """Issue 12 bug 4, for the whole cycle: the heads processed before the exception
    issued preemptions, held capacity and admitted on the cycle's snapshot; none of it
    reaches the cache, whose tree keeps exactly the usage it had, and every head is
    queued again (nothing lost, nothing assumed that no driver will ever write)."""
    cache = mid_cycle_world()
    before = live_state(cache)
    real = Scheduler._process
    calls = [0]

    def process(self: Scheduler, *args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == fail_at:
            raise RuntimeError("injected in the middle of the cycle")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Scheduler, "_process", process)
    with pytest.raises(RuntimeError, match="injected"):
        Scheduler(cache).schedule()
    assert calls[0] == fail_at
    assert live_state(cache) == before
    monkeypatch.undo()
    # The same cycle, run again, decides what it would have decided the first time.
    got = Scheduler(cache).schedule()
    want = Scheduler(fresh := mid_cycle_world()).schedule()
    assert [d.workload.key for d in got.admitted] == [d.workload.key for d in want.admitted]
    assert [p.workload.key for p in got.preempted] == [p.workload.key for p in want.preempted]
    assert tree_usage(cache) == tree_usage(fresh)
    assert {d.workload.key for d in got.admitted} == {"ns-cq-c/c", "ns-cq-d/d"}
    assert len(got.preempted) == 2


def test_a_cycle_never_changes_the_live_tree_before_it_commits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Holding capacity for a preemptor and releasing its victims happen on the snapshot:
    at the moment the first decision is committed, the live tree is still as it was."""
    cache = mid_cycle_world()
    before = tree_usage(cache)
    seen: list[dict[str, dict]] = []
    real = Scheduler._commit

    def commit(self: Scheduler, *args: object) -> None:
        if not seen:
            seen.append(tree_usage(cache))
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Scheduler, "_commit", commit)
    result = Scheduler(cache).schedule()
    assert seen == [before]
    assert len(result.preempted) == 2 and len(result.admitted) == 2


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


# -- bug 5: the pending head is O(log n); a Namespace edit re-routes nothing -----------


def shaped(i: int, lq: str = "lq", ns: str = "ns-cq", prio: int = 0) -> Workload:
    """Workload i with a shape of its own (a group of its own in the pending queue)."""
    return Workload(
        namespace=ns,
        name=f"w{i}",
        uid=f"u{i:06d}",
        queue_name=lq,
        priority=prio,
        creation_time=float(i),
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": 1000 + i})],
    )


def test_head_asks_each_local_queue_once_not_each_group() -> None:
    q = PendingQueue()
    for i in range(1000):
        q.push(shaped(i, lq=f"lq{i % 2}"))
    calls: list[str] = []

    def usage(lq: str) -> float:
        calls.append(lq)
        return 1.0 if lq == "ns-cq/lq0" else 0.0

    head = q.head(usage)
    assert head is not None and head.name == "w1"  # lq1 has less usage; w1 is its oldest
    assert sorted(calls) == ["ns-cq/lq0", "ns-cq/lq1"]


def test_head_does_not_scan_every_group() -> None:
    q = PendingQueue()
    for i in range(20_000):
        q.push(shaped(i))
    start = time.perf_counter()
    for _ in range(200):
        assert q.head() is not None
    # A scan of 20k groups costs milliseconds per head (seconds here); the index, µs.
    assert time.perf_counter() - start < 0.5


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


def _apply_queue_op(q: PendingQueue, op: str, wl: Workload) -> None:
    """One of the random operations the PendingQueue tests drive a queue with."""
    if op == "push":
        q.push(wl)
    elif op == "remove":
        q.remove(wl.key)
    elif op == "park" and wl.key in q:
        q.park(wl)
    elif op == "park_equivalent" and wl.key in q._keys:
        q.park_equivalent(wl)
    elif op == "wake":
        q.requeue_inadmissible()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["push", "remove", "park", "park_equivalent", "wake", "pop"]),
            st.integers(0, 15),  # workload
            st.integers(0, 2),  # priority
            st.integers(0, 2),  # LocalQueue
        ),
        max_size=60,
    )
)
def test_head_equals_the_best_active_workload(ops: list) -> None:
    """The indexed head is what a scan of every active group picks (with and without
    admission fair sharing)."""
    q = PendingQueue()
    wls: dict[int, Workload] = {}
    for op, i, prio, lq in ops:
        wl = wls[i] = wls.get(i) or _queued_workload(i, prio, lq)
        if op == "pop":
            q.pop_head()
        else:
            _apply_queue_op(q, op, wl)
        usage = {"ns/lq0": 0.5, "ns/lq1": 0.0, "ns/lq2": 0.5}
        for fn in (None, usage.__getitem__):
            best = None
            for group in q._active:
                okey, wkey = q._groups[group][0]
                cand = (fn(group[0]) if fn else 0.0, okey, wkey)
                best = cand if best is None or cand < best else best
            got = q.head(fn)
            assert (got.key if got else None) == (best[2] if best else None)
        # The index holds exactly the first workload of every active group (a push behind
        # a group's head, or the removal of one, leaves the index as it is).
        heads = sorted(q._groups[g][0] for g in q._active)
        assert list(q._heads) == heads
        # (the per-LocalQueue index is built on its first use, a head with an order)
        assert {lq: list(h) for lq, h in (q._lq_heads or {}).items()} == {
            lq: sorted(q._groups[g][0] for g in q._active if g[0] == lq)
            for lq in {g[0] for g in q._active}
        }


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["push", "remove", "park", "park_equivalent", "wake", "cycle"]),
            st.integers(0, 10),  # workload
            st.integers(0, 2),  # priority
            st.integers(0, 2),  # LocalQueue
            st.sampled_from(["admit", "park", "back", "sticky"]),  # what the cycle decided
        ),
        max_size=60,
    )
)
def test_a_head_left_in_place_ends_where_a_popped_one_would(ops: list) -> None:
    """The cycle takes heads without removing them (take_head) and removes, parks or
    keeps them when it commits: every queue ends exactly as when the head was popped
    and then removed, parked or pushed back (the sticky preemptor included)."""
    popped, taken = PendingQueue(), PendingQueue()
    wls: dict[int, Workload] = {}

    def state(q: PendingQueue) -> tuple:
        return (
            [w.key for w in q.workloads()],
            sorted(q._parked),
            sorted(q._active),
            list(q._heads),
            q.sticky if q.sticky in q else None,  # a sticky key no longer queued is inert
            q.head().key if q.head() else None,
        )

    for op, i, prio, lq, decided in ops:
        wl = wls[i] = wls.get(i) or _queued_workload(i, prio, lq)
        if op != "cycle":
            _apply_queue_op(popped, op, wl)
            _apply_queue_op(taken, op, wl)
            continue
        a, b = popped.pop_head(), taken.take_head()
        assert (a.key if a else None) == (b.key if b else None)
        if a is None or b is None:
            continue
        if decided == "admit":
            taken.remove(b.key)
        elif decided == "park":
            popped.park(a)
            taken.park(b)
        else:
            popped.push(a)
            taken.keep(b)
            if decided == "sticky":
                popped.sticky, taken.sticky = a.key, b.key
        assert state(popped) == state(taken)


def namespaced_cache() -> Cache:
    cache = make_cache(cq("cq", 10), cq("other", 10))
    cache.cluster_queues["cq"].namespace_selector = LabelSelector(match_labels=(("team", "a"),))
    cache.update_objects(
        cluster_queues=dict(cache.cluster_queues),
        namespaces={"ns-cq": Namespace("ns-cq", {}), "ns-other": Namespace("ns-other", {})},
    )
    return cache


def test_namespace_label_edit_keeps_queues_and_the_waiting_preemptor() -> None:
    cache = namespaced_cache()
    for i in range(3):
        cache.add_workload(shaped(i))
    cache.add_workload(workload("o", "other", 1))
    before = dict(cache.queues)
    cache.queues["cq"].sticky = "ns-cq/w2"  # a preemptor waiting for its victims
    result = Scheduler(cache).schedule()
    assert cache.status["ns-cq/w2"].reason == "Misconfigured"  # ns-cq lacks team=a
    assert [a.workload.key for a in result.admitted] == ["ns-other/o"]
    cache.queues["cq"].sticky = "ns-cq/w1"
    cache.update_objects(
        namespaces={"ns-cq": Namespace("ns-cq", {"team": "a"}), "ns-other": Namespace("ns-other")}
    )
    assert cache.queues == before and all(cache.queues[n] is before[n] for n in before)
    assert cache.queues["cq"].sticky == "ns-cq/w1"  # kept its head position
    # The parked workloads woke up: the label now selects them.
    result = Scheduler(cache).schedule()
    assert [a.workload.key for a in result.admitted] == ["ns-cq/w1"]


def test_local_queue_change_re_routes_only_its_workloads() -> None:
    cache = make_cache(cq("cq", 10), cq("other", 10))
    cache.add_workload(workload("a", "cq", 1))
    cache.add_workload(workload("b", "other", 1))
    cache.queues["other"].sticky = "ns-other/b"
    lqs = dict(cache.local_queues)
    lqs["ns-cq/lq"] = LocalQueue(namespace="ns-cq", name="lq", cluster_queue="other")
    cache.update_objects(local_queues=lqs)
    assert "ns-cq/a" in cache.queues["other"] and "ns-cq/a" not in cache.queues["cq"]
    assert cache.queues["other"].sticky == "ns-other/b"
    del lqs["ns-cq/lq"]
    cache.update_objects(local_queues=lqs)
    assert "ns-cq/a" in cache.unroutable and "ns-cq/a" not in cache.queues["other"]
    lqs["ns-cq/lq"] = LocalQueue(namespace="ns-cq", name="lq", cluster_queue="cq")
    cache.update_objects(local_queues=lqs)
    assert "ns-cq/a" in cache.queues["cq"] and not cache.unroutable


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
    cache = make_cache(
        cq("a1", 4, cohort="a"), cq("a2", 4, cohort="a"), cq("b1", 4, cohort="b")
    )
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


# -- the kept working copy of the tree is a clone, however both sides changed ---------


def tree_of_two_cohorts() -> CohortTree:
    cqs = {
        c.name: c
        for c in (cq("a1", 4, cohort="a"), cq("a2", 4, cohort="a"), cq("b1", 4, cohort="b"))
    }
    return CohortTree(cqs, {})


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.booleans(),  # on the working copy (else on the live tree)
                st.sampled_from(["a1", "a2", "b1"]),
                st.integers(-6, 6),  # cpu to add (negative: remove)
            ),
            max_size=8,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_a_kept_working_copy_is_what_a_fresh_clone_would_be(cycles: list) -> None:
    """Each "cycle" takes the working copy, changes it and the live tree at will and
    gives it back; the next one must start from exactly the live tree's usage (only
    changed paths are re-copied, so this is what could go wrong)."""
    tree = tree_of_two_cohorts()
    fr = ("default", "cpu")
    held = {"a1": 0, "a2": 0, "b1": 0}  # what the live tree holds (removals stay valid)
    for ops in cycles:
        copy = tree.working_copy()
        assert usage_of_tree(copy) == usage_of_tree(tree.clone())
        mine = dict(held)
        for on_copy, name, cpu in ops:
            target, acc = (copy, mine) if on_copy else (tree, held)
            amount = min(abs(cpu), acc[name]) if cpu < 0 else cpu
            if cpu < 0:
                target.remove_usage(name, {fr: amount * 1000})
                acc[name] -= amount
            else:
                target.add_usage(name, {fr: amount * 1000})
                acc[name] += amount
            if on_copy and cpu % 3 == 0:
                with copy.scratch():  # searches try removals and undo them
                    copy.remove_usage(name, {fr: mine[name] * 1000})
        tree.give_back(copy)
    assert usage_of_tree(tree.working_copy()) == usage_of_tree(tree.clone())


def test_a_working_copy_in_use_is_not_handed_out_twice() -> None:
    tree = tree_of_two_cohorts()
    first = tree.working_copy()
    second = tree.working_copy()  # the kept one is out: a fresh clone
    assert second is not first
    first.add_usage("a1", {("default", "cpu"): 1000})
    assert usage_of_tree(second) == usage_of_tree(tree)
    tree.give_back(second)  # not the kept one: nothing changes
    tree.give_back(first)
    assert tree.working_copy() is first
    assert usage_of_tree(first) == usage_of_tree(tree)


def test_the_collector_waits_for_the_cycle_and_is_restored_after_it() -> None:
    """The cyclic collector is off during a cycle (its short-lived containers are freed
    by reference counting) and as it was afterwards: on after a cycle, still off for a
    caller that had turned it off (``plan``), on again after a cycle that raised."""
    cache = make_cache(cq("cq", 10))
    seen: list[bool] = []
    sched = Scheduler(cache, clock=lambda: seen.append(gc.isenabled()) or 0.0)
    cache.add_workload(workload("a", "cq", 1))
    assert gc.isenabled()
    sched.schedule()
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        cache.add_workload(workload("b", "cq", 1))
        sched.schedule()
        assert not gc.isenabled()
    finally:
        gc.enable()

    def boom() -> float:
        raise RuntimeError("clock")

    failing = Scheduler(cache, clock=boom)
    cache.add_workload(workload("c", "cq", 1))
    with pytest.raises(RuntimeError):
        failing.schedule()
    assert gc.isenabled()


# -- a cycle visits only the ClusterQueues that have a head ------------------------------


def _world() -> Cache:
    return make_cache(
        cq("a1", 4, cohort="a", within_cluster_queue="LowerPriority"),
        cq("a2", 4, cohort="a", reclaim_within_cohort="Any"),
        cq("b1", 4, cohort="b", within_cluster_queue="LowerPriority"),
    )


def _decisions(result: object) -> tuple[list[str], list[str]]:
    return (
        [d.workload.key for d in result.admitted],  # type: ignore[attr-defined]
        [p.workload.key for p in result.preempted],  # type: ignore[attr-defined]
    )


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("add"),
                st.sampled_from(["a1", "a2", "b1"]),
                st.integers(1, 6),  # cpu
                st.integers(0, 2),  # priority
            ),
            st.tuples(st.just("cycle")),
            st.tuples(st.just("finish"), st.integers(0, 50)),
            st.tuples(st.just("evict"), st.integers(0, 50)),
        ),
        max_size=40,
    )
)
def test_a_cycle_over_the_queues_with_heads_decides_what_one_over_every_queue_does(
    ops: list,
) -> None:
    """The cycle visits only ``cache.with_heads`` (queues that got a head since a cycle
    last found them empty). Against a twin whose every cycle visits every queue (the
    set forced full), the decisions, the queues and the usage are the same after any
    sequence of arrivals, cycles, finishes (capacity events) and completed evictions."""
    fast, full = _world(), _world()
    sched = {id(fast): Scheduler(fast), id(full): Scheduler(full)}
    n = 0
    for op in ops:
        got = []
        for cache in (fast, full):
            if op[0] == "add":
                cache.add_workload(workload(f"w{n}", op[1], op[2], priority=op[3], created=n))
            elif op[0] == "cycle":
                if cache is full:
                    cache.with_heads = set(cache.queues)
                result = sched[id(cache)].schedule()
                for p in result.preempted:
                    cache.evicted(p.workload.key)  # the victims' evictions complete
                got.append(_decisions(result))
            else:
                admitted = sorted(cache.admitted)
                if admitted:
                    key = admitted[op[1] % len(admitted)]
                    if op[0] == "finish":
                        cache.finish(key)
                    else:
                        cache.evicted(key)
        if op[0] == "add":
            n += 1
        if got:
            assert got[0] == got[1]
        assert sorted(fast.admitted.items()) == sorted(full.admitted.items())
        assert {k: len(q) for k, q in fast.queues.items()} == {
            k: len(q) for k, q in full.queues.items()
        }
        assert tree_usage(fast) == tree_usage(full)
    # the set never misses a queue with a head
    for name, q in fast.queues.items():
        if q.head() is not None:
            assert name in fast.with_heads


def test_a_cycle_does_not_visit_queues_without_a_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a cluster of many ClusterQueues with work in a few, a cycle costs those few."""
    cache = make_cache(*(cq(f"q{i}", 4) for i in range(50)))
    cache.add_workload(workload("x", "q7", 1))
    visited: list[int] = []
    take = PendingQueue.take_head

    def spy(self: PendingQueue, *args: object, **kwargs: object) -> object:
        visited.append(id(self))
        return take(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PendingQueue, "take_head", spy)
    sched = Scheduler(cache)
    result = sched.schedule()
    assert [d.workload.name for d in result.admitted] == ["x"]
    assert visited == [id(cache.queues["q7"])]
    visited.clear()
    assert sched.schedule().heads == 0
    assert visited == [id(cache.queues["q7"])]  # found empty: it leaves the set
    visited.clear()
    sched.schedule()
    assert visited == []
    cache.add_workload(workload("y", "q3", 1))  # a head again: it joins
    assert [d.workload.name for d in sched.schedule().admitted] == ["y"]
    assert visited == [id(cache.queues["q3"])]
