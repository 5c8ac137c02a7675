"""A cycle visits only the ClusterQueues that have a head, and decides what a cycle over all of them would.

In a cluster of many ClusterQueues with work in a few, a cycle must cost those few: it
visits ``cache.with_heads`` only, and its decisions must be the same as those of a cycle
over every queue.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.engine.cache import Cache
from admission.engine.scheduler import Scheduler
from queues.pending import PendingQueue
from tests.unit.engine._support import cq, make_cache, tree_usage, workload

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
