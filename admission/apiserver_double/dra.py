"""resource.k8s.io/v1 as kube-apiserver serves it (Kubernetes 1.34+, DRA GA), for the
objects quota reads: DeviceClasses, ResourceClaimTemplates, ResourceClaims and
ResourceSlices.

* **Defaults** (``SetDefaults_ExactDeviceRequest``): an ``exactly`` request without an
  ``allocationMode`` is ``ExactCount``, and an ``ExactCount`` request without a
  ``count`` asks for 1 device; the same for each ``firstAvailable`` subrequest.
* **Validation** (``ValidateResourceClaimSpec``, the parts a client meets first): every
  request has a name and exactly one of ``exactly`` and ``firstAvailable``; an
  ``exactly`` request names its ``deviceClassName``; ``count`` is at least 1 and only
  set with ``ExactCount``; ``allocationMode`` is ``ExactCount`` or ``All``.
* **Updates**: a ResourceClaimTemplate's and a ResourceClaim's ``spec`` are immutable
  (``field is immutable``); a DeviceClass's and a ResourceSlice's are not.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError
from .resources import ResourceType

Obj = dict[str, Any]
GROUP = "resource.k8s.io"
CLAIM_KINDS = ("resourceclaimtemplates", "resourceclaims")
MODES = ("ExactCount", "All")


def is_claim(rt: ResourceType) -> bool:
    return rt.group == GROUP and rt.plural in CLAIM_KINDS


def claim_spec(rt: ResourceType, obj: Obj) -> tuple[str, Any]:
    """(field path, ResourceClaimSpec) of a claim or a template."""
    spec = obj.get("spec")
    if rt.plural == "resourceclaimtemplates":
        inner = spec.get("spec") if isinstance(spec, dict) else None
        return "spec.spec", inner
    return "spec", spec


def _requests(spec: Any) -> list[Any]:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    return requests if isinstance(requests, list) else []


def _default_exact(req: Any) -> None:
    if not isinstance(req, dict):
        return
    req.setdefault("allocationMode", "ExactCount")
    if req["allocationMode"] == "ExactCount":
        req.setdefault("count", 1)


def apply_defaults(rt: ResourceType, obj: Obj) -> None:
    if not is_claim(rt):
        return
    for req in _requests(claim_spec(rt, obj)[1]):
        if not isinstance(req, dict):
            continue
        _default_exact(req.get("exactly"))
        for sub in req.get("firstAvailable") or []:
            _default_exact(sub)


def spec_errors(rt: ResourceType, obj: Obj) -> list[FieldError]:
    if not is_claim(rt):
        return []
    where, spec = claim_spec(rt, obj)
    errors: list[FieldError] = []
    for i, req in enumerate(_requests(spec)):
        rp = f"{where}.devices.requests[{i}]"
        if not isinstance(req, dict):
            errors.append(FieldError("Invalid value", rp, "must be an object", req))
            continue
        if not req.get("name"):
            errors.append(FieldError("Required value", f"{rp}.name", ""))
        exactly, first = req.get("exactly"), req.get("firstAvailable")
        if (exactly is None) == (first is None):
            errors.append(FieldError("Invalid value", rp, "exactly one of `exactly` or "
                                     "`firstAvailable` is required", None))  # fmt: skip
            continue
        for sp, ex in ([(f"{rp}.exactly", exactly)] if exactly is not None else [
            (f"{rp}.firstAvailable[{j}]", s) for j, s in enumerate(first or [])
        ]):  # fmt: skip
            errors += _exact_errors(sp, ex)
    return errors


def _exact_errors(where: str, ex: Any) -> list[FieldError]:
    if not isinstance(ex, dict):
        return [FieldError("Invalid value", where, "must be an object", ex)]
    errors = []
    if not ex.get("deviceClassName"):
        errors.append(FieldError("Required value", f"{where}.deviceClassName", ""))
    mode = ex.get("allocationMode")
    if mode not in MODES:
        errors.append(FieldError("Unsupported value", f"{where}.allocationMode",
                                 'supported values: "All", "ExactCount"', mode))  # fmt: skip
    count = ex.get("count")
    if mode == "ExactCount" and (
        not isinstance(count, int) or isinstance(count, bool) or count < 1
    ):
        errors.append(FieldError("Invalid value", f"{where}.count", "must be greater than zero",
                                 count))  # fmt: skip
    if mode == "All" and count is not None:
        errors.append(FieldError("Invalid value", f"{where}.count",
                                 "must not be specified when allocationMode is 'All'", count))  # fmt: skip
    return errors


def update_errors(rt: ResourceType, old: Obj, new: Obj) -> list[FieldError]:
    if is_claim(rt) and old.get("spec") != new.get("spec"):
        return [FieldError("Invalid value", "spec", "field is immutable", new.get("spec"))]
    return []
