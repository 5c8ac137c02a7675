"""The controller's work: the items its workers reconcile, and the queue they wait in.

An item is one frozen value per object to reconcile; :class:`WorkQueue` deduplicates
items by equality, so each kind of item is its own class: an item names which
reconciler handles it, and a misspelt kind is a type error rather than an item no
worker recognises. ``label`` is the kind as the ``quartermaster_reconcile_errors_total``
metric and the logs name it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from queues.backoff import BackoffPolicy


@dataclass(frozen=True, slots=True)
class Workload:
    """Reconcile the Workload ``key`` (``namespace/name``) on its own."""

    key: str
    label: ClassVar[str] = "wl"


@dataclass(frozen=True, slots=True)
class Checks:
    """Apply the AdmissionChecks of the Workload ``key`` that holds quota: admit it,
    evict it for a retry, or deactivate it (``reconcilers.admission_checks``)."""

    key: str
    label: ClassVar[str] = "checks"


@dataclass(frozen=True, slots=True)
class PodGroup:
    """Reconcile a pod group: its Workload ``key`` and the group's pods together."""

    key: str
    label: ClassVar[str] = "podgroup"


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """Handle a node failure under the TAS-admitted Workload ``key``."""

    key: str
    label: ClassVar[str] = "nodefail"


@dataclass(frozen=True, slots=True)
class TasUngate:
    """Ungate the pods of the TAS-admitted Workload ``key`` (topology assignment)."""

    key: str
    label: ClassVar[str] = "tasungate"


@dataclass(frozen=True, slots=True)
class Job:
    """Reconcile the job object ``key`` of the integration whose ``Integration.lower_kind`` is ``lower_kind``."""

    lower_kind: str
    key: str

    @property
    def label(self) -> str:
        return self.lower_kind


Item = Workload | Checks | PodGroup | NodeFailure | TasUngate | Job
"""Any work item."""


class WorkQueue:
    """client-go's workqueue: deduplicated keys, one worker per key at a time, and a
    per-key exponential backoff for failures (controller-runtime's
    ``ItemExponentialFailureRateLimiter``): the n-th consecutive failure of a key is
    retried after ``base * 2**(n-1)`` seconds, at most ``cap``; a success forgets it."""

    def __init__(self, *, base: float = 0.1, cap: float = 300.0) -> None:
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._dirty: set[Item] = set()
        self._processing: set[Item] = set()
        self._failures: dict[Item, int] = {}
        self._waiting: dict[Item, asyncio.TimerHandle] = {}
        self.policy = BackoffPolicy(base=base, cap=cap)

    def add(self, item: Item) -> None:
        if item in self._dirty:
            return
        self._dirty.add(item)
        if item not in self._processing:
            self._queue.put_nowait(item)

    def backoff(self, item: Item) -> float:
        """The delay before the next retry of ``item`` (counts one more failure)."""
        n = self._failures.get(item, 0)
        self._failures[item] = n + 1
        return self.policy.delay(n)

    def add_after_failure(self, item: Item, *, when: Callable[[], bool]) -> float:
        """Queue ``item`` again after its backoff (if ``when()`` still holds then)."""
        delay = self.backoff(item)
        if (old := self._waiting.pop(item, None)) is not None:
            old.cancel()

        def fire() -> None:
            self._waiting.pop(item, None)
            if when():
                self.add(item)

        self._waiting[item] = asyncio.get_running_loop().call_later(delay, fire)
        return delay

    def forget(self, item: Item) -> None:
        self._failures.pop(item, None)

    def failures(self, item: Item) -> int:
        return self._failures.get(item, 0)

    async def get(self) -> Item:
        item = await self._queue.get()
        self._dirty.discard(item)
        if not self._dirty:
            # a set keeps the table of its largest size: after a start's 100k keys that
            # is MiBs for nothing
            self._dirty = set()
        self._processing.add(item)
        return item

    def done(self, item: Item) -> None:
        self._processing.discard(item)
        if item in self._dirty:
            self._queue.put_nowait(item)

    def close(self) -> None:
        for handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()

    def __len__(self) -> int:
        return len(self._dirty)
