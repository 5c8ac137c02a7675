"""In-place pod resize (``pods/resize``, Kubernetes 1.33+) of a pod that runs on quota.

A Workload is admitted for what its pods ask when they are made (requests, limits
standing in for missing ones); ``pods/resize`` changes a running pod's containers'
requests and limits without recreating it, so without a guard a tenant could raise a
running pod's cpu and memory after admission and run on more than the queue holds.
Kueue does not handle resize (kubernetes-sigs/kueue#5257 is open; its suggestion for
now is to keep ``pods/resize`` from batch users by RBAC). Here the pod validating
webhook is registered for the subresource too (the pod integration's
``guarded_subresources``), for every pod outside the system namespaces, and refuses,
on a pod the service holds quota for, any container's request or limit that grows:

* held pods: those the pod webhook managed (labelled ``kueue.x-k8s.io/managed`` or
  holding its finalizer, naming a pod group, or a queue in a managed namespace) and those with a managed ancestor up their controller
  owner chain (a Job's, a JobSet's Jobs', a RayCluster's pods): every kind of the
  registry, by the same owner walk the other webhooks use;
* what counts: per container (init containers and sidecars too) and for the pod-level
  ``spec.resources``, each resource's request (its limit when it has none: what the
  Workload counts) and its limit, compared with the pod before the resize. A lowered
  value is allowed — it stays within what was admitted, and the Workload keeps its
  quota until the pod ends, as Kueue keeps it — but cannot be raised again in place:
  the pod before the resize is all the webhook can trust (a pod's labels, which could
  point it at a larger podSet, are the tenant's to edit). A pod that needs more is
  recreated by its controller from its template, which is admitted as a whole.

Other pods' resizes are allowed unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

from admission.integrations.ownership import OwnershipError
from queues.api.labels import MANAGED as MANAGED_LABEL
from queues.api.labels import POD_GROUP_NAME as GROUP_NAME_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_LABEL
from queues.quantity import QuantityError, parse_quantity
from webhooks.handlers.common import request_namespace
from webhooks.handlers.owners import has_managed_ancestor
from webhooks.review import (
    AdmissionRequest,
    FieldErrors,
    HandlerContext,
    JsonObj,
    Verdict,
    allow,
    deny,
    get_map,
    go_value,
    metadata_of,
    string_map,
)

RESIZE = "resize"


def held_by_the_service(pod: JsonObj, namespace: str, ctx: HandlerContext) -> bool:
    """Whether a Workload holds (or will hold) quota for ``pod``: one the pod webhook
    managed (its managed label or finalizer, a pod group's name, or a queue name in a
    managed namespace: the labels a running pod keeps), or one a managed ancestor admits
    (raises OwnershipError)."""
    labels = string_map(pod, "labels")
    if labels.get(MANAGED_LABEL) or labels.get(GROUP_NAME_LABEL):
        return True
    if MANAGED_LABEL in (metadata_of(pod).get("finalizers") or []):
        return True
    if labels.get(QUEUE_LABEL) and ctx.config.namespace_is_managed(
        ctx.view.namespace_labels(namespace)
    ):
        return True
    return has_managed_ancestor(pod, ctx)


def _resource_lists(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, ``resources``) of each container, init container and the pod."""
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for i, c in enumerate(containers if isinstance(containers, list) else ()):
            res = c.get("resources") if isinstance(c, Mapping) else None
            yield f"spec.{key}[{i}].resources", res if isinstance(res, Mapping) else {}
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping):
        yield "spec.resources", pod_level


def _amounts(resources: Mapping[str, Any]) -> dict[tuple[str, str], tuple[str, Any]]:
    """(``requests``/``limits``, resource) -> (the field it is read from, its quantity):
    a request missing where a limit is set is the limit (what a Workload counts)."""
    out: dict[tuple[str, str], tuple[str, Any]] = {}
    for kind in ("limits", "requests"):
        values = resources.get(kind)
        for name, qty in (values if isinstance(values, Mapping) else {}).items():
            out[(kind, str(name))] = (f"{kind}[{name}]", qty)
    for (kind, name), found in list(out.items()):
        if kind == "limits" and ("requests", name) not in out:
            out[("requests", name)] = found
    return out


def _quantity(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError, ValueError):
        return None


def growth(new: JsonObj, old: JsonObj) -> list[tuple[str, Any, Any]]:
    """(field, value before, value after) of each request or limit ``new`` raises over
    ``old``: a request set where there was none (nor a limit to stand in), any value
    raised, a limit removed (the container is then unbounded), or a value that cannot
    be read where it changed. A limit set where there was none is not more."""
    before = {path: _amounts(res) for path, res in _resource_lists(get_map(old, "", "spec"))}
    out: list[tuple[str, Any, Any]] = []
    for path, res in _resource_lists(get_map(new, "", "spec")):
        was, now = before.get(path, {}), _amounts(res)
        for key, (field, qty) in sorted(now.items()):
            prev = was.get(key)
            b = _quantity(qty)
            if prev is None:
                if key[0] == "requests" and b != 0:
                    out.append((f"{path}.{field}", None, qty))
                continue
            a = _quantity(prev[1])
            if (
                (a is None or b is None)
                and prev[1] != qty
                or (a is not None and b is not None and b > a)
            ):
                out.append((f"{path}.{field}", prev[1], qty))
        for key, (field, qty) in sorted(was.items()):
            if key[0] == "limits" and key not in now:
                out.append((f"{path}.{field}", qty, None))
    return out


def validate_pod_resize(req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    """``pods/resize``: a held pod's requests and limits may be lowered, not raised."""
    new, old = req.object, req.old_object
    if req.operation != "UPDATE" or new is None or old is None:
        return allow()
    namespace = request_namespace(req, new)
    try:
        if not held_by_the_service(old, namespace, ctx):
            return allow()
    except OwnershipError as err:
        return deny(str(err), code=500, reason="InternalError")
    ref = f"{namespace}/{metadata_of(new).get('name') or req.name}"
    errs = FieldErrors()
    for field, was, now in growth(new, old):
        errs.forbidden(
            field,
            f"pod {ref} runs on the quota its Workload was admitted with: a resize may "
            f"lower its requests and limits, not raise them (was {go_value(was)}, "
            f"asked {go_value(now)}); recreate the pod from its controller's template "
            "to run it larger",
        )
    return errs.verdict()
