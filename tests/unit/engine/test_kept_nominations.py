"""Kept nominations (admission.engine.verdicts) change no decision.

Two caches receive the same random stream of events — submissions, bursts, finishes,
deletions of pending workloads, evictions completing late, priority changes (pending and
admitted), quota edits — and run the same cycles, one scheduler reusing its heads'
answers (the default), the other assigning every head anew. After every cycle the
admissions (with flavors and usage), the preemptions (with their messages), the pending
statuses in the order they were decided, the number of heads, every queue's workloads
with whether each is parked, the statuses and the waiting preemptors must be equal.

The worlds lean towards what the kept answers cover (a ClusterQueue of one flavor,
one podSet, one non-zero request) so that they are reused often, with the rest mixed
in: two flavors, two requests, lending limits, every preemption policy, cohorts up to
three levels deep, explanations with numbers on and off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from unittest import mock

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from admission.engine.assignment import Assignment
from admission.engine.cache import Cache
from admission.engine.decisions import CycleResult
from admission.engine.scheduler import Scheduler
from admission.engine.verdicts import KeptNominations
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

RESOURCES = ["cpu", "nvidia.com/gpu"]


@st.composite
def _quota(draw: st.DrawFn, *, with_parent: bool) -> ResourceQuota:
    nominal = draw(st.integers(0, 4))
    bl = draw(st.one_of(st.none(), st.integers(0, 4))) if with_parent else None
    ll = draw(st.one_of(st.none(), st.none(), st.integers(0, nominal))) if with_parent else None
    return ResourceQuota(nominal=nominal, borrowing_limit=bl, lending_limit=ll)


@st.composite
def _groups(draw: st.DrawFn, *, with_parent: bool, one_flavor: bool) -> list[ResourceGroup]:
    names = ["f1"] if one_flavor else draw(st.sampled_from([["f1"], ["f2"], ["f1", "f2"]]))
    flavors = [
        FlavorQuotas(
            name=f, resources={r: draw(_quota(with_parent=with_parent)) for r in RESOURCES}
        )
        for f in names
    ]
    return [ResourceGroup(covered_resources=list(RESOURCES), flavors=flavors)]


@st.composite
def worlds(draw: st.DrawFn) -> tuple[dict, dict, list, bool]:
    cohorts: dict[str, Cohort] = {}
    for i in range(draw(st.integers(1, 4))):
        parent = f"co{draw(st.integers(0, i - 1))}" if i > 0 else None
        cohorts[f"co{i}"] = Cohort(
            name=f"co{i}",
            parent=parent,
            resource_groups=draw(_groups(with_parent=parent is not None, one_flavor=False))
            if draw(st.booleans())
            else [],
        )
    cqs: dict[str, ClusterQueue] = {}
    for i in range(draw(st.integers(2, 5))):
        cohort = draw(st.one_of(st.none(), st.sampled_from(sorted(cohorts))))
        reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any"]))
        cqs[f"cq{i}"] = ClusterQueue(
            name=f"cq{i}",
            cohort=cohort,
            namespace_selector=LabelSelector(),
            resource_groups=draw(
                _groups(with_parent=cohort is not None, one_flavor=draw(st.booleans()))
            ),
            queueing_strategy=draw(
                st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"])
            ),
            preemption=PreemptionPolicy(
                within_cluster_queue=draw(
                    st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])
                ),
                reclaim_within_cohort=reclaim,
                borrow_within_cohort="Never"
                if reclaim == "Never"
                else draw(st.sampled_from(["Never", "LowerPriority"])),
                max_priority_threshold=draw(st.one_of(st.none(), st.integers(0, 2))),
            ),
        )
    names = sorted(cqs)
    shape = st.tuples(
        st.integers(1, 2),  # pods
        st.sampled_from([0, 1, 1, 2, 3]),  # cpu per pod
        st.sampled_from([0, 0, 0, 1, 2]),  # gpu per pod: mostly none (one request)
        st.integers(0, 2),  # priority
    )
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("submit"), st.sampled_from(names), shape),
                st.tuples(st.just("submit"), st.sampled_from(names), shape),
                st.tuples(st.just("burst"), shape),
                st.tuples(st.just("cycle")),
                st.tuples(st.just("cycle")),
                st.tuples(st.just("cycle")),
                st.tuples(st.just("release"), st.integers(0, 50)),
                st.tuples(st.just("release"), st.integers(0, 50)),
                st.tuples(st.just("finish"), st.integers(0, 50)),
                st.tuples(st.just("delete"), st.integers(0, 50)),
                st.tuples(st.just("evictions")),
                st.tuples(st.just("priority"), st.integers(0, 50), st.integers(0, 2)),
                st.tuples(st.just("quota"), st.sampled_from(names), st.integers(0, 6)),
            ),
            min_size=20,
            max_size=60,
        )
    )
    start = [("burst", draw(shape)), ("burst", draw(shape)), ("cycle",)]  # work to contend for
    return cqs, cohorts, start + ops, draw(st.booleans())


def _requota(spec: ClusterQueue, nominal: int) -> ClusterQueue:
    fq = spec.resource_groups[0].flavors[0]
    resources = {r: replace(q, nominal=nominal) for r, q in fq.resources.items()}
    return replace(
        spec,
        resource_groups=[
            ResourceGroup(
                covered_resources=list(RESOURCES),
                flavors=[
                    FlavorQuotas(name=fq.name, resources=resources),
                    *spec.resource_groups[0].flavors[1:],
                ],
            )
        ],
    )


def _workload(cq: str, seq: int, shape: tuple[int, int, int, int]) -> Workload:
    count, cpu, gpu, prio = shape
    return Workload(
        namespace=f"ns-{cq}",
        name=f"w{seq}",
        queue_name="lq",
        priority=prio,
        creation_time=float(seq),
        pod_sets=[PodSet(name="main", count=count, requests={"cpu": cpu, "nvidia.com/gpu": gpu})],
    )


def _decisions(r: CycleResult) -> tuple:
    return (
        r.heads,
        [
            (
                d.workload.key,
                d.cluster_queue,
                [
                    (p.name, sorted(p.flavors.items()), sorted(p.resource_usage.items()), p.count)
                    for p in d.admission.pod_set_assignments
                ],
            )
            for d in r.admitted
        ],
        [(d.workload.key, d.cluster_queue, d.by, d.reason, d.message) for d in r.preempted],
        [(k, s.reason, s.message) for k, s in r.pending.items()],
    )


def _queues(cache: Cache) -> tuple:
    """Every queue's workloads in order, with whether each is parked; the statuses, the
    statuses of parked groups and the waiting preemptors."""
    return (
        {
            name: [(wl.key, q.is_parked(wl.key)) for wl in q.workloads()]
            for name, q in sorted(cache.queues.items())
        },
        sorted((k, s.reason, s.message) for k, s in cache.status.items()),
        sorted((k[0], s.reason, s.message) for k, s in cache.group_status.items()),
        sorted(cache.preemptors),
        sorted(cache.evicting),
    )


class _Run:
    """One cache and scheduler, driven by the event stream."""

    def __init__(self, cqs: dict, cohorts: dict, *, kept: bool, explain: bool) -> None:
        flavors = {f: ResourceFlavor(name=f) for f in ("f1", "f2")}
        lqs = {
            f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs
        }
        self.cqs = dict(cqs)
        self.cache = Cache(
            flavors=flavors, cluster_queues=self.cqs, cohorts=cohorts, local_queues=lqs
        )
        self.sched = Scheduler(
            self.cache, clock=lambda: 1000.0, explain=explain, kept_nominations=kept
        )
        self.seq = 0

    def apply(self, op: tuple) -> tuple | None:
        cache = self.cache
        kind = op[0]
        if kind == "submit":
            self.seq += 1
            cache.add_workload(_workload(op[1], self.seq, op[2]))
        elif kind == "burst":
            for name in sorted(self.cqs):
                self.seq += 1
                cache.add_workload(_workload(name, self.seq, op[1]))
        elif kind == "cycle":
            r = self.sched.schedule()
            return _decisions(r), _queues(cache)
        elif kind == "release":  # a workload ends, another like it arrives, a cycle runs
            admitted = sorted(cache.admitted)
            if admitted:
                key = admitted[op[1] % len(admitted)]
                wl = cache.workloads[key]
                cache.finish(key)
                self.seq += 1
                cache.add_workload(
                    replace(
                        wl,
                        name=f"w{self.seq}",
                        admission=None,
                        admission_time=None,
                        admitted=False,
                        creation_time=float(self.seq),
                    )
                )
            r = self.sched.schedule()
            return _decisions(r), _queues(cache)
        elif kind == "finish":
            admitted = sorted(cache.admitted)
            if admitted:
                cache.finish(admitted[op[1] % len(admitted)])
        elif kind == "delete":
            pending = sorted(wl.key for wl, _ in cache.pending_workloads())
            if pending:
                cache.finish(pending[op[1] % len(pending)])
        elif kind == "evictions":
            for key in sorted(cache.evicting):
                cache.evicted(key)
        elif kind == "priority":
            keys = sorted(cache.workloads)
            if keys:
                old = cache.workloads[keys[op[1] % len(keys)]]
                new = replace(old, priority=op[2])
                if old.key not in cache.admitted:
                    cache.remove_pending(old.key)
                cache.add_workload(new)
        elif kind == "quota":
            self.cqs[op[1]] = _requota(self.cqs[op[1]], op[2])
            cache.update_objects(cluster_queues=dict(self.cqs))
        return None


def _answer(a: Assignment) -> tuple:
    return (
        a.mode,
        a.borrow,
        sorted(a.usage.items()),
        sorted(a.frs_need_preemption),
        a.reason,
        a.message,
        a.placement,
        [
            (
                p.name,
                p.count,
                p.flavors,
                p.usage,
                p.mode,
                p.borrow,
                p.reason,
                p.messages,
                p.topology,
            )
            for p in a.pod_sets
        ],
    )


@contextmanager
def _every_reuse_checked() -> Iterator[None]:
    """Each answer reused is also computed anew, and must be the same."""
    reuse = KeptNominations.reuse

    def checked(self: KeptNominations, k, assigner, wl, snap):  # noqa: ANN001, ANN202
        got = reuse(self, k, assigner, wl, snap)
        if got is not None:
            hopeless = self.hopeless
            assert _answer(got) == _answer(assigner.assign(wl)), wl.key
            self.hopeless = hopeless
        return got

    with mock.patch.object(KeptNominations, "reuse", checked):
        yield


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_kept_nominations_decide_as_assigning_every_head(w: tuple) -> None:
    cqs, cohorts, ops, explain = w
    kept = _Run(cqs, cohorts, kept=True, explain=explain)
    fresh = _Run(cqs, cohorts, kept=False, explain=explain)
    with _every_reuse_checked():
        for i, op in enumerate(ops):
            got, want = kept.apply(op), fresh.apply(op)
            assert got == want, f"step {i} {op}"
    counters = kept.sched._nominator.kept
    assert counters is not None and fresh.sched._nominator.kept is None
    event(f"kept answers reused: {'some' if counters.hits else 'none'}")


def _cohort(quotas: dict[str, tuple[int, int | None]]) -> tuple[dict, dict]:
    """ClusterQueues of one flavor (cpu) sharing a cohort, with these (nominal quota,
    borrowing limit); withinClusterQueue LowerPriority, reclaimWithinCohort Any."""
    policy = PreemptionPolicy(within_cluster_queue="LowerPriority", reclaim_within_cohort="Any")
    cqs = {
        n: ClusterQueue(
            name=n,
            cohort="co",
            namespace_selector=LabelSelector(),
            resource_groups=[
                ResourceGroup(
                    covered_resources=["cpu"],
                    flavors=[
                        FlavorQuotas(
                            name="f1",
                            resources={"cpu": ResourceQuota(nominal=q, borrowing_limit=bl)},
                        )
                    ],
                )
            ],
            preemption=policy,
        )
        for n, (q, bl) in quotas.items()
    }
    return cqs, {"co": Cohort(name="co")}


def _both(runs: list[_Run], *ops: tuple) -> list:
    """Apply ``ops`` to both runs; the answers of the last, which must be equal."""
    got: list = []
    for op in ops:
        got = [run.apply(op) for run in runs]
        assert got[0] == got[1], op
    return got


def test_a_short_head_nobody_can_help_is_answered_from_what_was_kept() -> None:
    """A head short in a ClusterQueue at its borrowing limit, of the lowest priority
    (nobody to preempt), is woken by every release elsewhere in its cohort and answered
    from what was kept: the decisions are those of assigning it anew."""
    cqs, cohorts = _cohort({"a": (2, 2), "b": (4, None)})
    runs = [_Run(cqs, cohorts, kept=k, explain=True) for k in (True, False)]
    for _ in range(4):  # a takes its 2 and borrows 2 (its limit), one a cycle
        _both(runs, ("submit", "a", (1, 1, 0, 2)), ("cycle",))
    _both(runs, ("submit", "b", (1, 1, 0, 2)), ("cycle",))
    _both(runs, ("submit", "a", (1, 1, 0, 0)), ("cycle",))  # short: parked
    for _ in range(4):  # b's workload ends and another takes its place: a's head wakes
        keys = sorted(k for k in runs[0].cache.admitted if k.startswith("ns-b/"))
        index = sorted(runs[0].cache.admitted).index(keys[0])
        _both(runs, ("finish", index), ("submit", "b", (1, 1, 0, 2)), ("cycle",))
    kept = runs[0].sched._nominator.kept
    assert kept is not None and kept.hits > 0


def test_a_head_that_fits_and_waits_is_answered_from_what_was_kept() -> None:
    """A borrowing head that fits when nominated, but not after a head within its
    nominal quota took the room, goes back to its queue, is nominated again next cycle,
    and answered from what was kept; the decisions are those of assigning it anew."""
    cqs, cohorts = _cohort({"a": (2, None), "b": (0, None)})
    runs = [_Run(cqs, cohorts, kept=k, explain=True) for k in (True, False)]
    _both(runs, ("submit", "a", (1, 1, 0, 1)), ("cycle",))
    _both(runs, ("submit", "b", (1, 1, 0, 1)))
    for _ in range(4):  # a's next head takes the room first; then a's running one ends
        _both(runs, ("submit", "a", (1, 1, 0, 1)), ("cycle",), ("finish", 0))
    kept = runs[0].sched._nominator.kept
    assert kept is not None and kept.hits > 0


def test_what_was_kept_for_a_deleted_cluster_queue_is_dropped() -> None:
    """A ClusterQueue that is deleted leaves no kept answers behind once another queue
    keeps its first one (queues deleted and created again under churn would pile up)."""
    cqs, cohorts = _cohort({"a": (2, None), "b": (2, None)})
    run = _Run(cqs, cohorts, kept=True, explain=False)
    run.apply(("submit", "a", (1, 1, 0, 1)))
    run.apply(("cycle",))
    kept = run.sched._nominator.kept
    assert kept is not None and "a" in kept._kept
    del run.cqs["a"]
    run.cache.update_objects(cluster_queues=dict(run.cqs))
    run.apply(("submit", "b", (1, 1, 0, 1)))
    run.apply(("cycle",))
    assert "b" in kept._kept and "a" not in kept._kept
