"""Cheap feasibility checks of the engine agree with the exhaustive ones they replace.

* ``Preemptor._could_free_enough`` reads other ClusterQueues' usage off the root of the
  cohort tree (where no lending limit keeps usage locally) instead of summing every
  queue of the tree: the answer must be the same as the sum's, in every random world
  (lending limits included, where the sum is still taken).
"""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.config.load import parse_config
from admission.engine.build import build_scheduler
from admission.engine.cache import Cache
from admission.engine.ordering import Entry
from admission.engine.preemption.classical import Preemptor
from admission.engine.scheduler import Scheduler
from admission.engine.snapshot import Snapshot
from admission.engine.vocabulary import AssignmentMode
from queues.model import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from queues.tree import CohortTree
from tests.unit.engine._support import cq as cpu_queue
from tests.unit.engine.test_engine_properties import (
    FLAVORS,
    RESOURCES,
    admitted_tree,
    requota,
    usage_snapshot,
    violations,
    world,
)
from tests.unit.engine.test_preemption_properties import _filled, _workload


class _Everything:
    """As ``kept_locally``'s answer: every pair is kept locally (always sum the queues)."""

    def __contains__(self, _item: object) -> bool:
        return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.data())
def test_could_free_enough_from_the_root_equals_the_sum_over_queues(
    w: tuple, data: st.DataObject
) -> None:
    cqs, _, _ = w
    cache, _ = _filled(w)
    snap = Snapshot(cache.tree)
    pre = Preemptor(cache)
    for cq in sorted(cqs):
        node = snap.tree.queues[cq]
        for prio in range(4):
            wl = _workload(cq, 9999, 1, 1, 1, prio)
            frs = {(f, r) for f in FLAVORS for r in RESOURCES}
            requests = {
                fr: data.draw(st.integers(0, 24)) * (1000 if fr[1] == "cpu" else 1) for fr in frs
            }
            fast = pre._could_free_enough(snap, wl, node, frs, requests)
            with mock.patch(
                "admission.engine.preemption.classical.kept_locally", lambda _r: _Everything()
            ):
                summed = pre._could_free_enough(snap, wl, node, frs, requests)
            assert fast == summed, (cq, prio, requests)
    snap.release()


# -- deficit-bounded parking (parkUntilFeasible) -----------------------------------------


def _without_lending(cqs: dict, cohorts: dict) -> tuple[dict, dict]:
    """The same world with every lending limit removed (where the bound applies)."""

    def strip(groups: list[ResourceGroup]) -> list[ResourceGroup]:
        return [
            ResourceGroup(
                covered_resources=g.covered_resources,
                flavors=[
                    FlavorQuotas(
                        name=fq.name,
                        resources={
                            r: replace(q, lending_limit=None) for r, q in fq.resources.items()
                        },
                    )
                    for fq in g.flavors
                ],
            )
            for g in groups
        ]

    return (
        {n: replace(c, resource_groups=strip(c.resource_groups)) for n, c in cqs.items()},
        {n: replace(c, resource_groups=strip(c.resource_groups)) for n, c in cohorts.items()},
    )


def _inadmissible_now(sched: Scheduler, cache: Cache, cq: str, wl: Workload) -> bool:
    """The engine's full nomination of ``wl`` against the cache as it is (flavor
    assignment, the victim search, partial admission): neither fits nor finds victims."""
    snap = Snapshot(cache.tree)
    try:
        sched._nominator.snap = snap
        e = Entry(workload=wl, cluster_queue=cq, preemptor=wl.key in cache.preemptors)
        sched._nominator.nominate(e, snap)
    finally:
        sched._nominator.snap = None
        snap.release()
    if e.status is not None:
        return True
    assert e.assignment is not None
    return e.assignment.mode != AssignmentMode.FIT and not e.targets


def _ops(cqs: dict) -> st.SearchStrategy:
    """Busier than the engine properties' streams: many heads, finishes and evictions,
    so that heads are parked with deficits and releases come near them."""
    names = sorted(cqs)
    submit = st.tuples(
        st.just("submit"),
        st.sampled_from(names),
        st.integers(1, 2),  # count
        st.integers(0, 2),  # cpu per pod
        st.sampled_from([0, 0, 1, 2]),  # gpu per pod
        st.integers(0, 2),  # priority
    )
    cycle = st.tuples(st.just("cycle"))
    finish = st.tuples(st.just("finish"), st.integers(0, 50))
    return st.lists(
        st.one_of(
            submit,
            submit,
            submit,
            st.tuples(st.just("burst"), st.integers(1, 2), st.integers(0, 2), st.integers(0, 1)),
            cycle,
            cycle,
            cycle,
            finish,
            finish,
            st.tuples(st.just("evict"), st.integers(0, 50)),
            st.tuples(st.just("reprioritise"), st.integers(0, 50), st.integers(0, 3)),
            # two podSets, or a partially admissible podSet (minCount)
            st.tuples(
                st.just("submit2"),
                st.sampled_from(names),
                st.integers(0, 2),
                st.integers(0, 3),
                st.integers(0, 2),
                st.booleans(),
            ),
            st.tuples(st.just("quota"), st.sampled_from(names), st.integers(0, 12)),
        ),
        min_size=15,
        max_size=60,
    )


def play_bounded(cqs: dict, cohorts: dict, ops: list, *, check: bool) -> list[tuple]:
    """Play ``ops`` with ``parkUntilFeasible: true``; with ``check``, after every step:
    every head parked with a ticket and not woken is inadmissible by the engine's full
    evaluation, every head parked as Kueue parks is woken by a release in its tree, no
    node is over its quotas, and usage is what the admissions hold."""
    flavors = {f: ResourceFlavor(name=f) for f in FLAVORS}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs)
    sched = build_scheduler(
        parse_config({"parkUntilFeasible": True}).engine_policy(), cache, clock=lambda: 0.0
    )
    assert cache.wake_index is not None
    log: list[tuple] = []
    seq = 0
    evicting: list[str] = []  # preempted, quota not yet released

    def submit(cq: str, pod_sets: list[PodSet], prio: int) -> None:
        nonlocal seq
        seq += 1
        cache.add_workload(replace(_workload(cq, seq, 1, 0, 0, prio), pod_sets=pod_sets))

    def released_in(cq: str) -> None:
        if not check:
            return
        tree = cache.tree.queues[cq].root()
        for name, q in cache.queues.items():
            if cache.tree.queues[name].root() is tree:
                assert all(t is not None for _, t in q.parked()), (
                    f"{name}: a head parked as Kueue parks it survived a release in its tree"
                )

    for op in ops:
        kind = op[0]
        if kind == "submit":
            _, cq, count, cpu, gpu, prio = op
            submit(cq, [PodSet("main", count, {"cpu": cpu * 1000, "nvidia.com/gpu": gpu})], prio)
        elif kind == "submit2":
            _, cq, cpu, gpu, prio, partial = op
            if partial:
                pod_sets = [PodSet("main", 3, {"cpu": cpu * 1000, "nvidia.com/gpu": gpu}, 1)]
            else:
                pod_sets = [
                    PodSet("a", 1, {"cpu": cpu * 1000}),
                    PodSet("b", 2, {"cpu": 1000, "nvidia.com/gpu": gpu}),
                ]
            submit(cq, pod_sets, prio)
        elif kind == "burst":
            _, count, cpu, gpu = op
            for cq in sorted(cqs):
                submit(
                    cq, [PodSet("main", count, {"cpu": cpu * 1000, "nvidia.com/gpu": gpu})], seq % 3
                )
        elif kind == "cycle":
            before = violations(admitted_tree(cache))
            r = sched.schedule()
            log.append(
                ("cycle", tuple(sorted((d.workload.key, d.cluster_queue) for d in r.admitted)))
            )
            log.append(("preempted", tuple(sorted((p.workload.key, p.by) for p in r.preempted))))
            log.append(("heads", r.heads))
            if check:
                after = violations(admitted_tree(cache))
                for k, v in after.items():
                    assert v <= before.get(k, 0), f"admission over quota at {k}"
            # half the victims stop at once, the others at a later "evict" step
            for i, p in enumerate(r.preempted):
                if i % 2:
                    evicting.append(p.workload.key)
                elif p.workload.key in cache.admitted:
                    cache.evicted(p.workload.key)
                    released_in(p.cluster_queue)
        elif kind in ("finish", "evict"):
            pool = evicting if kind == "evict" and evicting else sorted(cache.admitted)
            pool = [k for k in pool if k in cache.admitted]
            if pool:
                key = pool[op[1] % len(pool)]
                cq = cache.admitted[key]
                if key in evicting:
                    evicting.remove(key)
                (cache.finish if kind == "finish" else cache.evicted)(key)
                log.append((kind, key))
                released_in(cq)
        elif kind == "reprioritise":
            admitted = sorted(cache.admitted)
            if admitted:
                key = admitted[op[1] % len(admitted)]
                cache.add_workload(replace(cache.workloads[key], priority=op[2]))
                log.append(("reprioritise", key, op[2]))
        elif kind == "quota":
            _, cq, nominal = op
            cqs = {**cqs, cq: requota(cqs[cq], nominal)}
            cache.update_objects(cluster_queues=cqs)
        if check:
            for name in sorted(cache.queues):
                for wl, ticket in cache.queues[name].parked():
                    # (an eligible ticket is decided by the next cycle: test_ordered_wake)
                    if ticket is not None and not cache.wake_index.is_eligible(ticket):
                        assert _inadmissible_now(sched, cache, name, wl), (
                            f"{wl.key} parked in {name} with a ticket, not woken, but admissible"
                        )
            fresh = CohortTree(cache.cluster_queues, cache.cohorts)
            for key, cq in cache.admitted.items():
                fresh.add_usage(cq, cache.usage_of[key])
            assert usage_snapshot(fresh) == usage_snapshot(cache.tree)
    if check:
        for key in sorted(cache.admitted):
            cache.finish(key)
        assert all(not u for u in usage_snapshot(cache.tree).values())
    return log


@st.composite
def _small_quota(draw: st.DrawFn, resource: str, *, with_parent: bool) -> ResourceQuota:
    unit = 1000 if resource == "cpu" else 1
    nominal = draw(st.integers(1, 6))
    bl = draw(st.one_of(st.none(), st.integers(0, 4))) if with_parent else None
    ll = draw(st.one_of(st.none(), st.integers(0, nominal))) if with_parent else None
    return ResourceQuota(
        nominal=nominal * unit,
        borrowing_limit=None if bl is None else bl * unit,
        lending_limit=None if ll is None else ll * unit,
    )


@st.composite
def _small_groups(draw: st.DrawFn, *, with_parent: bool) -> list[ResourceGroup]:
    names = draw(st.sampled_from([["f1"], ["f2"], ["f1", "f2"]]))
    return [
        ResourceGroup(
            covered_resources=list(RESOURCES),
            flavors=[
                FlavorQuotas(
                    name=f,
                    resources={
                        r: draw(_small_quota(r, with_parent=with_parent)) for r in RESOURCES
                    },
                )
                for f in names
            ],
        )
    ]


@st.composite
def bounded_world(draw: st.DrawFn) -> tuple[dict, dict, list]:
    """Small cohort trees (depth 1-3) of 2-5 ClusterQueues with small quotas (so that
    they fill up and heads wait), random preemption policies (mostly without
    borrowWithinCohort, where the bound is tightest), lending limits in half of them."""
    cohorts: dict[str, Cohort] = {}
    for i in range(draw(st.integers(1, 3))):
        parent = f"co{draw(st.integers(0, i - 1))}" if i > 0 else None
        cohorts[f"co{i}"] = Cohort(
            name=f"co{i}",
            parent=parent,
            resource_groups=draw(_small_groups(with_parent=parent is not None))
            if draw(st.booleans())
            else [],
        )
    cqs: dict[str, ClusterQueue] = {}
    for i in range(draw(st.integers(2, 5))):
        cohort = draw(st.one_of(st.none(), *[st.just(c) for c in sorted(cohorts)] * 3))
        reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any"]))
        cqs[f"cq{i}"] = ClusterQueue(
            name=f"cq{i}",
            cohort=cohort,
            namespace_selector=LabelSelector(),
            resource_groups=draw(_small_groups(with_parent=cohort is not None)),
            preemption=PreemptionPolicy(
                within_cluster_queue=draw(
                    st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])
                ),
                reclaim_within_cohort=reclaim,
                borrow_within_cohort="Never"
                if reclaim == "Never" or draw(st.integers(0, 3))
                else "LowerPriority",
                max_priority_threshold=draw(st.one_of(st.none(), st.integers(0, 2))),
            ),
        )
    if draw(st.booleans()):
        cqs, cohorts = _without_lending(cqs, cohorts)
    return cqs, cohorts, draw(_ops(cqs))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bounded_world())
def test_a_head_parked_with_a_deficit_and_not_woken_is_inadmissible(w: tuple) -> None:
    cqs, cohorts, ops = w
    play_bounded(cqs, cohorts, ops, check=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bounded_world())
def test_bounded_parking_is_deterministic(w: tuple) -> None:
    cqs, cohorts, ops = w
    assert play_bounded(cqs, cohorts, ops, check=False) == play_bounded(
        cqs, cohorts, ops, check=False
    )


def _pool(*, reclaim: str = "Never") -> tuple[Scheduler, Scheduler]:
    """Cohort ``pool`` of ``a`` and ``b`` (4 cpu nominal each, no borrowing limit),
    one cache with ``parkUntilFeasible`` and one without (Kueue's parking)."""
    out = []
    for bounded in (True, False):
        cqs = {n: cpu_queue(n, 4, cohort="pool", reclaim_within_cohort=reclaim) for n in ("a", "b")}
        lqs = {
            f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs
        }
        cache = Cache(
            flavors={"default": ResourceFlavor(name="default")},
            cluster_queues=cqs,
            cohorts={"pool": Cohort(name="pool")},
            local_queues=lqs,
        )
        config = parse_config({"parkUntilFeasible": bounded})
        out.append((cache, build_scheduler(config.engine_policy(), cache, clock=lambda: 0.0)))
    return out[0][1], out[1][1]


def _drain(sched: Scheduler) -> int:
    """Cycles until one admits nothing; how many were admitted."""
    n = 0
    while admitted := len(sched.schedule().admitted):
        n += admitted
    return n


def _cpu(cq: str, name: str, cpu: int, created: float) -> Workload:
    return Workload(
        namespace=f"ns-{cq}",
        name=name,
        queue_name="lq",
        creation_time=created,
        pod_sets=[PodSet("main", 1, {"cpu": cpu * 1000})],
    )


def _released(cache: Cache, cq: str, key: str) -> bool:
    from tests.unit.engine.test_ordered_wake import _released as released  # (imports this)

    return released(cache, cq, key)


def test_a_head_held_back_by_its_own_borrowing_limit_ignores_releases_elsewhere() -> None:
    """A head capped by its ClusterQueue's borrowing limit waits for that queue's own
    usage to fall, not the cohort's: finishes in another queue leave it parked."""
    sched, _ = _pool()
    cache = sched.cache
    spec = cache.cluster_queues["a"]
    limited = replace(
        spec,
        resource_groups=[
            ResourceGroup(
                covered_resources=["cpu"],
                flavors=[
                    FlavorQuotas(
                        "default", {"cpu": ResourceQuota(nominal=4000, borrowing_limit=1000)}
                    )
                ],
            )
        ],
    )
    cache.update_objects(cluster_queues={**cache.cluster_queues, "a": limited})
    for i in range(5):
        cache.add_workload(_cpu("a", f"a{i}", 1, float(i)))  # a at its cap: 4 + 1
    cache.add_workload(_cpu("b", "b0", 1, 10.0))
    cache.add_workload(_cpu("b", "b1", 1, 11.0))
    assert _drain(sched) == 7
    head = _cpu("a", "head", 1, 100.0)
    cache.add_workload(head)
    assert not sched.schedule().admitted
    q = cache.queues["a"]
    assert q.is_parked(head.key)
    cache.finish("ns-b/b0")
    cache.finish("ns-b/b1")
    assert q.is_parked(head.key), "a release outside its binding limit woke it"
    cache.finish("ns-a/a0")
    assert _released(cache, "a", head.key)
    assert [d.workload.key for d in sched.schedule().admitted] == [head.key]


def _prio(cq: str, name: str, cpu: int, created: float, priority: int) -> Workload:
    return replace(_cpu(cq, name, cpu, created), priority=priority)


def test_a_head_that_may_reclaim_wakes_when_its_own_queue_gets_under_nominal_enough() -> None:
    """``b`` borrows from ``a`` (``reclaimWithinCohort: Any``); ``a`` holds 2 of its 4
    cpu, so a 3-cpu head can neither fit (the cohort is full) nor reclaim (it would end
    over nominal): parked. When ``a`` falls to 1 cpu it can reclaim: woken and admitted
    by preempting in ``b``, although the cohort as a whole freed only 1 cpu."""
    sched, _ = _pool(reclaim="Any")
    cache = sched.cache
    for i in range(2):
        cache.add_workload(_cpu("a", f"a{i}", 1, float(i)))
    for i in range(6):
        cache.add_workload(_cpu("b", f"b{i}", 1, 10.0 + i))
    assert _drain(sched) == 8
    head = _cpu("a", "head", 3, 100.0)
    cache.add_workload(head)
    r = sched.schedule()
    assert not r.admitted and not r.preempted
    q = cache.queues["a"]
    assert q.is_parked(head.key)
    cache.finish("ns-a/a0")
    assert _released(cache, "a", head.key)
    r = sched.schedule()
    assert r.preempted and {p.cluster_queue for p in r.preempted} == {"b"}


def test_an_admission_it_could_preempt_wakes_a_parked_head_in_time() -> None:
    """A standalone queue of 4 cpu (``withinClusterQueue: LowerPriority``) holds two
    1-cpu workloads of priority 5; a 3-cpu head of priority 2 is parked. A 1-cpu
    workload of priority 0 is admitted after it: once one of the priority-5 workloads
    finishes, the head fits by preempting it, and must not stay parked."""
    solo = cpu_queue("solo", 4, within_cluster_queue="LowerPriority")
    cache = Cache(
        flavors={"default": ResourceFlavor(name="default")},
        cluster_queues={"solo": solo},
        cohorts={},
        local_queues={
            "ns-solo/lq": LocalQueue(namespace="ns-solo", name="lq", cluster_queue="solo")
        },
    )
    sched = build_scheduler(
        parse_config({"parkUntilFeasible": True}).engine_policy(), cache, clock=lambda: 0.0
    )
    cache.add_workload(_prio("solo", "hi0", 1, 0.0, 5))
    cache.add_workload(_prio("solo", "hi1", 1, 1.0, 5))
    assert _drain(sched) == 2
    head = _prio("solo", "head", 3, 10.0, 2)
    cache.add_workload(head)
    assert not sched.schedule().admitted
    q = cache.queues["solo"]
    assert q.is_parked(head.key)
    cache.add_workload(_prio("solo", "lo", 1, 20.0, 0))
    assert _drain(sched) == 1  # the low-priority one fits
    while sched.schedule().heads:  # whatever was woken fails again and is parked
        pass
    cache.finish("ns-solo/hi0")
    assert _released(cache, "solo", head.key)
    r = sched.schedule()
    assert [p.workload.key for p in r.preempted] == ["ns-solo/lo"]


def test_park_until_feasible_is_off_by_default_and_has_no_effect_with_fair_sharing() -> None:
    cache, _ = _filled((_pool()[0].cache.cluster_queues, {"pool": Cohort(name="pool")}, []))
    build_scheduler(parse_config({}).engine_policy(), cache, clock=lambda: 0.0)
    assert cache.wake_index is None
    config = parse_config({"parkUntilFeasible": True, "fairSharing": {}})
    assert any(
        w.startswith("configuration: parkUntilFeasible: has no effect") for w in config.warnings
    )
    build_scheduler(config.engine_policy(), cache, clock=lambda: 0.0)
    assert cache.wake_index is None
    build_scheduler(
        parse_config({"parkUntilFeasible": True}).engine_policy(), cache, clock=lambda: 0.0
    )
    assert cache.wake_index is not None
    assert not parse_config({"parkUntilFeasible": True}).warnings


def test_the_wake_index_forgets_tickets_nobody_holds_and_keeps_the_others() -> None:
    """Tickets whose heads were woken otherwise are dropped when the index compacts
    (after as many parks as it holds tickets, plus 4,096), live ones still fire."""
    from admission.engine.wake_index import WakeIndex
    from queues.quota_node import QuotaNode

    node = QuotaNode("cq", is_cohort=False)
    node.usage[("f1", "cpu")] = 100
    held = set(range(1, 10_001, 7))  # the tickets a queue still holds
    index = WakeIndex(lambda t, _cq: t in held)
    for _ in range(10_000):
        index.park("cq", [(node, ("f1", "cpu"), 50)], -float("inf"))
    assert len(index) < 10_000  # compacted: dead tickets forgotten
    node.usage[("f1", "cpu")] = 49
    fired = {t for t, _ in index.released([node], [("f1", "cpu")])}
    assert held <= fired, "a ticket still held was lost"
    assert len(fired) < 10_000
    assert not index.released([node], [("f1", "cpu")])  # each fires once


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.data())
def test_the_precheck_never_rejects_a_request_the_full_search_finds_victims_for(
    w: tuple, data: st.DataObject
) -> None:
    """``_could_free_enough`` is a necessary condition only: whenever the victim search
    run without it (every candidate collected and tried) finds victims, it says yes."""
    cqs, _, _ = w
    cache, _ = _filled(w)
    snap = Snapshot(cache.tree)
    pre = Preemptor(cache)
    for cq in sorted(cqs):
        node = snap.tree.queues[cq]
        flavor = cqs[cq].resource_groups[0].flavors[0].name
        for prio in range(1, 5):
            wl = _workload(
                cq, 9999, 1, data.draw(st.integers(1, 6)), data.draw(st.integers(0, 6)), prio
            )
            requests = {(flavor, r): v for r, v in wl.pod_sets[0].requests.items() if v}
            frs = {fr for fr, v in requests.items() if v > node.available(fr)}
            if not frs:
                continue
            allowed = pre._could_free_enough(snap, wl, node, frs, requests)
            with mock.patch.object(Preemptor, "_could_free_enough", lambda *_a: True):
                found = pre.minimal_targets(snap, wl, node, frs, requests)
            if found:
                assert allowed, (cq, prio, requests, found)
            assert pre.minimal_targets(snap, wl, node, frs, requests) == found
    snap.release()
