"""Response bodies of the API-server double: JSON, Status errors, warnings and Tables.

``kubectl get`` asks for server-side printing (``Accept: ...;as=Table;g=meta.k8s.io``)
and prints whatever ``Table`` comes back, so the double answers with a table when
asked -- Name and Age, or a CRD's additionalPrinterColumns -- and with plain objects
otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from .errors import ApiError

Obj = dict[str, Any]


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def json_response(obj: Any, *, status: int = 200, warnings: Iterable[str] = ()) -> web.Response:
    response = web.Response(text=dumps(obj), status=status, content_type="application/json")
    add_warnings(response, warnings)
    return response


def add_warnings(response: web.StreamResponse, warnings: Iterable[str]) -> None:
    """RFC 7234 ``Warning: 299 - "text"`` headers, one per warning, as kube-apiserver sends."""
    for text in warnings:
        escaped = str(text).replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')


def error_response(error: ApiError) -> web.Response:
    if error.text is not None:  # Go's http.Error: text/plain, nosniff
        response = web.Response(
            text=error.text, status=error.code, content_type="text/plain", charset="utf-8"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
    else:
        response = json_response(error.status(), status=error.code)
    for key, value in error.headers.items():
        response.headers[key] = value
    return response


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "<unknown>"
    created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(objects: Iterable[Obj], *, resource_version: str, columns: Iterable[Obj] = ()) -> Obj:
    """A ``meta.k8s.io/v1`` Table with metadata-only row objects: Name and Age, or, for a
    CRD with ``additionalPrinterColumns``, Name and those columns (as apiextensions'
    table convertor does)."""
    now = datetime.now(UTC)
    extra = list(columns)
    definitions: list[Obj] = [
        {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}
    ]
    if extra:
        for col in extra:
            definitions.append(
                {
                    "name": col["name"],
                    "type": col.get("type", "string"),
                    "format": col.get("format", ""),
                    "description": col.get("description", ""),
                    "priority": col.get("priority", 0),
                }
            )
    else:
        definitions.append(
            {"name": "Age", "type": "string", "format": "", "description": "Age", "priority": 0}
        )
    rows = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        if extra:
            cells = [meta.get("name", "")] + [_cell(obj, col) for col in extra]
        else:
            cells = [meta.get("name", ""), _age(meta.get("creationTimestamp"), now)]
        rows.append(
            {
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[\?\(@\.([A-Za-z0-9_-]+)==['\"]([^'\"]*)['\"]\)\]")


def json_path(obj: Any, path: str) -> Any:
    """The printer-column subset of JSONPath: ``.a.b`` and ``[?(@.k=='v')]`` filters;
    None when nothing matches."""
    values = [obj]
    pos = 0
    while pos < len(path):
        match = _STEP.match(path, pos)
        if match is None:
            return None
        pos = match.end()
        key, fkey, fvalue = match.groups()
        nxt: list[Any] = []
        for value in values:
            if key is not None and isinstance(value, dict) and key in value:
                nxt.append(value[key])
            elif fkey is not None and isinstance(value, list):
                nxt += [v for v in value if isinstance(v, dict) and str(v.get(fkey)) == fvalue]
        values = nxt
    return values[0] if values else None


def _cell(obj: Obj, column: Obj) -> Any:
    value = json_path(obj, column.get("jsonPath", ""))
    if column.get("type") == "date" and isinstance(value, str):
        try:
            return _age(value, datetime.now(UTC))  # the convertor prints dates as ages
        except ValueError:
            return value
    if isinstance(value, dict | list):
        return dumps(value)
    return value
