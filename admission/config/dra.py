"""``resources.deviceClassMappings``: which DeviceClasses count against which quota
resource (Kueue's ``DeviceClassMapping``, apis/config/v1beta2), checked as Kueue's
``validateDeviceClassMappings`` checks it: qualified names, no resource named twice, no
class mapped to two resources, counter sources with a DNS-label counter, a driver and a
CEL ``deviceSelector`` that compiles. Capacity sources (consumable capacity) need a Kueue
feature gate that is off by default, and are refused as Kueue refuses them then."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

from admission.engine.dra_cel import compile_error, device_matches
from queues.dra import (
    CounterSource,
    DeviceClassMapping,
    DraAccounting,
    DraCatalog,
    mapping_errors,
)

__all__ = ["DeviceClassMappingDoc", "accounting", "check_mappings"]

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED = re.compile(rf"^({_SUBDOMAIN}/)?{_NAME}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DRIVER = re.compile(rf"^{_SUBDOMAIN}$")


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class CelDoc(_Doc):
    expression: str = Field(min_length=1)


class DeviceSelectorDoc(_Doc):
    cel: CelDoc


class CounterSourceDoc(_Doc):
    name: str
    driver: str
    deviceSelector: DeviceSelectorDoc


class CapacitySourceDoc(_Doc):
    name: str
    driver: str
    deviceSelector: DeviceSelectorDoc


class SourceDoc(_Doc):
    counter: CounterSourceDoc | None = None
    capacity: CapacitySourceDoc | None = None


class DeviceClassMappingDoc(_Doc):
    name: str
    deviceClassNames: list[str] = Field(default_factory=list)
    sources: list[SourceDoc] = Field(default_factory=list)

    @model_validator(mode="after")
    def _fields(self) -> DeviceClassMappingDoc:
        errors = _field_errors(self)
        if errors:
            raise ValueError(errors[0])
        return self

    def mapping(self) -> DeviceClassMapping:
        return DeviceClassMapping(
            name=self.name,
            device_class_names=tuple(self.deviceClassNames),
            counters=tuple(
                CounterSource(
                    name=s.counter.name,
                    driver=s.counter.driver,
                    selector=s.counter.deviceSelector.cel.expression,
                )
                for s in self.sources
                if s.counter is not None
            ),
        )


def _qualified(value: str) -> bool:
    return len(value) <= 253 and bool(_QUALIFIED.match(value))


def _field_errors(m: DeviceClassMappingDoc) -> list[str]:
    """The errors of one mapping, paths relative to it (Kueue's wording)."""
    out: list[str] = []
    if not _qualified(m.name):
        out.append(f'name: Invalid value: "{m.name}": must be a qualified name')
    for j, dc in enumerate(m.deviceClassNames):
        if not _qualified(dc):
            out.append(f'deviceClassNames[{j}]: Invalid value: "{dc}": must be a qualified name')
    kinds = set()
    for k, s in enumerate(m.sources):
        sp = f"sources[{k}]"
        if (s.counter is None) == (s.capacity is None):
            out.append(f"{sp}: Required value: exactly one source type must be set per entry")
            continue
        if s.capacity is not None:
            kinds.add("capacity")
            out.append(
                f"{sp}.capacity: Invalid value: true: capacity sources require "
                "KueueDRAIntegrationConsumableCapacity to be enabled"
            )
            continue
        assert s.counter is not None
        kinds.add("counter")
        c = s.counter
        if not _DNS_LABEL.match(c.name):
            out.append(f'{sp}.counter.name: Invalid value: "{c.name}": must be a DNS label')
        if len(c.driver) > 63 or not _DRIVER.match(c.driver):
            out.append(
                f'{sp}.counter.driver: Invalid value: "{c.driver}": must be a lowercase DNS '
                "subdomain of at most 63 characters"
            )
        why = compile_error(c.deviceSelector.cel.expression)
        if why is not None:
            out.append(f"{sp}.counter.deviceSelector.cel.expression: Invalid value: {why}")
    if len(kinds) > 1:
        out.append(
            "sources: Invalid value: cannot mix counter and capacity sources in the same mapping"
        )
    return out


def check_mappings(docs: list[DeviceClassMappingDoc]) -> tuple[DeviceClassMapping, ...]:
    """The mappings, or ``ValueError`` with Kueue's first cross-mapping error."""
    mappings = tuple(d.mapping() for d in docs)
    errors = mapping_errors(mappings)
    if errors:
        raise ValueError(errors[0].removeprefix("resources."))
    return mappings


def accounting(
    mappings: tuple[DeviceClassMapping, ...], catalog: DraCatalog | None = None
) -> DraAccounting:
    """The cache's DRA accounting for these mappings (always present: a claim of a class
    no mapping covers is inadmissible, never free), with DRA's CEL for counters."""
    return DraAccounting(mappings, catalog, selector_match=device_matches)
