"""Pure functions on raw Kubernetes objects: conditions, Job ⇄ Workload, status bodies.

Everything the controller writes is computed here from the object it read, so the
write paths stay short and these rules (Kueue's condition reasons and messages, what a
started Job gets injected and what a stopped one gets back) are unit-testable without
an API server. Nothing here does I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from admission.integrations.job import QUEUE_NAME_LABEL
from queues.labels import JOB_UID as JOB_UID_LABEL
from queues.labels import PODSET as PODSET_LABEL
from queues.model import Admission, ResourceFlavor, Toleration, Workload
from queues.quantity import format_quantity

Obj = dict[str, Any]

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"
PODS_READY = "PodsReady"

__all__ = ["QUEUE_NAME_LABEL"]


# -- time and keys ------------------------------------------------------------------------


def rfc3339(ts: float) -> str:
    """metav1.Time: whole seconds, UTC."""
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(ts: float) -> str:
    """metav1.MicroTime (Lease renewTime)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


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


def conditions(obj: Mapping[str, Any] | None) -> list[Obj]:
    status = (obj or {}).get("status") or {}
    conds = status.get("conditions") if isinstance(status, dict) else None
    return [c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else []


def condition(obj: Mapping[str, Any] | None, type_: str) -> Obj | None:
    return next((c for c in conditions(obj) if c.get("type") == type_), None)


def is_true(obj: Mapping[str, Any] | None, type_: str) -> bool:
    c = condition(obj, type_)
    return c is not None and c.get("status") == "True"


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


def owner_job(wl: Mapping[str, Any]) -> tuple[str, str] | None:
    """(job key "ns/name", job uid) of the Workload's controlling batch/v1 Job."""
    for ref in meta(wl).get("ownerReferences") or []:
        if (
            isinstance(ref, dict)
            and ref.get("kind") == "Job"
            and str(ref.get("apiVersion", "")).startswith("batch/")
            and ref.get("controller")
        ):
            ns = meta(wl).get("namespace") or "default"
            return f"{ns}/{ref.get('name')}", str(ref.get("uid") or "")
    return None


def job_uid_label(wl: Mapping[str, Any]) -> str:
    return str((meta(wl).get("labels") or {}).get(JOB_UID_LABEL) or "")


def requeue_at(wl: Mapping[str, Any] | None) -> float | None:
    state = ((wl or {}).get("status") or {}).get("requeueState") or {}
    return parse_time(state.get("requeueAt")) if isinstance(state, dict) else None


def requeue_count(wl: Mapping[str, Any] | None) -> int:
    state = ((wl or {}).get("status") or {}).get("requeueState") or {}
    n = state.get("count") if isinstance(state, dict) else None
    return n if isinstance(n, int) else 0


def admission_json(admission: Admission) -> Obj:
    return {
        "clusterQueue": admission.cluster_queue,
        "podSetAssignments": [
            {
                "name": psa.name,
                "flavors": dict(sorted(psa.flavors.items())),
                "resourceUsage": {
                    r: format_quantity(r, v) for r, v in sorted(psa.resource_usage.items())
                },
                "count": psa.count,
            }
            for psa in admission.pod_set_assignments
        ],
    }


def admission_status(wl: Obj, admission: Admission, *, now: float) -> Obj:
    """Status merge patch that reserves quota and admits (no admission checks)."""
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
    conds = set_condition(
        conds,
        type_=ADMITTED,
        status=True,
        reason="Admitted",
        message="The workload is admitted",
        now=now,
        observed_generation=gen,
    )
    for t in (EVICTED, PREEMPTED):
        conds = reset_if_true(conds, t, reason="QuotaReserved", now=now, gen=gen)
    return {"conditions": conds, "admission": admission_json(admission)}


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
    job is inactive."""
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
    return {"conditions": conds}


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


def finished_status(wl: Obj, *, succeeded: bool, now: float, message: str = "") -> Obj:
    conds = set_condition(
        conditions(wl),
        type_=FINISHED,
        status=True,
        reason="Succeeded" if succeeded else "Failed",
        message=message or ("Job finished successfully" if succeeded else "Job failed"),
        now=now,
        observed_generation=generation(wl),
    )
    return {"conditions": conds}


# -- jobs ---------------------------------------------------------------------------------


def job_finished(job: Mapping[str, Any]) -> tuple[bool, str] | None:
    """(succeeded, message) when the Job has a Complete or Failed condition."""
    for c in conditions(job):
        if c.get("status") != "True":
            continue
        if c.get("type") == "Complete":
            return True, str(c.get("message") or "")
        if c.get("type") == "Failed":
            return False, str(c.get("message") or c.get("reason") or "")
    return None


def job_suspended(job: Mapping[str, Any]) -> bool:
    return (job.get("spec") or {}).get("suspend") is True


def job_active(job: Mapping[str, Any]) -> int:
    n = (job.get("status") or {}).get("active")
    return n if isinstance(n, int) else 0


def job_ready(job: Mapping[str, Any]) -> int:
    status = job.get("status") or {}
    return sum(v for k in ("ready", "succeeded") if isinstance(v := status.get(k), int))


def job_queue_name(job: Mapping[str, Any]) -> str:
    return str((meta(job).get("labels") or {}).get(QUEUE_NAME_LABEL) or "")


def workload_for_job(job: Mapping[str, Any], wl: Workload) -> Obj:
    """The Workload object Kueue's job reconciler creates for ``job``."""
    m = meta(job)
    template = (job.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    pod_template: Obj = {"spec": copy.deepcopy(template.get("spec") or {})}
    kept = {k: copy.deepcopy(tmeta[k]) for k in ("labels", "annotations") if tmeta.get(k)}
    if kept:
        pod_template["metadata"] = kept
    ps = wl.pod_sets[0]
    pod_set: Obj = {"name": ps.name, "count": ps.count, "template": pod_template}
    if ps.min_count is not None:
        pod_set["minCount"] = ps.min_count
    spec: Obj = {"podSets": [pod_set], "queueName": wl.queue_name, "priority": wl.priority}
    if wl.priority_class:
        group = (
            "kueue.x-k8s.io" if wl.priority_class_kind != "PriorityClass" else "scheduling.k8s.io"
        )
        spec["priorityClassRef"] = {
            "group": group,
            "kind": wl.priority_class_kind or "WorkloadPriorityClass",
            "name": wl.priority_class,
        }
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": wl.name,
            "namespace": m.get("namespace") or "default",
            "labels": {JOB_UID_LABEL: str(m.get("uid") or "")},
            "annotations": {
                "kueue.x-k8s.io/job-owner-gvk": "batch/v1, Kind=Job",
                "kueue.x-k8s.io/job-owner-name": str(m.get("name") or ""),
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": m.get("name"),
                    "uid": m.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


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
    ] or [p.get("template") for p in have.get("podSets") or []] != [
        p.get("template") for p in want.get("podSets") or []
    ]:
        patch["podSets"] = want.get("podSets")
    return {"spec": patch} if patch else None


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


def job_mismatch(
    wl_obj: Mapping[str, Any], desired: Mapping[str, Any], *, started: bool
) -> str | None:
    """Why a Job no longer matches the Workload it was admitted with (Kueue's
    ``EquivalentToWorkload``), or None: pod counts and per-pod requests of every podSet.
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
    return None


def toleration_json(t: Toleration) -> Obj:
    out: Obj = {}
    if t.key:
        out["key"] = t.key
    if t.operator:
        out["operator"] = t.operator
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def start_job_patch(
    job: Mapping[str, Any],
    *,
    flavors: Iterable[ResourceFlavor],
    pod_set: str = "main",
    parallelism: int | None = None,
) -> Obj:
    """Merge patch: unsuspend, add flavors' nodeLabels/tolerations, label the podset;
    ``parallelism``: the admitted count under partial admission (Kueue's
    ``RunWithPodSetsInfo``), restored on stop."""
    tspec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    node_selector: dict[str, str] = {}
    tolerations: list[Obj] = [t for t in tspec.get("tolerations") or [] if isinstance(t, dict)]
    for flv in flavors:
        node_selector.update(flv.node_labels)
        for t in flv.tolerations:
            tj = toleration_json(t)
            if tj not in tolerations:
                tolerations.append(tj)
    spec: Obj = {}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations != (tspec.get("tolerations") or []):
        spec["tolerations"] = tolerations
    template: Obj = {"metadata": {"labels": {PODSET_LABEL: pod_set}}}
    if spec:
        template["spec"] = spec
    body: Obj = {"suspend": False, "template": template}
    if parallelism is not None:
        body["parallelism"] = parallelism
    return {"spec": body}


def job_start_time(job: Mapping[str, Any] | None) -> str:
    return str(((job or {}).get("status") or {}).get("startTime") or "")


def restore_job_patch(
    job: Mapping[str, Any], original: Mapping[str, Any] | None, *, parallelism: int | None = None
) -> Obj:
    """Merge patch restoring the template's scheduling fields (nodeSelector,
    tolerations, the podset label) from the Workload's copy of the original pod
    template; ``{}`` when nothing differs. Valid only on a suspended, never-started Job
    (see ``JobReconciler._stop``)."""
    tmpl = (job.get("spec") or {}).get("template") or {}
    tspec = tmpl.get("spec") or {}
    orig_spec = (original or {}).get("spec") or {}
    patch_spec: Obj = {}
    have_ns = tspec.get("nodeSelector") or {}
    want_ns = orig_spec.get("nodeSelector") or {}
    if have_ns != want_ns:
        ns_patch: Obj = {k: None for k in have_ns if k not in want_ns}
        ns_patch.update({k: v for k, v in want_ns.items() if have_ns.get(k) != v})
        patch_spec["nodeSelector"] = ns_patch
    if (tspec.get("tolerations") or []) != (orig_spec.get("tolerations") or []):
        patch_spec["tolerations"] = orig_spec.get("tolerations")
    template: Obj = {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    orig_labels = ((original or {}).get("metadata") or {}).get("labels") or {}
    if PODSET_LABEL in labels and PODSET_LABEL not in orig_labels:
        template["metadata"] = {"labels": {PODSET_LABEL: None}}
    if patch_spec:
        template["spec"] = patch_spec
    body: Obj = {"template": template} if template else {}
    if parallelism is not None and (job.get("spec") or {}).get("parallelism") != parallelism:
        body["parallelism"] = parallelism  # partial admission lowered it
    return {"spec": body} if body else {}


def job_needs_restore(
    job: Mapping[str, Any], original: Mapping[str, Any] | None, *, parallelism: int | None = None
) -> bool:
    return bool(restore_job_patch(job, original, parallelism=parallelism))


def flavors_of(admission: Mapping[str, Any] | None, pod_set: str = "main") -> list[str]:
    """Flavor names assigned to ``pod_set`` in a raw ``status.admission``."""
    for psa in (admission or {}).get("podSetAssignments") or []:
        if isinstance(psa, dict) and psa.get("name", "main") == pod_set:
            return sorted(set((psa.get("flavors") or {}).values()))
    return []
