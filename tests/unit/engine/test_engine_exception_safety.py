"""An exception in the middle of a search or a cycle leaves the engine's cache and tree as they were.

A preemption search (classical and fair sharing) and a whole cycle work on a snapshot and
scratch state; if anything raises half-way, the live tree and cache must be untouched, or
the next cycle would admit against quota that is not there. Each test failed before its
fix.
"""

from __future__ import annotations

import pytest

from admission.engine.cache import Cache
from admission.engine.preemption.classical import Preemptor
from admission.engine.preemption.fair_sharing import FairPreemptor, parse_strategies
from admission.engine.scheduler import Scheduler
from admission.engine.snapshot import Snapshot
from tests.unit.engine._support import cq, make_cache, tree_usage, usage_of_tree, workload


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
