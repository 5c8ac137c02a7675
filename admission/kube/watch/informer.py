"""List-then-watch caches of raw objects, one per resource.

The controller is level-based: it acts on the latest state of each object, which an
informer keeps in memory. Each :class:`Informer` lists its resource (paginated), then
watches from the list's resourceVersion with bookmarks, following the stream's
resourceVersion so that a reconnect resumes where it stopped. A ``410 Expired`` (an
``ERROR`` event or an HTTP 410) means the server no longer has the events since that
version: the informer relists and reports the difference to the store as events, so
handlers never miss a deletion. Errors back off exponentially with jitter (from a
seeded ``random.Random`` so tests are deterministic) and reset after progress.

Objects stay raw dicts (the client's typed models cost 5-10x ``json.loads``); handlers
parse what they need. The informers of the kinds that come in large numbers (Jobs,
Workloads, Pods) keep a slim, packed copy of each object (:mod:`.slim`): handlers and
``get`` see the slim dict, and :meth:`Informer.full` gives the whole object to the few
places that need it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from admission.kube.client.errors import ApiError
from admission.kube.client.rest import KubeClient, Obj, Resource
from admission.kube.client.unreachable import outage_of
from admission.kube.watch.read_your_writes import rv_at_least
from admission.kube.watch.recent import RecentObjects
from admission.kube.watch.slim import PackedStore, Slimmer, WorkloadSlimmer
from queues.backoff import BackoffPolicy

__all__ = ["WorkloadSlimmer", "Informer", "strip_managed_fields"]


log = logging.getLogger("quartermaster.kube.informer")

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
Handler = Callable[[str, str, Obj | None, Obj | None], None]
"""(event type, key, new object or None, old object or None). Handlers must not change
the objects they are given: a slim one shares parts with the whole object that
:meth:`Informer.full` answers from."""


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with full jitter: delay n is uniform in [d/2, d], d = base·2ⁿ ≤ cap."""

    base: float = 0.2
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def next(self) -> float:
        d = BackoffPolicy(base=self.base, cap=self.cap).delay(self.attempts)
        self.attempts = min(self.attempts + 1, 30)
        return d / 2 + self.rng.random() * d / 2

    def reset(self) -> None:
        self.attempts = 0


@dataclass(slots=True)
class InformerStats:
    lists: int = 0
    watches: int = 0
    relists_on_410: int = 0
    errors: int = 0
    events: int = 0


class Informer:
    """A store of one resource's objects kept current by list + watch."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        handler: Handler | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        rng: random.Random | None = None,
        backoff_base: float = 0.2,
        backoff_cap: float = 30.0,
        watch_timeout: int = 300,
        page_size: int = 500,
        transform: Callable[[Obj], Obj] | None = None,
        slimmer: Slimmer | None = None,
        keep_recent: int = 0,
    ) -> None:
        self.client = client
        self.transform = transform  # applied to each object before it is stored
        self.slimmer = slimmer  # stores slim packed copies (see .slim)
        self.resource = resource
        self.handler = handler
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.store: MutableMapping[str, Obj] = self._new_store()
        # the last whole objects seen, for full(): building a Workload from a new Job
        # needs its whole template, and so does copying it to a worker
        self.keep_recent = keep_recent if slimmer is not None else 0
        self._recent = RecentObjects(self.keep_recent)
        self.full_reads = 0  # full() calls answered by a GET
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.stats = InformerStats()
        self._rng = rng or random.Random()
        self._backoff = Backoff(base=backoff_base, cap=backoff_cap, rng=self._rng)
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.on_relist: Callable[[], None] | None = None

    @property
    def name(self) -> str:
        return self.resource.plural

    def get(self, key: str) -> Obj | None:
        return self.store.get(key)

    def _new_store(self) -> MutableMapping[str, Obj]:
        if self.slimmer is None:
            return {}
        return PackedStore(
            self.slimmer, api_version=self.resource.api_version, kind=self.resource.kind
        )

    def slim(self, obj: Obj) -> Obj:
        """What this informer stores of ``obj`` (``obj`` itself when nothing is slimmed)."""
        return obj if self.slimmer is None else self.slimmer.slim(obj)

    def _ingest(self, obj: Obj, *, recent: bool = True) -> tuple[str, Obj]:
        """(key, stored form) of an object from a list or watch; ``recent``: kept whole
        for :meth:`full` (not the objects of a list: a restart's would cost packing them
        all, for the few that are read whole)."""
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        if self.transform is not None:
            obj = self.transform(obj)
        # one string per key, shared by every table keyed by it (stores, indexes, queues)
        key = sys.intern(self.resource.key_of(obj))
        if recent and self.keep_recent:
            # by reference: nothing changes ``obj`` from here on (slimming copies what it
            # changes, the store packs, and handlers never change the slim dict, which
            # shares parts with ``obj``)
            self._recent.put(key, obj)
        return key, self.slim(obj)

    async def full(self, key: str, *, at_least: str = "") -> Obj | None:
        """The whole object (not the slim copy): the last one seen when it is at least
        as new as resourceVersion ``at_least`` (and as the stored one), else read from
        the API. None when it does not exist."""
        if self.slimmer is None:
            return self.store.get(key)
        stored = self.store.get(key)
        want = at_least or _rv(stored)
        recent = self._recent.get(key)
        if recent is not None and (not want or rv_at_least(recent, want)):
            return recent
        ns, _, name = key.rpartition("/")
        self.full_reads += 1
        try:
            obj = await self.client.get(
                self.resource, name, namespace=ns if self.resource.namespaced else None
            )
        except ApiError as err:
            if err.not_found:
                return None
            raise
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        obj = strip_managed_fields(obj)
        if self.keep_recent:  # read once: the next full() of it answers from here
            self._recent.put(key, obj)  # kept by reference: the caller gets a copy
            return self._recent.get(key)
        return obj

    def reset(self) -> None:
        """Forget every object and the resourceVersion, unsynced, with no events (the
        resource stopped being served: :mod:`.integrationgate`); the next :meth:`run`
        lists afresh and reports each object as ADDED."""
        self.store = self._new_store()
        self._recent.clear()
        self.resource_version = ""
        self.synced.clear()
        self._backoff.reset()

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                    self._backoff.reset()
                    outage_of(self.client).recovered()
                await self._watch_once()
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                self.stats.errors += 1
                if err.gone:
                    self.stats.relists_on_410 += 1
                    log.info("%s: watch window expired (410), relisting", self.name)
                    need_list = True
                    continue
                delay = self._backoff.next()
                if err.status == 0:  # said once per back-off for all informers
                    outage_of(self.client).failed(err.message, delay, who=self.name)
                else:
                    log.warning("%s: %s; retrying in %.2fs", self.name, err, delay)
                await asyncio.sleep(delay)
            except Exception:  # noqa: BLE001 - a handler bug must not stop the informer
                self.stats.errors += 1
                delay = self._backoff.next()
                log.exception("%s: informer error; relisting in %.2fs", self.name, delay)
                need_list = True
                await asyncio.sleep(delay)

    async def _relist(self) -> None:
        items = self._new_store()
        token: str | None = None
        rv = ""
        while True:
            page = await self.client.list(
                self.resource,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=self.page_size,
                continue_token=token,
            )
            self.stats.lists += 1
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion") or "")
            for obj in page.get("items") or []:
                key, stored = self._ingest(obj, recent=False)
                items[key] = stored
            token = meta.get("continue") or None
            if not token:
                break
        old = self.store
        self.store = items
        self.resource_version = rv
        if self.on_relist is not None:
            self.on_relist()
        for key, obj in items.items():
            prev = old.get(key)
            if prev is None:
                self._emit(ADDED, key, obj, None)
            elif _rv(prev) != _rv(obj):
                self._emit(MODIFIED, key, obj, prev)
        for key, prev in old.items():
            if key not in items:
                self._emit(DELETED, key, None, prev)
        self.synced.set()

    async def _watch_once(self) -> None:
        self.stats.watches += 1
        # client-go's reflector: between minWatchTimeout (5 min) and twice that, so the
        # informers' watches do not all end at once; every new watch is a request
        timeout = max(30, int(self.watch_timeout * (1.0 + self._rng.random())))
        async for event in self.client.watch(
            self.resource,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=timeout,
        ):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiError(
                    code or 500,
                    str(obj.get("reason") or "WatchError"),
                    str(obj.get("message") or "watch error"),
                    call=f"watch {self.name}",
                )
            rv = _rv(obj)
            if rv:
                self.resource_version = rv
            if kind == "BOOKMARK":
                continue
            self._backoff.reset()
            key, obj = self._ingest(obj)
            if kind in (ADDED, MODIFIED):
                prev = self.store.get(key)
                self.store[key] = obj
                self._emit(MODIFIED if prev is not None else ADDED, key, obj, prev)
            elif kind == DELETED:
                self._recent.pop(key)
                prev = self.store.pop(key, None)
                self._emit(DELETED, key, None, prev or obj)

    def _emit(self, kind: str, key: str, new: Obj | None, old: Obj | None) -> None:
        self.stats.events += 1
        if self.handler is None:
            return
        try:
            self.handler(kind, key, new, old)
        except Exception:  # noqa: BLE001 - one bad object must not stop the stream
            log.exception("%s: handler failed on %s %s", self.name, kind, key)


def strip_managed_fields(obj: Obj) -> Obj:
    """client-go's usual informer transform: managedFields are never read here."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _rv(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str((meta or {}).get("resourceVersion") or "")
