"""batch/v1 Job admission, as Kueue's JobWebhook (docs/semantics.md §3.3).

Mutating (CREATE): default LocalQueue ``default``, default WorkloadPriorityClass
``default``, ``spec.suspend=true`` for queue-managed jobs — all skipped when a managed
ancestor up the Job's controller-owner chain admits it (:mod:`.owners`).
Validating (CREATE, UPDATE): queue-name and prebuilt-workload labels, max execution
time, partial admission and completions-equal-parallelism annotations, and the update
rules that keep a running job's queue, priority class and parallelism stable.

The rules every job kind shares are :mod:`.common`'s; this module adds the Job's own
and a fast path for the common shape of a Job.

The TAS pod-template annotations are checked with Kueue's rules
(``queues.api.topology_request``); ``spec.managedBy`` is defaulted for MultiKueue's
queues (:mod:`.managed_by`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from admission.integrations.framework.requests import claim_changes
from admission.integrations.kinds.job import JOB
from queues.api.labels import ELASTIC_JOB as ELASTIC_JOB_ANNOTATION
from queues.api.labels import (
    JOB_COMPLETIONS_EQUAL_PARALLELISM as JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION,
)
from queues.api.labels import JOB_MIN_PARALLELISM as JOB_MIN_PARALLELISM_ANNOTATION
from queues.api.labels import PRIORITY_CLASS as PRIORITY_CLASS_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_LABEL
from queues.api.topology_request import topology_annotation_errors
from webhooks.handlers.common import (
    held_by_kueue,
    mutate_object,
    request_namespace,
    validate_on_create,
    validate_on_update,
)
from webhooks.handlers.dra_warnings import claim_warnings
from webhooks.handlers.managed_by import multikueue_queue
from webhooks.review import (
    DEFAULT_LOCAL_QUEUE,
    DEFAULT_PRIORITY_CLASS,
    AdmissionRequest,
    FieldErrors,
    HandlerContext,
    JsonObj,
    MalformedObject,
    Mutation,
    Verdict,
    allow,
    atoi,
    key_path,
    metadata_of,
    opt_bool,
    opt_int,
    opt_str,
    parse_bool,
    string_map,
)

ANNOTATIONS = "metadata.annotations"
MIN_PARALLELISM_PATH = key_path(ANNOTATIONS, JOB_MIN_PARALLELISM_ANNOTATION)
SYNC_COMPLETIONS_PATH = key_path(ANNOTATIONS, JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
ELASTIC_PATH = key_path(ANNOTATIONS, ELASTIC_JOB_ANNOTATION)


@dataclass(slots=True)
class JobFields:
    """The parts of a Job the rules read, type-checked once."""

    labels: dict[str, str]
    annotations: dict[str, str]
    suspended: bool
    parallelism: int
    completions: int | None
    completion_mode: str | None
    deleting: bool

    @classmethod
    def of(cls, obj: JsonObj) -> JobFields:
        fields = _job_fields_fast(obj)
        return fields if fields is not None else cls._of_checked(obj)

    @classmethod
    def _of_checked(cls, obj: JsonObj) -> JobFields:
        spec = obj.get("spec")
        if spec is None:
            spec = {}
        elif spec.__class__ is not dict:
            raise MalformedObject("spec", "must be an object")
        parallelism = opt_int(spec, "spec", "parallelism")
        return cls(
            labels=string_map(obj, "labels"),
            annotations=string_map(obj, "annotations"),
            suspended=bool(opt_bool(spec, "spec", "suspend")),
            parallelism=1 if parallelism is None else parallelism,
            completions=opt_int(spec, "spec", "completions"),
            completion_mode=opt_str(spec, "spec", "completionMode"),
            deleting=metadata_of(obj).get("deletionTimestamp") is not None,
        )

    @property
    def pods_count(self) -> int:
        if self.completions is not None and self.completions < self.parallelism:
            return self.completions
        return self.parallelism

    @property
    def sync_completions(self) -> bool:
        raw = self.annotations.get(JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
        return raw is not None and parse_bool(raw)[0]

    @property
    def elastic(self) -> bool:
        return self.annotations.get(ELASTIC_JOB_ANNOTATION) == "true"


def _strings_only(values: dict[str, Any]) -> bool:
    for v in values.values():
        if v.__class__ is not str:
            return False
    return True


def _job_fields_fast(obj: JsonObj) -> JobFields | None:
    """:meth:`JobFields.of` for the common shape (metadata and spec are maps, every field
    it reads well-typed), with class checks only; None otherwise, and the checked path
    then names the bad field. Parsed JSON holds exact dicts, strs, ints and bools."""
    meta = obj.get("metadata")
    spec = obj.get("spec")
    if meta.__class__ is not dict or spec.__class__ is not dict:
        return None
    labels = meta.get("labels")
    if labels is None:
        labels = {}
    elif labels.__class__ is not dict or not _strings_only(labels):
        return None
    annotations = meta.get("annotations")
    if annotations is None:
        annotations = {}
    elif annotations.__class__ is not dict or not _strings_only(annotations):
        return None
    parallelism = spec.get("parallelism")
    if parallelism is None:
        parallelism = 1
    elif parallelism.__class__ is not int:
        return None
    completions = spec.get("completions")
    if completions is not None and completions.__class__ is not int:
        return None
    mode = spec.get("completionMode")
    if mode is not None and mode.__class__ is not str:
        return None
    suspend = spec.get("suspend")
    if suspend is not None and suspend.__class__ is not bool:
        return None
    return JobFields(
        labels,
        annotations,
        suspend is True,
        parallelism,
        completions,
        mode,
        meta.get("deletionTimestamp") is not None,
    )


_ABSENT = object()

# The fast path's patches, keyed by which edits it makes and what each edited path holds
# in the original (absent, "", null, false): a handful of entries at most.
_FAST_PATCHES: dict[tuple[Any, ...], list[JsonObj]] = {}


def _mutate_job_fast(req: AdmissionRequest, obj: JsonObj, ctx: HandlerContext) -> Verdict | None:
    """:func:`mutate_job` for the common shape (well-typed fields, a label map, no owner
    references) without the generic :class:`Mutation` diff; the verdict is identical.
    None when the object is not of that shape: the generic path then decides."""
    job = _job_fields_fast(obj)
    if job is None:
        return None
    meta = obj["metadata"]
    if meta.get("labels") is None or meta.get("ownerReferences"):
        return None
    namespace = req.namespace
    if not namespace:
        namespace = meta.get("namespace")
        if namespace is None:
            namespace = ""
        elif namespace.__class__ is not str:
            return None
    view, config = ctx.view, ctx.config
    labels = job.labels
    queue = labels.get(QUEUE_LABEL)
    set_queue = ns_managed = False
    if not queue:  # the namespace matters only to a Job without a queue name
        ns_managed = config.namespace_is_managed(view.namespace_labels(namespace))
        set_queue = bool(ns_managed) and view.local_queue_exists(namespace, DEFAULT_LOCAL_QUEUE)
    set_priority = not labels.get(PRIORITY_CLASS_LABEL) and view.workload_priority_class_exists(
        DEFAULT_PRIORITY_CLASS
    )
    set_suspend = (
        not job.deleting
        and not job.suspended
        and bool(queue or set_queue or (config.manage_jobs_without_queue_name and ns_managed))
    )
    if not (set_queue or set_priority or set_suspend):
        return Verdict(True, [], [])
    if multikueue_queue(view, namespace, queue or (DEFAULT_LOCAL_QUEUE if set_queue else "")):
        return None  # managedBy defaulting: the generic path (.managed_by)
    key = (
        labels.get(QUEUE_LABEL, _ABSENT) if set_queue else None,
        labels.get(PRIORITY_CLASS_LABEL, _ABSENT) if set_priority else None,
        obj["spec"].get("suspend", _ABSENT) if set_suspend else None,
        set_queue,
        set_priority,
        set_suspend,
    )
    patch = _FAST_PATCHES.get(key)
    if patch is None:
        m = Mutation(obj)
        if set_queue:
            m.set_label(QUEUE_LABEL, DEFAULT_LOCAL_QUEUE)
        if set_priority:
            m.set_label(PRIORITY_CLASS_LABEL, DEFAULT_PRIORITY_CLASS)
        if set_suspend:
            m.set(("spec",), "suspend", True)
        patch = _FAST_PATCHES[key] = m.patch()
    return Verdict(True, patch, [])


def mutate_job(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    if req.operation != "CREATE" or req.object is None:
        return allow()
    obj = req.object
    fast = _mutate_job_fast(req, obj, ctx)
    if fast is not None:
        return fast
    JobFields.of(obj)  # a malformed Job is denied naming the field
    return mutate_object(JOB, req, ctx)


def _validate_partial_admission_create(job: JobFields, errs: FieldErrors) -> None:
    raw = job.annotations.get(JOB_MIN_PARALLELISM_ANNOTATION)
    if raw is None:
        return
    value, err = atoi(raw)
    if value is None:
        errs.invalid(MIN_PARALLELISM_PATH, raw, err)
    elif value >= job.pods_count or value <= 0:
        errs.invalid(MIN_PARALLELISM_PATH, value, f"should be between 0 and {job.pods_count - 1}")
    if job.elastic:
        errs.invalid(
            MIN_PARALLELISM_PATH, raw, "partial admission and elastic job cannot be used together"
        )


def _validate_sync_completions_create(job: JobFields, errs: FieldErrors) -> None:
    raw = job.annotations.get(JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
    if raw is None:
        return
    enabled, err = parse_bool(raw)
    if err:
        errs.invalid(SYNC_COMPLETIONS_PATH, raw, err)
    if enabled:
        if job.completion_mode in (None, "NonIndexed"):
            errs.invalid(SYNC_COMPLETIONS_PATH, raw, "should not be enabled for NonIndexed jobs")
        if job.parallelism != (1 if job.completions is None else job.completions):
            errs.invalid(
                "spec.completions",
                job.completions,
                f"should be equal to parallelism when {JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION} is annotation is true",
            )


def _validate_topology_annotations(obj: JsonObj, job: JobFields, errs: FieldErrors) -> None:
    """Kueue's ValidateTASPodSetRequest on the pod template (the shared rules of
    queues.api.topology_request, also applied when the Workload is built)."""
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    meta = template.get("metadata") if isinstance(template, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or not annotations:
        return
    strings = {k: v for k, v in annotations.items() if isinstance(v, str)}
    errs.errors.extend(
        topology_annotation_errors(strings, path="spec.template.metadata", count=job.pods_count)
    )


def validate_job(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    assert req.object is not None
    new = JobFields.of(req.object)
    errs = FieldErrors()
    validate_on_create(new.labels, errs)
    _validate_topology_annotations(req.object, new, errs)
    if req.operation == "CREATE":
        _validate_partial_admission_create(new, errs)
        _validate_sync_completions_create(new, errs)
        ns = request_namespace(req, req.object)
        held = held_by_kueue(new.labels, ns, ctx)
        return errs.verdict(claim_warnings(JOB, req.object, ns, ctx.view) or None if held else None)

    assert req.old_object is not None
    old = JobFields.of(req.old_object)
    if new.annotations.get(JOB_MIN_PARALLELISM_ANNOTATION) != old.annotations.get(
        JOB_MIN_PARALLELISM_ANNOTATION
    ):
        _validate_partial_admission_create(new, errs)
    _validate_sync_completions_create(new, errs)
    validate_on_update(
        old_labels=old.labels,
        new_labels=new.labels,
        old_suspended=old.suspended,
        new_suspended=new.suspended,
        namespace=request_namespace(req, req.object),
        ctx=ctx,
        errs=errs,
    )
    if old.elastic != new.elastic:
        errs.invalid(
            ELASTIC_PATH, new.annotations.get(ELASTIC_JOB_ANNOTATION, ""), "field is immutable"
        )
    if (
        JOB_MIN_PARALLELISM_ANNOTATION in old.annotations
        and not old.suspended
        and old.parallelism != new.parallelism
    ):
        errs.forbidden(
            "spec.parallelism",
            "cannot change when partial admission is enabled and the job is not suspended",
        )
    if (
        old.suspended == new.suspended
        and not new.suspended
        and old.sync_completions != new.sync_completions
    ):
        errs.forbidden(SYNC_COMPLETIONS_PATH, "field is immutable while the job is not suspended")
    if not old.suspended and held_by_kueue(new.labels, request_namespace(req, req.object), ctx):
        # running on its admission: its DRA claims are part of what it was admitted for
        errs.errors.extend(claim_changes(JOB, req.object, req.old_object))
    return errs.verdict()
