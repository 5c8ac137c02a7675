"""Strict field validation of built-in kinds, as ``kubectl apply`` gets it from the server.

kubectl asks for ``fieldValidation=Strict`` by default, so the API server refuses a Job
with a misspelt field (``strict decoding error: unknown field "spec.paralellism"``)
instead of silently dropping it; a value of the wrong JSON type (``parallelism: "3"``)
is refused by any decoding. ``plan`` reads the same files a user would apply and must
refuse them the same way, or it would plan a Job with the default parallelism of 1
that the cluster would never have accepted.

Kueue's own kinds are checked by their pydantic models (``queues.api.kinds``, extra fields
forbidden). The built-in kinds are checked here, against the field tables of
``builtin_fields.json``, generated from the Kubernetes OpenAPI schema by
``hack/gen_builtin_fields.py``. A table maps each API type to its fields; a field's
shape is a scalar kind (``string``, ``integer``, ``number``, ``boolean``,
``quantity``, ``int-or-string``, ``any``), a type name, ``[item]`` for a list or
``{"*": value}`` for a map. ``null`` is accepted everywhere, as JSON decoding does.
"""

from __future__ import annotations

import json
from datetime import date
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["FieldProblem", "check", "known_roots"]

FieldProblem = tuple[str, str]
"""(path, message) — the path in the API server's notation: ``spec.containers[0].name``."""

POD_TEMPLATE_SPEC = "v1 PodTemplateSpec"


@cache
def _tables() -> dict[str, Any]:
    text = resources.files("admission.drivers").joinpath("builtin_fields.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


def known_roots() -> dict[str, str]:
    """``"<apiVersion> <kind>"`` → API type name, for every kind the tables describe."""
    roots: dict[str, str] = _tables()["roots"]
    return roots


def check(value: Any, root: str, *, path: str = "") -> list[FieldProblem]:
    """Every unknown field and wrongly typed value of ``value`` read as ``root``.

    ``root`` is a key of :func:`known_roots` (``"batch/v1 Job"``); ``path`` prefixes the
    reported paths (a pod template inside a Workload: ``spec.podSets[0].template``).
    Unknown fields come first, in document order, then type errors.
    """
    types: dict[str, dict[str, Any]] = _tables()["types"]
    unknown: list[FieldProblem] = []
    wrong: list[FieldProblem] = []
    _walk(value, known_roots()[root], path, types, unknown, wrong)
    return unknown + wrong


_SCALARS = {"string", "integer", "number", "boolean", "quantity", "int-or-string", "any"}


def _walk(
    value: Any,
    shape: Any,
    path: str,
    types: dict[str, dict[str, Any]],
    unknown: list[FieldProblem],
    wrong: list[FieldProblem],
) -> None:
    if value is None:
        return
    if isinstance(shape, str):
        if shape in _SCALARS:
            if not _scalar_ok(value, shape):
                wrong.append((path, f"must be of type {_expected(shape)}, got {_json_type(value)}"))
            return
        fields = types[shape]
        if not isinstance(value, dict):
            wrong.append((path, f"must be of type object, got {_json_type(value)}"))
            return
        for key, sub in value.items():
            sub_path = f"{path}.{key}" if path else str(key)
            field_shape = fields.get(key) if isinstance(key, str) else None
            if field_shape is None:
                unknown.append((sub_path, f'strict decoding error: unknown field "{sub_path}"'))
            else:
                _walk(sub, field_shape, sub_path, types, unknown, wrong)
        return
    if isinstance(shape, list):
        if not isinstance(value, list):
            wrong.append((path, f"must be of type array, got {_json_type(value)}"))
            return
        item = shape[0]
        for i, sub in enumerate(value):
            _walk(sub, item, f"{path}[{i}]", types, unknown, wrong)
        return
    # a map: {"*": value shape}
    if not isinstance(value, dict):
        wrong.append((path, f"must be of type object, got {_json_type(value)}"))
        return
    item = shape["*"]
    for key, sub in value.items():
        _walk(sub, item, f"{path}[{key}]", types, unknown, wrong)


def _scalar_ok(value: Any, kind: str) -> bool:
    if kind == "any":
        return True
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "string":
        return isinstance(value, str | date)  # YAML turns unquoted timestamps into dates
    if kind == "integer":
        return isinstance(value, int)
    if kind == "number" or kind == "quantity":
        return isinstance(value, int | float) or (kind == "quantity" and isinstance(value, str))
    if kind == "int-or-string":
        return isinstance(value, int | str)
    return False  # boolean expected, not a bool


def _expected(kind: str) -> str:
    return {"quantity": "string or number", "int-or-string": "integer or string"}.get(kind, kind)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
