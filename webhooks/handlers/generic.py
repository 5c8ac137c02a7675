"""The job kinds' webhooks, from the integrations registry (Kueue's ``BaseWebhook``).

Every integration of ``admission.integrations.registry`` is served at Kueue's
paths (``/mutate-<group>-<version>-<kind>``, ``/validate-…``). A kind with webhook rules
of its own beyond Kueue's shared ones has its handlers here by framework name (batch/v1
Job: :mod:`.job`, with its fast path; plain pods: :mod:`.pods`); every other kind gets
the shared pair of :mod:`.common` (defaults and suspend; label and update rules plus
the kind's own ``Integration.validate``).

An integration the Configuration does not enable is answered "allowed", unchanged
(Kueue's NoopWebhook), so the shipped webhook configurations never block its objects.
"""

from __future__ import annotations

from admission.integrations.framework.interface import Integration
from admission.integrations.registry import ALL, INTEGRATIONS, Frameworks
from webhooks.handlers import job, pods
from webhooks.handlers.common import mutate_object, validate_object
from webhooks.review import (
    AdmissionRequest,
    Handler,
    HandlerContext,
    Verdict,
    WebhookSpec,
    allow,
)

# framework -> (mutating handler, validating handler) of kinds with rules of their own
OWN_HANDLERS: dict[str, tuple[Handler, Handler]] = {
    "batch/job": (job.mutate_job, job.validate_job),
    "pod": (pods.mutate_pod, pods.validate_pod),
}


def _noop(_req: AdmissionRequest, _ctx: HandlerContext) -> Verdict:
    return allow()


def _shared_pair(integ: Integration) -> tuple[Handler, Handler]:
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
            mutate, validate = OWN_HANDLERS.get(integ.framework) or _shared_pair(integ)
        res = integ.resource
        mutate_path, validate_path = integ.webhook_paths()
        specs.append(
            WebhookSpec(mutate_path, res.group, res.version, res.kind, mutate, mutating=True)
        )
        specs.append(
            WebhookSpec(validate_path, res.group, res.version, res.kind, validate, mutating=False,
                        reads_owners_on=integ.guarded_subresources)
        )  # fmt: skip
    return specs
