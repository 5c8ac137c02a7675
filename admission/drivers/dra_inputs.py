"""The DRA objects ``plan``, ``simulate``, the what-if and ``why`` read (resource.k8s.io/v1
DeviceClasses, ResourceClaimTemplates, ResourceClaims, ResourceSlices), kept whole and
turned into the cache's :class:`queues.dra.DraCatalog`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queues.dra import DraCatalog

__all__ = ["DRA_API", "DRA_KINDS", "NAMESPACED_DRA_KINDS", "catalog"]

DRA_API = "resource.k8s.io/v1"
DRA_KINDS = ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
NAMESPACED_DRA_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def catalog(objects: Mapping[tuple[str, str], Mapping[str, Any]]) -> DraCatalog:
    """The catalog of the objects read, by (kind, name or namespace/name)."""
    cat = DraCatalog()
    for (kind, key), obj in sorted(objects.items()):
        cat.set(kind, key, obj)
    return cat
