"""Results remembered per distinct content of a decoded JSON/YAML value.

Inputs repeat themselves: the Jobs of one array, the workloads of a generated input
and the pod templates of a real cluster share a handful of templates among thousands
of objects. What is a pure function of such a value (what its pods ask for, whether
it passes validation) is then computed once per distinct content.

The key is ``repr`` of the value, which is exact for decoded JSON/YAML values (types
included: ``"1"`` is not ``1``); the same content in another key order is merely
another entry. Only values decoded from JSON/YAML may be keyed this way (an object
whose ``repr`` is not its content would be wrong here). A memo is bounded: when full
it starts over, so a stream of distinct contents costs one ``repr`` each and no memory.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


def content_key(value: Any) -> str:
    return repr(value)


class ContentMemo(Generic[T]):
    """content key -> result, at most ``size`` of them."""

    __slots__ = ("_results", "_size")

    def __init__(self, size: int = 1024) -> None:
        self._results: dict[str, T] = {}
        self._size = size

    def get(self, key: str) -> T | None:
        return self._results.get(key)

    def put(self, key: str, result: T) -> None:
        if len(self._results) >= self._size:
            self._results.clear()
        self._results[key] = result
