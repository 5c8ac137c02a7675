"""AdmissionChecks offline: what ``plan`` makes of the checks of workloads holding quota.

A workload given with ``status.admission`` and ``status.admissionChecks`` is where its
checks' controllers left it; before the first cycle, ``plan`` does what the service
would do (:func:`admission.engine.admission_checks.verdict`): a Retry check releases
the quota (and the workload waits out ``requeueAfterSeconds``, beyond this plan's
instant, or queues again at once), a Rejected one releases it and deactivates the
workload; every check Ready admits it; otherwise it keeps its quota and waits. A
reservation the run makes on a ClusterQueue with checks waits for them (its checks are
Pending: their controllers run on the cluster, not here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from admission.engine.admission_checks import Action, Verdict, verdict
from admission.engine.cache import Cache
from admission.engine.decisions import AdmittedDecision
from queues.api.parse import ModelObject
from queues.model import AdmissionCheck, AdmissionCheckState


def as_written(model: ModelObject, origin: str, warnings: list[str]) -> ModelObject:
    """An AdmissionCheck read from a manifest without status: on a cluster its
    controller sets ``Active``; plan takes it as Active, and says so."""
    if not isinstance(model, AdmissionCheck):
        return model
    warnings.append(
        f"{origin}: AdmissionCheck {model.name} has no Active condition: taken as "
        f"Active (its controller, {model.controller_name}, sets it on a cluster)"
    )
    return replace(model, active=True)


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    workload: str
    cluster_queue: str
    verdict: Verdict
    states: tuple[AdmissionCheckState, ...]


def apply_verdicts(cache: Cache, now: float) -> list[CheckOutcome]:
    """Apply the checks' verdicts to the workloads loaded holding quota (see the module
    docstring); what each one got, in key order."""
    out = []
    for key in sorted(cache.admitted):
        wl = cache.workloads.get(key)
        if wl is None or wl.admission is None:
            continue
        cq = cache.admitted[key]
        required = cache.checks_for(cq, wl.admission)
        if not required and not wl.admission_checks:
            continue
        states = wl.admission_checks
        v = verdict(states, required, admitted=wl.admitted)
        if v.action == Action.ADMIT:
            wl.admitted = True
        elif v.action == Action.RETRY:
            cache.evicted(key, now)
            if v.requeue_at is not None and v.requeue_at > now:
                cache.park(key)  # back once the retry time has come
        elif v.action == Action.REJECT:
            wl.active = False
            cache.evicted(key, now)
        out.append(CheckOutcome(key, cq, v, states))
    return out


def checks_report(
    outcomes: list[CheckOutcome], admitted: list[AdmittedDecision]
) -> list[dict[str, Any]]:
    """The plan document's ``admissionChecks``: the verdict on each loaded workload that
    holds quota with checks, and each reservation of this run that waits for checks (a
    workload evicted for a retry and given quota again is reported with its verdict)."""
    rows = {o.workload: _row(o.workload, o.cluster_queue, o.verdict, o.states) for o in outcomes}
    for d in admitted:
        if d.checks and d.workload.key not in rows:
            wl = d.workload
            rows[wl.key] = _row(
                wl.key, d.cluster_queue, verdict(wl.admission_checks, d.checks), wl.admission_checks
            )
    return [rows[k] for k in sorted(rows)]


def _row(key: str, cq: str, v: Verdict, states: tuple[AdmissionCheckState, ...]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "workload": key,
        "clusterQueue": cq,
        "action": str(v.action),
        "checks": [{"name": s.name, "state": s.state} for s in states],
    }
    if v.message:
        row["message"] = v.message
    if v.requeue_at is not None:
        row["requeueAt"] = v.requeue_at
    return row
