"""Property tests of the engine's invariants over random cohort trees and workload streams.

* No over-admission: after every scheduling cycle, at no node of the cohort tree does
  usage exceed what its quotas and limits allow (a node already over because an admin
  cut its quota may stay over, but an admission never makes it worse).
* Usage is released exactly once: incremental accounting always equals a rebuild from
  the admitted workloads, and finishing everything leaves the tree empty.
* Determinism: the same inputs give the same decisions.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine.cache import Cache
from admission.engine.scheduler import Scheduler
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
from queues.quota_node import QuotaNode
from queues.tree import CohortTree

FLAVORS = ["f1", "f2"]
RESOURCES = ["cpu", "nvidia.com/gpu"]


@st.composite
def quota(draw: st.DrawFn, *, with_parent: bool, lending: bool = True) -> ResourceQuota:
    nominal = draw(st.integers(0, 16))
    bl = draw(st.one_of(st.none(), st.integers(0, 10))) if with_parent else None
    ll = draw(st.one_of(st.none(), st.integers(0, nominal))) if with_parent and lending else None
    return ResourceQuota(nominal=nominal, borrowing_limit=bl, lending_limit=ll)


def _scaled(resource: str, q: ResourceQuota) -> ResourceQuota:
    """Quotas are drawn in whole units; the engine counts cpu in milli-cores."""
    if resource != "cpu":
        return q
    return ResourceQuota(
        nominal=q.nominal * 1000,
        borrowing_limit=None if q.borrowing_limit is None else q.borrowing_limit * 1000,
        lending_limit=None if q.lending_limit is None else q.lending_limit * 1000,
    )


@st.composite
def groups(draw: st.DrawFn, *, with_parent: bool) -> list[ResourceGroup]:
    flavors = [
        FlavorQuotas(
            name=f,
            resources={r: _scaled(r, draw(quota(with_parent=with_parent))) for r in RESOURCES},
        )
        for f in draw(st.sampled_from([["f1"], ["f2"], ["f1", "f2"]]))
    ]
    return [ResourceGroup(covered_resources=list(RESOURCES), flavors=flavors)]


@st.composite
def world(draw: st.DrawFn) -> tuple[dict, dict, list]:
    n_cohorts = draw(st.integers(1, 3))
    cohorts: dict[str, Cohort] = {}
    for i in range(n_cohorts):
        parent = f"co{draw(st.integers(0, i - 1))}" if i > 0 else None
        cohorts[f"co{i}"] = Cohort(
            name=f"co{i}",
            parent=parent,
            resource_groups=draw(groups(with_parent=parent is not None))
            if draw(st.booleans())
            else [],
        )
    cqs: dict[str, ClusterQueue] = {}
    for i in range(draw(st.integers(1, 4))):
        cohort = draw(st.one_of(st.none(), st.sampled_from(sorted(cohorts))))
        within = draw(st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]))
        reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any"]))
        borrow = (
            "Never" if reclaim == "Never" else draw(st.sampled_from(["Never", "LowerPriority"]))
        )
        cqs[f"cq{i}"] = ClusterQueue(
            name=f"cq{i}",
            cohort=cohort,
            namespace_selector=LabelSelector(),
            resource_groups=draw(groups(with_parent=cohort is not None)),
            preemption=PreemptionPolicy(
                within_cluster_queue=within,
                reclaim_within_cohort=reclaim,
                borrow_within_cohort=borrow,
                max_priority_threshold=draw(st.one_of(st.none(), st.integers(0, 2))),
            ),
        )
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(
                    st.just("submit"),
                    st.sampled_from(sorted(cqs)),
                    st.integers(1, 2),  # count
                    st.integers(0, 2),  # cpu per pod
                    st.integers(0, 3),  # gpu per pod
                    st.integers(0, 2),  # priority
                ),
                # one workload in every ClusterQueue at once: heads compete in one cycle
                st.tuples(
                    st.just("burst"), st.integers(1, 2), st.integers(0, 2), st.integers(0, 3)
                ),
                st.tuples(st.just("cycle")),
                st.tuples(st.just("cycle")),  # cycles twice as likely: admissions must happen
                st.tuples(st.just("finish"), st.integers(0, 50)),
                st.tuples(st.just("quota"), st.sampled_from(sorted(cqs)), st.integers(0, 12)),
            ),
            min_size=8,  # long enough for several heads to compete in one cycle
            max_size=40,
        )
    )
    return cqs, cohorts, ops


def violations(tree: CohortTree) -> dict[tuple[str, tuple[str, str]], int]:
    """How far each node is over what its quotas and limits allow (0 = within)."""
    out = {}
    for node in list(tree.queues.values()) + list(tree.cohorts.values()):
        if node.disabled_reason:
            continue
        for fr in set(node.usage) | set(node.subtree_quota):
            used = node.usage.get(fr, 0)
            assert used >= 0, (node, fr, used)
            over = 0
            if node.parent is None:
                over = used - node.subtree_quota.get(fr, 0)
            else:
                q = node.quotas.get(fr)
                if q is not None and q.borrowing_limit is not None:
                    over = used - node.subtree_quota.get(fr, 0) - q.borrowing_limit
            out[(node.name, fr)] = max(0, over)
    return out


def admitted_tree(cache: Cache) -> CohortTree:
    """The tree charged with what is admitted and not being evicted: a preempted
    workload's quota counts as released from the moment its preemption is issued (Kueue's
    fits()), so a later entry of the same cycle may use it."""
    tree = CohortTree(cache.cluster_queues, cache.cohorts)
    for key, cq in cache.admitted.items():
        if key not in cache.evicting:
            tree.add_usage(cq, cache.usage_of[key])
    return tree


def usage_snapshot(tree: CohortTree) -> dict[str, dict]:
    nodes: list[QuotaNode] = list(tree.queues.values()) + list(tree.cohorts.values())
    return {n.name: {k: v for k, v in n.usage.items() if v} for n in nodes}


def requota(spec: ClusterQueue, nominal: int) -> ClusterQueue:
    """An admin's quota edit: the first flavor's nominal quota set to ``nominal`` units of
    every resource (and its lending limit dropped), the rest as it was."""
    fq = spec.resource_groups[0].flavors[0]
    new_res = {
        r: replace(q, nominal=nominal * (1000 if r == "cpu" else 1), lending_limit=None)
        for r, q in fq.resources.items()
    }
    return replace(
        spec,
        resource_groups=[
            ResourceGroup(
                covered_resources=list(RESOURCES),
                flavors=[
                    FlavorQuotas(name=fq.name, resources=new_res),
                    *spec.resource_groups[0].flavors[1:],
                ],
            )
        ],
    )


def run(cqs: dict, cohorts: dict, ops: list, *, check: bool) -> list[tuple]:
    flavors = {f: ResourceFlavor(name=f) for f in FLAVORS}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs)
    sched = Scheduler(cache)
    log: list[tuple] = []
    seq = 0
    for op in ops:
        if op[0] == "submit":
            _, cq, count, cpu, gpu, prio = op
            seq += 1
            wl = Workload(
                namespace=f"ns-{cq}",
                name=f"w{seq}",
                queue_name="lq",
                priority=prio,
                creation_time=float(seq),
                pod_sets=[
                    PodSet(
                        name="main",
                        count=count,
                        requests={"cpu": cpu * 1000, "nvidia.com/gpu": gpu},
                    )
                ],
            )
            cache.add_workload(wl)
        elif op[0] == "burst":
            _, count, cpu, gpu = op
            for cq in sorted(cqs):
                seq += 1
                cache.add_workload(
                    Workload(
                        namespace=f"ns-{cq}",
                        name=f"w{seq}",
                        queue_name="lq",
                        priority=seq % 3,
                        creation_time=float(seq),
                        pod_sets=[
                            PodSet(
                                name="main",
                                count=count,
                                requests={"cpu": cpu * 1000, "nvidia.com/gpu": gpu},
                            )
                        ],
                    )
                )
        elif op[0] == "cycle":
            before = violations(admitted_tree(cache))
            r = sched.schedule()
            log.append(
                ("cycle", tuple(sorted((d.workload.key, d.cluster_queue) for d in r.admitted)))
            )
            log.append(
                ("preempted", tuple(sorted((p.workload.key, p.by, p.reason) for p in r.preempted)))
            )
            if check:
                after = violations(admitted_tree(cache))
                for k, v in after.items():
                    assert v <= before.get(k, 0), (
                        f"admission over quota at {k}: {v} > {before.get(k, 0)}"
                    )
            for p in r.preempted:  # evictions complete before the next step
                cache.evicted(p.workload.key)
        elif op[0] == "finish":
            admitted = sorted(cache.admitted)
            if admitted:
                key = admitted[op[1] % len(admitted)]
                cache.finish(key)
                log.append(("finish", key))
        elif op[0] == "quota":
            _, cq, nominal = op
            cqs = {**cqs, cq: requota(cqs[cq], nominal)}
            cache.update_objects(cluster_queues=cqs)
        if check:
            # Incremental accounting equals a rebuild from the admitted workloads.
            fresh = CohortTree(cache.cluster_queues, cache.cohorts)
            for key, cq in cache.admitted.items():
                fresh.add_usage(cq, cache.usage_of[key])
            assert usage_snapshot(fresh) == usage_snapshot(cache.tree)
    if check:
        for key in sorted(cache.admitted):
            cache.finish(key)
        assert all(not u for u in usage_snapshot(cache.tree).values()), usage_snapshot(cache.tree)
    return log


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_no_over_admission_and_exact_release(w: tuple) -> None:
    cqs, cohorts, ops = w
    run(cqs, cohorts, ops, check=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_same_inputs_same_decisions(w: tuple) -> None:
    cqs, cohorts, ops = w
    assert run(cqs, cohorts, ops, check=False) == run(cqs, cohorts, ops, check=False)
