"""Dynamic Resource Allocation: the devices a podSet's ResourceClaims ask for, as quota.

A pod asks for a GPU through DRA (``resource.k8s.io/v1``) with a ``resourceClaims``
entry naming a ResourceClaimTemplate, not with ``nvidia.com/gpu``. Kueue charges those
devices to a quota resource the Configuration names (``resources.deviceClassMappings``:
DeviceClass names -> a resource such as ``example.com/gpu``), per pod, times the
podSet's count. This module is that arithmetic, mirroring Kueue's pkg/dra
(``countDevicesPerClass``, ``GetResourceRequestsForResourceClaimTemplates``,
``ResolveExtendedResourceQuota``, ``GetCounterResourcesForWorkload``) and
pkg/workload ``totalRequestsFromPodSets``:

* every request of a claim's ``spec.devices.requests`` must use ``exactly``; it counts
  ``count`` devices (default 1) of its ``deviceClassName``; ``adminAccess`` requests
  count nothing; ``allocationMode: All`` and ``firstAvailable`` are not supported and
  make the workload inadmissible (Kueue's messages);
* a podSet's pods each get a claim per ``resourceClaims`` entry: the devices count per
  pod, times the podSet's count; several containers sharing one pod claim count it once;
* a pod that names a ResourceClaim (``resourceClaimName``, a claim shared by pods) is
  inadmissible, as in Kueue ("does not support use of resource claims");
* a class whose mapping has counter ``sources`` (partitionable devices, MIG) charges the
  largest matching device's ``consumesCounters`` value for the counter times ``count``,
  read from the driver's complete ResourceSlice pools (:mod:`queues.dra_counters`);
* an extended resource (``nvidia.com/gpu: 1``) that a DeviceClass serves
  (``spec.extendedResourceName``) is counted once, under the class's mapped name when it
  has one, else under its own name; the claim the scheduler creates for it is never in
  the pod spec, so it is not counted again.

Beyond Kueue, so that nothing is silently charged zero: a claim whose DeviceClass does
not exist is inadmissible too (Kueue charges it, and the pods never schedule). Every
error names the podSet, the claim and the class; the workload waits (``Misconfigured``)
and is looked at again when a DeviceClass, template or claim changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from queues.dra_counters import CounterSource, Slice, all_devices, counter_charge
from queues.model import PodSet, Workload
from queues.quantity import to_units
from queues.transformations import ResourceTransformer

__all__ = [
    "CounterSource",
    "DeviceClass",
    "DeviceClassMapping",
    "DraAccounting",
    "DraCatalog",
    "DraError",
    "claim_device_counts",
    "mapping_errors",
]

EXACT_COUNT = "ExactCount"
ALL = "All"
SelectorMatch = Callable[[str, Mapping[str, Any], str], bool]
"""``(CEL expression, ResourceSlice device, driver) -> matches`` (DRA's CEL environment)."""


class DraError(ValueError):
    """A claim that cannot be counted; the message names the field and the objects."""


@dataclass(frozen=True, slots=True)
class DeviceClassMapping:
    """One ``resources.deviceClassMappings`` entry (Kueue's ``DeviceClassMapping``)."""

    name: str
    device_class_names: tuple[str, ...]
    counters: tuple[CounterSource, ...] = ()


def mapping_errors(mappings: Sequence[DeviceClassMapping]) -> list[str]:
    """Kueue's ``validateDeviceClassMappings``: a resource name used twice, a class named
    twice in one mapping, or one class mapped to two resources (unless both map it with
    counters of different names) is a configuration error."""
    path = "resources.deviceClassMappings"
    errors: list[str] = []
    if len(mappings) > 16:
        errors.append(f"{path}: Too many: {len(mappings)}: must have at most 16 items")
    seen_names: set[str] = set()
    owner: dict[str, str] = {}
    counters_of: dict[str, set[str]] = {}
    for i, m in enumerate(mappings):
        mp = f"{path}[{i}]"
        if m.name in seen_names:
            errors.append(f'{mp}.name: Duplicate value: "{m.name}"')
        seen_names.add(m.name)
        if not m.device_class_names:
            errors.append(
                f"{mp}.deviceClassNames: Required value: at least one device class name is required"
            )
        if len(m.device_class_names) > 8:
            errors.append(
                f"{mp}.deviceClassNames: Too many: {len(m.device_class_names)}: must have at most 8 items"
            )
        counter = m.counters[0].name if m.counters else ""
        in_mapping: set[str] = set()
        for j, dc in enumerate(m.device_class_names):
            dp = f"{mp}.deviceClassNames[{j}]"
            if dc in in_mapping:
                errors.append(f'{dp}: Duplicate value: "{dc}"')
                continue
            in_mapping.add(dc)
            existing = owner.get(dc)
            if existing is None:
                owner[dc] = m.name
                counters_of[dc] = {counter} if counter else set()
            elif existing != m.name:
                have = counters_of[dc]
                if not counter or not have:
                    errors.append(
                        f'{dp}: Invalid value: "{dc}": device class already mapped to resource {existing}'
                    )
                elif counter in have:
                    errors.append(
                        f'{dp}: Invalid value: "{dc}": device class already has a counter '
                        f'source for counter "{counter}"'
                    )
                else:
                    have.add(counter)
    return errors


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """What quota reads of a DeviceClass: its CEL selectors and the extended resource it
    serves (``spec.extendedResourceName``), with its creation time (the scheduler picks
    the newest class when two serve one name; ties go to the name sorted first)."""

    name: str
    selectors: tuple[str, ...] = ()
    extended_resource_name: str | None = None
    created: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> DeviceClass:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        return cls(
            name=str(meta.get("name") or ""),
            selectors=_cel_selectors(spec.get("selectors"), "spec.selectors"),
            extended_resource_name=spec.get("extendedResourceName") or None,
            created=str(meta.get("creationTimestamp") or ""),
        )


def _cel_selectors(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DraError(f"{where}: expected a list")
    out = []
    for i, sel in enumerate(raw):
        cel = (sel or {}).get("cel") if isinstance(sel, Mapping) else None
        expr = cel.get("expression") if isinstance(cel, Mapping) else None
        if isinstance(expr, str) and expr:
            out.append(expr)
        elif not isinstance(sel, Mapping) or "cel" in sel:
            raise DraError(f"{where}[{i}].cel.expression: Required value")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """One ``exactly`` device request that counts toward quota."""

    index: int
    device_class: str
    count: int
    selectors: tuple[str, ...] = ()


def claim_device_counts(spec: Any) -> list[ExactRequest]:
    """The countable requests of a ``ResourceClaimSpec`` (Kueue's ``countDevicesPerClass``):
    ``DraError`` with Kueue's message for a request it does not support."""
    if not isinstance(spec, Mapping):
        return []
    devices = spec.get("devices") or {}
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    if requests is None:
        return []
    if not isinstance(requests, list):
        raise DraError("devices.requests: expected a list")
    out: list[ExactRequest] = []
    for i, req in enumerate(requests):
        rp = f"devices.requests[{i}]"
        if not isinstance(req, Mapping):
            raise DraError(f"{rp}: expected an object")
        if req.get("firstAvailable") is not None:
            raise DraError(
                f"{rp}: Invalid value: null: FirstAvailable device selection is not supported"
            )
        exactly = req.get("exactly")
        if not isinstance(exactly, Mapping):
            raise DraError(
                f"{rp}: Invalid value: null: Exactly must be set if FirstAvailable is nil"
            )
        selectors = _cel_selectors(exactly.get("selectors"), f"{rp}.exactly.selectors")
        if exactly.get("adminAccess") is True:
            continue  # admin access: no quota (Kueue skips it)
        mode = exactly.get("allocationMode") or EXACT_COUNT
        if mode == ALL:
            raise DraError(
                f'{rp}.exactly.allocationMode: Invalid value: "All": '
                "AllocationMode 'All' is not supported"
            )
        if mode != EXACT_COUNT:
            raise DraError(
                f'{rp}.exactly.allocationMode: Invalid value: "{mode}": '
                f"unsupported allocation mode: {mode}"
            )
        count = exactly.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise DraError(
                f"{rp}.exactly.count: Invalid value: {count!r}: must be a positive integer"
            )
        dc = exactly.get("deviceClassName")
        if not isinstance(dc, str) or not dc:
            raise DraError(f"{rp}.exactly.deviceClassName: Required value")
        out.append(ExactRequest(index=i, device_class=dc, count=count, selectors=selectors))
    return out


# -------------------------------------------------------------------------- pod claims

PodClaim = tuple[str, str | None, str | None]
"""A pod's ``resourceClaims`` entry: (name, resourceClaimTemplateName, resourceClaimName)."""


# -------------------------------------------------------------------------- the catalog


@dataclass(slots=True)
class DraCatalog:
    """The DRA objects of a cluster that quota reads: DeviceClasses, ResourceClaimTemplates
    and ResourceClaims (by namespace/name) and ResourceSlices (for counters).
    ``version`` grows on every change, so workloads counted against an older catalog are
    counted again."""

    classes: dict[str, DeviceClass] = field(default_factory=dict)
    templates: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # ns/name -> object
    claims: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # ns/name -> object
    slices: dict[str, Slice] = field(default_factory=dict)
    version: int = 0

    def set(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Add, replace or (``obj`` None) remove one object of ``kind``."""
        self.version += 1
        if kind == "DeviceClass":
            if obj is None:
                self.classes.pop(key, None)
            else:
                try:
                    self.classes[key] = DeviceClass.of(obj)
                except DraError:
                    self.classes[key] = DeviceClass(name=key, selectors=("<invalid>",))
            return
        if kind == "ResourceSlice":
            if obj is None:
                self.slices.pop(key, None)
            else:
                self.slices[key] = Slice.of(obj)
            return
        table = {"ResourceClaimTemplate": self.templates, "ResourceClaim": self.claims}[kind]
        if obj is None:
            table.pop(key, None)
        else:
            table[key] = obj


# -------------------------------------------------------------------------- accounting


def _extended(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: fully qualified, outside kubernetes.io, not a
    quota ``requests.`` name."""
    return (
        "/" in name
        and not name.startswith("requests.")
        and not name.split("/", 1)[0].endswith("kubernetes.io")
    )


class DraAccounting:
    """Per-pod requests as quota sees them, DRA devices included (Kueue's
    ``WithPreprocessedDRAResources``): ``transformer`` output, less the extended
    resources DRA serves, plus the devices the claims ask for."""

    def __init__(
        self,
        mappings: Sequence[DeviceClassMapping] = (),
        catalog: DraCatalog | None = None,
        *,
        transformer: ResourceTransformer | None = None,
        selector_match: SelectorMatch | None = None,
    ) -> None:
        self.mappings = tuple(mappings)
        self.catalog = catalog if catalog is not None else DraCatalog()
        self.transformer = transformer if transformer else None
        self.selector_match = selector_match
        self._served_names: frozenset[str] = frozenset()
        self._served_at = -1
        self.logical: dict[str, str] = {}
        self.counters: dict[str, list[tuple[str, CounterSource]]] = {}
        for m in self.mappings:
            for dc in m.device_class_names:
                self.logical.setdefault(dc, m.name)
                for c in m.counters:
                    self.counters.setdefault(dc, []).append((m.name, c))

    def _served(self) -> frozenset[str]:
        """The extended resources some DeviceClass serves (kept per catalog version)."""
        version = self.catalog.version
        if self._served_at != version:
            names = (c.extended_resource_name for c in self.catalog.classes.values())
            self._served_names = frozenset(n for n in names if n)
            self._served_at = version
        return self._served_names

    def uses_dra(self, ps: PodSet) -> bool:
        if ps.resource_claims:
            return True
        served = self._served()
        if not served:
            return False
        declared = ps.requests if ps.declared_requests is None else ps.declared_requests
        return any(r in served for r in declared)

    def apply(self, wl: Workload) -> bool:
        """Give ``wl`` podSets with DRA devices in their requests (or the reason they
        cannot be counted). Idempotent; True when a podSet uses DRA."""
        if not any(self.uses_dra(ps) for ps in wl.pod_sets):
            return False
        wl.pod_sets = [
            self.pod_set(ps, i, wl.namespace) if self.uses_dra(ps) else ps
            for i, ps in enumerate(wl.pod_sets)
        ]
        return True

    def pod_set(self, ps: PodSet, index: int, namespace: str) -> PodSet:
        declared = ps.requests if ps.declared_requests is None else ps.declared_requests
        base = self.transformer.requests(declared) if self.transformer else dict(declared)
        try:
            added, replaced = self.requests(ps, index, namespace, declared)
        except DraError as exc:
            return replace(ps, requests=base, declared_requests=declared, dra_error=str(exc))
        for name in replaced:
            base.pop(name, None)
        for name, units in added.items():
            base[name] = base.get(name, 0) + units
        return replace(ps, requests=base, declared_requests=declared, dra_error="")

    def requests(
        self, ps: PodSet, index: int, namespace: str, declared: Mapping[str, int]
    ) -> tuple[dict[str, int], set[str]]:
        """Per-pod (units to add by quota resource, extended resources they replace)."""
        added: dict[str, int] = {}
        for j, (claim, template, named) in enumerate(ps.resource_claims):
            where = f"spec.podSets[{index}].template.spec.resourceClaims[{j}]"
            if named is not None:
                raise DraError(
                    f"{where}: podSet {ps.name}, claim {claim}, ResourceClaim {named}: "
                    "KueueDRAIntegration feature does not support use of resource claims"
                )
            if template is None:
                continue
            who = f"podSet {ps.name}, claim {claim}, ResourceClaimTemplate {template}"
            obj = self.catalog.templates.get(f"{namespace}/{template}")
            if obj is None:
                raise DraError(
                    f"{where}: Internal error: failed to get claim spec for "
                    f"ResourceClaimTemplate {template} in podset {ps.name} (claim {claim}): "
                    f'resourceclaimtemplates.resource.k8s.io "{template}" not found'
                )
            spec = ((obj.get("spec") or {}).get("spec")) if isinstance(obj, Mapping) else None
            try:
                exact = claim_device_counts(spec)
            except DraError as exc:
                raise DraError(f"{where}.{exc}: {who}") from None
            for req in exact:
                self._count(req, ps.name, where, who, added)
            self._selectable(exact, where, who)
        replaced = self._extended(ps, index, declared, added)
        return added, replaced

    def _count(
        self, req: ExactRequest, pod_set: str, where: str, who: str, added: dict[str, int]
    ) -> None:
        dc = req.device_class
        rp = f"{where}.devices.requests[{req.index}]"
        cls = self.catalog.classes.get(dc)
        if cls is None:
            raise DraError(
                f'{rp}.exactly.deviceClassName: Not found: "{dc}": {who}: '
                f"DeviceClass {dc} does not exist"
            )
        logical = self.logical.get(dc)
        if logical is None:
            raise DraError(
                f'{where}.resourceClaimTemplateName: Not found: "DeviceClass {dc} is not '
                f'mapped in DRA configuration for podset {pod_set}": {who}'
            )
        counters = self.counters.get(dc)
        if not counters:
            added[logical] = added.get(logical, 0) + req.count
            return
        for quota, source in counters:
            try:
                charge = counter_charge(
                    source, self.catalog.slices.values(), cls.selectors, req.selectors,
                    req.count, self.selector_match,
                )  # fmt: skip
            except ValueError as exc:
                raise DraError(f"{rp}: {who}, DeviceClass {dc}: {exc}") from None
            added[quota] = added.get(quota, 0) + to_units(quota, charge)

    def _selectable(self, exact: list[ExactRequest], where: str, who: str) -> None:
        """Kueue's ``validateCELSelectorsAgainstDevices``: a device-count request with CEL
        selectors waits until the cluster's ResourceSlices hold that many devices matching
        its class's and its own selectors (each device counted for one request only)."""
        taken: set[int] = set()
        devices: list[tuple[str, Mapping[str, Any]]] | None = None
        for req in exact:
            if not req.selectors or req.device_class in self.counters:
                continue
            cls = self.catalog.classes.get(req.device_class)
            if cls is None:
                continue  # _count said so
            if devices is None:
                devices = all_devices(self.catalog.slices.values())
            rp = f"{where}.devices.requests[{req.index}].exactly.selectors"
            found = 0
            for i, (driver, dev) in enumerate(devices):
                if found >= req.count:
                    break
                if i in taken:
                    continue
                try:
                    ok = self.selector_match is not None and all(
                        self.selector_match(e, dev, driver)
                        for e in (*cls.selectors, *req.selectors)
                    )
                except Exception as exc:  # a selector failing on a device: wait, say why
                    raise DraError(
                        f"{rp}: Invalid value: null: {who}: CEL evaluation failed for "
                        f"DeviceClass {req.device_class}: {exc}"
                    ) from None
                if ok:
                    taken.add(i)
                    found += 1
            if found < req.count:
                raise DraError(
                    f"{rp}: Internal error: {who}: insufficient matching devices for CEL "
                    f"selector in DeviceClass {req.device_class}: {found} device(s) match in "
                    f"the cluster but {req.count} requested"
                )

    def _extended(
        self, ps: PodSet, index: int, declared: Mapping[str, int], added: dict[str, int]
    ) -> set[str]:
        """Kueue's ``ResolveExtendedResourceQuota``: extended resources a DeviceClass serves
        move to the class's mapped name (or stay under their own)."""
        replaced: set[str] = set()
        if not self.catalog.classes:
            return replaced
        for name, units in declared.items():
            if units <= 0 or not _extended(name):
                continue
            serving = [c for c in self.catalog.classes.values() if c.extended_resource_name == name]
            if not serving:
                continue
            selected = max(serving, key=lambda c: (c.created, _desc(c.name)))
            key = self.logical.get(selected.name, name)
            if selected.name in self.counters:
                raise DraError(
                    f'spec.podSets[{index}].template.spec: Invalid value: "{name}": '
                    f"podSet {ps.name}: extended resource {name} resolves to DeviceClass "
                    f"{selected.name} with counters configured; use ResourceClaimTemplates "
                    "with CEL selectors for counter-based quota"
                )
            replaced.add(name)
            added[key] = added.get(key, 0) + units
        return replaced


def _desc(name: str) -> tuple[int, ...]:
    """Sort key that puts the lexicographically first name last (so ``max`` picks it)."""
    return tuple(-ord(ch) for ch in name) + (1,)
