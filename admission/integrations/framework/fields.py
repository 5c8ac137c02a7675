"""Reading the raw dicts of the API: metadata, paths into an object, merge patches,
and the checked reads of fields (an object, a string map, a count, a timestamp) that
raise :class:`IntegrationError` naming the object and the field."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from queues.times import aware_seconds, parse_rfc3339

Obj = dict[str, Any]
Path = tuple[str | int, ...]
_INT32_MAX = 2**31 - 1
_RFC3339_RE = re.compile(
    r"(?P<base>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:\.(?P<frac>[0-9]+))?(?P<tz>[Zz]|[+-][0-9]{2}:[0-9]{2})",
    re.ASCII,
)


class IntegrationError(ValueError):
    """An object cannot be turned into a Workload; the message names the object and field."""


# --------------------------------------------------------------------------- raw dicts


def meta_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    m = (obj or {}).get("metadata")
    return m if isinstance(m, Mapping) else {}


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``metav1.GetControllerOf``: the owner reference with ``controller: true``."""
    refs = meta_of(obj).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def ref_of(obj: Mapping[str, Any] | None) -> str:
    m = meta_of(obj)
    return f"{m.get('namespace') or 'default'}/{m.get('name') or '<unnamed>'}"


def spec_field(path: Path, rest: str) -> str:
    """The field ``rest`` (``spec.containers`` …) of the pod template at ``path``."""
    return f"{dotted(path)}.{rest}" if path else rest


def dotted(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def get_path(obj: Any, path: Path) -> Any:
    node = obj
    for part in path:
        node = node[part]
    return node


def set_path(obj: Obj, path: Sequence[str | int], value: Any) -> None:
    node: Any = obj
    for part in path[:-1]:
        if isinstance(part, str) and not isinstance(node.get(part), (dict, list)):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def merge_patch(old: Any, new: Any) -> Obj:
    """The RFC 7386 merge patch taking ``old`` to ``new`` (lists are replaced whole)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        raise TypeError("merge_patch compares two objects")
    out: Obj = {}
    for key in old:
        if key not in new:
            out[key] = None
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if before == value:
            continue
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                out[key] = sub
        else:
            out[key] = copy.deepcopy(value)
    return out


_MISSING = object()


def apply_merge_patch(obj: Any, patch: Any) -> Any:
    """``obj`` with the RFC 7386 merge patch applied, as the API server applies it."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(obj) if isinstance(obj, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


def as_object(value: Any, kind_noun: str, ref: str, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise IntegrationError(
            f"{kind_noun} {ref}: {where}: expected an object, got {type(value).__name__}"
        )
    return value


def string_map(value: Any, kind_noun: str, ref: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, val in as_object(value, kind_noun, ref, where).items():
        if not isinstance(key, str) or not isinstance(val, str):
            raise IntegrationError(
                f"{kind_noun} {ref}: {where}: keys and values must be strings, got {key!r}: {val!r}"
            )
        out[key] = val
    return out


def count_field(value: Any, kind_noun: str, ref: str, where: str, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
        raise IntegrationError(
            f"{kind_noun} {ref}: {where}: must be an integer between 0 and {_INT32_MAX}, got {value!r}"
        )
    return value


def template_at(obj: Mapping[str, Any], path: Path, kind_noun: str) -> Mapping[str, Any]:
    """The PodTemplateSpec at ``path`` (an object), IntegrationError when missing."""
    node: Any = obj
    for i, part in enumerate(path):
        ok = isinstance(node, list) if isinstance(part, int) else isinstance(node, Mapping)
        if (
            not ok
            or (isinstance(part, int) and part >= len(node))
            or (isinstance(part, str) and node.get(part) is None)
        ):
            raise IntegrationError(f"{kind_noun} {ref_of(obj)}: {dotted(path[: i + 1])}: required")
        node = node[part]
    if not isinstance(node, Mapping):
        raise IntegrationError(
            f"{kind_noun} {ref_of(obj)}: {dotted(path)}: expected an object, got {type(node).__name__}"
        )
    return node


def creation_time_of(value: Any, kind_noun: str, ref: str) -> float:
    where = "metadata.creationTimestamp"
    if value is None:
        return 0.0
    if isinstance(value, datetime):
        return aware_seconds(value)
    if not isinstance(value, str):
        raise IntegrationError(
            f"{kind_noun} {ref}: {where}: expected an RFC 3339 string, got {value!r}"
        )
    match = _RFC3339_RE.fullmatch(value)
    if match is None:
        raise IntegrationError(f"{kind_noun} {ref}: {where}: not an RFC 3339 timestamp: {value!r}")
    tz = match["tz"]
    iso = f"{match['base']}T{match['time']}{'+00:00' if tz in 'Zz' else tz}"
    try:
        whole = parse_rfc3339(iso)
    except ValueError as err:
        raise IntegrationError(
            f"{kind_noun} {ref}: {where}: not a valid timestamp: {value!r} ({err})"
        ) from err
    frac = float(f"0.{match['frac']}") if match["frac"] else 0.0
    return whole.timestamp() + frac
