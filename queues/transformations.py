"""Kueue's resource transformations: what a pod asks for, as quota sees it.

GPU organisations rarely want quota in the units the device plugin advertises: a MIG
slice ``nvidia.com/mig-4g.5gb`` should count as 5Gi of accelerator memory and 4 compute
slices, a HAMi vGPU request as its cores times the number of vGPUs, and a vendor's
bookkeeping resource not at all. Kueue's ``Configuration.resources`` says so once for the
cluster (``excludeResourcePrefixes``, ``transformations``) and applies it when a
Workload's pod requests become the requests the scheduler charges (``workload.NewInfo``
with ``WithExcludedResourcePrefixes`` and ``WithResourceTransformations``); the pods
themselves keep asking for what they ask for.

This module is that arithmetic, mirroring Kueue's pkg/workload/workload.go
(``dropExcludedResources``, ``applyResourceTransformations``), on the engine's integer
units (cpu in milli-cores, the rest in whole units) with exact fractions in between:

* resources whose name starts with an excluded prefix are dropped;
* each transformed input adds ``outputs`` × its quantity (× the quantity of the resource
  ``multiplyBy`` names, when the pod asks for it); ``Replace`` drops the input,
  ``Retain`` (the default) keeps it as requested;
* outputs of several inputs add up; a negative total is zero; an output that the pod
  also asks for directly adds to that request;
* the result is rounded up per pod, as Kueue's ``Requests`` do (``Value()``), so a
  fraction of a whole-unit resource counts as one per pod.

Applying is idempotent: a PodSet keeps its ``declared_requests`` and its ``requests``
are always recomputed from them, so a workload read again is never transformed twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

from queues.model import PodSet, Workload
from queues.quantity import CPU, to_units

__all__ = ["REPLACE", "RETAIN", "ResourceTransformation", "ResourceTransformer"]

RETAIN = "Retain"
REPLACE = "Replace"


@dataclass(frozen=True, slots=True)
class ResourceTransformation:
    """One entry of ``resources.transformations``; ``outputs`` are per unit of input."""

    input: str
    strategy: str = RETAIN
    outputs: tuple[tuple[str, Fraction], ...] = ()
    multiply_by: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceTransformer:
    """Kueue's workload info options: excluded prefixes and transformations by input."""

    excluded_prefixes: tuple[str, ...] = ()
    transformations: Mapping[str, ResourceTransformation] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        *,
        excluded_prefixes: Iterable[str] = (),
        transformations: Iterable[ResourceTransformation] = (),
    ) -> ResourceTransformer:
        return cls(tuple(excluded_prefixes), {t.input: t for t in transformations})

    def __bool__(self) -> bool:
        return bool(self.excluded_prefixes or self.transformations)

    def requests(self, declared: Mapping[str, int]) -> dict[str, int]:
        """Per-pod requests as quota sees them, from the requests the pod declares."""
        kept = {
            name: units
            for name, units in declared.items()
            if not name.startswith(self.excluded_prefixes)
        }
        transforms = self.transformations
        if not any(name in transforms for name in kept):
            return kept
        retained: dict[str, Fraction] = {}
        generated: dict[str, Fraction] = {}
        for name, units in kept.items():
            amount = _exact(name, units)
            mapping = transforms.get(name)
            if mapping is None:
                retained[name] = amount
                continue
            base = amount
            if mapping.multiply_by is not None and mapping.multiply_by in kept:
                base = amount * _exact(mapping.multiply_by, kept[mapping.multiply_by])
            for output, factor in mapping.outputs:
                generated[output] = generated.get(output, Fraction(0)) + base * factor
            if mapping.strategy == RETAIN:
                retained[name] = amount
        for name, amount in generated.items():
            retained[name] = retained.get(name, Fraction(0)) + max(amount, Fraction(0))
        return {name: to_units(name, amount) for name, amount in retained.items()}

    def apply(self, wl: Workload) -> None:
        """Give ``wl`` podSets with the requests quota sees (no-op without configuration).

        The PodSet objects are replaced, not changed: a scenario or an input set whose
        workloads are copied per run keeps its declared requests.
        """
        if not self:
            return
        wl.pod_sets = [self.pod_set(ps) for ps in wl.pod_sets]

    def pod_set(self, ps: PodSet) -> PodSet:
        declared = ps.requests if ps.declared_requests is None else ps.declared_requests
        return replace(ps, requests=self.requests(declared), declared_requests=declared)


def _exact(name: str, units: int) -> Fraction:
    return Fraction(units, 1000) if name == CPU else Fraction(units)
