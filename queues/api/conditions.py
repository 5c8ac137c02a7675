"""Status conditions of raw Kubernetes objects: the list, one type, is it True.

Malformed status (no list, entries that are no objects) reads as no conditions, so a
reader never has to guard against what a user or another controller wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def conditions(obj: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``status.conditions`` of ``obj``, the entries that are objects."""
    status = (obj or {}).get("status") or {}
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else []


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The first condition of type ``type_``, None when there is none."""
    return next((c for c in conditions(obj) if c.get("type") == type_), None)


def is_true(obj: Mapping[str, Any] | None, type_: str) -> bool:
    """Whether the condition of type ``type_`` has ``status: "True"``."""
    c = condition(obj, type_)
    return c is not None and c.get("status") == "True"
