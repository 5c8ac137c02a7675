"""CustomResourceDefinitions as objects: installing one serves its resource, deleting
it stops serving it.

kube-apiserver serves a custom resource only while its CRD exists: until then (and
after the CRD is deleted) a list or watch of the resource answers 404 and discovery
does not name it. The double models this with a store listener, the part of
apiextensions-apiserver's establishing and finalizing controllers that a client can
observe: a CRD written (created, or updated to other versions or names) registers its
:class:`~.resources.ResourceType` in the registry and the store; a CRD deleted removes
every object of its resource (each with a DELETED event), ends the watches on it and
unregisters it. A CRD is checked as apiextensions checks it (:func:`.crds.check_crd`)
before it is stored, and is stored ``Established`` and ``NamesAccepted`` at once.

Departures from a real server: the deletion is immediate (no ``Terminating``
condition, no ``customresourcecleanup`` finalizer, finalizers of the custom resources
are not waited for), and there is no window in which a just-established resource
answers 429 "storage is (re)initializing".
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from .crds import check_crd, resource_type
from .resources import Registry, ResourceType
from .store import Store, WatchEvent

Obj = dict[str, Any]
CRD_GROUP = "apiextensions.k8s.io"
CRD_PLURAL = "customresourcedefinitions"


def is_crd(rt: ResourceType) -> bool:
    return rt.group == CRD_GROUP and rt.plural == CRD_PLURAL


def check(crd: Obj) -> None:
    """Raise the 422 a real server answers for a CRD it refuses (cached by content:
    compiling the CEL rules of a large CRD is slow)."""
    _check(
        json.dumps(crd.get("spec"), sort_keys=True), json.dumps(crd.get("metadata", {}).get("name"))
    )


@lru_cache(maxsize=256)
def _check(spec: str, name: str) -> None:
    check_crd({"metadata": {"name": json.loads(name)}, "spec": json.loads(spec)})


def established_status(crd: Obj) -> Obj:
    """The status the establishing controller writes: names accepted, established."""
    spec = crd.get("spec") or {}
    conditions = [
        {"type": t, "status": "True", "reason": r, "message": m}
        for t, r, m in (
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        )
    ]
    stored = [v.get("name") for v in spec.get("versions") or [] if v.get("storage")]
    return {"acceptedNames": dict(spec.get("names") or {}), "conditions": conditions,
            "storedVersions": stored}  # fmt: skip


class CustomResourceDefinitions:
    """Keeps the served custom resources equal to the stored CRDs."""

    def __init__(self, registry: Registry, store: Store) -> None:
        self.registry = registry
        self.store = store
        store.listeners.append(self._on_event)

    def _on_event(self, rt: ResourceType, event: WatchEvent) -> None:
        if not is_crd(rt):
            return
        crd = event.obj
        if event.type == "DELETED":
            self._uninstall(crd)
        else:
            self._install(crd)

    def _install(self, crd: Obj) -> None:
        served = resource_type(crd)
        self.registry.install(served)
        self.store.add_type(served)

    def _uninstall(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        key = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        served = self.registry.uninstall(key)
        if served is not None:
            self.store.drop_type(served)
