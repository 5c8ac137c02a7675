"""Defaulting and validation of the built-in kinds the service writes: Jobs and Pods
(and the StatefulSets whose pods it admits).

kube-apiserver defaults every built-in object when it decodes a request body
(``SetDefaults_Job``, ``SetDefaults_PodSpec``, ...), generates a Job's selector and
controller labels when it validates a create, and refuses updates that the type's
strategy forbids.  The rules here are the ones a job-queueing controller runs into:

* **Job spec updates** (``ValidateJobUpdate``): ``spec.template`` is immutable, except
  that its ``nodeSelector``, ``tolerations``, labels, annotations and
  ``schedulingGates`` (and node affinity) may change while the *stored* Job is
  suspended and has no ``status.startTime``; selector, completionMode and friends are
  immutable;
* **Job status updates** (``ValidateJobUpdateStatus`` with the 1.32 options):
  ``Complete`` needs ``SuccessCriteriaMet``, ``completionTime`` and ``startTime``;
  ``Failed`` needs ``FailureTarget``; terminal conditions cannot be disabled; the
  start time of an unsuspended Job cannot be removed;
* **Pod spec updates** (``ValidatePodUpdate``): only images, activeDeadlineSeconds,
  added tolerations and removed scheduling gates -- and, while the stored pod is
  scheduling-gated, additions to ``nodeSelector``;
* **Deployments, ReplicaSets**: replicas (and a Deployment's strategy) defaulted, a
  selector matching the template's labels required, and immutable;
* **StatefulSets** (``SetDefaults_StatefulSet``, ``ValidateStatefulSet``,
  ``ValidateStatefulSetUpdate``): replicas, podManagementPolicy, updateStrategy and
  revisionHistoryLimit defaulted; a selector that matches the template's labels is
  required; an update may change only replicas, ordinals, template, updateStrategy,
  revisionHistoryLimit, persistentVolumeClaimRetentionPolicy and minReadySeconds.

Messages copy upstream's field errors, so a client sees the same 422 ``Status``.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any

from admission.apiserver_double import crdstate, dra

from .errors import FieldError, GoValue, invalid_errors
from .resources import ResourceType

Obj = dict[str, Any]

JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
CONTROLLER_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
TERMINAL_CONDITIONS = ("Failed", "Complete", "FailureTarget")
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)
#: JobSpec fields that ``ValidateJobSpecUpdate`` keeps immutable (besides the template).
JOB_IMMUTABLE_FIELDS = (
    "selector",
    "completionMode",
    "podFailurePolicy",
    "backoffLimitPerIndex",
    "managedBy",
    "successPolicy",
    "podReplacementPolicy",
)


def is_job(rt: ResourceType) -> bool:
    return rt.group == "batch" and rt.plural == "jobs"


def is_pod(rt: ResourceType) -> bool:
    return rt.group == "" and rt.plural == "pods"


def is_statefulset(rt: ResourceType) -> bool:
    return rt.group == "apps" and rt.plural == "statefulsets"


def is_replicated(rt: ResourceType) -> bool:
    """apps/v1 Deployments and ReplicaSets: a selector over a pod template."""
    return rt.group == "apps" and rt.plural in ("deployments", "replicasets")


STS_MUTABLE_FIELDS = ("replicas", "ordinals", "template", "updateStrategy",
                      "revisionHistoryLimit", "persistentVolumeClaimRetentionPolicy",
                      "minReadySeconds")  # fmt: skip
STS_UPDATE_FORBIDDEN = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
    "'minReadySeconds' are forbidden"
)


# -- defaulting -------------------------------------------------------------------------


def apply_defaults(rt: ResourceType, obj: Obj) -> Obj:
    """The built-in defaulting of a decoded object (in place; returns it)."""
    if is_job(rt):
        default_job(obj)
    elif is_statefulset(rt):
        default_statefulset(obj)
    elif is_replicated(rt):
        default_replicated(obj)
    elif dra.is_claim(rt):
        dra.apply_defaults(rt, obj)
    elif is_pod(rt):
        spec = obj.get("spec")
        if isinstance(spec, dict):
            default_pod_spec(spec)
            for container in spec.get("containers") or []:
                if isinstance(container, dict):
                    _copy_limits_to_requests(container)
    return obj


def default_job(obj: Obj) -> None:
    """``SetDefaults_Job`` (batch/v1, Kubernetes 1.32)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    template = spec.get("template")
    meta = obj.setdefault("metadata", {})
    if isinstance(template, dict):
        template_labels = (template.get("metadata") or {}).get("labels")
        if template_labels and not meta.get("labels"):
            meta["labels"] = dict(template_labels)
        pod_spec = template.get("spec")
        if isinstance(pod_spec, dict):
            default_pod_spec(pod_spec)
    spec.setdefault("completionMode", "NonIndexed")
    if spec.get("suspend") is None:
        spec["suspend"] = False
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = (
            "Failed" if spec.get("podFailurePolicy") is not None else "TerminatingOrFailed"
        )


def default_statefulset(obj: Obj) -> None:
    """``SetDefaults_StatefulSet`` (apps/v1): the fields a controller reads."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                       "rollingUpdate": {"partition": 0}})  # fmt: skip
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy",
                    {"whenDeleted": "Retain", "whenScaled": "Retain"})  # fmt: skip
    pod_spec = (spec.get("template") or {}).get("spec")
    if isinstance(pod_spec, dict):
        default_pod_spec(pod_spec)


def default_replicated(obj: Obj) -> None:
    """``SetDefaults_Deployment`` / ``SetDefaults_ReplicaSet`` (apps/v1): replicas, and a
    Deployment's strategy, history limit and progress deadline."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    if obj.get("kind") == "Deployment":
        spec.setdefault("strategy", {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})  # fmt: skip
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    pod_spec = (spec.get("template") or {}).get("spec")
    if isinstance(pod_spec, dict):
        default_pod_spec(pod_spec)


def default_pod_spec(spec: Obj) -> None:
    """``SetDefaults_PodSpec`` and ``SetDefaults_Container`` (the fields that matter)."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _default_container(container)


def _default_container(container: Obj) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    if "imagePullPolicy" not in container:
        image = str(container.get("image") or "")
        tag = image.rpartition("/")[2].partition(":")[2] if "@" not in image else "digest"
        container["imagePullPolicy"] = "Always" if tag in ("", "latest") else "IfNotPresent"


def _copy_limits_to_requests(container: Obj) -> None:
    """``SetDefaults_Pod``: a container's limits become its requests where unset."""
    resources = container.get("resources")
    if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
        return
    requests = resources.setdefault("requests", {})
    for name, quantity in resources["limits"].items():
        requests.setdefault(name, quantity)


NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def prepare_create(rt: ResourceType, obj: Obj) -> None:
    """What the create strategy adds once ``uid`` is set (before validating webhooks);
    for a Node also what kube-apiserver's ``TaintNodesByCondition`` admission plugin
    adds: every new Node is tainted ``node.kubernetes.io/not-ready:NoSchedule`` until
    the node lifecycle controller sees it Ready (there is none here: tests lift it)."""
    if rt.group == "" and rt.plural == "nodes":
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = obj["spec"] = {}
        taints = spec.get("taints") or []
        if not any(isinstance(t, dict) and t.get("key") == NOT_READY_TAINT["key"] for t in taints):
            spec["taints"] = [*taints, dict(NOT_READY_TAINT)]
    if is_job(rt):
        obj["status"] = {}
        if not (obj.get("spec") or {}).get("manualSelector"):
            generate_job_selector(obj)
    if crdstate.is_crd(rt):
        obj["status"] = crdstate.established_status(obj)


def generate_job_selector(obj: Obj) -> None:
    """``generateSelector``: job-name and controller-uid labels, selector on the uid."""
    meta = obj["metadata"]
    spec = obj.setdefault("spec", {})
    template = spec.setdefault("template", {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    for key in JOB_NAME_LABELS:
        labels.setdefault(key, meta.get("name", ""))
    for key in CONTROLLER_UID_LABELS:
        labels.setdefault(key, meta.get("uid", ""))
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        selector = spec["selector"] = {}
    match = selector.setdefault("matchLabels", {})
    match.setdefault("batch.kubernetes.io/controller-uid", meta.get("uid", ""))


# -- validation ---------------------------------------------------------------------------


def validate_create(rt: ResourceType, obj: Obj) -> None:
    errors: list[FieldError] = []
    if crdstate.is_crd(rt):
        crdstate.check(obj)
    if is_job(rt):
        errors += _job_spec_errors(obj)
    elif is_api_service(rt):
        errors += api_service_errors(obj)
    elif is_statefulset(rt) or is_replicated(rt):
        errors += statefulset_spec_errors(obj)
    errors += dra.spec_errors(rt, obj)
    _raise(rt, obj, errors)


def validate_update(rt: ResourceType, old: Obj, new: Obj, *, subresource: str | None) -> None:
    """The type's ``ValidateUpdate`` (or ``ValidateStatusUpdate`` for ``/status``)."""
    errors: list[FieldError] = []
    if crdstate.is_crd(rt) and subresource is None:
        crdstate.check(new)
    if is_job(rt):
        if subresource == "status":
            errors += job_status_errors(old, new)
        elif subresource is None:
            errors += _job_spec_errors(new) + job_spec_update_errors(old, new)
    elif dra.is_claim(rt) and subresource is None:
        errors += dra.update_errors(rt, old, new) or dra.spec_errors(rt, new)
    elif is_pod(rt) and subresource is None:
        errors += pod_spec_update_errors(old, new)
    elif is_pod(rt) and subresource == "resize":
        errors += pod_resize_errors(old, new)
    elif is_api_service(rt) and subresource is None:
        errors += api_service_errors(new)
    elif is_replicated(rt) and subresource is None:
        errors += statefulset_spec_errors(new)
        if _normalized((old.get("spec") or {}).get("selector")) != _normalized(
            (new.get("spec") or {}).get("selector")
        ):
            errors.append(FieldError("Invalid value", "spec.selector", "field is immutable",
                                     (new.get("spec") or {}).get("selector")))  # fmt: skip
    elif is_statefulset(rt) and subresource is None:
        errors += statefulset_spec_errors(new)
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if any(
            _normalized(old_spec.get(k)) != _normalized(new_spec.get(k))
            for k in set(old_spec) | set(new_spec)
            if k not in STS_MUTABLE_FIELDS
        ):
            errors.append(FieldError("Forbidden", "spec", STS_UPDATE_FORBIDDEN))
    _raise(rt, new, errors)


def is_api_service(rt: ResourceType) -> bool:
    return rt.group == "apiregistration.k8s.io" and rt.plural == "apiservices"


def api_service_errors(obj: Obj) -> list[FieldError]:
    """kube-aggregator's ValidateAPIService rule on TLS trust (the one this double
    models): skipping verification and naming a CA contradict each other."""
    spec = obj.get("spec") or {}
    if spec.get("insecureSkipTLSVerify") is True and spec.get("caBundle"):
        return [
            FieldError.invalid(
                "spec.insecureSkipTLSVerify", True, "may not be true if caBundle is present"
            )
        ]
    return []


def statefulset_spec_errors(obj: Obj) -> list[FieldError]:
    """``ValidateStatefulSetSpec`` (and the Deployment's, ReplicaSet's): a selector,
    matching the template's labels."""
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        what = str(obj.get("kind") or "statefulset").lower()
        return [FieldError("Invalid value", "spec.selector", f"empty selector is invalid for {what}",
                           GoValue("v1.LabelSelector{}"))]  # fmt: skip
    match = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in match.items()):
        return [FieldError("Invalid value", "spec.template.metadata.labels",
                           "`selector` does not match template `labels`", labels)]  # fmt: skip
    return []


def _raise(rt: ResourceType, obj: Obj, errors: list[FieldError]) -> None:
    if errors:
        name = (obj.get("metadata") or {}).get("name", "")
        raise invalid_errors(kind=rt.kind, group=rt.group, name=name, errors=errors)


def _job_spec_errors(job: Obj) -> list[FieldError]:
    pod_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    policy = pod_spec.get("restartPolicy")
    if policy in ("OnFailure", "Never"):
        return []
    where = "spec.template.spec.restartPolicy"
    if not policy:
        return [FieldError.required(where, 'valid values: "OnFailure", "Never"')]
    return [
        FieldError("Unsupported value", where, 'supported values: "OnFailure", "Never"', policy)
    ]


def _go_struct(type_name: str, value: Any) -> GoValue:
    """A stand-in for Go's ``%#v`` of a struct: its type, then the value as JSON."""
    return GoValue(f"{type_name}{json.dumps(value, separators=(',', ':'), sort_keys=True)}")


def job_spec_update_errors(old: Obj, new: Obj) -> list[FieldError]:
    """``ValidateJobSpecUpdate`` with ``AllowMutableSchedulingDirectives`` from the
    *stored* Job: suspended and never started."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    errors: list[FieldError] = []
    if not _completions_may_change(old_spec, new_spec) and old_spec.get(
        "completions"
    ) != new_spec.get("completions"):
        errors.append(
            FieldError.invalid(
                "spec.completions", new_spec.get("completions"), "field is immutable"
            )
        )
    for key in JOB_IMMUTABLE_FIELDS:
        if old_spec.get(key) != new_spec.get(key):
            value = new_spec.get(key)
            shown = value if not isinstance(value, dict | list) else _go_struct("v1.Obj", value)
            errors.append(FieldError.invalid(f"spec.{key}", shown, "field is immutable"))
    old_template = copy.deepcopy(old_spec.get("template") or {})
    new_template = new_spec.get("template") or {}
    suspended = old_spec.get("suspend") is True
    not_started = not (old.get("status") or {}).get("startTime")
    if suspended and not_started:
        _allow_scheduling_directives(old_template, new_template)
    if _normalized(old_template) != _normalized(new_template):
        errors.append(
            FieldError.invalid(
                "spec.template", _go_struct("core.PodTemplateSpec", new_template),
                "field is immutable",
            )
        )  # fmt: skip
    return errors


def _completions_may_change(old_spec: Obj, new_spec: Obj) -> bool:
    """Elastic Indexed Jobs: completions may follow parallelism."""
    return (
        new_spec.get("completionMode") == "Indexed"
        and old_spec.get("completions") == old_spec.get("parallelism")
        and new_spec.get("completions") == new_spec.get("parallelism")
    )


def _allow_scheduling_directives(old_template: Obj, new_template: Obj) -> None:
    """Copy the mutable scheduling directives of ``new_template`` into ``old_template``."""
    old_meta = old_template.setdefault("metadata", {})
    new_meta = new_template.get("metadata") or {}
    for key in ("labels", "annotations"):
        _copy_key(new_meta, old_meta, key)
    old_pod = old_template.setdefault("spec", {})
    new_pod = new_template.get("spec") or {}
    for key in ("nodeSelector", "tolerations", "schedulingGates"):
        _copy_key(new_pod, old_pod, key)
    new_affinity = new_pod.get("affinity")
    old_affinity = old_pod.get("affinity")
    if not new_affinity and old_affinity:
        rest = {k: v for k, v in old_affinity.items() if k != "nodeAffinity"}
        if rest:
            old_pod["affinity"] = rest
        else:
            old_pod.pop("affinity")
    elif new_affinity and not old_affinity:
        if "nodeAffinity" in new_affinity:
            old_pod["affinity"] = {"nodeAffinity": new_affinity["nodeAffinity"]}
    elif new_affinity and old_affinity:
        merged = {k: v for k, v in old_affinity.items() if k != "nodeAffinity"}
        if "nodeAffinity" in new_affinity:
            merged["nodeAffinity"] = new_affinity["nodeAffinity"]
        old_pod["affinity"] = merged


def _copy_key(source: Obj, target: Obj, key: str) -> None:
    if key in source:
        target[key] = copy.deepcopy(source[key])
    else:
        target.pop(key, None)


def _normalized(value: Any) -> Any:
    """Go's semantic equality treats absent, null and empty maps/lists alike."""
    if isinstance(value, dict):
        out = {k: _normalized(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


# -- Job status ----------------------------------------------------------------------------


def _condition_true(status: Obj, type_: str) -> bool:
    return any(
        isinstance(c, dict) and c.get("type") == type_ and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def job_status_errors(old: Obj, new: Obj) -> list[FieldError]:
    """``ValidateJobUpdateStatus`` with the options 1.32's strategy sets (JobManagedBy
    and JobPodReplacementPolicy are on by default)."""
    spec = new.get("spec") or {}
    status, old_status = new.get("status") or {}, old.get("status") or {}
    errors: list[FieldError] = []
    for i, cond in enumerate(status.get("conditions") or []):
        where = f"status.conditions[{i}]"
        if not isinstance(cond, dict) or not cond.get("type"):
            errors.append(FieldError.required(f"{where}.type"))
        elif cond.get("status") not in ("True", "False", "Unknown"):
            errors.append(
                FieldError(
                    "Unsupported value", f"{where}.status",
                    'supported values: "False", "True", "Unknown"', cond.get("status"),
                )
            )  # fmt: skip
    if errors:
        return errors

    def true(st: Obj, t: str) -> bool:
        return _condition_true(st, t)

    complete, failed = true(status, "Complete"), true(status, "Failed")
    finished = complete or failed
    was_finished = true(old_status, "Complete") or true(old_status, "Failed")
    complete_changed = complete != true(old_status, "Complete")
    failed_changed = failed != true(old_status, "Failed")
    target_changed = true(status, "FailureTarget") != true(old_status, "FailureTarget")
    criteria_changed = true(status, "SuccessCriteriaMet") != true(old_status, "SuccessCriteriaMet")
    start, old_start = status.get("startTime"), old_status.get("startTime")
    end, old_end = status.get("completionTime"), old_status.get("completionTime")
    start_changed = _time(start) != _time(old_start)
    end_changed = _time(end) != _time(old_end)
    active_changed = (status.get("active") or 0) != (old_status.get("active") or 0)
    suspended_zero = spec.get("suspend") is True and spec.get("completions") == 0
    conditions = "status.conditions"

    for type_ in TERMINAL_CONDITIONS:
        if true(old_status, type_) and not true(status, type_):
            errors.append(
                FieldError.invalid(
                    conditions, GoValue('"null"'), f"cannot disable the terminal {type_}=True condition"
                )
            )  # fmt: skip
    for counter in ("failed", "succeeded"):
        if (status.get(counter) or 0) < (old_status.get(counter) or 0):
            indexed = spec.get("completionMode") == "Indexed"
            if (
                counter == "succeeded"
                and indexed
                and spec.get("completions") == spec.get("parallelism")
            ):
                continue
            errors.append(
                FieldError.invalid(
                    f"status.{counter}", status.get(counter) or 0, f"cannot decrease the {counter} counter"
                )
            )  # fmt: skip
    if failed_changed and failed and not true(status, "FailureTarget"):
        errors.append(
            FieldError.invalid(
                conditions, GoValue('"null"'),
                "cannot set Failed=True condition without the FailureTarget=true condition",
            )
        )  # fmt: skip
    if (
        (complete_changed or criteria_changed)
        and complete
        and not true(status, "SuccessCriteriaMet")
    ):
        errors.append(
            FieldError.invalid(
                conditions, GoValue('"null"'),
                "cannot set Complete=True condition without the SuccessCriteriaMet=true condition",
            )
        )  # fmt: skip
    if (finished != was_finished or active_changed) and finished and (status.get("active") or 0):
        errors.append(
            FieldError.invalid("status.active", GoValue('"null"'), "active>0 is invalid for finished job")
        )  # fmt: skip
    if (
        (finished != was_finished or start_changed)
        and not suspended_zero
        and finished
        and not start
    ):
        errors.append(
            FieldError.required("status.startTime", "startTime is required for finished job")
        )
    if start_changed and old_start and spec.get("suspend") is not True:
        errors.append(
            FieldError.required("status.startTime", "startTime cannot be removed for unsuspended job")
        )  # fmt: skip
    start_t, end_t = _time(start), _time(end)
    if (start_changed or end_changed) and start_t and end_t and end_t < start_t:
        errors.append(
            FieldError.invalid("status.completionTime", end, "completionTime cannot be set before startTime")
        )  # fmt: skip
    if end and old_end and end_changed:
        errors.append(
            FieldError.invalid("status.completionTime", end, "completionTime cannot be mutated")
        )
    if (complete_changed or end_changed) and complete and not end:
        errors.append(
            FieldError.required("status.completionTime", "completionTime is required for Complete job")
        )  # fmt: skip
    if (complete_changed or end_changed) and not complete and end:
        errors.append(
            FieldError.invalid(
                "status.completionTime", end, "completionTime cannot be set for a not Complete job"
            )
        )  # fmt: skip
    if (complete_changed or failed_changed) and complete and failed:
        errors.append(
            FieldError.invalid(
                conditions, GoValue('"null"'), "cannot set Complete=True and Failed=true conditions"
            )
        )  # fmt: skip
    if (complete_changed or target_changed) and complete and true(status, "FailureTarget"):
        errors.append(
            FieldError.invalid(
                conditions, GoValue('"null"'),
                "cannot set Complete=True and FailureTarget=true conditions",
            )
        )  # fmt: skip
    return errors


# -- Pod spec updates -----------------------------------------------------------------------


def pod_spec_update_errors(old: Obj, new: Obj) -> list[FieldError]:
    """``ValidatePodUpdate``'s spec rules."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    errors: list[FieldError] = []
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    for tol in old_tolerations:
        if not any(
            {**tol, "tolerationSeconds": None} == {**t, "tolerationSeconds": None}
            for t in new_tolerations
            if isinstance(t, dict)
        ):
            errors.append(
                FieldError.forbidden(
                    "spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"
                )
            )  # fmt: skip
            break
    old_gates = {g.get("name") for g in old_spec.get("schedulingGates") or []}
    for i, gate in enumerate(new_spec.get("schedulingGates") or []):
        if gate.get("name") not in old_gates:
            errors.append(
                FieldError.forbidden(
                    f"spec.schedulingGates[{i}].name",
                    f"only deletion is allowed, but found new scheduling gate '{gate.get('name')}'",
                )
            )
    if _normalized(old_spec) == _normalized(new_spec):
        return errors
    munged = copy.deepcopy(new_spec)
    for key in ("containers", "initContainers"):
        old_list, new_list = old_spec.get(key) or [], munged.get(key) or []
        if len(old_list) == len(new_list):
            for container, before in zip(new_list, old_list, strict=True):
                if isinstance(container, dict) and isinstance(before, dict):
                    _copy_key(before, container, "image")
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        _copy_key(old_spec, munged, key)
    if old_spec.get("schedulingGates"):
        old_selector = old_spec.get("nodeSelector") or {}
        new_selector = munged.get("nodeSelector") or {}
        if any(new_selector.get(k) != v for k, v in old_selector.items()):
            errors.append(
                FieldError.invalid(
                    "spec.nodeSelector", new_selector,
                    "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
                )
            )  # fmt: skip
        _copy_key(old_spec, munged, "nodeSelector")
        _copy_key(old_spec, munged, "affinity")  # node affinity may be narrowed while gated
    if _normalized(munged) != _normalized(old_spec):
        changed = sorted(
            k
            for k in set(munged) | set(old_spec)
            if _normalized(munged.get(k)) != _normalized(old_spec.get(k))
        )
        errors.append(
            FieldError.forbidden(
                "spec", f"{POD_UPDATE_FORBIDDEN}\n  core.PodSpec{{\n  changed: {', '.join(changed)}\n  }}"
            )
        )  # fmt: skip
    return errors


RESIZABLE = ("cpu", "memory")


def _resources_of(spec: Obj) -> list[tuple[str, Any]]:
    out = [
        (f"{key}[{i}]", c.get("resources"))
        for key in ("initContainers", "containers")
        for i, c in enumerate(spec.get(key) or [])
        if isinstance(c, dict)
    ]
    return out + [("resources", spec.get("resources"))]


def _without_resizable(resources: Any) -> Any:
    if not isinstance(resources, dict):
        return resources
    out = dict(resources)
    for kind in ("requests", "limits"):
        if isinstance(out.get(kind), dict):
            out[kind] = {k: v for k, v in out[kind].items() if k not in RESIZABLE}
    return out


def qos_class(spec: Obj) -> str:
    """``qos.GetPodQOS``: Guaranteed, Burstable or BestEffort (by the containers' cpu
    and memory requests and limits)."""
    guaranteed, best_effort = True, True
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            res = c.get("resources") or {} if isinstance(c, dict) else {}
            requests, limits = res.get("requests") or {}, res.get("limits") or {}
            if any(r in requests or r in limits for r in RESIZABLE):
                best_effort = False
            if not all(r in limits and requests.get(r, limits[r]) == limits[r] for r in RESIZABLE):
                guaranteed = False
    return "BestEffort" if best_effort else "Guaranteed" if guaranteed else "Burstable"


def pod_resize_errors(old: Obj, new: Obj) -> list[FieldError]:
    """``ValidatePodResize``: only the cpu and memory requests and limits change, and
    the pod's QoS class stays."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    errors: list[FieldError] = []
    before = dict(_resources_of(old_spec))
    for where, res in _resources_of(new_spec):
        if _normalized(_without_resizable(res)) != _normalized(
            _without_resizable(before.get(where))
        ):
            errors.append(FieldError.forbidden("spec", "only cpu and memory resources are mutable"))
            break
    if qos_class(old_spec) != qos_class(new_spec):
        errors.append(FieldError("Invalid value", "spec", "Pod QOS Class may not change as a "
                                 "result of resizing", qos_class(new_spec)))  # fmt: skip
    return errors
