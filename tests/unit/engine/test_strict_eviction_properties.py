"""Strict mode (``reserveEvictingCapacity: true``, issue 13 item 17): admitted plus
evicting workloads never exceed what any node of the cohort tree may use.

By default (Kueue's behaviour) a later head of the cycle that issues a preemption may
use the capacity the victims will free, while the victims still hold their quota until
their Jobs stop: for that long the cohort holds more than it has. In strict mode a
victim's capacity is kept for its preemptor: here evictions take a while (they finish
only on an explicit step, several cycles later, as a Job's pods terminate), and after
every cycle the live tree, which charges every admitted workload including those being
evicted, must be within every quota and limit (or, where an admin cut a quota, no
further over than before the cycle).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from admission.config.load import parse_config
from admission.config.schema import ConfigError
from admission.engine.build import build_scheduler
from admission.engine.cache import Cache
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
from tests.unit.engine._support import cq, make_cache, workload
from tests.unit.engine.test_engine_properties import FLAVORS, RESOURCES, violations, world

POLICIES = {
    "classical": {},
    "fair-sharing": {"fairSharing": {}},
    "credits": {"cohortCredits": {"usageHalfLifeTime": "1h"}},
}


def _submit(
    cache: Cache, cq_name: str, seq: int, count: int, cpu: int, gpu: int, prio: int
) -> None:
    cache.add_workload(
        Workload(
            namespace=f"ns-{cq_name}",
            name=f"w{seq}",
            queue_name="lq",
            priority=prio,
            creation_time=float(seq),
            pod_sets=[
                PodSet(
                    name="main", count=count, requests={"cpu": cpu * 1000, "nvidia.com/gpu": gpu}
                )
            ],
        )
    )


def run(
    cqs: dict, cohorts: dict, ops: list, *, policy: str, evict_after: int, strict: bool = True
) -> int:
    """Play ``ops`` in strict mode; evictions finish ``evict_after`` cycles after they are
    issued. Returns how many preemptions were issued (to see the runs exercise them)."""
    flavors = {f: ResourceFlavor(name=f) for f in FLAVORS}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs)
    config = parse_config({**POLICIES[policy], "reserveEvictingCapacity": strict})
    sched = build_scheduler(config.engine_policy(), cache, clock=lambda: 0.0)
    assert sched.reserve_evicting_capacity is strict
    evicting: list[tuple[int, str]] = []  # (cycle it finishes at, key)
    seq = cycles = preempted = 0
    cut = False  # an admin cut a quota: nodes may be over from then on, never worse
    for op in ops:
        if op[0] == "submit":
            _, cq_name, count, cpu, gpu, prio = op
            seq += 1
            _submit(cache, cq_name, seq, count, cpu, gpu, prio)
        elif op[0] == "burst":
            _, count, cpu, gpu = op
            for cq_name in sorted(cqs):
                seq += 1
                _submit(cache, cq_name, seq, count, cpu, gpu, seq % 3)
        elif op[0] == "cycle":
            before = violations(cache.tree)
            r = sched.schedule()
            cycles += 1
            after = violations(cache.tree)
            for k, v in after.items():
                limit = before.get(k, 0) if cut else 0
                assert v <= limit, f"admitted + evicting over quota at {k}: {v} > {limit}"
            for p in r.preempted:
                preempted += 1
                evicting.append((cycles + evict_after, p.workload.key))
            # the Jobs of victims whose time has come have stopped
            done = [k for at, k in evicting if at <= cycles]
            evicting = [(at, k) for at, k in evicting if at > cycles]
            for key in done:
                cache.evicted(key)
        elif op[0] == "finish":
            admitted = sorted(k for k in cache.admitted if k not in cache.evicting)
            if admitted:
                cache.finish(admitted[op[1] % len(admitted)])
        elif op[0] == "quota":
            _, cq_name, nominal = op
            spec = cqs[cq_name]
            fq = spec.resource_groups[0].flavors[0]
            new_res = {
                r: replace(q, nominal=nominal * (1000 if r == "cpu" else 1), lending_limit=None)
                for r, q in fq.resources.items()
            }
            groups = [
                ResourceGroup(
                    covered_resources=list(RESOURCES),
                    flavors=[
                        FlavorQuotas(name=fq.name, resources=new_res),
                        *spec.resource_groups[0].flavors[1:],
                    ],
                )
            ]
            cqs = {**cqs, cq_name: replace(spec, resource_groups=groups)}
            cache.update_objects(cluster_queues=cqs)
            cut = True
    return preempted


@st.composite
def crowded_cohort(draw: st.DrawFn) -> tuple[dict, dict, list]:
    """One cohort (sometimes with a child cohort) of 3-4 ClusterQueues that lend and
    borrow cpu and reclaim from each other, and bursts of heads competing in one cycle:
    where a preemption and later heads of the same cycle meet."""
    cohorts = {"pool": Cohort(name="pool")}
    if draw(st.booleans()):
        cohorts["sub"] = Cohort(name="sub", parent="pool")
    cqs: dict[str, ClusterQueue] = {}
    for i in range(draw(st.integers(3, 4))):
        bl = draw(st.one_of(st.none(), st.integers(0, 8)))
        reclaim = draw(st.sampled_from(["Any", "LowerPriority", "Never"]))
        cqs[f"cq{i}"] = ClusterQueue(
            name=f"cq{i}",
            cohort=draw(st.sampled_from(sorted(cohorts))),
            namespace_selector=LabelSelector(),
            resource_groups=[
                ResourceGroup(
                    covered_resources=list(RESOURCES),
                    flavors=[
                        FlavorQuotas(
                            name="f1",
                            resources={
                                "cpu": ResourceQuota(
                                    nominal=draw(st.integers(0, 8)) * 1000,
                                    borrowing_limit=None if bl is None else bl * 1000,
                                ),
                                "nvidia.com/gpu": ResourceQuota(nominal=4),
                            },
                        )
                    ],
                )
            ],
            preemption=PreemptionPolicy(
                within_cluster_queue=draw(st.sampled_from(["Never", "LowerPriority"])),
                reclaim_within_cohort=reclaim,
                borrow_within_cohort="Never"
                if reclaim == "Never"
                else draw(st.sampled_from(["Never", "LowerPriority"])),
            ),
        )
    names = sorted(cqs)
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(
                    st.just("submit"),
                    st.sampled_from(names),
                    st.integers(1, 2),
                    st.integers(1, 6),
                    st.just(0),
                    st.integers(0, 3),
                ),
                st.tuples(st.just("burst"), st.just(1), st.integers(1, 4), st.just(0)),
                st.tuples(st.just("cycle")),
                st.tuples(st.just("cycle")),
                st.tuples(st.just("finish"), st.integers(0, 50)),
            ),
            min_size=10,
            max_size=40,
        )
    )
    return cqs, cohorts, ops


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.sampled_from(sorted(POLICIES)), st.integers(1, 3))
def test_strict_mode_never_holds_more_than_a_quota_allows(
    w: tuple, policy: str, evict_after: int
) -> None:
    cqs, cohorts, ops = w
    run(cqs, cohorts, ops, policy=policy, evict_after=evict_after)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded_cohort(), st.sampled_from(sorted(POLICIES)), st.integers(1, 3))
def test_strict_mode_never_holds_more_than_a_crowded_cohort_allows(
    w: tuple, policy: str, evict_after: int
) -> None:
    cqs, cohorts, ops = w
    run(cqs, cohorts, ops, policy=policy, evict_after=evict_after)


def _evicting_world(strict: bool) -> tuple[Cache, dict]:
    """cq-a (10) may reclaim from cq-b, which borrows 20 of the 30-cpu cohort; cq-c holds
    7; heads: a-new (10, needs b-big's 20), c-new (3) and b-new (3)."""
    cache = make_cache(
        cq("cq-a", 10, cohort="pool", reclaim_within_cohort="Any"),
        cq("cq-b", 10, cohort="pool"),
        cq("cq-c", 10, cohort="pool"),
    )
    cache.add_workload(workload("b-big", "cq-b", 20, created=1, admitted=True))
    cache.add_workload(workload("c-old", "cq-c", 7, created=1, admitted=True))
    cache.add_workload(workload("a-new", "cq-a", 10, priority=10, created=2))
    cache.add_workload(workload("c-new", "cq-c", 3, created=3))
    cache.add_workload(workload("b-new", "cq-b", 3, priority=5, created=3))
    config = parse_config({"reserveEvictingCapacity": strict})
    return cache, {"sched": build_scheduler(config.engine_policy(), cache, clock=lambda: 0.0)}


def test_kueue_mode_holds_more_than_the_cohort_while_a_victim_is_evicted() -> None:
    """The default keeps Kueue's behaviour (and the property above fails without strict
    mode): 33 cpu held in a 30-cpu cohort until b-big's Job stops."""
    cache, s = _evicting_world(strict=False)
    r = s["sched"].schedule()
    assert [p.workload.key for p in r.preempted] == ["ns-cq-b/b-big"]
    assert sorted(d.workload.key for d in r.admitted) == ["ns-cq-b/b-new", "ns-cq-c/c-new"]
    assert violations(cache.tree)[("pool", ("default", "cpu"))] == 3000


def test_strict_mode_keeps_the_victims_capacity_for_the_preemptor() -> None:
    cache, s = _evicting_world(strict=True)
    r = s["sched"].schedule()
    assert [p.workload.key for p in r.preempted] == ["ns-cq-b/b-big"]
    assert [d.workload.key for d in r.admitted] == ["ns-cq-c/c-new"]  # the really free 3
    assert not any(violations(cache.tree).values())
    # Still evicting in the next cycle: nothing more is admitted, the preemptor waits.
    r = s["sched"].schedule()
    assert not r.admitted and not r.preempted
    assert not any(violations(cache.tree).values())
    cache.evicted("ns-cq-b/b-big")
    r = s["sched"].schedule()
    assert [d.workload.key for d in r.admitted] == ["ns-cq-a/a-new", "ns-cq-b/b-new"]
    assert not any(violations(cache.tree).values())


def test_the_configuration_field_is_off_by_default_and_typed() -> None:
    assert parse_config({}).doc.reserveEvictingCapacity is False
    assert parse_config({"reserveEvictingCapacity": True}).doc.reserveEvictingCapacity is True
    with pytest.raises(ConfigError, match="reserveEvictingCapacity"):
        parse_config({"reserveEvictingCapacity": "sometimes"})


def test_the_crowded_cohorts_do_catch_kueue_mode() -> None:
    """The property is not vacuous: without strict mode, the same generator soon finds a
    run that holds more than a quota while a victim is evicted (generation only, no
    shrinking: the first counterexample is enough)."""

    @settings(
        max_examples=3000,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(crowded_cohort())
    def kueue_mode(w: tuple) -> None:
        cqs, cohorts, ops = w
        run(cqs, cohorts, ops, policy="classical", evict_after=2, strict=False)

    with pytest.raises(AssertionError, match="admitted \\+ evicting over quota"):
        kueue_mode()
