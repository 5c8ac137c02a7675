"""The control-plane loops that finish deletions, run asynchronously beside the double.

On a cluster a DELETE often only *starts* a deletion; other components finish it:

* the **garbage collector** (kube-controller-manager) handles ``propagationPolicy``:
  ``Orphan`` puts the ``orphan`` finalizer on the owner, and the collector removes
  the dependents' ownerReferences, then the finalizer; ``Foreground`` puts
  ``foregroundDeletion`` on it and the collector deletes the dependents first;
  ``Background`` removes the owner at once and the collector deletes dependents
  whose owners are all gone -- later, not inside the request;
* the **namespace controller**: a deleted Namespace is ``Terminating`` (with the
  ``kubernetes`` spec finalizer) until everything in it is gone;
* the **kubelet**: a pod bound to a node (``spec.nodeName``) is deleted gracefully --
  ``deletionTimestamp`` plus ``deletionGracePeriodSeconds`` -- and removed once the
  kubelet has stopped it (here after ``kubelet_delay`` seconds); on a node tainted
  ``node.kubernetes.io/unreachable`` no kubelet confirms, and the pod stays terminating.

:class:`Controllers` watches the store's events and runs a pass soon after anything
relevant happened (``delay`` seconds, on the server's loop).  The garbage collector
writes through the API, as kube-controller-manager's does: its updates (a dependent's
ownerReferences dropped, the ``orphan``/``foregroundDeletion`` finalizer lifted) and
deletes go through the write path with admission (:class:`CollectorApi`), as
``system:serviceaccount:kube-system:generic-garbage-collector``, so the webhooks see
them and may refuse them: a refused write is tried again on a later pass, as the
collector retries. The test hook :meth:`Controllers.run_now` (``ApiServer.delete_object``)
finishes everything at once in the store instead, as every pass of the namespace
controller and of the kubelet stand-in does (their writes pass no webhook the double
models).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from .admission import UserInfo
from .errors import ApiError
from .store import StaleWrite, Store, WatchEvent
from .strategy import now_rfc3339

if TYPE_CHECKING:
    from .resources import Registry, ResourceType

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
NAMESPACE_FINALIZER = "kubernetes"
#: kube-controller-manager's garbage collector (``--use-service-account-credentials``)
GARBAGE_COLLECTOR = UserInfo(
    "system:serviceaccount:kube-system:generic-garbage-collector",
    ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
)
RETRY_SECONDS = 0.2  # a refused collector write is tried again after this


class RemoveOrMark(Protocol):
    """The API's delete path as the loops use it (``Operations.remove_or_mark``):
    remove ``old`` or mark it deleted, following ``policy``."""

    def __call__(
        self, rt: ResourceType, old: Obj, *, policy: str, grace: int | None = None
    ) -> object: ...


class CollectorApi(Protocol):
    """The API's write path as the garbage collector uses it (``Operations``): a patch
    (``compute`` of the stored object) and a delete, with admission, as ``user``."""

    async def update_as(
        self, user: UserInfo, rt: ResourceType, obj: Obj, compute: Callable[[Obj], Obj]
    ) -> object: ...

    async def delete_as(self, user: UserInfo, rt: ResourceType, obj: Obj) -> object: ...


class _StoreWriter:
    """How a collector pass writes: straight into the store (the synchronous test hook;
    never waits), or through the API (:class:`_ApiWriter`). Each write answers whether
    it is done (False: refused, to be tried again)."""

    def __init__(self, controllers: Controllers) -> None:
        self.c = controllers

    async def update(self, rt: ResourceType, obj: Obj, change: Callable[[Obj], Obj]) -> bool:
        return self.c._replace(rt, obj, change(copy.deepcopy(obj)))

    async def delete(self, rt: ResourceType, obj: Obj) -> bool:
        self.c.remove_or_mark(rt, obj, policy="Background")
        return True


class _ApiWriter(_StoreWriter):
    def __init__(self, controllers: Controllers, api: CollectorApi) -> None:
        super().__init__(controllers)
        self.api = api

    async def update(self, rt: ResourceType, obj: Obj, change: Callable[[Obj], Obj]) -> bool:
        uid = obj["metadata"].get("uid")

        def compute(current: Obj) -> Obj:
            if current["metadata"].get("uid") != uid:
                raise ApiError(409, "the object was deleted and created again")
            return change(copy.deepcopy(current))

        try:
            await self.api.update_as(GARBAGE_COLLECTOR, rt, obj, compute)
        except ApiError as err:
            return _settled(rt, obj, err)
        return True

    async def delete(self, rt: ResourceType, obj: Obj) -> bool:
        try:
            await self.api.delete_as(GARBAGE_COLLECTOR, rt, obj)
        except ApiError as err:
            return _settled(rt, obj, err)
        return True


def _settled(rt: ResourceType, obj: Obj, err: ApiError) -> bool:
    """Whether a refused write needs no retry: its object is gone or was replaced."""
    if err.status in (404, 409):
        return True
    meta = obj["metadata"]
    log.warning("garbage collector: %s %s/%s: %s", rt.plural, meta.get("namespace") or "",
                meta.get("name"), err)  # fmt: skip
    return False


def _drive(coro: Coroutine[Any, Any, tuple[bool, bool]]) -> tuple[bool, bool]:
    """Run a pass whose writes never wait (the store writer) to its end, synchronously."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a synchronous garbage-collector pass waited")


class Controllers:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        remove_or_mark: RemoveOrMark,
        *,
        api: CollectorApi | None = None,
        delay: float = 0.01,
        kubelet_delay: float = 0.05,
    ):
        self.store = store
        self.registry = registry
        self.remove_or_mark = remove_or_mark
        self.api = api  # None: the collector writes into the store too
        self._gc_task: asyncio.Task[None] | None = None
        self._gc_again = False
        self.delay = delay
        self.kubelet_delay = kubelet_delay
        self.gone: set[str] = set()  # uids of removed objects
        self._absent: set[str] = set()  # removed owners whose dependents are unchecked
        self._finalizing: set[tuple[str, str, str]] = set()  # (rt key, ns, name)
        self._namespaces: set[str] = set()
        self._pods: dict[tuple[str, str], float] = {}  # terminating bound pods -> due time
        self._handle: asyncio.Handle | None = None
        self._types = {rt.key: rt for rt in registry}
        self.store.listeners.append(self._on_event)

    # -- triggers -------------------------------------------------------------------------

    def _on_event(self, rt: ResourceType, event: WatchEvent) -> None:
        self._types.setdefault(rt.key, rt)  # kinds served later, from a CRD
        meta = event.obj.get("metadata") or {}
        if event.type == "DELETED":
            if meta.get("uid"):
                self.gone.add(meta["uid"])
                self._absent.add(meta["uid"])
            self.kick()
        elif meta.get("deletionTimestamp"):
            self.kick()

    def track(self, rt: ResourceType, obj: Obj) -> None:
        """A deletion this loop must finish (called by the delete path)."""
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        if ORPHAN in finalizers or FOREGROUND in finalizers:
            self._finalizing.add((rt.key, meta.get("namespace") or "", meta["name"]))
        if rt.plural == "namespaces" and not rt.group:
            self._namespaces.add(meta["name"])
        if rt.plural == "pods" and not rt.group and (meta.get("deletionGracePeriodSeconds") or 0):
            self._pods[(meta["namespace"], meta["name"])] = self._now() + self.kubelet_delay
        self.kick()

    def _now(self) -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return 0.0

    def kick(self, delay: float | None = None) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving yet (objects given to the constructor): run_now() covers it
        if self._handle is None:
            self._handle = loop.call_later(self.delay if delay is None else delay, self._run)

    def _run(self) -> None:
        self._handle = None
        if self.api is None:
            self.run_now(kubelet=False)
        else:
            for _ in range(100):
                if not (self._terminating_namespaces() | self._stopped_pods(force=False)):
                    break
            self._start_collector()
        if self._pods:
            now = self._now()
            due = min(self._pods.values())
            self.kick(max(0.0, due - now))

    def _start_collector(self) -> None:
        """The collector's passes through the API, one task at a time."""
        if not (self._finalizing or self._absent):
            return
        if self._gc_task is not None and not self._gc_task.done():
            self._gc_again = True  # what it finds next is picked up by the running task
            return
        self._gc_task = asyncio.get_running_loop().create_task(self._collect_through_the_api())

    async def _collect_through_the_api(self) -> None:
        assert self.api is not None
        writer = _ApiWriter(self, self.api)
        try:
            for _ in range(100):
                self._gc_again = False
                changed, refused = await self._collect(writer)
                if refused:
                    self.kick(RETRY_SECONDS)
                    return
                if not changed and not self._gc_again:
                    return
        except Exception:  # noqa: BLE001 - a collector bug must not end the double's loop
            log.exception("garbage collector pass failed")
            self.kick(RETRY_SECONDS)

    # -- one pass ---------------------------------------------------------------------------

    def run_now(self, *, kubelet: bool = True) -> None:
        """Run every loop until nothing changes (``kubelet``: stop bound pods now); the
        collector writes into the store (a test hook: no admission)."""
        writer = _StoreWriter(self)
        for _ in range(100):
            changed, _ = _drive(self._collect(writer))
            changed |= self._terminating_namespaces()
            changed |= self._stopped_pods(force=kubelet)
            if not changed:
                return

    async def _collect(self, writer: _StoreWriter) -> tuple[bool, bool]:
        """One garbage-collector pass: (whether it changed anything, whether a write was
        refused, its work kept for a later pass)."""
        changed, refused = await self._deletion_finalizers(writer)
        more, refused_more = await self._dependents_of_absent_owners(writer)
        return changed or more, refused or refused_more

    def _replace(self, rt: ResourceType, old: Obj, new: Obj) -> bool:
        try:
            if deletable(rt, new):
                self.store.remove(rt, new, expected_rv=old["metadata"]["resourceVersion"])
                return True
            self.store.replace(rt, new, expected_rv=old["metadata"]["resourceVersion"])
        except StaleWrite:
            pass
        return True

    async def _deletion_finalizers(self, writer: _StoreWriter) -> tuple[bool, bool]:
        changed = refused = False
        for key in list(self._finalizing):
            rt_key, ns, name = key
            rt = self._types[rt_key]
            obj = self.store.get(rt, ns, name)
            finalizers = ((obj or {}).get("metadata") or {}).get("finalizers") or []
            if obj is None or not ({ORPHAN, FOREGROUND} & set(finalizers)):
                self._finalizing.discard(key)
                continue
            uid = obj["metadata"]["uid"]
            dependents = list(self.store.dependents(uid))
            done_all = True
            if ORPHAN in finalizers:
                for dep_rt, dep in dependents:
                    done_all &= await self._drop_refs(writer, dep_rt, dep, {uid})
                done = ORPHAN
            else:
                pending = False
                for dep_rt, dep in dependents:
                    pending = True
                    if not dep["metadata"].get("deletionTimestamp"):
                        done_all &= await writer.delete(dep_rt, dep)
                        changed = True
                if pending:
                    refused |= not done_all
                    continue
                done = FOREGROUND
            if not done_all:  # a dependent keeps its reference for now, so does the owner
                refused = True
                continue

            def lifted(current: Obj, done: str = done) -> Obj:
                left = [f for f in current["metadata"].get("finalizers") or [] if f != done]
                if left:
                    current["metadata"]["finalizers"] = left
                else:
                    current["metadata"].pop("finalizers", None)
                return current

            if await writer.update(rt, obj, lifted):
                changed = True
                self._finalizing.discard(key)
            else:
                refused = True
        return changed, refused

    @staticmethod
    async def _drop_refs(writer: _StoreWriter, rt: ResourceType, dep: Obj, uids: set[str]) -> bool:
        def dropped(current: Obj) -> Obj:
            meta = current["metadata"]
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") not in uids]
            if refs:
                meta["ownerReferences"] = refs
            else:
                meta.pop("ownerReferences", None)
            return current

        return await writer.update(rt, dep, dropped)

    async def _dependents_of_absent_owners(self, writer: _StoreWriter) -> tuple[bool, bool]:
        changed = refused = False
        retry: set[str] = set()
        while self._absent:
            uid = self._absent.pop()
            for rt, dep in list(self.store.dependents(uid)):
                changed = True
                refs = dep["metadata"].get("ownerReferences") or []
                if all(r.get("uid") in self.gone for r in refs):
                    done = bool(dep["metadata"].get("deletionTimestamp")) or await writer.delete(
                        rt, dep
                    )
                else:
                    done = await self._drop_refs(writer, rt, dep, set(self.gone))
                if not done:
                    retry.add(uid)
                    refused = True
        self._absent |= retry
        return changed, refused

    def _terminating_namespaces(self) -> bool:
        changed = False
        ns_rt = self._types["namespaces"]
        for name in list(self._namespaces):
            namespace = self.store.get(ns_rt, "", name)
            if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
                self._namespaces.discard(name)
                continue
            left = 0
            for rt in self.registry:
                if not rt.namespaced:
                    continue
                for obj in self.store.list(rt, name):
                    left += 1
                    if not obj["metadata"].get("deletionTimestamp"):
                        self.remove_or_mark(rt, obj, policy="Background")
                        changed = True
            if left:
                continue
            new = copy.deepcopy(namespace)
            spec = new.setdefault("spec", {})
            spec["finalizers"] = [
                f for f in spec.get("finalizers") or [] if f != NAMESPACE_FINALIZER
            ]
            if not spec["finalizers"]:
                del spec["finalizers"]
            self._replace(ns_rt, namespace, new)
            self._namespaces.discard(name)
            changed = True
        return changed

    def _unreachable(self, pod: Obj) -> bool:
        """The pod's node carries ``node.kubernetes.io/unreachable`` (its kubelet is gone)."""
        node_name = (pod.get("spec") or {}).get("nodeName")
        nodes = self._types.get("nodes")
        node = self.store.get(nodes, "", node_name) if node_name and nodes is not None else None
        return any(
            isinstance(t, dict) and t.get("key") == "node.kubernetes.io/unreachable"
            for t in ((node or {}).get("spec") or {}).get("taints") or []
        )

    def _stopped_pods(self, *, force: bool) -> bool:
        changed = False
        now = self._now()
        pods = self._types["pods"]
        for key, due in list(self._pods.items()):
            if not force and due > now:
                continue
            pod = self.store.get(pods, *key)
            if pod is not None and not force and self._unreachable(pod):
                continue  # its node's kubelet is down: nobody confirms (stuck terminating)
            del self._pods[key]
            if pod is None or not pod["metadata"].get("deletionTimestamp"):
                continue
            new = copy.deepcopy(pod)
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            changed |= self._replace(pods, pod, new)
        return changed


def mark_namespace_terminating(obj: Obj) -> Obj:
    new = copy.deepcopy(obj)
    new["metadata"]["deletionTimestamp"] = now_rfc3339()
    new["metadata"]["deletionGracePeriodSeconds"] = 0
    new.setdefault("spec", {})["finalizers"] = [NAMESPACE_FINALIZER]
    new.setdefault("status", {})["phase"] = "Terminating"
    return new


def deletable(rt: ResourceType, obj: Obj) -> bool:
    """A deleting object goes once nothing holds it: no finalizers (a Namespace's spec
    ones too) and, for a pod, the kubelet's confirmation (grace period 0)."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp") or meta.get("finalizers"):
        return False
    if rt.plural == "namespaces" and not rt.group:
        return not (obj.get("spec") or {}).get("finalizers")
    if rt.plural == "pods" and not rt.group:
        return not meta.get("deletionGracePeriodSeconds")
    return True
