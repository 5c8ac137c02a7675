"""Parking failed heads and their equivalents, as Kueue does, and the admitted
workloads the victim searches read (issue 16, cycle-5k).

Kueue (SchedulingEquivalenceHashing, on by default since 0.18) parks a BestEffortFIFO
head that neither fits nor can preempt together with every queued workload of its
scheduling hash, remembers the hash (``ClusterQueue.hashToBulkMoveReason``, set in
``requeueIfNotPresent``/``handleInadmissibleHash``) and sends a workload of that hash
that is added or updated before the next requeue of the queue's inadmissible workloads
straight to them (``PushOrUpdate``: "Skip to inadmissible if the workload's equivalence
class was already bulk-moved"); ``queueInadmissibleWorkloads`` (a release in the cohort
tree, a spec change) forgets the hashes. A workload requeued at once
(``requeueIfNotPresent`` with ``immediate``) goes to the heap alone: the inadmissible
ones stay where they are. ``pkg/cache/queue/cluster_queue.go``,
``pkg/cache/queue/inadmissible_workloads.go``.

``PendingQueue.park_with_equivalents`` does what ``park`` then ``park_equivalent`` do
in fewer sorted-list operations; the property tests below run random operations through
both and compare everything observable, on one queue and on whole engines.

``Cache.admitted_rows`` keeps each ClusterQueue's admitted workloads for the victim
searches across cycles until an admission there changes; a property test checks it
against a fresh read before every cycle of random worlds.
"""

from __future__ import annotations

from collections.abc import Callable
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine.cache import Cache
from admission.engine.scheduler import Scheduler
from queues.model import PodSet, Workload
from queues.pending import PendingQueue
from tests.unit.engine._support import _queued_workload, cq, make_cache, workload
from tests.unit.engine.test_cycle_fast_paths import decisions
from tests.unit.engine.test_engine_properties import world


def _long_way(self: PendingQueue, wl: Workload, *, remember: bool = True) -> int:
    self.park(wl)
    return self.park_equivalent(wl, remember=remember)


# -- Kueue's behaviour, pinned -----------------------------------------------------------


def test_an_equivalent_that_arrives_after_its_head_failed_stays_parked() -> None:
    """cq (10 cpu) runs 6; ``big`` (8 cpu) fails in cycle 1 and is parked. ``big2``, of
    the same shape and priority, arrives before cycle 2: Kueue sends it to the
    inadmissible workloads at once, so cycle 2's head is ``small`` (admitted), not
    ``big2`` (which would fail as ``big`` did and admit ``small`` a cycle later). The
    release of ``running`` wakes both; ``big`` is admitted first (the older)."""
    cache = make_cache(cq("cq", 10))
    cache.add_workload(workload("running", "cq", 6, admitted=True))
    cache.add_workload(workload("big", "cq", 8, created=1))
    cache.add_workload(workload("small", "cq", 2, created=5))
    s = Scheduler(cache)
    r = s.schedule()
    assert (r.heads, r.admitted) == (1, [])
    assert cache.queues["cq"].is_parked("ns-cq/big")
    cache.add_workload(workload("big2", "cq", 8, created=3))  # before small in the heap
    q = cache.queues["cq"]
    assert q.is_parked("ns-cq/big2")
    r = s.schedule()
    assert r.heads == 1
    assert [d.workload.key for d in r.admitted] == ["ns-cq/small"]
    assert q.is_parked("ns-cq/big") and q.is_parked("ns-cq/big2")
    # its status is its group's (the reason the equivalent failed)
    assert cache.status_of(cache.workloads["ns-cq/big2"], "cq") == cache.status["ns-cq/big"]
    cache.finish("ns-cq/running")  # a release: everything parked in the tree is woken
    assert not q.is_parked("ns-cq/big") and not q.is_parked("ns-cq/big2")
    r = s.schedule()
    assert [d.workload.key for d in r.admitted] == ["ns-cq/big"]


def test_a_different_shape_or_priority_is_not_parked_with_them() -> None:
    cache = make_cache(cq("cq", 10))
    cache.add_workload(workload("running", "cq", 6, admitted=True))
    cache.add_workload(workload("big", "cq", 8, created=1))
    Scheduler(cache).schedule()
    cache.add_workload(workload("other-size", "cq", 7, created=2))
    cache.add_workload(workload("other-prio", "cq", 8, created=2, priority=1))
    q = cache.queues["cq"]
    assert q.is_parked("ns-cq/big")
    assert not q.is_parked("ns-cq/other-size") and not q.is_parked("ns-cq/other-prio")


def test_strict_fifo_remembers_no_hash() -> None:
    spec = cq("cq", 10)
    spec.queueing_strategy = "StrictFIFO"
    cache = make_cache(spec)
    cache.add_workload(workload("running", "cq", 6, admitted=True))
    cache.add_workload(workload("big", "cq", 8, created=1))
    Scheduler(cache).schedule()
    cache.add_workload(workload("big2", "cq", 8, created=3))
    q = cache.queues["cq"]
    assert not q.is_parked("ns-cq/big") and not q.is_parked("ns-cq/big2")


def _same_shape(i: int, created: float) -> Workload:
    return Workload(
        namespace="ns",
        name=f"w{i}",
        uid=f"u{i}",
        queue_name="lq",
        priority=0,
        creation_time=created,
        pod_sets=[PodSet(name="main", count=1, requests={"cpu": 1000})],
    )


def test_a_workload_put_back_at_once_wakes_none_of_its_parked_equivalents() -> None:
    """Kueue's immediate requeue (``PushActiveIfNotPresent``) queues that workload
    only: a push into a parked group leaves the group's workloads parked."""
    q = PendingQueue()
    a, b, c = _same_shape(1, 1.0), _same_shape(2, 2.0), _same_shape(3, 0.5)
    q.push(a)
    q.push(b)
    assert q.take_head() is a
    assert q.park_with_equivalents(a) == 1
    assert q.head() is None and q.is_parked(a.key) and q.is_parked(b.key)
    q.push(c)  # e.g. an admission that could not be written (Cache.forget)
    assert q.head() is c
    assert q.is_parked(a.key) and q.is_parked(b.key)
    q.arrive(_same_shape(4, 9.0))  # an arrival of the hash: parked
    assert q.is_parked("ns/w4")
    assert q.requeue_inadmissible() >= 1  # a capacity event: everybody again, in order
    order = []
    while (h := q.pop_head()) is not None:
        order.append(h.name)
    assert order == ["w3", "w1", "w2", "w4"]


# -- the short way parks exactly what the long way parks ---------------------------------


def _observed(q: PendingQueue, keys: list[str], tickets: list[int]) -> tuple:
    usage = {"ns/lq0": 0.5, "ns/lq1": 0.0, "ns/lq2": 0.25}
    head = q.head()
    fair = q.head(usage.__getitem__)
    return (
        len(q),
        head.key if head else None,
        fair.key if fair else None,
        {k: (k in q, q.is_parked(k)) for k in keys},
        sorted(w.key for w in q.workloads()),
        [q.holds(t) for t in tickets],
    )


def _drain(q: PendingQueue) -> list[str]:
    """Everything left, in the order cycles would take it: the active ones, then
    (after a capacity event) the parked ones."""
    out = []
    for _ in range(2):
        while (h := q.pop_head()) is not None:
            out.append(h.key)
        q.requeue_inadmissible()
    return out


_OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["push", "push", "arrive", "arrive", "remove", "cycle", "cycle", "cycle", "wake"]
            + ["unbounded", "ticket", "sticky"]
        ),
        st.integers(0, 11),  # workload
        st.integers(0, 1),  # priority
        st.integers(0, 2),  # LocalQueue
        st.sampled_from(["admit", "park", "park_eq", "park_eq", "park_eq_unremembered", "back"]),
        st.booleans(),  # does the owner give the park a ticket
    ),
    min_size=15,
    max_size=70,
)


def _run(ops: list, park_eq: Callable[..., int]) -> list[tuple]:
    q = PendingQueue()
    tickets: list[int] = []
    give = [False]
    made: dict[str, int] = {}  # this step's ticket per workload (the cache's memo)

    def on_park(wl: Workload) -> int | None:
        if not give[0]:
            return None
        if wl.key not in made:
            tickets.append(len(tickets) + 1)
            made[wl.key] = tickets[-1]
        return made[wl.key]

    q.on_park = on_park
    wls: dict[int, Workload] = {}
    seen: list[tuple] = []
    keys: list[str] = []
    for op, i, prio, lq, decided, ticketed in ops:
        wl = wls[i] = wls.get(i) or _queued_workload(i, prio, lq)
        if wl.key not in keys:
            keys.append(wl.key)
        give[0] = ticketed
        made.clear()
        if op == "push":
            q.push(wl)
        elif op == "arrive":
            q.arrive(wl)
        elif op == "remove":
            q.remove(wl.key)
        elif op == "wake":
            q.requeue_inadmissible()
        elif op == "unbounded":
            q.wake_unbounded()
        elif op == "ticket" and tickets:
            q.wake(tickets[i % len(tickets)])
        elif op == "sticky":
            h = q.take_head()
            if h is not None:
                q.keep(h)
                q.sticky = h.key
        elif op == "cycle":
            h = q.take_head()
            if h is None:
                pass
            elif decided == "admit":
                q.remove(h.key)
            elif decided == "park":
                q.park(h)
            elif decided == "back":
                q.keep(h)
            else:
                seen.append(("parked", park_eq(q, h, remember=decided == "park_eq")))
        seen.append(_observed(q, keys, tickets))
    seen.append(("drain", _drain(q)))
    return seen


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_parking_with_equivalents_the_short_way_is_the_long_way(ops: list) -> None:
    short = _run(ops, PendingQueue.park_with_equivalents)
    long = _run(ops, _long_way)
    assert short == long


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_engines_decide_the_same_either_way(w: tuple) -> None:
    """Random worlds (arrivals, cycles, finishes, quota changes) through the short
    way and through ``park`` + ``park_equivalent``: the same decisions and messages."""
    cqs, cohorts, ops = w
    short = decisions(cqs, cohorts, ops)
    with mock.patch.object(PendingQueue, "park_with_equivalents", _long_way):
        long = decisions(cqs, cohorts, ops)
    assert short == long


def _fresh_rows(cache: Cache, cq_name: str) -> list[tuple] | None:
    keys = cache.by_cq.get(cq_name)
    if not keys:
        return None
    return [(k, cache.workloads[k], cache.workloads[k].priority, cache.usage_of[k]) for k in keys]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_kept_admitted_rows_are_what_the_cache_holds_before_every_cycle(w: tuple) -> None:
    cqs, cohorts, ops = w
    checked = [0]
    real = Scheduler.schedule

    def schedule(self: Scheduler) -> object:
        cache = self.cache
        for name in cache.cluster_queues:
            kept = cache.admitted_rows(name)
            fresh = _fresh_rows(cache, name)
            assert (kept[0] if kept else None) == fresh, name
            if kept is not None:
                assert all(
                    a[1] is b[1] and a[3] is b[3] for a, b in zip(kept[0], fresh or [], strict=True)
                )
                assert kept[1] == min(r[2] for r in kept[0])
                # each row's place in Kueue's candidate order, as read from it now
                assert [rank for rank, _ in kept[2]] == [
                    (wl.priority, -(wl.admission_time or 0.0), wl.uid or key)
                    for key, wl, _, _ in kept[0]
                ]
                assert all(a is b for (_, a), b in zip(kept[2], kept[0], strict=True))
            checked[0] += 1
        return real(self)

    with mock.patch.object(Scheduler, "schedule", schedule):
        decisions(cqs, cohorts, ops)


def test_an_admitted_workload_read_again_is_ranked_as_read() -> None:
    """A row's place in the candidate order is worked out when the workload is charged;
    an admitted workload read again (a new priority, a new admission time) is charged
    again, so the rows and their order are those of the object read last."""
    cache = make_cache(cq("a", 10))
    cache.add_workload(workload("w1", "a", 1, priority=1, created=5.0, admitted=True))
    cache.add_workload(workload("w2", "a", 1, priority=2, created=6.0, admitted=True))
    kept = cache.admitted_rows("a")
    assert kept is not None
    assert [rank for rank, _ in kept[2]] == [(1, -5.0, "w1"), (2, -6.0, "w2")]
    again = workload("w1", "a", 1, priority=3, created=7.0, admitted=True)
    cache.add_workload(again)
    kept = cache.admitted_rows("a")
    assert kept is not None
    assert [row[0] for row in kept[0]] == ["ns-a/w2", "ns-a/w1"]
    assert kept[0][1][1] is again and kept[0][1][2] == 3 and kept[1] == 2
    assert kept[2][1] == ((3, -7.0, "w1"), kept[0][1])
