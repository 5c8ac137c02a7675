"""In-memory object storage with etcd-like resource versions and a watch event window.

This is the double's etcd: one global, monotonically increasing revision that becomes
every object's ``metadata.resourceVersion``; compare-and-swap writes
(:meth:`Store.replace` with the revision the writer read); and, per resource type, a
bounded ring buffer of events from which watches resume.  A watch that asks for a
revision older than the buffer holds gets ``410 Expired`` -- the case every informer
must handle by relisting.  All methods run on the server's event loop; stored dicts are
never mutated in place (writers build new dicts), so watchers can share them.
"""

from __future__ import annotations

import asyncio
import builtins
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import already_exists, bad_request, expired, not_found
from .resources import Registry, ResourceType
from .selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]
ObjectKey = tuple[str, str]  # (namespace or "", name)


class StaleWrite(Exception):
    """The object changed between read and write; the caller re-reads and retries."""


def object_key(obj: Obj) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None = None


@dataclass(frozen=True, slots=True)
class Drop:
    """Queue sentinel: end this watch (``abrupt`` kills the connection instead)."""

    abrupt: bool = False


class Watcher:
    """One open watch: filters the resource's events and queues what its client sees."""

    def __init__(
        self,
        *,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> None:
        self.rt = rt
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.queue: asyncio.Queue[tuple[str, Obj] | Drop] = asyncio.Queue()

    def _matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace and (obj["metadata"].get("namespace") or "") != self.namespace:
            return False
        return self.labels.matches(obj["metadata"].get("labels")) and self.fields.matches(obj)

    def offer(self, event: WatchEvent) -> None:
        """Queue ``event`` as this watcher sees it (selector transitions become ADDED/DELETED)."""
        now = self._matches(event.obj)
        if event.type != "MODIFIED":
            if now:
                self.queue.put_nowait((event.type, event.obj))
            return
        before = self._matches(event.old)
        if now and before:
            self.queue.put_nowait(("MODIFIED", event.obj))
        elif now:
            self.queue.put_nowait(("ADDED", event.obj))
        elif before:
            self.queue.put_nowait(("DELETED", event.obj))

    def drop(self, *, abrupt: bool = False) -> None:
        self.queue.put_nowait(Drop(abrupt=abrupt))


@dataclass(slots=True)
class _EventLog:
    window: int
    events: deque[WatchEvent] = field(default_factory=deque)
    floor: int = 0  # every event with rv > floor is still in `events`
    watchers: set[Watcher] = field(default_factory=set)

    def append(self, event: WatchEvent) -> None:
        self.events.append(event)
        while len(self.events) > self.window:
            self.floor = self.events.popleft().rv


class Store:
    """Objects per resource type, keyed by (namespace, name), plus per-type event logs."""

    def __init__(self, registry: Registry, *, window: int = 1000) -> None:
        if window < 1:
            raise ValueError(f"watch window must be >= 1 event, got {window}")
        self.registry = registry
        self.window = window
        self.revision = 0
        self._objects: dict[str, dict[ObjectKey, Obj]] = {rt.key: {} for rt in registry}
        self._logs: dict[str, _EventLog] = {rt.key: _EventLog(window) for rt in registry}
        self._types = {rt.key: rt for rt in registry}
        self._dependents: dict[str, set[tuple[str, ObjectKey]]] = {}
        #: called with (type, event) after every write (the controllers' trigger)
        self.listeners: list[Callable[[ResourceType, WatchEvent], None]] = []

    # -- reads ------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._objects[rt.key].get((namespace if rt.namespaced else "", name))

    def require(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.get(rt, namespace, name)
        if obj is None:
            raise not_found(rt.qualified(), name)
        return obj

    def list(self, rt: ResourceType, namespace: str | None = None) -> list[Obj]:
        objects = self._objects[rt.key]
        keys = sorted(k for k in objects if not namespace or k[0] == namespace)
        return [objects[k] for k in keys]

    def count(self, rt: ResourceType) -> int:
        return len(self._objects[rt.key])

    def dependents(self, owner_uid: str) -> Iterator[tuple[ResourceType, Obj]]:
        """Objects whose ownerReferences name ``owner_uid``."""
        for rt_key, key in sorted(self._dependents.get(owner_uid, ())):
            rt = self._types[rt_key]
            obj = self._objects[rt.key].get(key)
            if obj is not None:
                yield rt, obj

    # -- writes -----------------------------------------------------------------------

    def _next_revision(self, obj: Obj) -> Obj:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        return obj

    def insert(self, rt: ResourceType, obj: Obj) -> Obj:
        """Store a new object (which becomes owned by the store) and emit ADDED."""
        key = object_key(obj)
        objects = self._objects[rt.key]
        if key in objects:
            raise already_exists(rt.qualified(), key[1])
        self._next_revision(obj)
        objects[key] = obj
        self._index_owners(rt, key, None, obj)
        self._emit(rt, WatchEvent(self.revision, "ADDED", obj))
        return obj

    def replace(self, rt: ResourceType, obj: Obj, *, expected_rv: str) -> Obj:
        """Compare-and-swap: replace the object if it is still at ``expected_rv``."""
        key = object_key(obj)
        objects = self._objects[rt.key]
        old = objects.get(key)
        if old is None or old["metadata"]["resourceVersion"] != expected_rv:
            raise StaleWrite(key)
        self._next_revision(obj)
        objects[key] = obj
        self._index_owners(rt, key, old, obj)
        self._emit(rt, WatchEvent(self.revision, "MODIFIED", obj, old))
        return obj

    def remove(self, rt: ResourceType, obj: Obj, *, expected_rv: str) -> Obj:
        """Delete the object if still at ``expected_rv``; the DELETED event carries ``obj``."""
        key = object_key(obj)
        objects = self._objects[rt.key]
        old = objects.get(key)
        if old is None or old["metadata"]["resourceVersion"] != expected_rv:
            raise StaleWrite(key)
        del objects[key]
        self._index_owners(rt, key, old, None)
        final = self._next_revision(obj)
        self._emit(rt, WatchEvent(self.revision, "DELETED", final, old))
        return final

    def _index_owners(
        self, rt: ResourceType, key: ObjectKey, old: Obj | None, new: Obj | None
    ) -> None:
        for obj, add in ((old, False), (new, True)):
            for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []:
                uid = ref.get("uid")
                if not uid:
                    continue
                entries = self._dependents.setdefault(uid, set())
                (entries.add if add else entries.discard)((rt.key, key))
                if not entries:
                    del self._dependents[uid]

    def _emit(self, rt: ResourceType, event: WatchEvent) -> None:
        log = self._logs[rt.key]
        log.append(event)
        for watcher in list(log.watchers):
            watcher.offer(event)
        for listener in self.listeners:
            listener(rt, event)

    # -- served types -----------------------------------------------------------------

    def add_type(self, rt: ResourceType) -> None:
        """Store objects of ``rt`` (a CRD was established); a type of the same key keeps
        its objects and event log (a CRD update)."""
        self._types[rt.key] = rt
        self._objects.setdefault(rt.key, {})
        self._logs.setdefault(rt.key, _EventLog(self.window))

    def drop_type(self, rt: ResourceType) -> None:
        """Forget ``rt`` (its CRD was deleted): each object is removed with a DELETED
        event, then its watches end, as kube-apiserver's CRD finalizer deletes every
        custom resource before it stops serving them."""
        for obj in list(self._objects.get(rt.key, {}).values()):
            self.remove(rt, obj, expected_rv=obj["metadata"]["resourceVersion"])
        log = self._logs.pop(rt.key, None)
        for watcher in list(log.watchers) if log is not None else ():
            watcher.drop()
        self._objects.pop(rt.key, None)
        self._types.pop(rt.key, None)

    # -- watches ----------------------------------------------------------------------

    def watch(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        since: str | None,
    ) -> Watcher:
        """Open a watch; ``since`` absent or "0" starts with ADDED for the current state."""
        watcher = Watcher(rt=rt, namespace=namespace, labels=labels, fields=fields)
        log = self._logs[rt.key]
        if since in (None, "", "0"):
            for obj in self.list(rt, namespace):
                watcher.offer(WatchEvent(self.revision, "ADDED", obj))
        else:
            try:
                since_rv = int(since)
            except ValueError:
                raise bad_request(
                    f"resourceVersion: Invalid value: {since!r}: must be an integer"
                ) from None
            if since_rv < log.floor:
                raise expired(f"too old resource version: {since_rv} ({log.floor + 1})")
            for event in log.events:
                if event.rv > since_rv:
                    watcher.offer(event)
        log.watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        """Forget ``watcher``; a no-op when its type is gone (the CRD delete already
        ended and dropped its watches)."""
        log = self._logs.get(watcher.rt.key)
        if log is not None:
            log.watchers.discard(watcher)

    def watchers(self) -> builtins.list[Watcher]:
        return [w for log in self._logs.values() for w in log.watchers]

    def compact(self) -> None:
        """Forget every buffered event: watches from any older revision now get 410."""
        for log in self._logs.values():
            log.events.clear()
            log.floor = self.revision

    def drop_watches(self, *, abrupt: bool = False) -> int:
        watchers = self.watchers()
        for watcher in watchers:
            watcher.drop(abrupt=abrupt)
        return len(watchers)
