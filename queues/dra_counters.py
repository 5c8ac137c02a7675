"""Counter-based DRA quota: what a partition of a device (a MIG slice) consumes.

A ``deviceClassMappings`` entry with a ``counter`` source charges, instead of a device
count, the device counter a DRA driver publishes in its ResourceSlices
(``consumesCounters``, e.g. the GPU memory a MIG profile takes). Kueue 0.19
(``GetCounterResourcesForWorkload``, ``matchDevicesWithSelectors``,
``computeCounterCharges``) charges conservatively: among the devices of the driver's
*complete* pools (every slice of the pool's newest generation present) that match the
source's ``deviceSelector``, the DeviceClass's selectors and the request's selectors,
the largest value of the counter, times the request's ``count``. Fewer matching devices
than requested, or none that consumes the counter, leave the workload waiting.

CEL is evaluated by the caller's ``match`` function (DRA's CEL environment is outside
this pure package); without one, a selector cannot be evaluated and the workload waits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from queues.quantity import QuantityError, parse_quantity

__all__ = ["CounterSource", "Slice", "all_devices", "counter_charge"]


@dataclass(frozen=True, slots=True)
class CounterSource:
    """A mapping's ``sources[].counter``: the counter, the driver, the device selector."""

    name: str
    driver: str
    selector: str  # CEL expression ("" selects every device of the driver)


@dataclass(frozen=True, slots=True)
class Slice:
    """What counters read of a ResourceSlice."""

    driver: str
    pool: str
    generation: int
    slice_count: int
    devices: tuple[Mapping[str, Any], ...]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Slice:
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        devices = spec.get("devices") or []
        return cls(
            driver=str(spec.get("driver") or ""),
            pool=str(pool.get("name") or ""),
            generation=int(pool.get("generation") or 0),
            slice_count=int(pool.get("resourceSliceCount") or 1),
            devices=tuple(d for d in devices if isinstance(d, Mapping)),
        )


def complete_pool_devices(slices: Iterable[Slice], driver: str) -> list[Mapping[str, Any]]:
    """The devices of ``driver``'s pools whose newest generation has all its slices."""
    pools: dict[str, tuple[int, int, list[Slice]]] = {}
    for s in slices:
        if s.driver != driver:
            continue
        have = pools.get(s.pool)
        if have is None or s.generation > have[0]:
            pools[s.pool] = (s.generation, s.slice_count, [s])
        elif s.generation == have[0]:
            have[2].append(s)
    return [
        d
        for _, (_, count, members) in sorted(pools.items())
        if len(members) == count
        for s in members
        for d in s.devices
    ]


def all_devices(slices: Iterable[Slice]) -> list[tuple[str, Mapping[str, Any]]]:
    """(driver, device) of every device of every slice (Kueue's
    ``buildDeviceListFromSlices``: no pool completeness check)."""
    return [(s.driver, d) for s in slices for d in s.devices]


def counter_charge(
    source: CounterSource,
    slices: Iterable[Slice],
    class_selectors: tuple[str, ...],
    request_selectors: tuple[str, ...],
    count: int,
    match: Callable[[str, Mapping[str, Any], str], bool] | None,
) -> Fraction:
    """The counter charge of one request (``ValueError`` with Kueue's message)."""
    selectors = tuple(e for e in (source.selector, *class_selectors, *request_selectors) if e)
    if selectors and match is None:
        raise ValueError("CEL selectors cannot be evaluated here")
    matched = []
    for dev in complete_pool_devices(slices, source.driver):
        try:
            ok = all(match(e, dev, source.driver) for e in selectors) if match else True
        except Exception as exc:  # a selector that fails on a device: wait, say why
            raise ValueError(f"CEL evaluation error for device {dev.get('name')}: {exc}") from None
        if ok:
            matched.append(dev)
    if len(matched) < count:
        raise ValueError(
            f"insufficient matching devices for counter driver: {len(matched)} device(s) "
            f"match but {count} requested"
        )
    best: Fraction | None = None
    for dev in matched:
        for consumption in dev.get("consumesCounters") or []:
            value = ((consumption.get("counters") or {}).get(source.name) or {}).get("value")
            if value is None:
                continue
            try:
                q = max(parse_quantity(value), Fraction(0))
            except QuantityError:
                continue
            if best is None or q > best:
                best = q
    if best is None:
        raise ValueError(
            f'matched devices have no consumesCounters entry for counter "{source.name}"'
        )
    return best * count
