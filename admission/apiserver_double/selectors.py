"""Label and field selectors, parsed and matched as kube-apiserver does.

Two forms exist: the query-string form (``labelSelector=app=x,tier in (a,b),!canary``,
``fieldSelector=metadata.name=x``) used by list and watch, and the structured
``LabelSelector`` (``matchLabels`` + ``matchExpressions``) used in webhook
configurations.  Both reduce to the same :class:`Requirement` list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, bad_request

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>[-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One label requirement; ``op`` is ``in``, ``notin``, ``exists`` or ``!exists``."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "in":
            return present and labels[self.key] in self.values
        if self.op == "notin":
            return not present or labels[self.key] not in self.values
        if self.op == "exists":
            return present
        return not present  # "!exists"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A conjunction of requirements; empty matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the ``labelSelector`` query parameter; a bad selector is a 400 like upstream."""
    if not text or not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    for part in _split_top_level(text):
        if m := _SET_RE.match(part):
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            requirements.append(Requirement(m["key"], m["op"], values))
        elif m := _EQ_RE.match(part):
            op = "notin" if m["op"] == "!=" else "in"
            requirements.append(Requirement(m["key"], op, frozenset({m["value"]})))
        elif m := _EXISTS_RE.match(part):
            requirements.append(Requirement(m["key"], "!exists" if m["neg"] else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {part.strip()!r} in {text!r}")
    return LabelSelector(tuple(requirements))


_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def label_selector_from_dict(selector: Mapping[str, Any] | None, *, where: str) -> LabelSelector:
    """Convert a structured ``metav1.LabelSelector``; ``where`` names it in error messages."""
    if selector is None:
        return LabelSelector()
    requirements = [
        Requirement(str(k), "in", frozenset({str(v)}))
        for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        op = _OPERATORS.get(expr.get("operator", ""))
        if op is None or "key" not in expr:
            raise ValueError(
                f"{where}.matchExpressions[{i}]: needs a key and an operator in "
                f"{sorted(_OPERATORS)}, got {expr!r}"
            )
        values = frozenset(str(v) for v in expr.get("values") or [])
        if op in ("in", "notin") and not values:
            raise ValueError(f"{where}.matchExpressions[{i}].values: must be non-empty for {op}")
        requirements.append(Requirement(expr["key"], op, values))
    return LabelSelector(tuple(requirements))


# -- field selectors -----------------------------------------------------------------

ALWAYS_SUPPORTED_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    path: str
    value: str
    negate: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string a field selector compares against (missing fields are ``""``)."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


def parse_field_selector(text: str | None, *, supported: Iterable[str]) -> FieldSelector:
    """Parse ``fieldSelector``; unsupported field labels are a 400 as upstream."""
    if not text or not text.strip():
        return FieldSelector()
    allowed = set(ALWAYS_SUPPORTED_FIELDS) | set(supported)
    requirements: list[FieldRequirement] = []
    for part in text.split(","):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
        path, op, value = m.groups()
        if path not in allowed:
            raise ApiError(400, f"field label not supported: {path}")
        requirements.append(FieldRequirement(path, value, negate=op == "!="))
    return FieldSelector(tuple(requirements))
