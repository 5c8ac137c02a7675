"""What a large trace repeats, held once: podSet lists, run times, empty mappings.

A trace of 200,000 workloads has a handful of podSet shapes, a few hundred distinct
run times and no labels at all, yet one ``PodSet`` (with its requests, selector,
affinity and toleration containers), one ``int`` per run time and three empty dicts
per ``Workload`` made most of its loaded size (≈ 1.2 KiB per workload before this).
The engine never changes a podSet, a run time or an empty label map in place (the
service's informers share podSets the same way, ``admission/kube/watch/packing.py``), so the
trace loader gives every workload of one shape the same objects:

* :class:`PodSetShapes` — one ``list[PodSet]`` per distinct raw ``podSets`` value of
  the trace (keyed by its ``repr``: equal text, equal parse), parsed the first time
  it is seen;
* :class:`Ints` — one object per distinct integer (Python caches only -5..256);
* :data:`EMPTY` — a dict that stays empty, for ``labels``, ``annotations`` and
  ``reclaimablePods``: a write into it raises ``TypeError`` instead of reaching every
  workload (code that needs a map of its own assigns a new dict, as the engine does).

Each cache is bounded (``max_entries``; cleared when full, so a trace of all-distinct
shapes costs no more than before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from queues.model import PodSet

MAX_ENTRIES = 20_000


class FrozenEmptyDict(dict[str, Any]):
    """An empty ``dict`` that refuses to be filled (shared by many workloads)."""

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError(
            "this empty mapping is shared by the trace's workloads: assign a new dict "
            "instead of changing it"
        )

    __setitem__ = _refuse
    update = _refuse  # type: ignore[assignment]
    setdefault = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[()]]:
        return (dict, ())  # a copy is an ordinary (empty) dict of its own

    def __copy__(self) -> dict[str, Any]:
        return {}

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {}


EMPTY: dict[str, Any] = FrozenEmptyDict()


class PodSetShapes:
    """One parsed podSet list per distinct raw ``podSets`` value."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._shapes: dict[str, list[PodSet]] = {}
        self.max_entries = max_entries

    def __call__(self, raw: Any, parse: Callable[[Any], list[PodSet]]) -> list[PodSet]:
        """The podSets of ``raw``: ``parse(raw)`` the first time (its errors are the
        caller's), the same list for every equal value after that."""
        key = repr(raw)
        shared = self._shapes.get(key)
        if shared is None:
            shared = parse(raw)  # raises for a bad value: nothing is remembered
            if len(self._shapes) >= self.max_entries:
                self._shapes.clear()
            self._shapes[key] = shared
        return shared

    def __len__(self) -> int:
        return len(self._shapes)


class Ints:
    """One ``int`` object per distinct value (bounded)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._values: dict[int, int] = {}
        self.max_entries = max_entries

    def __call__(self, value: int) -> int:
        shared = self._values.get(value)
        if shared is None:
            if len(self._values) >= self.max_entries:
                self._values.clear()
            shared = self._values[value] = value
        return shared
