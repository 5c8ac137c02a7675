"""The webhook rules every job kind shares (Kueue's jobframework ``BaseWebhook``).

Mutating (CREATE): unless a managed ancestor up the controller-owner chain admits the
object (:mod:`.owners`), default the LocalQueue ``default`` and the
WorkloadPriorityClass ``default``, and suspend an object Kueue holds at the kind's
``suspend`` field; a queued pod owner's update carries its queue and priority class to
its templates. Validating (CREATE, UPDATE): the queue-name, prebuilt-workload and
max-execution-time labels, the update rules that keep a running object's queue and
priority class stable, and the kind's own rules (``Integration.validate``).

The batch/v1 Job (:mod:`.job`) and plain pods (:mod:`.pods`) apply these rules inside
handlers of their own; every other kind is served by :func:`mutate_object` and
:func:`validate_object` (:mod:`.generic`).
"""

from __future__ import annotations

from admission.integrations.framework.interface import Integration
from admission.integrations.framework.requests import claim_changes
from admission.integrations.kinds.admitted_by_pods import PodOwnerIntegration, UpdateCheck
from admission.integrations.ownership import OwnershipError
from queues.api.labels import MAX_EXEC_TIME as MAX_EXEC_TIME_LABEL
from queues.api.labels import MULTIKUEUE_CONTROLLER, MULTIKUEUE_ORIGIN
from queues.api.labels import PREBUILT_WORKLOAD as PREBUILT_WORKLOAD_LABEL
from queues.api.labels import PRIORITY_CLASS as PRIORITY_CLASS_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_LABEL
from webhooks.handlers.dra_warnings import claim_warnings
from webhooks.handlers.managed_by import managed_by_default
from webhooks.handlers.owners import has_managed_ancestor
from webhooks.review import (
    DEFAULT_LOCAL_QUEUE,
    DEFAULT_PRIORITY_CLASS,
    AdmissionRequest,
    FieldErrors,
    HandlerContext,
    JsonObj,
    Mutation,
    Verdict,
    allow,
    atoi,
    deny,
    dns1123_subdomain_errors,
    go_value,
    key_path,
    metadata_of,
    opt_str,
    string_map,
)

LABELS = "metadata.labels"
QUEUE_PATH = key_path(LABELS, QUEUE_LABEL)
PRIORITY_CLASS_PATH = key_path(LABELS, PRIORITY_CLASS_LABEL)
MAX_EXEC_TIME_PATH = key_path(LABELS, MAX_EXEC_TIME_LABEL)
PREBUILT_PATH = key_path(LABELS, PREBUILT_WORKLOAD_LABEL)


def request_namespace(req: AdmissionRequest, obj: JsonObj) -> str:
    """The object's namespace (the request's, else ``metadata.namespace``)."""
    return req.namespace or opt_str(metadata_of(obj), "metadata", "namespace") or ""


def apply_queue_defaults(
    m: Mutation, *, namespace: str, ctx: HandlerContext, default_queue: bool
) -> None:
    """ApplyDefaultLocalQueue + ApplyDefaultWorkloadPriorityClass on ``m``."""
    labels = m.labels()
    if (
        default_queue
        and not labels.get(QUEUE_LABEL)
        and ctx.view.local_queue_exists(namespace, DEFAULT_LOCAL_QUEUE)
    ):
        m.set_label(QUEUE_LABEL, DEFAULT_LOCAL_QUEUE)
    if not labels.get(PRIORITY_CLASS_LABEL) and ctx.view.workload_priority_class_exists(
        DEFAULT_PRIORITY_CLASS
    ):
        m.set_label(PRIORITY_CLASS_LABEL, DEFAULT_PRIORITY_CLASS)


def validate_label_as_name(labels: dict[str, str], key: str, errs: FieldErrors) -> None:
    """ValidateLabelAsCRDName: the label, when present, is a DNS-1123 subdomain."""
    value = labels.get(key)
    if value is not None:
        problems = dns1123_subdomain_errors(value)
        if problems:
            errs.invalid(key_path(LABELS, key), value, ",".join(problems))


def validate_on_create(labels: dict[str, str], errs: FieldErrors) -> None:
    """ValidateJobOnCreate: queue name, prebuilt workload name, max execution time."""
    validate_label_as_name(labels, QUEUE_LABEL, errs)
    validate_label_as_name(labels, PREBUILT_WORKLOAD_LABEL, errs)
    raw = labels.get(MAX_EXEC_TIME_LABEL)
    if raw is not None:
        value, err = atoi(raw)
        if value is None:
            errs.invalid(MAX_EXEC_TIME_PATH, raw, err)
        elif value <= 0:
            errs.invalid(MAX_EXEC_TIME_PATH, value, "should be greater than 0")


def validate_on_update(
    *,
    old_labels: dict[str, str],
    new_labels: dict[str, str],
    old_suspended: bool,
    new_suspended: bool,
    namespace: str,
    ctx: HandlerContext,
    errs: FieldErrors,
) -> None:
    """ValidateJobOnUpdate: queue name, prebuilt workload, max exec time, priority class."""
    old_q, new_q = old_labels.get(QUEUE_LABEL, ""), new_labels.get(QUEUE_LABEL, "")
    if not new_suspended and new_q != old_q:
        errs.immutable(QUEUE_PATH, new_q)
    if not new_q and old_q and ctx.view.local_queue_exists(namespace, DEFAULT_LOCAL_QUEUE):
        errs.invalid(QUEUE_PATH, "", "queue-name must not be empty in namespace with default queue")

    if new_suspended:
        pass  # validate_on_create already checked the new prebuilt name
    else:
        old_p, new_p = (
            old_labels.get(PREBUILT_WORKLOAD_LABEL, ""),
            new_labels.get(PREBUILT_WORKLOAD_LABEL, ""),
        )
        if new_p != old_p:
            errs.immutable(PREBUILT_PATH, new_p)

    if not new_suspended or not old_suspended:
        old_t, new_t = (
            old_labels.get(MAX_EXEC_TIME_LABEL, ""),
            new_labels.get(MAX_EXEC_TIME_LABEL, ""),
        )
        if new_t != old_t:
            errs.immutable(MAX_EXEC_TIME_PATH, new_t)

    old_pc, new_pc = (
        old_labels.get(PRIORITY_CLASS_LABEL, ""),
        new_labels.get(PRIORITY_CLASS_LABEL, ""),
    )
    if not new_suspended and not old_pc and new_pc:
        errs.invalid(
            PRIORITY_CLASS_PATH,
            new_pc,
            "WorkloadPriorityClass cannot be added to a non-suspended workload",
        )
    elif not new_pc and old_pc:
        errs.invalid(
            PRIORITY_CLASS_PATH, new_pc, "WorkloadPriorityClass cannot be removed from a workload"
        )
    elif not new_suspended and not old_suspended and old_pc != new_pc:
        # changing it on a running job would take effect silently at its next requeue
        errs.immutable(PRIORITY_CLASS_PATH, new_pc)


def mutate_object(integ: Integration, req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    """``BaseWebhook.Default`` for any job kind: queue and priority defaults, then
    suspend at the kind's ``suspend`` field — skipped when a managed ancestor admits
    the object (Kueue's ``WorkloadShouldBeSuspended``: a JobSet's Jobs, a TrainJob's
    JobSet)."""
    if req.object is None:
        return allow()
    if req.operation == "UPDATE" and isinstance(integ, PodOwnerIntegration):
        return _mutate_owner_update(integ, req, ctx)
    if req.operation != "CREATE":
        return allow()
    obj = req.object
    if integ.skip(obj):
        return allow()
    left = _left_to_ancestor(obj, ctx)
    if left is not None:
        return left
    namespace = request_namespace(req, obj)
    ns_managed = ctx.config.namespace_is_managed(ctx.view.namespace_labels(namespace))
    m = Mutation(obj)
    apply_queue_defaults(m, namespace=namespace, ctx=ctx, default_queue=ns_managed)
    deleting = metadata_of(obj).get("deletionTimestamp") is not None
    if not deleting and held_by_kueue(m.labels(), namespace, ctx):
        for path, key, value in integ.suspend_edits(obj, m.labels()):
            m.set(path, key, value)
        queue = m.labels().get(QUEUE_LABEL) or ""
        where = managed_by_default(integ.lower_kind, obj, ctx.view, namespace, queue)
        if where is not None:
            m.set(where, "managedBy", MULTIKUEUE_CONTROLLER)
    return allow(m.patch())


def _left_to_ancestor(obj: JsonObj, ctx: HandlerContext) -> Verdict | None:
    """ "Allowed" unchanged when a managed ancestor admits ``obj``; a refusal when its
    owner chain cannot be decided; None: the object is its own."""
    try:
        return allow() if has_managed_ancestor(obj, ctx) else None
    except OwnershipError as err:
        return deny(str(err), code=500, reason="InternalError")


def held_by_kueue(labels: dict[str, str], namespace: str, ctx: HandlerContext) -> bool:
    """An object Kueue holds: it names a queue, or (``manageJobsWithoutQueueName``) it
    is in a managed namespace."""
    if labels.get(QUEUE_LABEL):
        return True
    return ctx.config.manage_jobs_without_queue_name and ctx.config.namespace_is_managed(
        ctx.view.namespace_labels(namespace)
    )


def _mutate_owner_update(
    integ: PodOwnerIntegration, req: AdmissionRequest, ctx: HandlerContext
) -> Verdict:
    """A queued pod owner's update: its templates follow its queue and priority class
    (``PodOwnerIntegration.update_edits``); no defaults are applied to an update."""
    obj, old = req.object, req.old_object
    if obj is None or old is None or metadata_of(obj).get("deletionTimestamp") is not None:
        return allow()
    m = Mutation(obj)
    if not held_by_kueue(m.labels(), request_namespace(req, obj), ctx):
        return allow()
    left = _left_to_ancestor(obj, ctx)
    if left is not None:
        return left
    for path, key, value in integ.update_edits(obj, old, m.labels()):
        m.set(path, key, value)
    return allow(m.patch())


def _multikueue_copy_of_own_group(integ: Integration, obj: JsonObj, labels: dict[str, str]) -> bool:
    """A StatefulSet that a MultiKueue manager copied to this worker: labelled
    ``multikueue-origin`` and naming its own pod group's Workload, which the manager
    created here (Kueue's StatefulSet adapter labels its copy so; its webhook does not
    refuse the label)."""
    return MULTIKUEUE_ORIGIN in labels and labels.get(PREBUILT_WORKLOAD_LABEL) == (
        integ.workload_name(obj)
    )


def validate_object(integ: Integration, req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    """``BaseWebhook.ValidateCreate/ValidateUpdate`` plus the kind's own rules."""
    assert req.object is not None
    new = req.object
    labels = string_map(new, "labels")
    errs = FieldErrors()
    validate_on_create(labels, errs)
    if (
        integ.reconciler == "parent"
        and PREBUILT_WORKLOAD_LABEL in labels
        and not _multikueue_copy_of_own_group(integ, new, labels)
    ):
        # admitted through its pods' groups: there is no one Workload to name (Kueue)
        errs.forbidden(PREBUILT_PATH, f"Is not supported for {go_value(integ.resource.gvk)}")
    old = req.old_object if req.operation == "UPDATE" else None
    if old is not None and isinstance(integ, PodOwnerIntegration):
        managed = held_by_kueue(labels, request_namespace(req, new), ctx)
        workloads = ctx.view.workloads

        def holds_quota(key: str) -> bool | None:
            wl = workloads.get(key)
            return None if wl is None else wl.admission is not None

        errs.errors.extend(integ.update_errors(new, old, UpdateCheck(managed, holds_quota)))
    elif old is not None:
        validate_on_update(
            old_labels=string_map(old, "labels"),
            new_labels=labels,
            old_suspended=integ.is_suspended(old),
            new_suspended=integ.is_suspended(new),
            namespace=request_namespace(req, new),
            ctx=ctx,
            errs=errs,
        )
        if not integ.is_suspended(old) and held_by_kueue(labels, request_namespace(req, new), ctx):
            errs.errors.extend(claim_changes(integ, new, old))  # running: DRA devices fixed
    errs.errors.extend(integ.validate(new, old))
    warnings = None
    if held_by_kueue(labels, request_namespace(req, new), ctx):
        warnings = claim_warnings(integ, new, request_namespace(req, new), ctx.view) or None
    return errs.verdict(warnings)
