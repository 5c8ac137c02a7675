"""The job kinds' webhooks, from the integrations registry (Kueue's ``BaseWebhook``).

Every integration of ``admission.integrations.framework.registry`` is served at Kueue's paths
(``/mutate-<group>-<version>-<kind>``, ``/validate-…``). A kind with webhook rules of
its own beyond Kueue's generic ones has its handlers here by framework name
(batch/v1 Job: :mod:`.jobs`, with its fast path; plain pods: :mod:`.pods`); every other
kind gets the generic pair:

* mutating (CREATE): unless a managed ancestor up the controller-owner chain admits the
  object (:mod:`.owners`),
  default the LocalQueue ``default`` and the WorkloadPriorityClass ``default``, and
  suspend (at the kind's ``suspend`` field) an object that names a queue (or any
  object, with ``manageJobsWithoutQueueName``, in a managed namespace);
* validating (CREATE, UPDATE): the queue-name, prebuilt-workload and max-execution-time
  labels, the update rules that keep a running object's queue and priority class
  stable (:func:`.jobs.validate_on_update`), and the kind's own rules
  (``Integration.validate``: podSet count and names …).

An integration the Configuration does not enable is answered "allowed", unchanged
(Kueue's NoopWebhook), so the shipped webhook configurations never block its objects.
"""

from __future__ import annotations

from admission.integrations.framework.interface import Integration
from admission.integrations.framework.registry import ALL, INTEGRATIONS, Frameworks
from admission.integrations.kinds.admitted_by_pods import PodOwnerIntegration, UpdateCheck
from queues.api.labels import PREBUILT_WORKLOAD as PREBUILT_WORKLOAD_LABEL
from webhooks.handlers import job as jobs
from webhooks.handlers import pods
from webhooks.handlers.job import (
    held_by_kueue,
    mutate_object,
    request_namespace,
    validate_on_create,
    validate_on_update,
)
from webhooks.review import (
    AdmissionRequest,
    FieldErrors,
    Handler,
    HandlerContext,
    Verdict,
    WebhookSpec,
    allow,
    go_value,
    string_map,
)

# framework -> (mutating handler, validating handler) of kinds with rules of their own
CUSTOM: dict[str, tuple[Handler, Handler]] = {
    "batch/job": (jobs.mutate_job, jobs.validate_job),
    "pod": (pods.mutate_pod, pods.validate_pod),
}


def validate_object(integ: Integration, req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    """``BaseWebhook.ValidateCreate/ValidateUpdate`` plus the kind's own rules."""
    assert req.object is not None
    new = req.object
    labels = string_map(new, "labels")
    errs = FieldErrors()
    validate_on_create(labels, errs)
    if integ.reconciler == "parent" and PREBUILT_WORKLOAD_LABEL in labels:
        # admitted through its pods' groups: there is no one Workload to name (Kueue)
        gvk = f"{integ.api_version}, Kind={integ.kind}"
        errs.forbidden(jobs.PREBUILT_PATH, f"Is not supported for {go_value(gvk)}")
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
    errs.errors.extend(integ.validate(new, old))
    return errs.verdict()


def _noop(_req: AdmissionRequest, _ctx: HandlerContext) -> Verdict:
    return allow()


def _generic(integ: Integration) -> tuple[Handler, Handler]:
    def mutate(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
        return mutate_object(integ, req, ctx)

    def validate(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
        return validate_object(integ, req, ctx)

    return mutate, validate


def integration_webhooks(frameworks: Frameworks = ALL) -> list[WebhookSpec]:
    """Two webhooks per registered integration; no-ops for the disabled ones."""
    specs: list[WebhookSpec] = []
    for integ in INTEGRATIONS:
        mutate: Handler
        validate: Handler
        if not frameworks.is_enabled(integ):
            mutate, validate = _noop, _noop
        else:
            mutate, validate = CUSTOM.get(integ.framework) or _generic(integ)
        r = integ.resource
        mutate_path, validate_path = integ.webhook_paths()
        specs.append(WebhookSpec(mutate_path, r.group, r.version, r.kind, mutate, mutating=True))
        specs.append(
            WebhookSpec(validate_path, r.group, r.version, r.kind, validate, mutating=False)
        )
    return specs
