"""Why one workload waits, and which single quota change would admit it.

``quartermaster why WORKLOAD`` runs the engine (``plan``, with the service's
configuration) on the cluster's current objects and reports the workload's pending
reason and message — which podSet, resource and flavor are short, by how much, and
which limit binds. Then it asks the what-if (:func:`admission.drivers.whatif.what_if`)
the operator's question: for each quota that could bind — the ClusterQueue's
``nominalQuota`` and ``borrowingLimit`` for each flavor and resource the workload
requests, and the ``nominalQuota`` of each Cohort above it that lends that flavor — the
smallest value at which the same plan admits this workload (a binary search between
today's value and today's plus the workload's whole request). So "admitted if
research's borrowingLimit for a100/nvidia.com/gpu were 24" is a plan that was run, not
an estimate; workloads ahead of it in the queue are admitted first, as they would be.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from admission.config.schema import Config
from admission.drivers.inputs import Inputs, default_namespaces, store
from admission.drivers.plan import PlanResult, run_plan
from admission.engine import messages
from admission.engine.admission_checks import Action
from queues.api import parse as api
from queues.model import (
    CHECK_READY,
    ResourceGroup,
    ResourceQuota,
    Workload,
)

MAX_STEPS = 24  # binary-search iterations per limit
UNSATISFIED_CHECKS = "UnsatisfiedAdmissionChecks"  # Kueue's Admitted=False reason


@dataclass(frozen=True, slots=True)
class Change:
    """One limit and the value that would admit the workload."""

    owner_kind: str  # "ClusterQueue" or "Cohort"
    owner: str
    field: str  # "nominalQuota" or "borrowingLimit"
    flavor: str
    resource: str
    current: int | None  # engine units (None: no limit)
    needed: int


@dataclass(slots=True)
class Explanation:
    workload: str
    cluster_queue: str | None
    reason: str
    message: str
    admitted_now: bool = False  # the next cycles admit it without any change
    changes: list[Change] = field(default_factory=list)
    result: PlanResult | None = None
    checks: tuple[str, ...] = ()  # admitted_now: the AdmissionChecks it then waits for


def inputs_from_objects(docs: Iterable[dict[str, Any]]) -> Inputs:
    """The plan's inputs from API objects as a cluster returns them (``status`` and
    server-set metadata included). Finished workloads are left out, as ``plan`` does."""
    inputs = Inputs()
    for doc in docs:
        meta = dict(doc.get("metadata") or {})
        meta.pop("managedFields", None)
        obj = api.parse_model({**doc, "metadata": meta})
        if isinstance(obj, Workload):
            if obj.finished:
                inputs.finished_workloads.add(obj.key)
            else:
                inputs.workloads.append(obj)
        else:
            store(inputs, obj)
    if not inputs.namespaces_given:
        inputs.namespaces = default_namespaces(inputs)
    return inputs


def _admits(result: PlanResult, key: str) -> bool:
    return any(d.workload.key == key for d in result.admitted)


def _groups_with(
    groups: list[ResourceGroup],
    flavor: str,
    resource: str,
    fn: Callable[[ResourceQuota], ResourceQuota],
) -> list[ResourceGroup]:
    out = copy.deepcopy(groups)
    for g in out:
        for fq in g.flavors:
            if fq.name == flavor and resource in fq.resources:
                fq.resources[resource] = fn(fq.resources[resource])
    return out


def _quota(groups: list[ResourceGroup], flavor: str, resource: str) -> ResourceQuota | None:
    for g in groups:
        for fq in g.flavors:
            if fq.name == flavor and resource in fq.resources:
                return fq.resources[resource]
    return None


def _candidates(inputs: Inputs, wl: Workload, cq_name: str) -> list[tuple[str, str, str, str, str]]:
    """(owner kind, owner, field, flavor, resource) of every limit that could bind."""
    requested = {r for ps in wl.pod_sets for r, v in ps.requests.items() if v > 0}
    cq = inputs.cluster_queues[cq_name]
    out = []
    for g in cq.resource_groups:
        for fq in g.flavors:
            for r in fq.resources:
                if r not in requested:
                    continue
                out.append(("ClusterQueue", cq_name, "nominalQuota", fq.name, r))
                if cq.cohort and fq.resources[r].borrowing_limit is not None:
                    out.append(("ClusterQueue", cq_name, "borrowingLimit", fq.name, r))
                cohort, seen = cq.cohort, set()
                while cohort and cohort not in seen:
                    seen.add(cohort)
                    node = inputs.cohorts.get(cohort)
                    if node is None:
                        break
                    if _quota(node.resource_groups, fq.name, r) is not None:
                        out.append(("Cohort", cohort, "nominalQuota", fq.name, r))
                    cohort = node.parent
    return out


def _with(inputs: Inputs, cand: tuple[str, str, str, str, str], value: int) -> Inputs:
    kind, owner, fld, flavor, resource = cand

    def set_value(q: ResourceQuota) -> ResourceQuota:
        return (
            replace(q, nominal=value)
            if fld == "nominalQuota"
            else replace(q, borrowing_limit=value)
        )

    if kind == "ClusterQueue":
        cq = inputs.cluster_queues[owner]
        new_cq = replace(
            cq, resource_groups=_groups_with(cq.resource_groups, flavor, resource, set_value)
        )
        return replace(inputs, cluster_queues={**inputs.cluster_queues, owner: new_cq},
                       workloads=[copy.copy(w) for w in inputs.workloads])  # fmt: skip
    co = inputs.cohorts[owner]
    new_co = replace(
        co, resource_groups=_groups_with(co.resource_groups, flavor, resource, set_value)
    )
    return replace(inputs, cohorts={**inputs.cohorts, owner: new_co},
                   workloads=[copy.copy(w) for w in inputs.workloads])  # fmt: skip


def _current(inputs: Inputs, cand: tuple[str, str, str, str, str]) -> int | None:
    kind, owner, fld, flavor, resource = cand
    groups = (
        inputs.cluster_queues[owner] if kind == "ClusterQueue" else inputs.cohorts[owner]
    ).resource_groups
    q = _quota(groups, flavor, resource)
    if q is None:
        return None
    return q.nominal if fld == "nominalQuota" else q.borrowing_limit


def explain(inputs: Inputs, key: str, *, config: Config | None = None) -> Explanation:
    """Why ``key`` ("namespace/name") is pending and the single changes that admit it."""
    config = config or Config()
    fresh = replace(inputs, workloads=[copy.copy(w) for w in inputs.workloads])
    before = run_plan(fresh, config=config)
    wl = next((w for w in inputs.workloads if w.key == key), None)
    if wl is None:
        raise KeyError(key)
    if _admits(before, key):
        d = next(d for d in before.admitted if d.workload.key == key)
        return Explanation(key, d.cluster_queue, "", "", admitted_now=True, result=before,
                           checks=d.checks)  # fmt: skip
    verdict = next((o for o in before.checks if o.workload == key), None)
    if verdict is not None and verdict.verdict.action == Action.WAIT:
        waiting = [s for s in verdict.states if s.state != CHECK_READY]
        return Explanation(key, verdict.cluster_queue, UNSATISFIED_CHECKS,
                           messages.waiting_for_checks(verdict.cluster_queue, waiting),
                           result=before)  # fmt: skip
    if verdict is not None and verdict.verdict.action in (Action.RETRY, Action.REJECT):
        # Kueue's Evicted reasons: a retry, or a deactivation by a Rejected check
        reason = (
            "AdmissionCheck"
            if verdict.verdict.action == Action.RETRY
            else "DeactivatedDueToAdmissionCheck"
        )
        return Explanation(key, verdict.cluster_queue, reason, verdict.verdict.message,
                           result=before)  # fmt: skip
    if wl.admission is not None:
        return Explanation(key, wl.admission.cluster_queue, "Admitted", "", result=before)
    cq, status = before.pending.get(key, (None, None))
    if status is None:
        return Explanation(key, cq, "", "not pending", result=before)
    out = Explanation(key, cq, str(status.reason), status.message, result=before)
    if cq is None or cq not in inputs.cluster_queues:
        return out
    if before.cache is not None:  # as the plan counted it (DRA devices included)
        wl = before.cache.workloads.get(key, wl)
    total: dict[str, int] = {}
    for ps in wl.pod_sets:
        for r, v in ps.requests.items():
            total[r] = total.get(r, 0) + v * ps.count
    for cand in _candidates(inputs, wl, cq):
        current = _current(inputs, cand)
        if current is None:
            continue
        low, high = current, current + total.get(cand[4], 0)
        if high <= low or not _admits(run_plan(_with(inputs, cand, high), config=config), key):
            continue
        step = 1000 if all(v % 1000 == 0 for v in (low, high)) else 1
        lo, hi = low // step, high // step  # admitted at hi, not at lo
        for _ in range(MAX_STEPS):
            if hi - lo <= 1:
                break
            mid = (lo + hi) // 2
            if _admits(run_plan(_with(inputs, cand, mid * step), config=config), key):
                hi = mid
            else:
                lo = mid
        out.changes.append(Change(cand[0], cand[1], cand[2], cand[3], cand[4], current, hi * step))
    return out
