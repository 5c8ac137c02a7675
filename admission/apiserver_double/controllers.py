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
  kubelet has stopped it (here after ``kubelet_delay`` seconds).

:class:`Controllers` watches the store's events and runs a pass soon after anything
relevant happened (``delay`` seconds, on the server's loop).  Its passes act with the
store directly, as those components' writes pass no webhooks the double models.
"""

from __future__ import annotations

import asyncio
import copy
from typing import TYPE_CHECKING, Any, Protocol

from .store import StaleWrite, Store, WatchEvent
from .strategy import now_rfc3339

if TYPE_CHECKING:
    from .resources import Registry, ResourceType

Obj = dict[str, Any]
ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
NAMESPACE_FINALIZER = "kubernetes"


class RemoveOrMark(Protocol):
    """The API's delete path as the loops use it (``Operations.remove_or_mark``):
    remove ``old`` or mark it deleted, following ``policy``."""

    def __call__(
        self, rt: ResourceType, old: Obj, *, policy: str, grace: int | None = None
    ) -> object: ...


class Controllers:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        remove_or_mark: RemoveOrMark,
        *,
        delay: float = 0.01,
        kubelet_delay: float = 0.05,
    ):
        self.store = store
        self.registry = registry
        self.remove_or_mark = remove_or_mark
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
        self.run_now(kubelet=False)
        if self._pods:
            now = self._now()
            due = min(self._pods.values())
            self.kick(max(0.0, due - now))

    # -- one pass ---------------------------------------------------------------------------

    def run_now(self, *, kubelet: bool = True) -> None:
        """Run every loop until nothing changes (``kubelet``: stop bound pods now)."""
        for _ in range(100):
            changed = self._deletion_finalizers()
            changed |= self._dependents_of_absent_owners()
            changed |= self._terminating_namespaces()
            changed |= self._stopped_pods(force=kubelet)
            if not changed:
                return

    def _replace(self, rt: ResourceType, old: Obj, new: Obj) -> bool:
        try:
            if deletable(rt, new):
                self.store.remove(rt, new, expected_rv=old["metadata"]["resourceVersion"])
                return True
            self.store.replace(rt, new, expected_rv=old["metadata"]["resourceVersion"])
        except StaleWrite:
            pass
        return True

    def _deletion_finalizers(self) -> bool:
        changed = False
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
            if ORPHAN in finalizers:
                for dep_rt, dep in dependents:
                    self._drop_refs(dep_rt, dep, {uid})
                done = ORPHAN
            else:
                pending = False
                for dep_rt, dep in dependents:
                    pending = True
                    if not dep["metadata"].get("deletionTimestamp"):
                        self.remove_or_mark(dep_rt, dep, policy="Background")
                        changed = True
                if pending:
                    continue
                done = FOREGROUND
            new = copy.deepcopy(obj)
            new["metadata"]["finalizers"] = [f for f in finalizers if f != done]
            if not new["metadata"]["finalizers"]:
                del new["metadata"]["finalizers"]
            changed |= self._replace(rt, obj, new)
            self._finalizing.discard(key)
        return changed

    def _drop_refs(self, rt: ResourceType, dep: Obj, uids: set[str]) -> None:
        new = copy.deepcopy(dep)
        refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") not in uids]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self._replace(rt, dep, new)

    def _dependents_of_absent_owners(self) -> bool:
        changed = False
        while self._absent:
            uid = self._absent.pop()
            for rt, dep in list(self.store.dependents(uid)):
                changed = True
                refs = dep["metadata"].get("ownerReferences") or []
                if all(r.get("uid") in self.gone for r in refs):
                    if not dep["metadata"].get("deletionTimestamp"):
                        self.remove_or_mark(rt, dep, policy="Background")
                else:
                    self._drop_refs(rt, dep, self.gone)
        return changed

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

    def _stopped_pods(self, *, force: bool) -> bool:
        changed = False
        now = self._now()
        pods = self._types["pods"]
        for key, due in list(self._pods.items()):
            if not force and due > now:
                continue
            del self._pods[key]
            pod = self.store.get(pods, *key)
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
