"""Pods as kube-apiserver defaults and validates them, and the pod spec every workload
kind's template holds.

* **Defaults** (``SetDefaults_PodSpec``, ``SetDefaults_Container``, ``SetDefaults_Pod``):
  restartPolicy, dnsPolicy, terminationGracePeriodSeconds, schedulerName, an empty
  securityContext, each container's imagePullPolicy (by its tag) and termination
  message fields, and a pod's requests copied from its limits where unset.  Jobs,
  Deployments, ReplicaSets and StatefulSets default their templates' specs with
  :func:`default_pod_spec` too.
* **Spec updates** (``ValidatePodUpdate``): only images, activeDeadlineSeconds, added
  tolerations and removed scheduling gates -- and, while the stored pod is
  scheduling-gated, additions to ``nodeSelector`` (and node affinity);
* **Resize** (``ValidatePodResize``, ``pods/resize``): only the cpu and memory requests
  and limits, and the pod's QoS class stays.

Messages copy upstream's field errors, so a client sees the same 422 ``Status``.
"""

from __future__ import annotations

import copy
from typing import Any

from .compare import copy_key, normalized
from .errors import FieldError
from .resources import ResourceType

Obj = dict[str, Any]

POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def is_pod(rt: ResourceType) -> bool:
    return rt.group == "" and rt.plural == "pods"


# -- defaulting -------------------------------------------------------------------------


def default_pod(obj: Obj) -> None:
    """A Pod's defaults: its spec's, and each container's requests from its limits."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        default_pod_spec(spec)
        for container in spec.get("containers") or []:
            if isinstance(container, dict):
                _copy_limits_to_requests(container)


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
    if normalized(old_spec) == normalized(new_spec):
        return errors
    munged = copy.deepcopy(new_spec)
    for key in ("containers", "initContainers"):
        old_list, new_list = old_spec.get(key) or [], munged.get(key) or []
        if len(old_list) == len(new_list):
            for container, before in zip(new_list, old_list, strict=True):
                if isinstance(container, dict) and isinstance(before, dict):
                    copy_key(before, container, "image")
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        copy_key(old_spec, munged, key)
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
        copy_key(old_spec, munged, "nodeSelector")
        copy_key(old_spec, munged, "affinity")  # node affinity may be narrowed while gated
    if normalized(munged) != normalized(old_spec):
        changed = sorted(
            k
            for k in set(munged) | set(old_spec)
            if normalized(munged.get(k)) != normalized(old_spec.get(k))
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
        if normalized(_without_resizable(res)) != normalized(_without_resizable(before.get(where))):
            errors.append(FieldError.forbidden("spec", "only cpu and memory resources are mutable"))
            break
    if qos_class(old_spec) != qos_class(new_spec):
        errors.append(FieldError("Invalid value", "spec", "Pod QOS Class may not change as a "
                                 "result of resizing", qos_class(new_spec)))  # fmt: skip
    return errors
