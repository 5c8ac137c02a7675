"""DRA's CEL selectors, evaluated on ResourceSlice devices (for counter-based quota).

A DeviceClass, a device request and a ``deviceClassMappings`` counter source select
devices with CEL expressions over ``device`` (Kubernetes' dynamic-resource-allocation
cel package): ``device.driver``, ``device.attributes[domain].name`` and
``device.capacity[domain].name``, where an attribute or capacity written without a
domain belongs to the driver's. Attribute values are the one of ``int``, ``bool``,
``string`` and ``version`` that is set; capacities are compared as integers (the
``quantity`` type's methods are not available: such a selector fails to evaluate and
the workload waits, saying so).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import celpy

from queues.quantity import QuantityError, parse_quantity

__all__ = ["compile_error", "device_matches"]

_ENV = celpy.Environment()


@functools.lru_cache(maxsize=256)
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression))


def compile_error(expression: str) -> str | None:
    """Why ``expression`` does not compile, or None."""
    try:
        _program(expression)
    except Exception as exc:  # celpy raises its own error types
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {first}".rstrip(": ")
    return None


def _domained(raw: Any, driver: str, value: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, item in (raw or {}).items() if isinstance(raw, Mapping) else ():
        domain, _, name = str(key).rpartition("/")
        out.setdefault(domain or driver, {})[name] = value(item)
    return out


def _attribute(item: Any) -> Any:
    if isinstance(item, Mapping):
        for kind in ("string", "int", "bool", "version"):
            if kind in item:
                return item[kind]
    return None


def _capacity(item: Any) -> Any:
    value = item.get("value") if isinstance(item, Mapping) else None
    try:
        return int(parse_quantity(value)) if value is not None else 0
    except QuantityError:
        return 0


def device_matches(expression: str, device: Mapping[str, Any], driver: str) -> bool:
    """Whether the ResourceSlice ``device`` of ``driver`` satisfies ``expression``
    (raises when the expression does not compile or fails to evaluate)."""
    doc = {
        "driver": driver,
        "attributes": _domained(device.get("attributes"), driver, _attribute),
        "capacity": _domained(device.get("capacity"), driver, _capacity),
    }
    result = _program(expression).evaluate({"device": celpy.json_to_cel(doc)})
    if isinstance(result, Exception):
        raise ValueError(str(result))
    return bool(result)
