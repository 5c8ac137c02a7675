"""batch/v1 Job -> Workload, the way Kueue's job controller builds it.

Users submit Jobs, not Workloads; Kueue's ``batch/job`` integration turns each one
into a Workload that the scheduler queues and admits. Quartermaster must derive the
same Workload (same name, podSet, count, requests, queue and priority) or its plans
and decisions would not line up with Kueue's. Sources: Kueue
pkg/controller/jobframework/workload_names.go (``GetWorkloadNameForOwnerWithGVK``),
pkg/controller/jobs/job/job_controller.go (``PodSets``, ``podsCount``,
``minPodsCount``), pkg/controller/jobframework/reconciler.go (``ExtractPriority``),
pkg/util/priority/priority.go and the Job webhook's min-parallelism validation.

Pure functions on plain dicts: nothing here reads the cluster; the caller passes the
WorkloadPriorityClasses and PriorityClasses it knows.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from queues.labels import JOB_MIN_PARALLELISM as JOB_MIN_PARALLELISM_ANNOTATION
from queues.labels import PRIORITY_CLASS as PRIORITY_CLASS_LABEL
from queues.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.model import PriorityClass, Workload
from queues.pods import PodSpecError, podset_from_template
from queues.quantity import QuantityError
from queues.topology_request import TopologyAnnotationError, topology_request_from_annotations

__all__ = [
    "JOB_MIN_PARALLELISM_ANNOTATION",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "JobError",
    "workload_from_job",
    "workload_name",
]


DEFAULT_POD_SET_NAME = "main"
# Kueue's PodIndexLabel for batch/v1 Jobs (the ungater hands out domains in this order).
JOB_COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"
POD_PRIORITY_CLASS = "PriorityClass"

MAX_WORKLOAD_NAME_LENGTH = 253  # 63 with Kueue's alpha ShortWorkloadNames gate
_HASH_LENGTH = 5
_INT32_MAX = 2**31 - 1

# Namespace for UIDs invented for Jobs that carry none (files, tests), so that the
# derived Workload names stay the same from run to run.
_FAKE_UID_NAMESPACE = uuid.UUID("6f1c1d0e-8a53-4b8e-9a52-7b1f4c0d9e21")

_ATOI_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_RFC3339_RE = re.compile(
    r"(?P<base>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:\.(?P<frac>[0-9]+))?(?P<tz>[Zz]|[+-][0-9]{2}:[0-9]{2})",
    re.ASCII,
)


class JobError(ValueError):
    """A Job cannot be turned into a Workload; the message names the Job and the field."""


def workload_name(
    *, owner_name: str, owner_uid: str, kind: str = "Job", group: str = "batch"
) -> str:
    """Kueue's ``GetWorkloadNameForOwnerWithGVK``.

    ``<lower(kind)>-<owner_name>`` truncated so the whole name fits 253 characters,
    then ``-`` and the first 5 hex digits of sha1("<kind>\\n<group>\\n<name>\\n<uid>")
    (the kind keeps its case in the hash).
    """
    digest = hashlib.sha1(usedforsecurity=False)
    for i, part in enumerate((kind, group, owner_name, owner_uid)):
        if i:
            digest.update(b"\n")
        digest.update(part.encode())
    prefix = f"{kind.lower()}-{owner_name}"
    prefix = prefix[: MAX_WORKLOAD_NAME_LENGTH - 1 - _HASH_LENGTH]
    return f"{prefix}-{digest.hexdigest()[:_HASH_LENGTH]}"


def workload_from_job(
    job: Mapping[str, Any],
    *,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The Workload Kueue's job controller creates for ``job`` (a batch/v1 Job dict).

    One podSet ``main`` with count = min(parallelism, completions), minCount from the
    ``job-min-parallelism`` annotation, per-pod requests from the pod template, queue
    from the ``queue-name`` label, and priority resolved WorkloadPriorityClass label ->
    template ``priorityClassName`` -> globalDefault PriorityClass -> 0.
    Raises ``JobError`` naming the Job and the field on bad input.
    """
    if not isinstance(job, Mapping):
        raise JobError(f"job: expected an object, got {type(job).__name__}")
    metadata = _object(job.get("metadata"), "<unknown>", "metadata")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise JobError(f"job <unknown>: metadata.namespace: expected a string, got {namespace!r}")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise JobError(f"job {namespace}/<unnamed>: metadata.name: required, got {name!r}")
    ref = f"{namespace}/{name}"

    for field, expected in (("kind", "Job"), ("apiVersion", "batch/v1")):
        if field in job and job[field] != expected:
            raise JobError(f"job {ref}: {field}: expected {expected!r}, got {job[field]!r}")

    labels = _string_map(metadata.get("labels"), ref, "metadata.labels")
    annotations = _string_map(metadata.get("annotations"), ref, "metadata.annotations")
    uid = metadata.get("uid")
    if uid is None or uid == "":
        uid = str(uuid.uuid5(_FAKE_UID_NAMESPACE, ref))
    elif not isinstance(uid, str):
        raise JobError(f"job {ref}: metadata.uid: expected a string, got {uid!r}")
    creation_time = _creation_time(metadata.get("creationTimestamp"), ref)

    spec = _object(job.get("spec"), ref, "spec")
    parallelism = _count(spec.get("parallelism"), ref, "spec.parallelism", default=1)
    completions = _count(spec.get("completions"), ref, "spec.completions", default=parallelism)
    count = min(parallelism, completions)
    min_count = _min_count(annotations.get(JOB_MIN_PARALLELISM_ANNOTATION), count, ref)

    if spec.get("template") is None:
        raise JobError(f"job {ref}: spec.template: required")
    template = _object(spec.get("template"), ref, "spec.template")
    pod_spec = _object(template.get("spec"), ref, "spec.template.spec")
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise JobError(
            f"job {ref}: spec.template.spec.containers: at least one container is required"
        )
    try:
        pod_set = podset_from_template(
            name=DEFAULT_POD_SET_NAME, count=count, template=template, min_count=min_count
        )
    except (QuantityError, PodSpecError) as err:
        raise JobError(f"job {ref}: spec.template.spec: {err}") from err
    template_meta = template.get("metadata")
    if isinstance(template_meta, Mapping):
        template_annotations = template_meta.get("annotations")
        if isinstance(template_annotations, Mapping):
            try:
                pod_set.topology = topology_request_from_annotations(
                    _string_map(template_annotations, ref, "spec.template.metadata.annotations"),
                    path="spec.template.metadata",
                    count=count,
                    pod_index_label=JOB_COMPLETION_INDEX_LABEL,
                )
            except TopologyAnnotationError as err:
                raise JobError(f"job {ref}: {err}") from err

    priority_class, kind, priority = workload_priority(
        labels=labels,
        pod_spec=pod_spec,
        ref=ref,
        workload_priority_classes=workload_priority_classes,
        priority_classes=priority_classes,
    )

    return Workload(
        namespace=namespace,
        name=workload_name(owner_name=name, owner_uid=uid),
        pod_sets=[pod_set],
        queue_name=labels.get(QUEUE_NAME_LABEL, ""),
        priority=priority,
        priority_class=priority_class,
        priority_class_kind=kind,
        uid=uid,
        creation_time=creation_time,
        labels=labels,
        annotations=annotations,
    )


# --------------------------------------------------------------------------- helpers


def _object(value: Any, ref: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise JobError(f"job {ref}: {field}: expected an object, got {type(value).__name__}")
    return value


def _string_map(value: Any, ref: str, field: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, val in _object(value, ref, field).items():
        if not isinstance(key, str) or not isinstance(val, str):
            raise JobError(
                f"job {ref}: {field}: keys and values must be strings, got {key!r}: {val!r}"
            )
        out[key] = val
    return out


def _count(value: Any, ref: str, field: str, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
        raise JobError(
            f"job {ref}: {field}: must be an integer between 0 and {_INT32_MAX}, got {value!r}"
        )
    return value


def _min_count(raw: str | None, count: int, ref: str) -> int | None:
    """The Job webhook's rule: an integer with 0 < v < count (strconv.Atoi syntax)."""
    if raw is None:
        return None
    field = f'metadata.annotations["{JOB_MIN_PARALLELISM_ANNOTATION}"]'
    value = int(raw) if _ATOI_RE.fullmatch(raw) else None
    if value is None or not 0 < value < count:
        bounds = (
            f"between 1 and {count - 1}" if count > 1 else "unset: the job has fewer than 2 pods"
        )
        raise JobError(f"job {ref}: {field}: must be {bounds}, got {raw!r}")
    return value


def _creation_time(value: Any, ref: str) -> float:
    field = "metadata.creationTimestamp"
    if value is None:
        return 0.0
    if isinstance(value, datetime):  # YAML loaders turn unquoted timestamps into datetimes
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if not isinstance(value, str):
        raise JobError(f"job {ref}: {field}: expected an RFC 3339 string, got {value!r}")
    match = _RFC3339_RE.fullmatch(value)
    if match is None:
        raise JobError(f"job {ref}: {field}: not an RFC 3339 timestamp: {value!r}")
    tz = match["tz"]
    iso = f"{match['base']}T{match['time']}{'+00:00' if tz in 'Zz' else tz}"
    try:
        whole = datetime.fromisoformat(iso)
    except ValueError as err:
        raise JobError(f"job {ref}: {field}: not a valid timestamp: {value!r} ({err})") from err
    frac = float(f"0.{match['frac']}") if match["frac"] else 0.0
    return whole.timestamp() + frac


def workload_priority(
    *,
    labels: Mapping[str, str],
    pod_spec: Mapping[str, Any],
    ref: str,
    workload_priority_classes: Mapping[str, PriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> tuple[str | None, str | None, int]:
    """Kueue's ``ExtractPriority``: (class name, class kind, priority value)."""
    wpc_name = labels.get(PRIORITY_CLASS_LABEL, "")
    if wpc_name:
        wpc = workload_priority_classes.get(wpc_name)
        if wpc is None:
            raise JobError(
                f'job {ref}: metadata.labels["{PRIORITY_CLASS_LABEL}"]: '
                f"WorkloadPriorityClass {wpc_name!r} not found (WorkloadPriorityClassNotFound)"
            )
        return wpc.name, WORKLOAD_PRIORITY_CLASS, wpc.value

    pc_name = pod_spec.get("priorityClassName") or ""
    if not isinstance(pc_name, str):
        raise JobError(
            f"job {ref}: spec.template.spec.priorityClassName: expected a string, got {pc_name!r}"
        )
    if pc_name:
        pc = priority_classes.get(pc_name)
        if pc is None:
            raise JobError(
                f"job {ref}: spec.template.spec.priorityClassName: PriorityClass {pc_name!r} not found"
            )
        return pc.name, POD_PRIORITY_CLASS, pc.value

    # Several global defaults can exist after a race; Kueue takes the lowest value.
    defaults = [pc for pc in priority_classes.values() if pc.global_default]
    if defaults:
        pc = min(defaults, key=lambda p: (p.value, p.name))
        return pc.name, POD_PRIORITY_CLASS, pc.value
    return None, None, 0
