"""What a quota edit will do to the live state, in one line per effect.

The validating webhook asks this on every allowed ClusterQueue, Cohort,
ResourceFlavor or LocalQueue edit and returns the lines as AdmissionReview
``warnings`` (``kubectl apply`` and ``--dry-run=server`` print them). It is the same
what-if as ``plan --what-if``: the engine runs to quiescence on the current objects,
and again with the edit applied, and the differences are described:

1. admitted workloads now over quota (they keep running: nothing is evicted by an edit),
2. preemptions the edit would trigger,
3. pending workloads that will now be admitted,
4. pending workloads that can now never fit (``ExceedsMaxQuota``),
5. ClusterQueues that start borrowing, whose workloads become reclaimable.

Most important first, at most ``limit`` lines.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from admission.cache import Cache
from admission.plan import pending_report, run_cycles
from admission.scheduler import AdmittedDecision, PreemptedDecision, Scheduler
from queues.model import ClusterQueue, Cohort, LocalQueue, Namespace, ResourceFlavor, Workload
from queues.quantity import format_quantity
from queues.tree import CohortTree

KINDS = {
    "ClusterQueue": "cluster_queues",
    "Cohort": "cohorts",
    "ResourceFlavor": "flavors",
    "LocalQueue": "local_queues",
}


def _cache(
    objs: Mapping[str, dict[str, Any]],
    workloads: Mapping[str, Workload],
    namespaces: Mapping[str, Namespace],
) -> Cache:
    cache = Cache(namespaces=namespaces, **objs)  # type: ignore[arg-type]
    for key in sorted(workloads):
        wl = copy.copy(workloads[key])  # the scheduler replaces wl.admission, never mutates it
        cache.add_workload(wl)
    return cache


def _over_quota(tree: CohortTree) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(kind, node, fr...) -> (usage, allowed) for nodes over what their limits allow."""
    out = {}
    for node in list(tree.queues.values()) + list(tree.cohorts.values()):
        for fr, used in node.usage.items():
            if node.parent is None:
                allowed = node.subtree_quota.get(fr, 0)
            else:
                q = node.quotas.get(fr)
                if q is None or q.borrowing_limit is None:
                    continue
                allowed = node.subtree_quota.get(fr, 0) + q.borrowing_limit
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


def _run(cache: Cache) -> tuple[list[AdmittedDecision], list[PreemptedDecision], dict]:
    scheduler = Scheduler(cache)
    admitted: list[AdmittedDecision] = []
    preempted: list[PreemptedDecision] = []
    run_cycles(scheduler, cycles=None, admitted=admitted, preempted=preempted)
    return admitted, preempted, pending_report(cache)


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
) -> list[str]:
    """Lines describing what replacing (or adding) ``obj`` of ``kind`` would do."""
    field = KINDS.get(kind)
    if field is None:
        return []
    before: dict[str, dict[str, Any]] = {
        "flavors": dict(flavors),
        "cluster_queues": dict(cluster_queues),
        "cohorts": dict(cohorts),
        "local_queues": dict(local_queues),
    }
    after = {k: dict(v) for k, v in before.items()}
    key = obj.key if kind == "LocalQueue" else obj.name
    after[field][key] = obj
    used_ns = {wl.namespace for wl in workloads.values()} | {
        lq.namespace for lq in after["local_queues"].values()
    }
    namespaces = {ns: Namespace(name=ns, labels=namespace_labels(ns)) for ns in used_ns}

    cache_b = _cache(before, workloads, namespaces)
    cache_a = _cache(after, workloads, namespaces)
    over_b, over_a = _over_quota(cache_b.tree), _over_quota(cache_a.tree)
    borrow_b, borrow_a = _borrowing(cache_b.tree), _borrowing(cache_a.tree)
    adm_b, pre_b, pend_b = _run(cache_b)
    adm_a, pre_a, pend_a = _run(cache_a)

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
    new_pre = [p for p in pre_a if (p.workload.key, p.by) not in pre_keys_b]
    if new_pre:
        names = ", ".join(f"{p.workload.key} ({p.reason}, by {p.by})" for p in new_pre[:5])
        more = f" and {len(new_pre) - 5} more" if len(new_pre) > 5 else ""
        lines.append(f"{len(new_pre)} admitted workload(s) would be preempted: {names}{more}")
    adm_keys_b = {d.workload.key for d in adm_b}
    newly = sorted(
        {d.workload.key for d in adm_a if d.workload.key in cache_a.admitted} - adm_keys_b
    )
    if newly:
        more = f" and {len(newly) - 5} more" if len(newly) > 5 else ""
        lines.append(
            f"{len(newly)} pending workload(s) now fit and will be admitted: {', '.join(newly[:5])}{more}"
        )
    never = sorted(
        k
        for k, (_cq, st) in pend_a.items()
        if st.reason == "ExceedsMaxQuota"
        and (k not in pend_b or pend_b[k][1].reason != "ExceedsMaxQuota")
    )
    for k in never[:3]:
        lines.append(f"{k} can now never fit (ExceedsMaxQuota): {pend_a[k][1].message}")
    if len(never) > 3:
        lines.append(f"{len(never) - 3} more pending workload(s) can now never fit")
    for (cq, flavor, res), over in sorted(borrow_a.items()):
        if (cq, flavor, res) in borrow_b:
            continue
        lines.append(
            f"ClusterQueue {cq} now borrows {format_quantity(res, over)} {res} on flavor {flavor} "
            "beyond its nominal quota: those workloads become reclaimable by the cohort"
        )
    return lines[:limit]
