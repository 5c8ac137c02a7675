"""The collector's policy around cycles (admission.engine.gc_pause): no full collection
inside a cycle; full collections walk only what is new once the survivors are frozen;
what freezing holds on to is given back by a compaction."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from admission.engine import gc_pause
from admission.engine.gc_pause import between_cycles, collector_paused, freeze_survivors, release
from admission.engine.scheduler import Scheduler
from tests.unit.engine._support import cq, make_cache, workload


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture
def collector() -> Iterator[list[int]]:
    """The generations of the collections that ran, in order."""
    assert gc.isenabled() and gc.get_freeze_count() == 0
    seen: list[int] = []

    def hook(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(hook)
    try:
        yield seen
    finally:
        gc.callbacks.remove(hook)
        release()
        assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_cycle_ends_with_a_young_collection_and_leaves_nothing_due(
    collector: list[int],
) -> None:
    """However much the cycle allocated while the collector was off, it ends with a
    collection of generation 0 and no collection is due at the next allocation
    (before, the first allocation after ``gc.enable`` ran what the counts had made due,
    a full collection as readily as a young one)."""
    threshold = gc.get_threshold()
    gc.set_threshold(100, 1, 1)  # a full collection is due after every young one
    try:
        kept = []
        gc.collect()  # every count at 0
        start = len(collector)
        with collector_paused():
            assert not gc.isenabled()
            kept = [[i] for i in range(50_000)]  # far past every threshold
        count = gc.get_count()
    finally:
        gc.set_threshold(*threshold)
    assert kept and gc.isenabled()
    assert collector[start:][:1] == [0]  # the young collection at the cycle's end
    assert count[0] < 100 and count[1] <= 1  # nothing due at the next allocation


def test_no_full_collection_runs_inside_schedule(collector: list[int]) -> None:
    """With every collection due as often as it can be, the collections that run while
    ``schedule()`` runs are the young one at its end, never a full one."""
    cache = make_cache(cq("cq", 1000))
    for i in range(300):
        cache.add_workload(workload(f"w{i}", "cq", 1))
    scheduler = Scheduler(cache, clock=lambda: 0.0)
    threshold = gc.get_threshold()
    gc.set_threshold(10, 1, 1)
    try:
        gc.collect()  # every count at 0
        seen_before = len(collector)
        result = scheduler.schedule()
        during = collector[seen_before:]
    finally:
        gc.set_threshold(*threshold)
    assert result.admitted
    assert during[:1] == [0]  # the young collection at the cycle's end
    assert all(generation < 2 for generation in during)


def test_frozen_survivors_are_not_walked_again() -> None:
    """After ``freeze_survivors`` the long-lived objects are in the permanent generation,
    which no collection walks; the survivors of every later full collection join them."""
    try:
        old = [Node() for _ in range(1000)]
        frozen = freeze_survivors()
        assert frozen >= 1000 and gc.get_freeze_count() == frozen
        assert gc.get_count() == (0, 0, 0) or gc.get_count()[0] < 700
        walked = gc.get_objects()
        assert not any(o is old[0] for o in walked)  # what collections walk: not it
        new = [Node() for _ in range(1000)]
        assert any(o is new[0] for o in gc.get_objects())
        before = gc.get_stats()[2]["collections"]
        gc.collect()
        assert gc.get_stats()[2]["collections"] == before + 1
        assert gc.get_freeze_count() >= frozen + 1000  # the new survivors, frozen as it ended
        assert not any(o is new[0] for o in gc.get_objects())
    finally:
        release()
    assert gc.get_freeze_count() == 0 and any(o is old[0] for o in gc.get_objects())


def test_cyclic_garbage_is_collected_before_it_is_frozen() -> None:
    try:
        garbage = Node()
        gone = weakref.ref(garbage)
        del garbage
        freeze_survivors()
        assert gone() is None
    finally:
        release()


def test_what_freezing_holds_on_to_is_bounded_by_compaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reference cycle that dies after it was frozen is held until the frozen population
    has grown past ``COMPACT_GROWTH`` times its size at the last compaction; then
    ``between_cycles`` compacts and it is reclaimed."""
    try:
        held = Node()
        dead = weakref.ref(held)
        freeze_survivors()
        del held
        gc.collect()
        assert dead() is not None  # frozen: the collector does not see it die
        assert not between_cycles()  # nothing due yet
        monkeypatch.setattr(gc_pause, "COMPACT_GROWTH", 0.5)
        gc.collect()  # a full collection notes the growth
        assert between_cycles()
        assert dead() is None
        assert gc.get_freeze_count() > 0 and gc_pause.frozen_state()["compactions"] >= 1
    finally:
        release()


class FakeHeap:
    """The collector over a heap counted, not allocated: live objects outside the
    permanent generation (``young``), live and dead ones in it; a full collection frees
    the dead ones it walks (none of the frozen ones)."""

    def __init__(self, live: int) -> None:
        self.callbacks: list[Any] = []
        self.young, self.young_dead = live, 0
        self.frozen_live, self.frozen_dead = 0, 0
        self.full_collections = 0

    def collect(self) -> int:
        self.full_collections += 1
        for hook in list(self.callbacks):
            hook("start", {"generation": 2})
        freed, self.young_dead = self.young_dead, 0
        for hook in list(self.callbacks):
            hook("stop", {"generation": 2, "collected": freed})
        return freed

    def freeze(self) -> None:
        self.frozen_live += self.young
        self.frozen_dead += self.young_dead
        self.young = self.young_dead = 0

    def unfreeze(self) -> None:
        self.young += self.frozen_live
        self.young_dead += self.frozen_dead
        self.frozen_live = self.frozen_dead = 0

    def get_freeze_count(self) -> int:
        return self.frozen_live + self.frozen_dead

    def churn(self, n: int) -> None:
        """``n`` frozen objects die as reference cycles, ``n`` new ones are made."""
        self.frozen_live -= n
        self.frozen_dead += n
        self.young += n

    @property
    def live(self) -> int:
        return self.young + self.frozen_live


def test_the_frozen_count_never_exceeds_twice_the_survivors_of_the_last_compaction() -> None:
    """A service whose state does not grow but whose frozen objects die as cycles (the
    quota tree a queue-object change replaces): after every ``between_cycles`` the
    frozen population is at most ``COMPACT_GROWTH`` times what survived the last
    compaction — a steady heap's size — and every compaction gives back all the dead."""
    heap = FakeHeap(live=10_000)
    freezer = gc_pause.Freezer(heap)
    assert freezer.freeze_survivors() == 10_000
    for cycle in range(1, 2_001):
        heap.churn(100)
        if cycle % 7 == 0:
            heap.collect()  # when the interpreter's rule runs one: its survivors frozen
        if freezer.between_cycles():
            assert heap.frozen_dead == 0 and heap.get_freeze_count() == heap.live
        assert freezer.baseline == heap.live == 10_000
        assert heap.get_freeze_count() <= gc_pause.COMPACT_GROWTH * freezer.baseline
    assert freezer.compactions >= 10  # 200,000 deaths in a 10,000-object heap
    dead = heap.frozen_dead
    assert freezer.release() == dead  # what it still held, given back
    assert heap.callbacks == [] and heap.get_freeze_count() == 0
