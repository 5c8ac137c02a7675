"""Where an API resource lives and how it is addressed: its group, version and plural,
its REST paths and object keys, and the verbs the service uses on it."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


def gvk(api_version: str, kind: str) -> str:
    """Kueue's ``GroupVersionKind.String()``: how the ``job-owner-gvk`` annotation and
    Kueue's messages name a kind (``apps/v1, Kind=StatefulSet``)."""
    return f"{api_version}, Kind={kind}"


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: where it lives and how it is addressed (the job kinds', and
    every other resource ``admission.kube`` reads or writes)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gvk(self) -> str:
        """The kind as :func:`gvk` names it (``apps/v1, Kind=StatefulSet``)."""
        return gvk(self.api_version, self.kind)

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The REST path (``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<sub>]]``)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base

    def key_of(self, obj: Mapping[str, Any]) -> str:
        """``namespace/name`` for namespaced resources, ``name`` otherwise."""
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        return sys.intern(f"{meta.get('namespace') or ''}/{name}") if self.namespaced else name


@dataclass(frozen=True, slots=True)
class ApiUse:
    """A verb on a resource (or one of its subresources) an integration needs."""

    resource: Resource
    verbs: tuple[str, ...]
    subresource: str = ""
