"""What the controller's parts share: options, the work queue and the write primitive.

:class:`Writer` is the one way the controller changes a Workload's status: it computes
the new status from the object it last saw, sends it as a JSON merge patch pinned to
that object's resourceVersion (optimistic concurrency), and on ``409 Conflict``
re-reads and recomputes — the compute function decides whether the write still makes
sense, it is never blindly retried. Successful writes are remembered
(:mod:`admission.kube.watch.read_your_writes`) so a reconcile that runs before the
informer delivers our own change does not act on the stale copy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from admission.integrations.registry import ALL, Frameworks
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import MERGE_PATCH, WORKLOADS, KubeClient, Resource
from admission.kube.control.work import Item
from admission.kube.watch.informer import Informer
from admission.kube.watch.read_your_writes import LastWrites, newer, read_back
from queues.backoff import BackoffPolicy
from queues.model import LabelSelector

if TYPE_CHECKING:
    from admission.engine.cache import Cache
    from admission.kube.control.metrics import Metrics
    from admission.kube.watch.cachesync import CacheSync

log = logging.getLogger("quartermaster.kube.controller")

Obj = dict[str, Any]


@dataclass(slots=True)
class PodsReadyOptions:
    """waitForPodsReady (Kueue defaults: enabled, 30 minutes, backoff 60 s·2ⁿ⁻¹ ≤ 3600 s)."""

    enabled: bool = True
    timeout: float = 1800.0
    backoff_base: float = 60.0
    backoff_max: float = 3600.0
    backoff_limit: int | None = None
    requeue_by_creation: bool = False

    @property
    def backoff(self) -> BackoffPolicy:
        return BackoffPolicy(base=self.backoff_base, cap=self.backoff_max)


@dataclass(slots=True)
class ControllerOptions:
    manage_jobs_without_queue_name: bool = False
    managed_namespaces: LabelSelector | None = None  # None: every namespace but the exclusions
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    workers: int = 8
    pending_writers: int = 4
    # seconds a pending reason must hold before it is written: most heads that miss a
    # cycle are admitted within a second or two (Kueue's baseline on the simulator with
    # its 50 QPS budget: 4,318 first reasons written with 1 s, 856 with 2 s, 305 with 5 s)
    pending_delay: float = 2.0
    # ... and, while decisions are written and the low_share is spent, at most this long
    pending_max_hold: float = 300.0
    # a changed message with the same reason (only the numbers moved): at most this often
    # per workload; a changed reason is written once it held for pending_delay
    pending_refresh: float = 60.0
    # a cycle waits while more decisions wait for the client's budget than it can send
    # in this many seconds (qps × decision_lead): admissions hold quota from the moment
    # they are decided, so a cycle far ahead of the writes makes heads inadmissible and
    # preemptors evict for quota nobody is using yet (0: no back-pressure)
    decision_lead: float = 0.5
    schedule_batch: float = 0.01  # coalesce events this long before a scheduling pass
    cycle_in_thread: bool = True  # run schedule() in a worker thread (the loop stays live)
    status_interval: float = 1.0
    # while decisions are written, queue statuses (other than status.significant
    # changes) and pending reasons take at most this share of the requests decisions
    # make (ratelimit.ShareCredit)
    low_share: float = 0.04
    status_budget: int = 100  # queue status writes per interval at most (big clusters)
    tick: float = 0.5
    events: bool = True
    retry_base: float = 0.1  # first retry of a failed reconcile, doubled per failure
    retry_cap: float = 300.0  # ... up to this (controller-runtime: 5 ms .. 1000 s)
    pods_ready: PodsReadyOptions = field(default_factory=PodsReadyOptions)
    frameworks: Frameworks = ALL  # the integrations enabled (integrations.frameworks)


async def _ready() -> None:
    return None


CONFLICT_WAIT = 1.0  # seconds a 409 waits for the watch before reading the object


class Abandon(Exception):
    """The compute function decided the write no longer applies."""


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
            # is MiBs for nothing (bench serve-memory)
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


class Writer:
    """RV-pinned status writes with re-read on conflict, and read-your-writes."""

    def __init__(
        self,
        client: KubeClient,
        *,
        workloads: Informer,
        objects: dict[str, Informer],
        sync: CacheSync,
    ) -> None:
        self.client = client
        self.workloads = workloads
        self.sync = sync
        self.latest: LastWrites[tuple[str, str]] = LastWrites()  # (plural, key)
        # Workloads and the job objects the reconciler writes (one informer per kind)
        self._stores = {WORKLOADS.plural: workloads, **objects}

    # -- read-your-writes ---------------------------------------------------------------------

    def current(self, res: Resource, key: str) -> Obj | None:
        """The newer of the informer's copy and our last write (Workloads and job objects)."""
        informer = self._stores.get(res.plural)
        if informer is None:
            raise ValueError(f"Writer keeps no {res.plural}: only workloads and job objects")
        return self.latest.read((res.plural, key), informer.get(key))

    def workload(self, key: str) -> Obj | None:
        return self.current(WORKLOADS, key)

    def remember(self, res: Resource, key: str, obj: Obj) -> None:
        informer = self._stores.get(res.plural)
        slim = getattr(informer, "slim", None)  # kept as the informer keeps it (.slim)
        self.latest.remember((res.plural, key), slim(obj) if slim is not None else obj)
        if res is WORKLOADS:
            self.sync.own_writes.written(key, obj)

    def forget_object(self, res: Resource, key: str) -> None:
        self.latest.forget((res.plural, key))

    # -- writes ---------------------------------------------------------------------------------

    async def reread(self, key: str) -> Obj | None:
        ns, name = kobj.split_key(key)
        try:
            obj = await self.client.get(WORKLOADS, name, namespace=ns)
        except ApiError as err:
            if err.not_found:
                return None
            raise
        obj.setdefault("apiVersion", WORKLOADS.api_version)
        obj.setdefault("kind", WORKLOADS.kind)
        return newer(obj, self.workload(key))

    async def read_back(
        self, key: str, landed: Callable[[Obj], bool], *, attempts: int
    ) -> bool | None:
        """Whether a Workload write that failed ambiguously landed: ``landed`` of the
        Workload read back (:func:`admission.kube.watch.read_your_writes.read_back`)."""
        return await read_back(
            lambda: self.reread(key),
            landed,
            lambda obj: self.remember(WORKLOADS, key, obj),
            attempts=attempts,
        )

    async def _newer_than(self, key: str, stale: Obj) -> Obj | None:
        """The Workload after a 409 on ``stale``: the server holds a newer version, which
        our watch delivers moments later at no cost; only when it does not within
        ``CONFLICT_WAIT`` is it read (a GET spends a token of the rate limit)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONFLICT_WAIT
        while loop.time() < deadline:
            await asyncio.sleep(0.01)
            current = self.workload(key)
            if current is None:
                break  # deleted, or never delivered: ask the server
            if kobj.rv(current) != kobj.rv(stale):
                return current
        return await self.reread(key)

    async def update_status(
        self, key: str, compute: Callable[[Obj], Obj | None], *, attempts: int = 3
    ) -> Obj | None:
        """Write ``compute(obj)`` as the Workload's status (merge patch pinned to obj's RV).

        ``compute`` runs once this write's turn at the client's rate limit has come
        (``KubeClient.turn``), on the freshest copy we have then: a write that became
        unnecessary while it waited (the victim finished, the workload was admitted)
        is never sent, and its token goes back. Returns the written object, or the
        current one when ``compute`` returned None, or None when the Workload is gone.
        ``compute`` may raise :class:`Abandon`. Raises :class:`ApiError` on other
        failures (409 after ``attempts``).
        """
        ns, name = kobj.split_key(key)
        reread: Obj | None = None
        for attempt in range(attempts):
            async with self.client.turn():
                obj = self.workload(key) if reread is None else newer(reread, self.workload(key))
                if obj is None:
                    return None
                status = compute(obj)
                if status is None:
                    return obj
                body = {"metadata": {"resourceVersion": kobj.rv(obj)}, "status": status}
                try:
                    new = await self.client.patch(
                        WORKLOADS,
                        name,
                        body,
                        namespace=ns,
                        subresource="status",
                        content_type=MERGE_PATCH,
                    )
                except ApiError as err:
                    if err.not_found:
                        return None
                    if not (err.conflict and attempt + 1 < attempts):
                        raise
                    new = None
            if new is None:  # 409: our copy was stale; get the current one, decide again
                reread = await self._newer_than(key, obj)
                if reread is None:
                    return None
                continue
            new.setdefault("apiVersion", WORKLOADS.api_version)
            new.setdefault("kind", WORKLOADS.kind)
            self.remember(WORKLOADS, key, new)
            return new
        raise AssertionError("unreachable")

    async def patch_object(
        self, res: Resource, key: str, body: Obj, *, subresource: str | None = None
    ) -> Obj | None:
        """Merge-patch a job object; the written object (remembered), None when gone."""
        ns, name = kobj.split_key(key)
        try:
            new = await self.client.patch(
                res, name, body, namespace=ns, subresource=subresource, content_type=MERGE_PATCH
            )
        except ApiError as err:
            if err.not_found:
                return None
            raise
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        self.remember(res, key, new)
        return new


class JobIndex:
    """(kind, object key) -> the keys of its Workloads: one, nearly always, kept as a
    plain string then (a set per pending job costs more than the rest of the entry)."""

    def __init__(self) -> None:
        self._index: dict[tuple[str, str], str | set[str]] = {}

    def add(self, job: tuple[str, str], wkey: str) -> None:
        have = self._index.get(job)
        if have is None or have == wkey:
            self._index[job] = wkey
        elif isinstance(have, str):
            self._index[job] = {have, wkey}
        else:
            have.add(wkey)

    def get(self, job: tuple[str, str]) -> set[str]:
        have = self._index.get(job)
        if have is None:
            return set()
        return {have} if isinstance(have, str) else set(have)

    def pop(self, job: tuple[str, str]) -> set[str]:
        have = self._index.pop(job, None)
        if have is None:
            return set()
        return {have} if isinstance(have, str) else have

    def __contains__(self, job: object) -> bool:
        return job in self._index


@dataclass(slots=True)
class Context:
    """The shared pieces every controller part works with."""

    client: KubeClient
    cache: Cache
    sync: CacheSync
    informers: dict[str, Informer]
    writer: Writer
    metrics: Metrics
    options: ControllerOptions
    clock: Callable[[], float]
    wake: Callable[[], None]
    enqueue: Callable[[Item], None]
    record_event: Callable[..., None] = lambda *a, **k: None
    # True while this replica may write decisions (the Lease is held and fresh): checked
    # before every admission and preemption write, so a leader whose renewals hang stops
    # at its renew deadline, before a successor can take over
    fence: Callable[[], bool] = lambda: True
    cache_ready: Callable[[], Awaitable[None]] = field(default=lambda: _ready())
    # True while admissions or evictions are being written or wait for the client's
    # budget: queue statuses and pending reasons then take the back seat (they cost the
    # tokens and the CPU the decisions need)
    deciding: Callable[[], bool] = lambda: False
    # (job kind's plural, job key) -> the keys of its Workloads
    job_index: JobIndex = field(default_factory=JobIndex)

    def informer(self, res: Resource) -> Informer:
        return self.informers[res.plural]
