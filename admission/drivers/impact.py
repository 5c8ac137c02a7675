"""What a quota edit will do to the live state, in one line per effect.

The validating webhook asks this on every allowed ClusterQueue, Cohort,
ResourceFlavor or LocalQueue edit and returns the lines as AdmissionReview
``warnings`` (``kubectl apply`` and ``--dry-run=server`` print them). It is the same
what-if as ``plan --what-if`` (:func:`admission.drivers.whatif.what_if`, with the scheduler the
service's configuration builds): the engine runs to quiescence on the current
objects, and again with the edit applied, and the differences are described:

1. admitted workloads now over quota (they keep running: nothing is evicted by an edit),
2. preemptions the edit would trigger,
3. pending workloads that will now be admitted,
4. pending workloads that can now never fit (``ExceedsMaxQuota``),
5. ClusterQueues that start borrowing, whose workloads become reclaimable.

Workloads are **counted per ClusterQueue, never named**: the webhook port answers any
caller, and a review (its namespace included) is whatever the caller wrote, so a
warning must not tell one tenant the names or sizes of another's workloads.

Most important first, at most ``limit`` lines. :func:`impact_of_snapshot` is the part
that may run off the event loop, on a :func:`admission.drivers.whatif.snapshot`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from admission.config.schema import Config
from admission.drivers.inputs import Inputs
from admission.drivers.whatif import snapshot, what_if, with_now
from admission.engine.cache import Cache
from admission.engine.vocabulary import PendingReason
from queues.model import AdmissionCheck, ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload
from queues.quantity import format_quantity
from queues.tree import CohortTree

KINDS = {
    "ClusterQueue": "cluster_queues",
    "Cohort": "cohorts",
    "ResourceFlavor": "flavors",
    "LocalQueue": "local_queues",
}


def _over_quota(tree: CohortTree) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(kind, node, fr...) -> (usage, allowed) for nodes over what their limits allow."""
    out = {}
    for node in list(tree.queues.values()) + list(tree.cohorts.values()):
        for fr, used in node.usage.items():
            if node.parent is None:
                allowed = node.subtree_quota.get(fr, 0)
            else:
                cap = node.borrowing_cap(fr)
                if cap is None:
                    continue
                allowed = cap
            if used > allowed:
                kind = "Cohort" if node.is_cohort else "ClusterQueue"
                out[(f"{kind} {node.name}", fr[0], fr[1])] = (used, allowed)
    return out


def _borrowing(tree: CohortTree) -> dict[tuple[str, str, str], int]:
    out = {}
    for name, node in tree.queues.items():
        if node.parent is None:
            continue
        for fr, used in node.usage.items():
            over = used - node.subtree_quota.get(fr, 0)
            if over > 0:
                out[(name, fr[0], fr[1])] = over
    return out


def _per_queue(items: Iterable[str]) -> str:
    """ "2 in ClusterQueue a, 1 in ClusterQueue b" from one ClusterQueue name per workload."""
    counts = Counter(items)
    return ", ".join(f"{n} in ClusterQueue {cq}" for cq, n in sorted(counts.items()))


def impact_of_edit(
    *,
    flavors: Mapping[str, ResourceFlavor],
    cluster_queues: Mapping[str, ClusterQueue],
    cohorts: Mapping[str, Cohort],
    local_queues: Mapping[str, LocalQueue],
    workloads: Mapping[str, Workload],
    namespace_labels: Callable[[str], dict[str, str]],
    kind: str,
    obj: Any,
    limit: int = 10,
    config: Config | None = None,
    now: float | None = None,
    admission_checks: Mapping[str, AdmissionCheck] | None = None,
) -> list[str]:
    """Lines describing what replacing (or adding) ``obj`` of ``kind`` would do."""
    if kind not in KINDS:
        return []
    snap = snapshot(
        flavors=flavors,
        cluster_queues=cluster_queues,
        cohorts=cohorts,
        local_queues=local_queues,
        workloads=workloads,
        namespace_labels=namespace_labels,
        extra_namespaces=(obj.namespace,) if kind == "LocalQueue" else (),
        admission_checks=admission_checks,
    )
    return impact_of_snapshot(snap, kind, obj, config=config, now=now, limit=limit)


def impact_of_snapshot(
    snap: Inputs,
    kind: str,
    obj: Any,
    *,
    config: Config | None = None,
    now: float | None = None,
    limit: int = 10,
    deadline: float | None = None,
) -> list[str]:
    """:func:`impact_of_edit` on a snapshot; ``now`` (epoch seconds, default the
    configuration's ``now``) is the clock of the scheduler (usage decay);
    ``deadline`` (``time.monotonic()``) bounds the run
    (:class:`admission.drivers.plan.DeadlineExceeded`)."""
    field = KINDS.get(kind)
    if field is None:
        return []
    after = Inputs(
        flavors=dict(snap.flavors),
        cluster_queues=dict(snap.cluster_queues),
        cohorts=dict(snap.cohorts),
        local_queues=dict(snap.local_queues),
        namespaces=snap.namespaces,
        workloads=snap.workloads,
        namespaces_given=snap.namespaces_given,
        dra_counted=snap.dra_counted,
        admission_checks=snap.admission_checks,
    )
    key = obj.key if kind == "LocalQueue" else obj.name
    getattr(after, field)[key] = obj
    over: dict[str, dict] = {}
    borrow: dict[str, dict] = {}

    def probe(side: str, cache: Cache) -> None:
        over[side] = _over_quota(cache.tree)
        borrow[side] = _borrowing(cache.tree)

    cfg = with_now(config, now) if now is not None else config
    w = what_if(snap, after, config=cfg, before_cycles=probe, deadline=deadline)
    over_b, over_a = over["before"], over["after"]
    borrow_b, borrow_a = borrow["before"], borrow["after"]
    pre_b, pre_a = w.before.preempted, w.after.preempted
    adm_b, adm_a = w.before.admitted, w.after.admitted
    pend_b, pend_a = w.before.pending, w.after.pending
    cache_a = w.after.cache
    assert cache_a is not None

    lines: list[str] = []
    for (node, flavor, res), (used, allowed) in sorted(over_a.items()):
        if over_b.get((node, flavor, res)) == (used, allowed):
            continue
        lines.append(
            f"{node}: admitted workloads use {format_quantity(res, used)} {res} on flavor {flavor}, "
            f"{format_quantity(res, used - allowed)} over the new limit {format_quantity(res, allowed)}; "
            "they keep running (an edit evicts nothing)"
        )
    pre_keys_b = {(p.workload.key, p.by) for p in pre_b}
    new_pre = {
        p.workload.key: (p.cluster_queue, p.reason)
        for p in pre_a
        if (p.workload.key, p.by) not in pre_keys_b
    }
    if new_pre:
        reasons = Counter(new_pre.values())
        detail = ", ".join(
            f"{n} in ClusterQueue {cq} ({reason})" for (cq, reason), n in sorted(reasons.items())
        )
        lines.append(f"{len(new_pre)} admitted workload(s) would be preempted: {detail}")
    adm_keys_b = {d.workload.key for d in adm_b}
    newly = {
        d.workload.key: d.cluster_queue
        for d in adm_a
        if d.workload.key in cache_a.admitted and d.workload.key not in adm_keys_b
    }
    if newly:
        lines.append(
            f"{len(newly)} pending workload(s) now fit and will be admitted: "
            f"{_per_queue(newly.values())}"
        )
    never = {
        k: cq or "-"
        for k, (cq, st) in pend_a.items()
        if st.reason == PendingReason.EXCEEDS_MAX_QUOTA
        and (k not in pend_b or pend_b[k][1].reason != PendingReason.EXCEEDS_MAX_QUOTA)
    }
    if never:
        lines.append(
            f"{len(never)} pending workload(s) can now never fit (ExceedsMaxQuota): "
            f"{_per_queue(never.values())}"
        )
    for (cq, flavor, res), amount in sorted(borrow_a.items()):
        if (cq, flavor, res) in borrow_b:
            continue
        lines.append(
            f"ClusterQueue {cq} now borrows {format_quantity(res, amount)} {res} on flavor {flavor} "
            "beyond its nominal quota: those workloads become reclaimable by the cohort"
        )
    return lines[:limit]
