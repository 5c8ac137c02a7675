"""Pure functions on raw Kubernetes objects: conditions, Workload status bodies.

Everything the controller writes to a Workload is computed here from the object it
read, so the write paths stay short and these rules (Kueue's condition reasons and
messages, when a job no longer matches its admission) are unit-testable without an API
server. What a job kind gets on start and stop is its integration's
(``admission.integrations``). Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from admission.engine.admission_checks import all_ready, reset_on_eviction, sync_states
from admission.kube.digest import DIGEST, template_digest
from queues.api.conditions import condition, conditions, is_true
from queues.api.topology_assignment import to_v1beta2
from queues.model import Admission, AdmissionCheckState, PodSetAssignment
from queues.quantity import format_quantity
from queues.times import rfc3339_seconds

Obj = dict[str, Any]

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"
PODS_READY = "PodsReady"
DEACTIVATION_TARGET = "DeactivationTarget"
UNSATISFIED_CHECKS = "UnsatisfiedAdmissionChecks"

# -- time and keys ------------------------------------------------------------------------


def rfc3339(ts: float) -> str:
    """metav1.Time: whole seconds, UTC."""
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(ts: float) -> str:
    """metav1.MicroTime (Lease renewTime)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def ns_key(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return f"{m.get('namespace') or 'default'}/{m.get('name') or ''}"


def split_key(key: str) -> tuple[str, str]:
    ns, _, name = key.rpartition("/")
    return ns, name


def rv(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def generation(obj: Mapping[str, Any] | None) -> int:
    g = meta(obj).get("generation")
    return g if isinstance(g, int) else 0


def deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


# -- conditions ---------------------------------------------------------------------------


def set_condition(
    conds: list[Obj],
    *,
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: float,
    observed_generation: int = 0,
) -> list[Obj]:
    """A new list with the condition set; lastTransitionTime moves only on a status change."""
    value = "True" if status else "False"
    out: list[Obj] = []
    found = False
    for c in conds:
        if c.get("type") != type_:
            out.append(c)
            continue
        found = True
        ltt = c.get("lastTransitionTime") if c.get("status") == value else rfc3339(now)
        out.append(_cond(type_, value, reason, message, ltt or rfc3339(now), observed_generation))
    if not found:
        out.append(_cond(type_, value, reason, message, rfc3339(now), observed_generation))
    return out


def _cond(type_: str, status: str, reason: str, message: str, ltt: str, gen: int) -> Obj:
    c: Obj = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": ltt,
    }
    if gen:
        c["observedGeneration"] = gen
    return c


def reset_if_true(conds: list[Obj], type_: str, *, reason: str, now: float, gen: int) -> list[Obj]:
    """Kueue's SetQuotaReservation: a True Evicted/Preempted becomes False ("Previously: …")."""
    c = next((x for x in conds if x.get("type") == type_), None)
    if c is None or c.get("status") != "True":
        return conds
    return set_condition(
        conds,
        type_=type_,
        status=False,
        reason=reason,
        message=f"Previously: {c.get('message', '')}",
        now=now,
        observed_generation=gen,
    )


# -- workloads ----------------------------------------------------------------------------


def has_quota(wl: Mapping[str, Any] | None) -> bool:
    """QuotaReserved=True with ``status.admission`` set: the workload holds quota."""
    status = (wl or {}).get("status") or {}
    return bool(status.get("admission")) and is_true(wl, QUOTA_RESERVED)


def is_finished(wl: Mapping[str, Any] | None) -> bool:
    return is_true(wl, FINISHED)


def is_active(wl: Mapping[str, Any] | None) -> bool:
    return ((wl or {}).get("spec") or {}).get("active", True) is not False


def admission_of(wl: Mapping[str, Any] | None) -> Obj | None:
    adm = ((wl or {}).get("status") or {}).get("admission")
    return adm if isinstance(adm, dict) else None


def requeue_at(wl: Mapping[str, Any] | None) -> float | None:
    state = ((wl or {}).get("status") or {}).get("requeueState") or {}
    return rfc3339_seconds(state.get("requeueAt")) if isinstance(state, dict) else None


def requeue_count(wl: Mapping[str, Any] | None) -> int:
    state = ((wl or {}).get("status") or {}).get("requeueState") or {}
    n = state.get("count") if isinstance(state, dict) else None
    return n if isinstance(n, int) else 0


def admission_json(admission: Admission) -> Obj:
    return {
        "clusterQueue": admission.cluster_queue,
        "podSetAssignments": [_psa_json(psa) for psa in admission.pod_set_assignments],
    }


def _psa_json(psa: PodSetAssignment) -> Obj:
    out: Obj = {
        "name": psa.name,
        "flavors": dict(sorted(psa.flavors.items())),
        "resourceUsage": {r: format_quantity(r, v) for r, v in sorted(psa.resource_usage.items())},
        "count": psa.count,
    }
    if psa.topology_assignment is not None:  # Kueue's v1beta2 form
        out["topologyAssignment"] = to_v1beta2(psa.topology_assignment)
    return out


def admission_status(
    wl: Obj, admission: Admission, *, now: float, checks: tuple[str, ...] = ()
) -> Obj:
    """Status merge patch that reserves quota; and admits, unless some of ``checks`` (the
    AdmissionChecks the reservation must pass) is not Ready yet: then
    ``status.admissionChecks`` gets a Pending entry for each one missing and
    ``Admitted`` is False (``UnsatisfiedAdmissionChecks``)."""
    gen = generation(wl)
    conds = conditions(wl)
    conds = set_condition(
        conds,
        type_=QUOTA_RESERVED,
        status=True,
        reason="QuotaReserved",
        message=f"Quota reserved in ClusterQueue {admission.cluster_queue}",
        now=now,
        observed_generation=gen,
    )
    have = check_states(wl)
    states, _ = sync_states(have, checks, now)
    conds = admitted_condition(conds, admitted=all_ready(states, checks), now=now, gen=gen)
    for t in (EVICTED, PREEMPTED):
        conds = reset_if_true(conds, t, reason="QuotaReserved", now=now, gen=gen)
    status: Obj = {"conditions": conds, "admission": admission_json(admission)}
    if checks or have:
        status["admissionChecks"] = check_states_json(states, wl)
    return status


def admitted_condition(conds: list[Obj], *, admitted: bool, now: float, gen: int) -> list[Obj]:
    """Kueue's ``SyncAdmittedCondition`` for a workload holding quota."""
    if admitted:
        return set_condition(conds, type_=ADMITTED, status=True, reason="Admitted",
                             message="The workload is admitted", now=now,
                             observed_generation=gen)  # fmt: skip
    return set_condition(conds, type_=ADMITTED, status=False, reason=UNSATISFIED_CHECKS,
                         message="The workload has not all checks ready", now=now,
                         observed_generation=gen)  # fmt: skip


# -- admission checks ---------------------------------------------------------------------


def check_states(wl: Mapping[str, Any] | None) -> tuple[AdmissionCheckState, ...]:
    """``status.admissionChecks`` as the engine reads it (entries without a name or a
    known state are skipped: the CRD's schema refuses them)."""
    out = []
    for item in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        if item.get("state") not in ("Pending", "Ready", "Retry", "Rejected"):
            continue
        after, count = item.get("requeueAfterSeconds"), item.get("retryCount")
        out.append(
            AdmissionCheckState(
                name=item["name"],
                state=item["state"],
                message=str(item.get("message") or ""),
                last_transition=rfc3339_seconds(item.get("lastTransitionTime")),
                requeue_after_seconds=after if isinstance(after, int) else None,
                retry_count=count if isinstance(count, int) else None,
            )
        )
    return tuple(out)


def check_states_json(
    states: tuple[AdmissionCheckState, ...], wl: Mapping[str, Any] | None = None
) -> list[Obj]:
    """``status.admissionChecks`` for ``states``; each entry keeps the ``podSetUpdates``
    its controller wrote on ``wl``."""
    updates = {
        item.get("name"): item.get("podSetUpdates")
        for item in ((wl or {}).get("status") or {}).get("admissionChecks") or []
        if isinstance(item, dict) and item.get("podSetUpdates")
    }
    out: list[Obj] = []
    for s in states:
        entry: Obj = {
            "name": s.name,
            "state": s.state,
            "message": s.message[:32768],
            "lastTransitionTime": rfc3339(s.last_transition or 0),
        }
        if s.requeue_after_seconds is not None:
            entry["requeueAfterSeconds"] = s.requeue_after_seconds
        if s.retry_count is not None:
            entry["retryCount"] = s.retry_count
        if updates.get(s.name):
            entry["podSetUpdates"] = updates[s.name]
        out.append(entry)
    return out


def pending_status(wl: Obj, *, reason: str, message: str, now: float) -> Obj | None:
    """QuotaReserved=False with the engine's reason, or None when nothing would change."""
    c = condition(wl, QUOTA_RESERVED)
    if c is not None and c.get("status") == "False" and c.get("reason") == reason:
        if c.get("message") == message[:32768]:
            return None
    conds = set_condition(
        conditions(wl),
        type_=QUOTA_RESERVED,
        status=False,
        reason=reason,
        message=message,
        now=now,
        observed_generation=generation(wl),
    )
    return {"conditions": conds}


def evicted_status(
    wl: Obj, *, reason: str, message: str, now: float, preempted_reason: str | None = None
) -> Obj:
    """Evicted=True (and Preempted=True for preemptions); the admission stays until the
    job is inactive. Its AdmissionChecks go back to Pending (Kueue's
    ``prepareForEviction``)."""
    gen = generation(wl)
    conds = set_condition(
        conditions(wl),
        type_=EVICTED,
        status=True,
        reason=reason,
        message=message,
        now=now,
        observed_generation=gen,
    )
    if preempted_reason is not None:
        conds = set_condition(
            conds,
            type_=PREEMPTED,
            status=True,
            reason=preempted_reason,
            message=message,
            now=now,
            observed_generation=gen,
        )
    status: Obj = {"conditions": conds}
    have = check_states(wl)
    if have:
        status["admissionChecks"] = check_states_json(reset_on_eviction(have, now), wl)
    old = wl.get("status") or {}
    if old.get("clusterName") or old.get("nominatedClusterNames"):
        # Kueue's resetClusterNomination: MultiKueue dispatches the workload afresh
        status["clusterName"] = status["nominatedClusterNames"] = None
    return status


def pod_set_update_conflict(
    info_labels: dict[str, str],
    info_annotations: dict[str, str],
    info_node_selector: dict[str, str],
    update: Mapping[str, Any],
) -> str | None:
    """Kueue's ``PodSetInfo.Merge`` check of one AdmissionCheck ``podSetUpdate`` against
    what the podSet gets already: the first key both set to different values, or None."""
    for what, have in (
        ("annotations", info_annotations),
        ("labels", info_labels),
        ("nodeSelector", info_node_selector),
    ):
        for k, v in have.items():
            other = (update.get(what) or {}).get(k)
            if other is not None and other != v:
                return (
                    "invalid admission check PodSetUpdate: conflict for "
                    f"{what}: conflict for key={k}, value1={v}, value2={other}"
                )
    return None


def deactivation_eviction(wl: Obj) -> tuple[str, str]:
    """The ``Evicted`` reason and message of a deactivated workload (Kueue): with a
    ``DeactivationTarget`` condition (e.g. a Rejected AdmissionCheck),
    ``DeactivatedDueTo<its reason>`` and "The workload is deactivated due to <its
    message>"; else ``Deactivated``."""
    dt = condition(wl, DEACTIVATION_TARGET)
    if dt is None or dt.get("status") != "True":
        return "Deactivated", "The workload is deactivated"
    return (
        f"DeactivatedDueTo{dt.get('reason') or ''}",
        f"The workload is deactivated due to {dt.get('message') or ''}",
    )


def without_deactivation_target(status: Obj) -> Obj:
    """A status write that also removes the ``DeactivationTarget`` condition."""
    conds = [c for c in status.get("conditions") or [] if c.get("type") != DEACTIVATION_TARGET]
    return {**status, "conditions": conds}


def cleared_status(wl: Obj, *, now: float, requeue_state: Obj | None = None) -> Obj:
    """The eviction is complete: admission cleared, QuotaReserved=False, Requeued set."""
    gen = generation(wl)
    ev = condition(wl, EVICTED) or {}
    reason = str(ev.get("reason") or "Pending")
    message = str(ev.get("message") or "The workload was evicted")
    conds = set_condition(
        conditions(wl),
        type_=QUOTA_RESERVED,
        status=False,
        reason="Pending",
        message=message,
        now=now,
        observed_generation=gen,
    )
    conds = set_condition(
        conds,
        type_=ADMITTED,
        status=False,
        reason="NoReservation",
        message="The workload has no reservation",
        now=now,
        observed_generation=gen,
    )
    requeued = reason in ("Preempted", "NodeFailures")
    conds = set_condition(
        conds,
        type_=REQUEUED,
        status=requeued,
        reason=reason,
        message=message,
        now=now,
        observed_generation=gen,
    )
    status: Obj = {"conditions": conds, "admission": None}
    if requeue_state is not None:
        status["requeueState"] = requeue_state
    return status


def finished_status(
    wl: Obj, *, succeeded: bool, now: float, message: str = "", reason: str = ""
) -> Obj:
    conds = set_condition(
        conditions(wl),
        type_=FINISHED,
        status=True,
        reason=reason or ("Succeeded" if succeeded else "Failed"),
        message=message or ("Job finished successfully" if succeeded else "Job failed"),
        now=now,
        observed_generation=generation(wl),
    )
    return {"conditions": conds}


def workload_spec_drift(wl_obj: Mapping[str, Any], desired: Mapping[str, Any]) -> Obj | None:
    """A spec merge patch bringing a pending Workload in line with its Job, or None."""
    have = wl_obj.get("spec") or {}
    want = desired.get("spec") or {}
    patch: Obj = {}
    for key in ("queueName", "priority", "priorityClassRef"):
        if have.get(key) != want.get(key):
            patch[key] = want.get(key)
    if [p.get("count") for p in have.get("podSets") or []] != [
        p.get("count") for p in want.get("podSets") or []
    ] or [template_digest(p.get("template")) for p in have.get("podSets") or []] != [
        template_digest(p.get("template")) for p in want.get("podSets") or []
    ]:
        patch["podSets"] = want.get("podSets")
    return {"spec": patch} if patch else None


def carries_slim_template(body: Mapping[str, Any]) -> bool:
    """Whether a Workload body (or spec patch) holds a slim template, built from an
    informer's copy: such a body is for comparing, never for writing."""
    spec = body.get("spec") or {}
    return any(DIGEST in (p.get("template") or {}) for p in spec.get("podSets") or [])


def _admitted_counts(wl_obj: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for psa in (admission_of(wl_obj) or {}).get("podSetAssignments") or []:
        if isinstance(psa, dict) and isinstance(psa.get("count"), int):
            out[str(psa.get("name", "main"))] = psa["count"]
    return out


def running_count(wl_obj: Mapping[str, Any], pod_set: str = "main") -> int | None:
    """The pod count a Job admitted under ``wl_obj`` runs with, when partial admission
    gave it fewer pods than asked (None: the podSet's own count)."""
    for ps in (wl_obj.get("spec") or {}).get("podSets") or []:
        if ps.get("name") == pod_set and ps.get("minCount") is not None:
            admitted = _admitted_counts(wl_obj).get(pod_set)
            if admitted is not None and admitted < int(ps.get("count") or 0):
                return admitted
    return None


def references_key(integ: Any, resolved: Mapping[str, Any]) -> str:
    """What ``Integration.resolve`` added to an object from the objects it references (a
    TrainJob's runtime), as a key: an edit of them changes the object's podSets though
    not its generation. ``""`` for a kind that references nothing."""
    if not integ.references:
        return ""
    added = {k: v for k, v in resolved.items() if k not in _OWN_KEYS}
    return hashlib.sha1(repr(sorted(added.items())).encode(), usedforsecurity=False).hexdigest()


_OWN_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})


def job_mismatch(
    wl_obj: Mapping[str, Any], desired: Mapping[str, Any], *, started: bool
) -> str | None:
    """Why a Job no longer matches the Workload it was admitted with (Kueue's
    ``EquivalentToWorkload``), or None: pod counts, per-pod requests and resource claims
    of every podSet.
    A ``started`` Job runs at the admitted count under partial admission; a suspended
    one still has its original count. Anything else (the flavors' nodeSelector we
    injected, labels) may differ."""
    from queues.pods import pod_requests

    have = (wl_obj.get("spec") or {}).get("podSets") or []
    want = (desired.get("spec") or {}).get("podSets") or []
    if [p.get("name") for p in have] != [p.get("name") for p in want]:
        return "its podSets changed"
    for h, w in zip(have, want, strict=True):
        name = h.get("name")
        expected = (running_count(wl_obj, str(name)) if started else None) or h.get("count")
        if w.get("count") != expected:
            return f"podSet {name}: admitted for {expected} pods, the job now has {w.get('count')}"
        h_spec = (h.get("template") or {}).get("spec") or {}
        w_spec = (w.get("template") or {}).get("spec") or {}
        if pod_requests(h_spec) != pod_requests(w_spec):
            return f"podSet {name}: the pods' resource requests changed"
        if (h_spec.get("resourceClaims") or []) != (w_spec.get("resourceClaims") or []):
            return f"podSet {name}: the pods' resource claims (DRA devices) changed"
    return None


def topology_assignment_of(
    admission: Mapping[str, Any] | None, pod_set: str = "main"
) -> Obj | None:
    """The raw ``topologyAssignment`` of ``pod_set`` in a ``status.admission`` (None:
    the podSet was not placed by topology)."""
    for psa in (admission or {}).get("podSetAssignments") or []:
        if isinstance(psa, dict) and psa.get("name", "main") == pod_set:
            ta = psa.get("topologyAssignment")
            return ta if isinstance(ta, dict) and ta else None
    return None


def flavors_of(admission: Mapping[str, Any] | None, pod_set: str = "main") -> list[str]:
    """Flavor names assigned to ``pod_set`` in a raw ``status.admission``."""
    for psa in (admission or {}).get("podSetAssignments") or []:
        if isinstance(psa, dict) and psa.get("name", "main") == pod_set:
            return sorted(set((psa.get("flavors") or {}).values()))
    return []
