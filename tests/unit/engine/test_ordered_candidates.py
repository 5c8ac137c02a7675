"""Victim searches take their candidates lazily, in the order the eager lists give.

``admission.engine.preemption.ordered`` keeps each ClusterQueue's admitted workloads
sorted by Kueue's CandidatesOrdering across cycles and merges them per search; these
tests compare it with :meth:`CandidateSearch.candidates` item for item (ties of the
whole sort key included), and the decisions of random runs with it on and off.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine.cache import Cache, ranked_row
from admission.engine.preemption.classical import Preemptor
from admission.engine.preemption.ordered import ordered_candidates
from admission.engine.scheduler import Scheduler
from admission.engine.snapshot import Snapshot
from queues.model import LocalQueue, PodSet, ResourceFlavor
from tests.unit.engine.test_cycle_fast_paths import _pod_sets
from tests.unit.engine.test_engine_properties import FLAVORS, world
from tests.unit.engine.test_preemption_properties import _filled, _workload, workload_of


def _row(c: object) -> tuple:
    return (c.key, c.cq, c.lca.name if c.lca is not None else None, c.variant)  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.data())
def test_lazy_candidates_are_the_eager_lists_in_order(w: tuple, data: st.DataObject) -> None:
    """For random preemptors, requests and victims already taken, with the sort key's
    parts tied on purpose (equal admission times, equal UIDs), the lazy sequence and
    its flags are those of the eager lists."""
    cqs, _, _ = w
    cache, seq = _filled(w)
    if data.draw(st.booleans()):  # ties of the whole key: the eager stable sort decides
        for key in cache.admitted:
            wl = cache.workloads[key]
            wl.admission_time = 1.0
            wl.uid = "same"
            # charged again as read now (a workload read again while admitted is)
            cache.by_cq[cache.admitted[key]][key] = ranked_row(wl, cache.usage_of[key])
        cache._rows.clear()  # (the rows are built again, as after a change)
    snap = Snapshot(cache.tree)
    pre = Preemptor(cache)
    admitted = sorted(cache.admitted)
    for _ in range(4):
        cq = data.draw(st.sampled_from(sorted(cqs)))
        node = snap.tree.queues[cq]
        flavor = data.draw(st.sampled_from(sorted(FLAVORS)))
        resource = data.draw(st.sampled_from(["cpu", "nvidia.com/gpu"]))
        frs = {(flavor, resource)}
        if data.draw(st.booleans()):
            frs.add((flavor, "cpu" if resource != "cpu" else "nvidia.com/gpu"))
        requests = {fr: data.draw(st.integers(1, 4000)) for fr in frs}
        preemptor = _workload(cq, 9999, 1, 1, 0, data.draw(st.integers(0, 3)))
        preemptor.creation_time = data.draw(st.floats(0, float(seq + 1)))
        eager = pre.candidates(snap, preemptor, node, frs, requests)
        lazy = ordered_candidates(pre, pre.sorted_admitted, snap, preemptor, node, frs, requests)
        assert lazy is not None
        # the flags first (they pull only the first item of a list), then everything
        assert lazy.none_hierarchical == eager.none_hierarchical
        assert lazy.none_from_others == eager.none_from_others
        assert bool(lazy) == bool(eager.ordered)
        want = [_row(c) for c in eager.ordered]
        assert [_row(c) for c in lazy] == want
        assert [_row(c) for c in lazy] == want  # walked again: the same
        if admitted:  # the next search runs after this one took a victim
            snap.victims.add(data.draw(st.sampled_from(admitted)))


def test_lazy_candidates_step_aside_while_workloads_are_evicted() -> None:
    """Workloads being evicted go first: only the eager lists give that order."""
    cache = Cache(flavors={}, cluster_queues={}, cohorts={}, local_queues={})
    pre = Preemptor(cache)
    cache.evicting["ns/w"] = ""
    assert ordered_candidates(pre, pre.sorted_admitted, None, None, None, set(), {}) is None  # type: ignore[arg-type]


def _decisions(cqs: dict, cohorts: dict, ops: list) -> list[object]:
    """The cycles' decisions and statuses of a random world, on a clock that ties
    admission times within a cycle (the candidate order then falls to the UID)."""
    flavors = {f: ResourceFlavor(name=f) for f in FLAVORS}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs)
    now = [0.0]
    sched = Scheduler(cache, explain=True, clock=lambda: now[0])
    log: list[object] = []
    seq = 0
    for op in ops:
        if op[0] in ("submit", "burst"):
            if op[0] == "submit":
                _, cq, count, cpu, gpu, prio = op
                targets = [(cq, prio)]
            else:
                _, count, cpu, gpu = op
                targets = [(cq, (seq + i) % 3) for i, cq in enumerate(sorted(cqs))]
            for cq, prio in targets:
                seq += 1
                cache.add_workload(workload_of(cq, seq, _pod_sets(seq, count, cpu, gpu), prio))
        elif op[0] == "cycle":
            now[0] += 1.0
            r = sched.schedule()
            log.append((r.heads, r.changed, [(d.workload.key, d.admission) for d in r.admitted]))
            log.append([(p.workload.key, p.by, p.reason, p.message) for p in r.preempted])
            log.append({k: (s.reason, s.message) for k, s in r.pending.items()})
            for p in r.preempted:
                cache.evicted(p.workload.key)
        elif op[0] == "finish":
            admitted = sorted(cache.admitted)
            if admitted:
                cache.finish(admitted[op[1] % len(admitted)])
    log.append(sorted(cache.admitted.items()))
    return log


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_random_runs_decide_the_same_with_and_without_lazy_candidates(w: tuple) -> None:
    cqs, cohorts, ops = w
    lazy = _decisions(cqs, cohorts, ops)
    with mock.patch.object(Preemptor, "_ordered_candidates", lambda *_a: None):
        eager = _decisions(cqs, cohorts, ops)
    assert lazy == eager


def _tied_cohort() -> Cache:
    """Three ClusterQueues of one Cohort: ``a`` and ``b`` borrow with workloads whose
    whole sort key is the same (priority, admission time, UID); ``c`` may reclaim."""
    from queues.model import (
        ClusterQueue,
        Cohort,
        FlavorQuotas,
        LabelSelector,
        PreemptionPolicy,
        ResourceGroup,
        ResourceQuota,
    )

    def cq(name: str) -> ClusterQueue:
        return ClusterQueue(
            name=name,
            cohort="co",
            namespace_selector=LabelSelector(),
            resource_groups=[
                ResourceGroup(
                    covered_resources=["cpu"],
                    flavors=[FlavorQuotas(name="f1", resources={"cpu": ResourceQuota(2000)})],
                )
            ],
            preemption=PreemptionPolicy(
                within_cluster_queue="LowerPriority", reclaim_within_cohort="Any"
            ),
        )

    cqs = {n: cq(n) for n in ("a", "b", "c")}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(
        flavors={"f1": ResourceFlavor(name="f1")},
        cluster_queues=cqs,
        cohorts={"co": Cohort(name="co")},
        local_queues=lqs,
    )
    sched = Scheduler(cache, clock=lambda: 1.0)
    seq = 0
    for name in ("a", "b"):
        for _ in range(3):
            seq += 1
            wl = workload_of(name, seq, [PodSet(name="main", count=1, requests={"cpu": 1000})], 0)
            wl.uid = "same"
            cache.add_workload(wl)
            sched.schedule()
    assert len(cache.admitted) == 6
    return cache


def test_ties_of_the_whole_key_keep_the_walks_order() -> None:
    """Equal keys in two queues of one list: the eager stable sort keeps the walk's
    order (queue by queue, then admission order), and so does the merge."""
    cache = _tied_cohort()
    snap = Snapshot(cache.tree)
    pre = Preemptor(cache)
    node = snap.tree.queues["c"]
    frs = {("f1", "cpu")}
    preemptor = workload_of("c", 99, [PodSet(name="main", count=1, requests={"cpu": 1000})], 1)
    eager = pre.candidates(snap, preemptor, node, frs, {("f1", "cpu"): 1000})
    lazy = ordered_candidates(
        pre, pre.sorted_admitted, snap, preemptor, node, frs, {("f1", "cpu"): 1000}
    )
    assert lazy is not None
    assert len({c.wl.uid for c in eager.ordered}) == 1 and len(eager.ordered) == 6
    assert [_row(c) for c in lazy] == [_row(c) for c in eager.ordered]
