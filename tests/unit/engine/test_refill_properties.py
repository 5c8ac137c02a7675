"""Property test of scheduling refill (``schedulingRefill``): a cycle with refill decides
exactly what the same cycles run back to back, with no event between them, decide.

Two caches receive the same random stream of submissions, finishes, quota edits and
cycles (the worlds of ``test_engine_properties``). Where the stream says "cycle", the
refill scheduler runs one ``schedule()``; the plain one (Kueue's) runs cycles while the
last admitted something and the refill bounds allow. Admissions (with their flavors),
preemptions (victim, preemptor, reason, message), the pending statuses and the cache
left behind must be equal, under classical preemption, fair sharing and strict
eviction.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from admission.config.load import parse_config
from admission.config.schema import STRATEGIES, ConfigError
from admission.engine.build import EnginePolicy, build_scheduler
from admission.engine.cache import Cache
from admission.engine.decisions import AdmittedDecision
from admission.engine.scheduler import Refill, Scheduler
from queues.model import LocalQueue, ResourceFlavor
from tests.unit.engine._support import cq, make_cache, workload
from tests.unit.engine.test_cycle_fast_paths import _pod_sets
from tests.unit.engine.test_engine_properties import FLAVORS, requota, usage_snapshot, world
from tests.unit.engine.test_preemption_properties import workload_of

POLICIES = {
    "classical": EnginePolicy(),
    "fair-sharing": EnginePolicy(fair_sharing=STRATEGIES),
    "strict-eviction": EnginePolicy(reserve_evicting_capacity=True),
}


def _admitted(d: AdmittedDecision) -> tuple:
    return d.workload.key, d.cluster_queue, d.admission, d.workload.admission_time


def _cycle(sched: Scheduler, bounds: Refill, *, back_to_back: bool, runs: list[int]) -> tuple:
    """One cycle with refill, or Kueue's cycles back to back under the same bounds:
    (admissions, preemptions, pending statuses)."""
    if not back_to_back:
        r = sched.schedule()
        return (
            [_admitted(d) for d in r.admitted],
            [(p.workload.key, p.by, p.reason, p.message) for p in r.preempted],
            {k: (s.reason, s.message) for k, s in r.pending.items()},
        )
    admitted: list[tuple] = []
    preempted: list[tuple] = []
    pending: dict[str, tuple] = {}
    heads = rounds = 0
    while True:
        r = sched.schedule()
        heads += r.heads
        admitted += [_admitted(d) for d in r.admitted]
        preempted += [(p.workload.key, p.by, p.reason, p.message) for p in r.preempted]
        pending.update({k: (s.reason, s.message) for k, s in r.pending.items()})
        if not r.admitted or rounds >= bounds.max_rounds or heads >= bounds.max_heads:
            break
        rounds += 1
    runs.append(rounds)
    for a in admitted:
        pending.pop(a[0], None)
    return admitted, preempted, pending


def run(
    cqs: dict,
    cohorts: dict,
    ops: list,
    policy: EnginePolicy,
    bounds: Refill,
    *,
    refill: bool,
    runs: list[int] | None = None,
) -> list[tuple]:
    """The log of one world; ``runs`` gets, per back-to-back cycle, its refill rounds."""
    flavors = {f: ResourceFlavor(name=f) for f in FLAVORS}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs)
    now = [0.0]
    sched = build_scheduler(
        EnginePolicy(**{**_fields(policy), "refill": bounds if refill else None}),
        cache,
        clock=lambda: now[0],
    )
    log: list[tuple] = []
    seq = 0

    def submit(cq: str, count: int, cpu: int, gpu: int, prio: int) -> None:
        nonlocal seq
        seq += 1
        cache.add_workload(workload_of(cq, seq, _pod_sets(seq, count, cpu, gpu), prio))

    for op in ops:
        now[0] += 1.0
        if op[0] == "submit":
            submit(*op[1:])
        elif op[0] == "burst":
            for cq in sorted(cqs):
                submit(cq, op[1], op[2], op[3], (seq + 1) % 3)
        elif op[0] == "cycle":
            admitted, preempted, pending = _cycle(
                sched, bounds, back_to_back=not refill, runs=runs if runs is not None else []
            )
            log.append(("cycle", admitted, preempted, pending))
            for p in preempted:  # evictions complete before the next step
                cache.evicted(p[0])
        elif op[0] == "finish":
            keys = sorted(cache.admitted)
            if keys:
                cache.finish(keys[op[1] % len(keys)])
        elif op[0] == "quota":
            cqs = {**cqs, op[1]: requota(cqs[op[1]], op[2])}
            cache.update_objects(cluster_queues=cqs)
        log.append(
            (
                "state",
                dict(cache.admitted),
                {k: (s.reason, s.message) for k, s in cache.status.items()},
                usage_snapshot(cache.tree),
                {n: sorted(w.key for w in q.workloads()) for n, q in cache.queues.items()},
            )
        )
    return log


def _fields(policy: EnginePolicy) -> dict:
    return {f: getattr(policy, f) for f in policy.__dataclass_fields__}


bounds = st.builds(Refill, max_heads=st.integers(1, 12), max_rounds=st.integers(1, 6))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.sampled_from(sorted(POLICIES)), bounds)
def test_refill_decides_what_back_to_back_cycles_decide(w: tuple, name: str, b: Refill) -> None:
    cqs, cohorts, ops = w
    policy = POLICIES[name]
    with_refill = run(cqs, cohorts, ops, policy, b, refill=True)
    runs: list[int] = []
    back_to_back = run(cqs, cohorts, ops, policy, b, refill=False, runs=runs)
    event(f"most refill rounds in a cycle: {min(max(runs, default=0), 3)}")
    assert with_refill == back_to_back


def test_refill_admits_several_heads_of_one_queue_in_one_cycle() -> None:
    """The point of it: a ClusterQueue with room for three admits all three in one cycle
    (Kueue: one per cycle)."""
    for refill, per_cycle in ((None, [1, 1, 1]), (Refill(), [3])):
        cache = make_cache(cq("a", cpu=3))
        for i in range(3):
            cache.add_workload(workload(f"w{i}", "a", cpu=1, created=float(i)))
        sched = Scheduler(cache, clock=lambda: 0.0, refill=refill)
        got = []
        while (r := sched.schedule()).admitted:
            got.append(len(r.admitted))
        assert got == per_cycle


def test_the_configuration_turns_refill_on_only_when_asked() -> None:
    base = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
    assert parse_config(base).engine_policy().refill is None
    off = parse_config({**base, "schedulingRefill": {"maxRounds": 3}})
    assert off.engine_policy().refill is None
    on = parse_config({**base, "schedulingRefill": {"enable": True, "maxHeadsPerCycle": 50}})
    assert on.engine_policy().refill == Refill(max_heads=50, max_rounds=100)
    with pytest.raises(ConfigError, match="schedulingRefill.maxRounds"):
        parse_config({**base, "schedulingRefill": {"enable": True, "maxRounds": 0}})
