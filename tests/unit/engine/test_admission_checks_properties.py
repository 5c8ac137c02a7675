"""Property test: AdmissionChecks never let quota escape.

Random cohort trees (the engine property test's worlds) whose ClusterQueues need an
AdmissionCheck, random workloads, and a random check controller that answers Ready,
Retry or Rejected on reservations at random times. After every step:

* no over-admission, counting the reservations that wait for their checks (they hold
  quota: Kueue charges a QuotaReserved workload);
* the tree's usage equals a rebuild from every reservation, admitted or waiting;
* a workload is admitted only with every check it needs Ready; a Rejected one is never
  queued or charged again; a retried one holds nothing until it reserves again.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine.admission_checks import Action, all_ready, set_state, verdict
from admission.engine.cache import Cache
from admission.engine.scheduler import Scheduler
from queues.model import (
    CHECK_READY,
    CHECK_REJECTED,
    CHECK_RETRY,
    AdmissionCheck,
    AdmissionCheckState,
    LocalQueue,
    PodSet,
    ResourceFlavor,
    Workload,
)
from queues.tree import CohortTree
from tests.unit.engine.test_engine_properties import (
    FLAVORS,
    admitted_tree,
    usage_snapshot,
    violations,
    world,
)

CHECKS = {"prov": AdmissionCheck("prov", "example.com/prov", active=True)}


@st.composite
def checked_world(draw: st.DrawFn) -> tuple[dict, dict, list, list]:
    cqs, cohorts, ops = draw(world())
    cqs = {
        name: replace(cq, admission_checks={"prov": ()}) if draw(st.booleans()) else cq
        for name, cq in cqs.items()
    }
    answers = draw(
        st.lists(
            st.tuples(
                st.integers(0, 50), st.sampled_from([CHECK_READY, CHECK_RETRY, CHECK_REJECTED])
            ),
            min_size=4,
            max_size=30,
        )
    )
    return cqs, cohorts, ops, answers


def _answer(cache: Cache, pick: int, state: str, rejected: set[str], now: float) -> None:
    """The check controller answers on one reservation waiting for its check, and the
    service applies the verdict (as admission.kube.reconcilers.admission_checks does)."""
    waiting = sorted(
        k for k in cache.admitted if not cache.workloads[k].admitted and k not in cache.evicting
    )
    if not waiting:
        return
    key = waiting[pick % len(waiting)]
    wl = cache.workloads[key]
    required = cache.checks_for(cache.admitted[key], wl.admission)
    wl.admission_checks = set_state(wl.admission_checks, AdmissionCheckState("prov", state), now)
    v = verdict(wl.admission_checks, required)
    if v.action == Action.ADMIT:
        wl.admitted = True
    elif v.action == Action.RETRY:
        cache.evicted(key, now)
    elif v.action == Action.REJECT:
        wl.active = False
        cache.evicted(key, now)
        rejected.add(key)


def run(cqs: dict, cohorts: dict, ops: list, answers: list) -> None:
    flavors = {f: ResourceFlavor(name=f) for f in FLAVORS}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(
        flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs,
        admission_checks=CHECKS,
    )  # fmt: skip
    sched = Scheduler(cache)
    rejected: set[str] = set()
    seq = 0
    steps = list(ops)
    # interleave the controller's answers with the world's steps
    for i, (pick, state) in enumerate(answers):
        steps.insert(min(len(steps), (i * 3) % (len(steps) + 1)), ("answer", pick, state))
    for now, op in enumerate(steps):
        if op[0] in ("submit", "burst"):
            targets = [op[1]] if op[0] == "submit" else sorted(cqs)
            count, cpu, gpu = (op[2], op[3], op[4]) if op[0] == "submit" else op[1:4]
            for cq in targets:
                seq += 1
                cache.add_workload(
                    Workload(
                        namespace=f"ns-{cq}", name=f"w{seq}", queue_name="lq",
                        priority=seq % 3, creation_time=float(seq),
                        pod_sets=[PodSet("main", count, {"cpu": cpu * 1000, "nvidia.com/gpu": gpu})],
                    )
                )  # fmt: skip
        elif op[0] == "cycle":
            before = violations(admitted_tree(cache))
            r = sched.schedule()
            for k, v in violations(admitted_tree(cache)).items():
                assert v <= before.get(k, 0), f"admission over quota at {k}"
            for d in r.admitted:
                needs = cache.checks_for(d.cluster_queue, d.admission)
                assert d.checks == needs
                assert d.workload.admitted == (not needs), d.workload.key
                assert d.workload.key not in rejected
            for p in r.preempted:
                cache.evicted(p.workload.key, float(now))
        elif op[0] == "finish":
            admitted = sorted(cache.admitted)
            if admitted:
                cache.finish(admitted[op[1] % len(admitted)])
        elif op[0] == "answer":
            _answer(cache, op[1], op[2], rejected, float(now))
        # every reservation, admitted or waiting for its check, is charged exactly once
        fresh = CohortTree(cache.cluster_queues, cache.cohorts)
        for key, cq in cache.admitted.items():
            fresh.add_usage(cq, cache.usage_of[key])
        assert usage_snapshot(fresh) == usage_snapshot(cache.tree)
        for key in cache.admitted:
            wl = cache.workloads[key]
            required = cache.checks_for(cache.admitted[key], wl.admission)
            if wl.admitted and required:
                assert all_ready(wl.admission_checks, required), key
        assert not rejected & set(cache.admitted)
        assert not any(k in q for q in cache.queues.values() for k in rejected)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(checked_world())
def test_checks_never_let_quota_escape(w: tuple) -> None:
    run(*w)
