"""The built-in kinds' strategies: which family's defaulting, create-time preparation
and validation a request to kube-apiserver meets.

kube-apiserver defaults every built-in object when it decodes a request body
(``SetDefaults_*``), adds what the create strategy generates once the object has a uid,
and validates creates and updates (``ValidateUpdate``, or ``ValidateStatusUpdate`` for
``/status``) with the type's strategy.  The write path (:mod:`.operations`,
:mod:`.strategy`) and the test hooks call the four entry points here; the rules
themselves live one module per family:

* :mod:`.jobs` -- batch/v1 Jobs: defaults, the generated selector, spec and status updates;
* :mod:`.pods` -- Pods and every template's pod spec: defaults, spec updates, resize;
* :mod:`.apps` -- Deployments, ReplicaSets and StatefulSets;
* :mod:`.dra` -- resource.k8s.io claims;
* :mod:`.crdstate` -- CustomResourceDefinitions as objects.

Two families of one rule each live here: a new Node's ``not-ready`` taint (the
``TaintNodesByCondition`` admission plugin) and an APIService's TLS trust.  An invalid
object is refused with one 422 ``Status`` listing every field error, as upstream.
"""

from __future__ import annotations

from typing import Any

from admission.apiserver_double import apps, crdstate, dra, jobs, pods

from .errors import FieldError, invalid_errors
from .resources import ResourceType

Obj = dict[str, Any]

NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def apply_defaults(rt: ResourceType, obj: Obj) -> Obj:
    """The built-in defaulting of a decoded object (in place; returns it)."""
    if jobs.is_job(rt):
        jobs.default_job(obj)
    elif apps.is_statefulset(rt):
        apps.default_statefulset(obj)
    elif apps.is_replicated(rt):
        apps.default_replicated(obj)
    elif dra.is_claim(rt):
        dra.apply_defaults(rt, obj)
    elif pods.is_pod(rt):
        pods.default_pod(obj)
    return obj


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
    if jobs.is_job(rt):
        jobs.prepare_create(obj)
    if crdstate.is_crd(rt):
        obj["status"] = crdstate.established_status(obj)


def validate_create(rt: ResourceType, obj: Obj) -> None:
    errors: list[FieldError] = []
    if crdstate.is_crd(rt):
        crdstate.check(obj)
    if jobs.is_job(rt):
        errors += jobs.job_spec_errors(obj)
    elif is_api_service(rt):
        errors += api_service_errors(obj)
    elif apps.is_statefulset(rt) or apps.is_replicated(rt):
        errors += apps.statefulset_spec_errors(obj)
    errors += dra.spec_errors(rt, obj)
    _raise(rt, obj, errors)


def validate_update(rt: ResourceType, old: Obj, new: Obj, *, subresource: str | None) -> None:
    """The type's ``ValidateUpdate`` (or ``ValidateStatusUpdate`` for ``/status``)."""
    errors: list[FieldError] = []
    if crdstate.is_crd(rt) and subresource is None:
        crdstate.check(new)
    if jobs.is_job(rt):
        if subresource == "status":
            errors += jobs.job_status_errors(old, new)
        elif subresource is None:
            errors += jobs.job_spec_errors(new) + jobs.job_spec_update_errors(old, new)
    elif dra.is_claim(rt) and subresource is None:
        errors += dra.update_errors(rt, old, new) or dra.spec_errors(rt, new)
    elif pods.is_pod(rt) and subresource is None:
        errors += pods.pod_spec_update_errors(old, new)
    elif pods.is_pod(rt) and subresource == "resize":
        errors += pods.pod_resize_errors(old, new)
    elif is_api_service(rt) and subresource is None:
        errors += api_service_errors(new)
    elif (apps.is_replicated(rt) or apps.is_statefulset(rt)) and subresource is None:
        errors += apps.update_errors(rt, old, new)
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


def _raise(rt: ResourceType, obj: Obj, errors: list[FieldError]) -> None:
    if errors:
        name = (obj.get("metadata") or {}).get("name", "")
        raise invalid_errors(kind=rt.kind, group=rt.group, name=name, errors=errors)
