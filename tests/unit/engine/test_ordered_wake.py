"""Precise waking of bounded parking (``parkUntilFeasible``): a head parked with a
demand whose threshold a release reaches becomes eligible, and the next cycle decides
(``QueueManager.settle_wakes``): a head that its queue would not nominate now stays
eligible, one no threshold of which is reached any more is parked again, and one that
would be its queue's only head and fits is processed in its place in the cycle's order
while still parked (a phantom), woken only if admitted.

Soundness, cycle by cycle: no head left parked so would have been admitted, or would
have preempted, had it been woken and evaluated with the others (the engine's full
evaluation of every head): each cycle is replayed with them woken too. Between cycles,
every parked head that the full evaluation admits is eligible (``play_bounded`` checks
that after every step)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine import queue_manager, wake_index
from admission.engine.cache import Cache
from admission.engine.wake_index import WakeIndex
from queues.model import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    PreemptionPolicy,
    ResourceGroup,
    ResourceQuota,
)
from tests.unit.engine.test_feasibility import _cpu, _drain, _pool, bounded_world, play_bounded


@st.composite
def herd_world(draw: st.DrawFn) -> tuple[dict, dict, list]:
    """Where ordered waking matters: a cohort tree (depth 1-3) of 3-6 ClusterQueues
    with one flavor each and small quotas, kept full by single-pod workloads of 1-3
    cpu, with finishes and evictions freeing a little at a time, so that a release
    reaches several parked heads at once."""
    cohorts: dict[str, Cohort] = {}
    for i in range(draw(st.integers(1, 3))):
        parent = f"co{draw(st.integers(0, i - 1))}" if i > 0 else None
        cohorts[f"co{i}"] = Cohort(name=f"co{i}", parent=parent)
    cqs: dict[str, ClusterQueue] = {}
    for i in range(draw(st.integers(3, 6))):
        cohort = draw(st.sampled_from(sorted(cohorts)))
        reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any"]))
        bl = draw(st.one_of(st.none(), st.integers(0, 4)))
        cqs[f"cq{i}"] = ClusterQueue(
            name=f"cq{i}",
            cohort=cohort,
            namespace_selector=LabelSelector(),
            resource_groups=[
                ResourceGroup(
                    covered_resources=["cpu"],
                    flavors=[
                        FlavorQuotas(
                            name=draw(st.sampled_from(["f1", "f1", "f2"])),
                            resources={
                                "cpu": ResourceQuota(
                                    nominal=draw(st.integers(1, 4)) * 1000,
                                    borrowing_limit=None if bl is None else bl * 1000,
                                )
                            },
                        )
                    ],
                )
            ],
            preemption=PreemptionPolicy(
                within_cluster_queue=draw(
                    st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])
                ),
                reclaim_within_cohort=reclaim,
                borrow_within_cohort="Never",
            ),
        )
    names = sorted(cqs)
    submit = st.tuples(
        st.just("submit"),
        st.sampled_from(names),
        st.just(1),
        st.integers(1, 3),
        st.just(0),
        st.integers(0, 2),
    )
    ops = draw(
        st.lists(
            st.one_of(
                submit,
                submit,
                submit,
                st.tuples(st.just("burst"), st.just(1), st.integers(1, 2), st.just(0)),
                st.tuples(st.just("cycle")),
                st.tuples(st.just("cycle")),
                st.tuples(st.just("finish"), st.integers(0, 50)),
                st.tuples(st.just("finish"), st.integers(0, 50)),
                st.tuples(st.just("evict"), st.integers(0, 50)),
                st.tuples(st.just("reprioritise"), st.integers(0, 50), st.integers(0, 3)),
            ),
            min_size=20,
            max_size=70,
        )
    )
    return cqs, cohorts, ops


def _left_parked_would_win(cqs: dict, cohorts: dict, ops: list, k: int) -> list[str]:
    """Replay ``ops`` up to their ``k``-th cycle; before that cycle takes its heads,
    let ordered waking decide, then wake as well every eligible head it left parked
    (deferred, phantoms included). Of those, the ones that cycle admits or that preempt
    in it. (A head parked again, none of its thresholds reached, is inadmissible on its
    own, which ``play_bounded`` checks; woken, it could only take its queue's turn.)"""
    cut = [i for i, op in enumerate(ops) if op[0] == "cycle"][k]
    left: list[str] = []
    settle, defer = queue_manager.QueueManager.settle_wakes, WakeIndex.defer
    calls = 0

    def shadow_settle(self: queue_manager.QueueManager) -> list:
        nonlocal calls
        calls += 1
        if calls != k + 1:
            return settle(self)
        held: list[tuple[int, str]] = []
        WakeIndex.defer = lambda _i, t, cq: held.append((t, cq))  # type: ignore[method-assign]
        try:
            settle(self)
        finally:
            WakeIndex.defer = defer  # type: ignore[method-assign]
        assert self.wake_index is not None
        for ticket, cq in held:
            head = self.queues[cq].ticket_head(ticket)
            if head is not None:
                left.append(head.key)
            self.wake_index.forget(ticket)
            self.queues[cq].wake(ticket)
        return []  # the phantoms too are woken: nominated as heads

    queue_manager.QueueManager.settle_wakes = shadow_settle  # type: ignore[method-assign]
    try:
        log = play_bounded(cqs, cohorts, ops[: cut + 1], check=False)
    finally:
        queue_manager.QueueManager.settle_wakes = settle  # type: ignore[method-assign]
    admitted = {key for key, _ in log[-3][1]}
    preempting = {by for _, by in log[-2][1]}
    return [key for key in left if key in admitted or key in preempting]


def _sound(w: tuple) -> None:
    """Cycle by cycle, no head ordered waking left parked would have been admitted or
    would have preempted had it been woken with the others (the engine's full
    evaluation of every head): each cycle is replayed with them woken too."""
    cqs, cohorts, ops = w
    log = play_bounded(cqs, cohorts, ops, check=True)
    cycles = [i for i, entry in enumerate(log) if entry[0] == "cycle"]
    for k, at in enumerate(cycles):
        won = {key for key, _ in log[at][1]} | {by for _, by in log[at + 1][1]}
        # (a phantom the cycle admitted was left parked only until then)
        lost = set(_left_parked_would_win(cqs, cohorts, ops, k)) - won
        assert not lost, f"cycle {k + 1}: {sorted(lost)} left parked"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(herd_world())
def test_no_head_left_parked_would_be_admitted_where_releases_reach_many_heads(w: tuple) -> None:
    _sound(w)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bounded_world())
def test_no_head_left_parked_would_be_admitted(w: tuple) -> None:
    _sound(w)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(herd_world())
def test_compacting_the_wake_index_at_every_park_loses_no_eligible_head(w: tuple) -> None:
    slack = wake_index.COMPACT_SLACK
    wake_index.COMPACT_SLACK = 0
    try:
        _sound(w)
    finally:
        wake_index.COMPACT_SLACK = slack


def test_herd_worlds_defer_heads() -> None:
    """The property above is not vacuous: in these worlds releases do reach heads that
    stay parked while eligible (deferred, phantoms among them), and heads parked again."""
    counts = {"defer": 0, "refile": 0}
    defer, refile = WakeIndex.defer, WakeIndex.refile

    def counting_defer(self: WakeIndex, ticket: int, cq: str) -> None:
        counts["defer"] += 1
        defer(self, ticket, cq)

    def counting_refile(self: WakeIndex, ticket: int) -> None:
        counts["refile"] += 1
        refile(self, ticket)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(herd_world())
    def run(w: tuple) -> None:
        play_bounded(*w, check=False)

    WakeIndex.defer, WakeIndex.refile = counting_defer, counting_refile  # type: ignore[method-assign]
    try:
        run()
    finally:
        WakeIndex.defer, WakeIndex.refile = defer, refile  # type: ignore[method-assign]
    assert counts["defer"] > 0 and counts["refile"] > 0


def _released(cache: Cache, cq: str, key: str) -> bool:
    """Woken, or eligible: the next cycle decides about it (``settle_wakes``)."""
    q = cache.queues[cq]
    index = cache.wake_index
    return not q.is_parked(key) or any(
        wl.key == key and t is not None and index is not None and index.is_eligible(t)
        for wl, t in q.parked()
    )


def test_a_release_too_small_for_a_parked_head_does_not_wake_it_a_large_enough_one_does() -> None:
    """``b`` borrows all of ``a``'s quota (8 cpu in 1-cpu workloads); ``a``'s head asks
    for 2 cpu and cannot reclaim (``reclaimWithinCohort: Never``): parked, 2 cpu short.
    One finish in ``b`` frees 1 cpu: Kueue wakes the head (and fails it again), bounded
    parking does not; a second finish frees 2 cpu in all: it is woken and admitted."""
    runs = []
    for s in _pool():
        c = s.cache
        for i in range(8):
            c.add_workload(_cpu("b", f"b{i}", 1, float(i)))
        assert _drain(s) == 8
        head = _cpu("a", "head", 2, 100.0)
        c.add_workload(head)
        r = s.schedule()
        assert not r.admitted and r.heads == 1
        q = c.queues["a"]
        assert q.is_parked(head.key)
        c.finish("ns-b/b0")  # 1 cpu free in the cohort: not enough
        runs.append((c.wake_index is not None, q.is_parked(head.key), s.schedule().heads))
        c.finish("ns-b/b1")  # 2 cpu free: enough
        assert _released(c, "a", head.key)
        r = s.schedule()
        assert [d.workload.key for d in r.admitted] == [head.key]
    assert runs == [(True, True, 0), (False, False, 1)]
