"""Property tests of fair sharing, usage decay and cohort credits.

* **No two-workload preemption loop** (Kueue's proof in docs/fair_sharing.md,
  docs/semantics.md §4.7–4.8): if workload A (ClusterQueue X) preempts B (ClusterQueue
  Y ≠ X) with reason InCohortFairSharing, then once that has happened B, submitted
  again, cannot take exactly A back (S0 → S1 → S0), nor can the two take turns after
  a multi-victim preemption (S1 → S2 → S1). When B is the only victim, Kueue's
  Lemma 1 holds in the state A saw: the share of X's almost-LCA with A admitted is
  below the share of Y's almost-LCA with B admitted. (After a preemption with several
  victims a victim may legitimately take A back: the other victims are gone.)
  Two counterexamples found by the property are kept as plain tests: fill-back of
  victims after the strategy checks breaks the lemma (pending a fix).
* **Decay** (§4.9): ``alpha``/``decay`` follow the half-life formula: one half-life
  with nothing in use halves the history; the result is monotone in the elapsed time
  and lies between the old value and the current usage.
* **Credits** (issue 4, our extension): siblings' credits add up to the pool's unused
  capacity over the window, ``Σ credit = τ·(C − Σ ū)``, which is the exponentially
  weighted integral of the idle capacity; zero when the pool was always full.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from admission.config.load import parse_config
from admission.config.schema import Config
from admission.engine.build import build_scheduler as configure
from admission.engine.cache import Cache
from admission.engine.preemption.fair_sharing import FairPreemptor, _almost_lcas, parse_strategies
from admission.engine.snapshot import Snapshot
from admission.engine.vocabulary import PreemptionReason
from queues.fairshare import alpha, decay, dominant_resource_share, window
from queues.model import (
    Admission,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from queues.quota_node import QuotaNode

FLAVOR = "default"
STRATEGY_LISTS = [
    ["LessThanOrEqualToFinalShare"],
    ["LessThanInitialShare"],
    ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
]


def _group(cpu: int, gpu: int | None = None) -> list[ResourceGroup]:
    resources = {"cpu": ResourceQuota(nominal=cpu * 1000)}
    if gpu is not None:
        resources["nvidia.com/gpu"] = ResourceQuota(nominal=gpu)
    return [
        ResourceGroup(
            covered_resources=list(resources),
            flavors=[FlavorQuotas(name=FLAVOR, resources=resources)],
        )
    ]


def _admitted(cq: str, seq: int, usage: dict[str, int], *, at: float) -> Workload:
    return Workload(
        namespace=f"ns-{cq}",
        name=f"w{seq}",
        uid=f"w{seq:04d}",
        queue_name="lq",
        creation_time=float(seq),
        pod_sets=[PodSet(name="main", count=1, requests=dict(usage))],
        admission=Admission(
            cluster_queue=cq,
            pod_set_assignments=[
                PodSetAssignment(
                    name="main",
                    flavors={r: FLAVOR for r in usage},
                    resource_usage=dict(usage),
                    count=1,
                )
            ],
        ),
        admission_time=at,
    )


@st.composite
def fair_world(draw: st.DrawFn) -> tuple[dict, dict]:
    """A root cohort, 0–2 child cohorts, 2–4 ClusterQueues that may reclaim from anyone."""
    cohorts: dict[str, Cohort] = {
        "root": Cohort(
            name="root",
            resource_groups=_group(draw(st.integers(0, 6))) if draw(st.booleans()) else [],
            fair_weight=draw(st.sampled_from([1.0, 2.0])),
        )
    }
    for i in range(draw(st.integers(0, 2))):
        cohorts[f"co{i}"] = Cohort(
            name=f"co{i}",
            parent="root",
            resource_groups=_group(draw(st.integers(0, 6))) if draw(st.booleans()) else [],
            fair_weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
        )
    cqs: dict[str, ClusterQueue] = {}
    for i in range(draw(st.integers(2, 4))):
        cqs[f"cq{i}"] = ClusterQueue(
            name=f"cq{i}",
            cohort=draw(st.sampled_from(sorted(cohorts))),
            namespace_selector=LabelSelector(),
            resource_groups=_group(draw(st.integers(0, 10))),
            preemption=PreemptionPolicy(reclaim_within_cohort="Any"),
            fair_weight=draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
        )
    return cqs, cohorts


def _cache(cqs: dict, cohorts: dict) -> Cache:
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    return Cache(
        flavors={FLAVOR: ResourceFlavor(name=FLAVOR)},
        cluster_queues=cqs,
        cohorts=cohorts,
        local_queues=lqs,
    )


@st.composite
def fillings(draw: st.DrawFn, names: list[str]) -> list[tuple[str, dict[str, int]]]:
    """Workloads to admit, in order, while they fit: (ClusterQueue, cpu usage) pairs."""
    return [
        (draw(st.sampled_from(names)), {"cpu": draw(st.integers(1, 6)) * 1000})
        for _ in range(draw(st.integers(0, 24)))
    ]


def _fill(cache: Cache, filling: list) -> None:
    """Admit the workloads that fit, in order (a reachable state of the tree)."""
    for seq, (cq, usage) in enumerate(filling):
        node = cache.tree.queues[cq]
        if all(v <= node.available((FLAVOR, r)) for r, v in usage.items()):
            cache.add_workload(_admitted(cq, seq, usage, at=float(seq)))


def describe(cache: Cache) -> str:
    """The tree and its admitted workloads, for failure reports."""
    lines = []
    for node in sorted(
        list(cache.tree.queues.values()) + list(cache.tree.cohorts.values()), key=lambda n: n.name
    ):
        parent = node.parent.name if node.parent else "-"
        share = dominant_resource_share(node)
        lines.append(
            f"{node!r} parent={parent} weight={node.fair_weight} quota={node.quotas and {fr: q.nominal for fr, q in node.quotas.items()}} "
            f"subtree={node.subtree_quota} usage={node.usage} share={share.weighted:.1f}"
        )
    for key, cq in cache.admitted.items():
        lines.append(
            f"  {key} in {cq}: {cache.usage_of[key]} at {cache.workloads[key].admission_time}"
        )
    return "\n".join(lines)


def _pending(cq: str, name: str, usage: dict[str, int]) -> Workload:
    return Workload(
        namespace=f"ns-{cq}",
        name=name,
        uid=name,
        queue_name="lq",
        creation_time=1000.0,
        pod_sets=[PodSet(name="main", count=1, requests=dict(usage))],
    )


def _preemption(
    cache: Cache, strategies: list[str], wl: Workload, cq: str, requests: dict
) -> list | None:
    """The victims FairPreemptor picks for wl, or None if wl needs no preemption."""
    snap = Snapshot(cache.tree)
    node = snap.tree.queues[cq]
    frs = {fr for fr, v in requests.items() if v > node.available(fr)}
    if not frs:
        return None
    pre = FairPreemptor(cache, strategies=parse_strategies(strategies))
    return pre.minimal_targets(snap, wl, node, frs, requests)


# -- (a) no two-workload preemption loop ------------------------------------------


def _admit(cache: Cache, wl: Workload, cq: str, usage: dict) -> None:
    cache.remove_pending(wl.key)
    cache.workloads[wl.key] = wl
    cache.assume(wl, cq, dict(usage))


def _only(targets: list, key: str) -> bool:
    """Exactly one victim, ``key``, taken for fair sharing."""
    return [(t.key, t.reason) for t in targets] == [(key, PreemptionReason.IN_COHORT_FAIR_SHARING)]


def check_no_two_workload_loop(
    cqs: dict,
    cohorts: dict,
    filling: list,
    strategies: list[str],
    x: str,
    cpu: int,
    *,
    log: Callable[[str], None] = lambda _text: None,
) -> int:
    """A (in x) preempts; each fair-sharing victim B, submitted again, must not take
    exactly A back in a way that restores an earlier state (S0 or S1). Returns the
    number of fair-sharing victims checked."""

    def state() -> tuple[Cache, Workload, dict]:
        cache = _cache(cqs, cohorts)
        _fill(cache, filling)
        a = _pending(x, "a", {"cpu": cpu * 1000})
        return cache, a, {(FLAVOR, "cpu"): cpu * 1000}

    cache, a, req_a = state()
    log(describe(cache))
    targets = _preemption(cache, strategies, a, x, req_a) or []
    log(f"A={a.key} in {x} requests {req_a}; strategies {strategies}; targets {targets}")
    fair = [t for t in targets if t.reason == PreemptionReason.IN_COHORT_FAIR_SHARING]
    if len(targets) == 1 and fair:
        # Kueue's Lemma 1, in the state A saw: share of X's almost-LCA with A admitted
        # < share of Y's almost-LCA with B admitted.
        tree = cache.tree
        mine, theirs = _almost_lcas(tree.queues[x], tree.queues[fair[0].cluster_queue])
        tree.add_usage(x, req_a)
        try:
            assert (
                dominant_resource_share(mine).sort_key()
                < dominant_resource_share(theirs).sort_key()
            )
        finally:
            tree.remove_usage(x, req_a)
    for t in fair:
        cache, a, req_a = state()  # S0 → S1: A's victims leave, A is admitted
        y, req_b = t.cluster_queue, dict(cache.usage_of[t.key])
        for v in targets:
            cache.evicted(v.key)
        _admit(cache, a, x, req_a)
        b = cache.workloads[t.key]
        back = _preemption(cache, strategies, b, y, req_b) or []
        if not _only(back, a.key):
            continue
        assert len(targets) > 1, f"{b.key} would take {a.key} back: S0 → S1 → S0 …"
        cache.evicted(a.key)  # S1 → S2: B takes A back
        _admit(cache, b, y, req_b)
        again = _preemption(cache, strategies, a, x, req_a) or []
        assert not _only(again, b.key), f"{a.key} and {b.key} take turns: S1 → S2 → S1 …"
    return len(fair)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fair_world(), st.sampled_from(STRATEGY_LISTS), st.data())
def test_no_two_workload_preemption_loop_under_fair_sharing(
    world: tuple, strategies: list[str], data: st.DataObject
) -> None:
    cqs, cohorts = world
    names = sorted(cqs)
    filling = data.draw(fillings(names), label="filling")
    x = data.draw(st.sampled_from(names), label="preemptor queue")
    cpu = data.draw(st.integers(1, 8), label="preemptor cpu")
    n = check_no_two_workload_loop(cqs, cohorts, filling, strategies, x, cpu, log=note)
    event(f"fair-sharing victims: {min(n, 3)}")


def _queues(spec: dict[str, tuple[str, int, float]]) -> dict[str, ClusterQueue]:
    """name -> (cohort, nominal cpu, weight); every queue may reclaim from anyone."""
    return {
        n: ClusterQueue(
            name=n,
            cohort=cohort,
            namespace_selector=LabelSelector(),
            resource_groups=_group(cpu),
            preemption=PreemptionPolicy(reclaim_within_cohort="Any"),
            fair_weight=weight,
        )
        for n, (cohort, cpu, weight) in spec.items()
    }


def test_fill_back_does_not_let_the_victim_take_its_preemptor_back() -> None:
    """Found by the property above (pending a fix, see the report of issue 4).

    A (cq2, 7 cpu) preempts only w5 (cq1, 6 cpu): at the root, cq2 with A has share
    381 < co0 with w5 762. Submitted again, w5's search first removes w4 (cq0), which
    drops co0 to 286 < 381, takes A under LessThanInitialShare, then fills w4 back:
    w5 preempts exactly A although co0 with w5 (762) is above cq2 with A (381). The
    two then preempt each other forever (`plan` shows A preempted in cycles 3, 5, 7…).
    """
    cqs = _queues(
        {
            "cq0": ("co0", 3, 0.5),
            "cq1": ("co0", 5, 0.5),
            "cq2": ("root", 4, 0.5),
            "cq3": ("co0", 3, 0.5),
        }
    )
    cohorts = {
        "root": Cohort(name="root", resource_groups=_group(6)),
        "co0": Cohort(name="co0", parent="root", fair_weight=0.5),
    }
    filling = [
        ("cq2", {"cpu": 1000}),
        ("cq3", {"cpu": 2000}),
        ("cq0", {"cpu": 3000}),
        ("cq1", {"cpu": 3000}),
        ("cq0", {"cpu": 5000}),
        ("cq1", {"cpu": 6000}),
    ]
    strategies = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    assert check_no_two_workload_loop(cqs, cohorts, filling, strategies, "cq2", 7) == 1


def test_fill_back_does_not_leave_a_victim_with_the_lower_share() -> None:
    """Found by the property above (pending a fix, see the report of issue 4).

    A (cq3, 4 cpu, LessThanOrEqualToFinalShare) first takes w3 from cq1, which brings
    co1 back within its quota (share 0), so taking w2 from cq0 passes the strategy
    (0 ≤ 0); fill-back then returns w3. The only victim is w2, yet co1 with A has share
    400 and co0 with w2 only 267: A preempted a workload whose side had the lower share,
    against Kueue's Lemma 1 (a preempts b only if a's share after admission is lower).
    """
    cqs = _queues(
        {
            "cq0": ("co0", 4, 0.5),
            "cq1": ("co1", 0, 0.5),
            "cq2": ("co1", 10, 0.5),
            "cq3": ("co1", 0, 0.5),
        }
    )
    cohorts = {
        "root": Cohort(name="root", resource_groups=_group(1)),
        "co0": Cohort(name="co0", parent="root", fair_weight=0.5),
        "co1": Cohort(name="co1", parent="root", fair_weight=0.5),
    }
    filling = [
        ("cq0", {"cpu": 1000}),
        ("cq0", {"cpu": 1000}),
        ("cq0", {"cpu": 4000}),
        ("cq1", {"cpu": 3000}),
        ("cq1", {"cpu": 6000}),
    ]
    # The fill-back guard keeps the second victim (its removal is what made the first
    # one eligible), so no lone victim is left with the lower share.
    assert (
        check_no_two_workload_loop(cqs, cohorts, filling, ["LessThanOrEqualToFinalShare"], "cq3", 4)
        >= 1
    )


# -- (b) decay ------------------------------------------------------------------------

finite = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


@given(st.floats(1, 1e7), finite)
def test_one_half_life_with_nothing_in_use_halves_the_history(
    half_life: float, consumed: float
) -> None:
    assert math.isclose(
        decay(consumed, 0.0, half_life, half_life), consumed / 2, rel_tol=1e-9, abs_tol=1e-9
    )
    assert math.isclose(alpha(half_life, half_life), 0.5, rel_tol=1e-12)


@given(st.floats(1, 1e7), st.floats(0, 1e8), finite, finite)
def test_decay_matches_the_half_life_formula(
    half_life: float, elapsed: float, consumed: float, current: float
) -> None:
    a = 1 - 0.5 ** (elapsed / half_life)
    want = consumed * (1 - a) + current * a
    assert math.isclose(
        decay(consumed, current, elapsed, half_life), want, rel_tol=1e-9, abs_tol=1e-6
    )


@given(st.floats(1, 1e7), st.floats(0, 1e7), st.floats(0, 1e7), finite, finite)
def test_decay_is_monotone_in_elapsed_time_and_between_old_and_current(
    half_life: float, t1: float, t2: float, consumed: float, current: float
) -> None:
    short, long = sorted((t1, t2))
    d_short = decay(consumed, current, short, half_life)
    d_long = decay(consumed, current, long, half_life)
    lo, hi = min(consumed, current), max(consumed, current)
    tol = 1e-9 * max(1.0, hi)
    for d in (d_short, d_long):
        assert lo - tol <= d <= hi + tol
    # The longer the time, the closer to the current usage.
    assert abs(d_long - current) <= abs(d_short - current) + tol
    assert 0.0 <= alpha(short, half_life) <= alpha(long, half_life) <= 1.0


@given(st.floats(1, 1e6), finite, finite, st.floats(0, 1e6), st.floats(0, 1e6))
def test_two_samples_equal_one_sample_over_the_sum_at_constant_usage(
    half_life: float, consumed: float, current: float, dt1: float, dt2: float
) -> None:
    """Sampling more often does not change the result while usage stays constant."""
    two = decay(decay(consumed, current, dt1, half_life), current, dt2, half_life)
    one = decay(consumed, current, dt1 + dt2, half_life)
    assert math.isclose(two, one, rel_tol=1e-9, abs_tol=1e-6)


def test_zero_half_life_resets_to_current_usage() -> None:
    assert decay(100.0, 3.0, 1.0, 0.0) == 3.0
    assert decay(100.0, 3.0, 0.0, 60.0) == 100.0  # no time passed: nothing changes


# -- (c) credits ------------------------------------------------------------------------


@st.composite
def credit_world(draw: st.DrawFn) -> tuple[dict, dict]:
    """root → (child cohorts) → ClusterQueues, cpu and GPUs, random weights (0 included)."""
    cohorts = {
        "root": Cohort(
            name="root", resource_groups=_group(draw(st.integers(0, 4)), draw(st.integers(0, 4)))
        )
    }
    for i in range(draw(st.integers(0, 2))):
        cohorts[f"co{i}"] = Cohort(
            name=f"co{i}",
            parent="root",
            resource_groups=_group(draw(st.integers(0, 4)), draw(st.integers(0, 4)))
            if draw(st.booleans())
            else [],
            fair_weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
        )
    cqs = {}
    for i in range(draw(st.integers(1, 4))):
        cqs[f"cq{i}"] = ClusterQueue(
            name=f"cq{i}",
            cohort=draw(st.sampled_from(sorted(cohorts))),
            namespace_selector=LabelSelector(),
            resource_groups=_group(draw(st.integers(0, 8)), draw(st.integers(0, 8))),
            fair_weight=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
        )
    return cqs, cohorts


def _credits_config(half_life: float, weights: dict[str, float]) -> Config:
    return parse_config(
        {
            "cohortCredits": {
                "usageHalfLifeTime": f"{half_life}s",
                "usageSamplingInterval": "60s",
                "resourceWeights": weights,
            }
        }
    )


def _weighted_usage(cache: Cache, cq: str, weights: dict[str, float]) -> float:
    """Independent of the tracker: resource-weighted usage of a ClusterQueue's admissions."""
    total = 0.0
    for key in cache.by_cq.get(cq, {}):
        for (_flavor, r), v in cache.usage_of[key].items():
            amount = v / 1000.0 if r == "cpu" else float(v)
            total += weights.get(r, 1.0) * amount
    return total


def _capacity(node: QuotaNode, weights: dict[str, float]) -> float:
    total = 0.0
    for (_flavor, r), v in node.subtree_quota.items():
        total += weights.get(r, 1.0) * (v / 1000.0 if r == "cpu" else float(v))
    return total


def _subtree_queues(node: QuotaNode) -> list[str]:
    out: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        stack.extend(n.child_cohorts)
        out.extend(q.name for q in n.child_queues)
    return out


def _siblings_weighted(node: QuotaNode) -> bool:
    return sum(c.fair_weight for c in node.children) > 0


weights_st = st.fixed_dictionaries(
    {
        "cpu": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        "nvidia.com/gpu": st.sampled_from([0.0, 1.0, 4.0]),
    }
)
op_st = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(0, 4), st.integers(0, 3)),
    st.tuples(st.just("finish"), st.integers(0, 30)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    credit_world(),
    weights_st,
    st.sampled_from([600.0, 3600.0, 86400.0]),
    st.lists(st.tuples(st.floats(1.0, 20000.0), st.lists(op_st, max_size=4)), max_size=25),
)
def test_siblings_credits_add_up_to_the_pools_unused_capacity_over_the_window(
    world: tuple, weights: dict[str, float], half_life: float, steps: list
) -> None:
    cqs, cohorts = world
    cache = _cache(cqs, cohorts)
    now = [0.0]
    sched = configure(
        _credits_config(half_life, weights).engine_policy(), cache, clock=lambda: now[0]
    )
    tracker = sched.usage
    assert tracker is not None
    tau = window(half_life)
    tree = cache.tree
    names = sorted(cqs)
    # Reference: per cohort, the exponentially weighted integral of its unused capacity,
    # counting the time before the first sample as idle (the tracker starts with no usage).
    unused = {n: tau * _capacity(c, weights) for n, c in tree.cohorts.items()}
    ref_rate = dict.fromkeys(names, 0.0)
    held = {q: _weighted_usage(cache, q, weights) for q in names}
    seq = 0
    for dt, ops in steps:
        now[0] += dt
        tracker.sample(now[0])
        keep = math.exp(-dt / tau)
        for q in names:
            ref_rate[q] = ref_rate[q] * keep + held[q] * (1 - keep)
        for n, c in tree.cohorts.items():
            used = sum(held[q] for q in _subtree_queues(c))
            unused[n] = unused[n] * keep + (_capacity(c, weights) - used) * tau * (1 - keep)
        for op in ops:  # usage changes right after a sample and holds until the next
            if op[0] == "submit":
                seq += 1
                _, i, cpu, gpu = op
                usage = {"cpu": cpu * 1000, "nvidia.com/gpu": gpu}
                cache.add_workload(_pending(names[i % len(names)], f"s{seq}", usage))
                sched.schedule()
            elif cache.admitted:
                keys = sorted(cache.admitted)
                cache.finish(keys[op[1] % len(keys)])
        held = {q: _weighted_usage(cache, q, weights) for q in names}
    for n, c in tree.cohorts.items():
        if not _siblings_weighted(c):
            continue  # all siblings have weight 0: no shares to split (see the report)
        credits = sum(tracker.credit_of_node(ch.name, cohort=ch.is_cohort) for ch in c.children)
        rate = sum(ref_rate[q] for q in _subtree_queues(c))
        scale = max(1.0, tau * _capacity(c, weights), tau * rate)
        assert math.isclose(
            credits, tau * (_capacity(c, weights) - rate), rel_tol=1e-9, abs_tol=1e-9 * scale
        )
        assert math.isclose(credits, unused[n], rel_tol=1e-9, abs_tol=1e-9 * scale), (
            n,
            credits,
            unused[n],
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    credit_world(),
    weights_st,
    st.lists(st.floats(0.05, 3.0), min_size=1, max_size=8),
)
def test_credits_add_up_to_zero_when_the_pool_was_always_full(
    world: tuple, weights: dict[str, float], gaps: list[float]
) -> None:
    cqs, cohorts = world
    cache = _cache(cqs, cohorts)
    now = [0.0]
    half_life = 3600.0
    sched = configure(
        _credits_config(half_life, weights).engine_policy(), cache, clock=lambda: now[0]
    )
    tracker = sched.usage
    assert tracker is not None
    names = sorted(cqs)
    seq = 0
    for resource in ("cpu", "nvidia.com/gpu"):  # fill the whole pool, one unit at a time
        admitted = True
        while admitted:
            admitted = False
            for q in names:
                seq += 1
                cache.add_workload(
                    _pending(q, f"u{seq}", {resource: 1000 if resource == "cpu" else 1})
                )
                admitted |= bool(sched.schedule().admitted)
    root = cache.tree.cohorts["root"]
    assert all(root.usage.get(fr, 0) == v for fr, v in root.subtree_quota.items()), (
        "the pool is full"
    )
    # Full from the first sample on, for 64 half-lives in uneven steps: what the window
    # remembers of the idle time before the first sample is 2^-64 of it.
    total = 64 * half_life
    marks = [sum(gaps[: i + 1]) / sum(gaps) * total for i in range(len(gaps))]
    for t in marks:
        now[0] = t
        tracker.sample(t)
    scale = window(half_life) * max(1.0, _capacity(root, weights))
    if _siblings_weighted(root):
        credits = sum(tracker.credit_of_node(ch.name, cohort=ch.is_cohort) for ch in root.children)
        assert abs(credits) <= 1e-9 * scale, credits
    assert abs(tracker.credit_of_node("root", cohort=True)) <= 1e-9 * scale


def test_credits_add_up_to_zero_when_full_with_a_lending_limit() -> None:
    """Pending a fix (see the report of issue 4). cq-a (10 cpu, lendingLimit 0) and cq-b
    (10 cpu) each use exactly their own quota, for 64 half-lives: the pool was always
    full and neither borrowed, so their credits must add up to 0. The parent's subtree
    quota (10) leaves out cq-a's kept capacity while the usage rate (20) includes it,
    so today both are overdrawn by 5 cpu × τ."""
    quota = ResourceQuota(nominal=10_000, lending_limit=0)
    cqs = {
        "cq-a": ClusterQueue(
            name="cq-a",
            cohort="root",
            namespace_selector=LabelSelector(),
            resource_groups=[
                ResourceGroup(
                    covered_resources=["cpu"],
                    flavors=[FlavorQuotas(name=FLAVOR, resources={"cpu": quota})],
                )
            ],
        ),
        "cq-b": ClusterQueue(
            name="cq-b",
            cohort="root",
            namespace_selector=LabelSelector(),
            resource_groups=_group(10),
        ),
    }
    cache = _cache(cqs, {"root": Cohort(name="root")})
    now = [0.0]
    sched = configure(_credits_config(3600.0, {}).engine_policy(), cache, clock=lambda: now[0])
    for i, cq in enumerate(sorted(cqs)):
        cache.add_workload(_pending(cq, f"full{i}", {"cpu": 10_000}))
        sched.schedule()
    assert len(cache.admitted) == 2
    tracker = sched.usage
    assert tracker is not None
    for hour in range(1, 65):
        now[0] = hour * 3600.0
        tracker.sample(now[0])
    total = tracker.credit_of_node("cq-a") + tracker.credit_of_node("cq-b")
    assert abs(total) <= 1e-6 * window(3600.0), total
