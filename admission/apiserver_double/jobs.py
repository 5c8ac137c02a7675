"""batch/v1 Jobs as kube-apiserver defaults and validates them.

* **Defaults** (``SetDefaults_Job``): completions and parallelism, backoffLimit,
  completionMode, suspend, podReplacementPolicy, the Job's labels from its template's,
  and the template's pod spec (:func:`.pods.default_pod_spec`);
* **Create** (``generateSelector``): unless ``manualSelector``, the ``job-name`` and
  ``controller-uid`` template labels and a selector on the uid; an empty status;
* **Spec** (``ValidateJobSpec``, the part a client meets): restartPolicy Never or
  OnFailure;
* **Spec updates** (``ValidateJobUpdate``): ``spec.template`` is immutable, except
  that its ``nodeSelector``, ``tolerations``, labels, annotations and
  ``schedulingGates`` (and node affinity) may change while the *stored* Job is
  suspended and has no ``status.startTime``; selector, completionMode and friends are
  immutable;
* **Status updates** (``ValidateJobUpdateStatus`` with the 1.32 options):
  ``Complete`` needs ``SuccessCriteriaMet``, ``completionTime`` and ``startTime``;
  ``Failed`` needs ``FailureTarget``; terminal conditions cannot be disabled; the
  start time of an unsuspended Job cannot be removed.

Messages copy upstream's field errors, so a client sees the same 422 ``Status``.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any

from .compare import copy_key, normalized
from .errors import FieldError, GoValue
from .pods import default_pod_spec
from .resources import ResourceType

Obj = dict[str, Any]

JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
CONTROLLER_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
TERMINAL_CONDITIONS = ("Failed", "Complete", "FailureTarget")
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


# -- defaulting and create --------------------------------------------------------------


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


def prepare_create(obj: Obj) -> None:
    """What the create strategy adds once ``uid`` is set: an empty status, and the
    generated selector unless the Job asks for ``manualSelector``."""
    obj["status"] = {}
    if not (obj.get("spec") or {}).get("manualSelector"):
        generate_job_selector(obj)


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


# -- spec -------------------------------------------------------------------------------


def job_spec_errors(job: Obj) -> list[FieldError]:
    """``ValidateJobSpec``'s rule on the template's restartPolicy: Never or OnFailure."""
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
    if normalized(old_template) != normalized(new_template):
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
        copy_key(new_meta, old_meta, key)
    old_pod = old_template.setdefault("spec", {})
    new_pod = new_template.get("spec") or {}
    for key in ("nodeSelector", "tolerations", "schedulingGates"):
        copy_key(new_pod, old_pod, key)
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
