"""The API server's checks of resource quantities in the pod specs of built-in kinds.

Kubernetes refuses a Job, Deployment, StatefulSet or Pod whose containers request a
negative quantity of any resource, or a fraction of an extended resource
(``nvidia.com/gpu: "0.5"``): ``ValidateResourceQuantityValue`` in
k8s.io/kubernetes pkg/apis/core/validation ("must be greater than or equal to 0",
"must be an integer"). Such an object never exists in a cluster, so ``plan`` refuses
it too, naming the field, instead of admitting −2 GPUs or rounding 0.5 up to 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from queues.quantity import QuantityError, parse_quantity

__all__ = ["quantity_problems"]

NEGATIVE = "must be greater than or equal to 0"
NOT_INTEGER = "must be an integer"
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def is_extended_resource(name: str) -> bool:
    """apimachinery's ``IsExtendedResourceName``: a domain-prefixed name outside
    ``kubernetes.io/`` (``nvidia.com/gpu``), not a quota's ``requests.`` name."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def quantity_problems(doc: Any, path: str = "") -> list[tuple[str, str]]:
    """(field path, message) of every negative quantity and fractional extended
    resource in the pod specs within ``doc``, in the API server's notation."""
    return list(_walk(doc, path))


def _walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield from _pod_spec(value, path)
            return
        for key, child in value.items():
            yield from _walk(child, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _walk(child, f"{path}[{i}]")


def _pod_spec(spec: dict[str, Any], path: str) -> Iterator[tuple[str, str]]:
    prefix = f"{path}." if path else ""
    for field in _CONTAINER_LISTS:
        containers = spec.get(field)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            if isinstance(container, dict):
                yield from _requirements(
                    container.get("resources"), f"{prefix}{field}[{i}].resources"
                )
    yield from _requirements(spec.get("resources"), f"{prefix}resources")
    yield from _resource_list(spec.get("overhead"), f"{prefix}overhead")


def _requirements(resources: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(resources, dict):
        for field in ("limits", "requests"):
            yield from _resource_list(resources.get(field), f"{path}.{field}")


def _resource_list(values: Any, path: str) -> Iterator[tuple[str, str]]:
    if not isinstance(values, dict):
        return
    for name, raw in values.items():
        try:
            qty: Fraction = parse_quantity(raw)
        except QuantityError:
            continue  # the quantity grammar is checked where the requests are read
        where = f"{path}[{name}]"
        if qty < 0:
            yield where, f'Invalid value: "{raw}": {NEGATIVE}'
        elif is_extended_resource(str(name)) and qty.denominator != 1:
            yield where, f'Invalid value: "{raw}": {NOT_INTEGER}'
