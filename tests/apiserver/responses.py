"""Response bodies of the API-server double: JSON, Status errors, warnings and Tables.

``kubectl get`` asks for server-side printing (``Accept: ...;as=Table;g=meta.k8s.io``)
and prints whatever ``Table`` comes back, so the double answers with a two-column
(Name, Age) table when asked, and with plain objects otherwise.
"""

from __future__ import annotations

import json
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


def table(objects: Iterable[Obj], *, resource_version: str) -> Obj:
    """A ``meta.k8s.io/v1`` Table with Name and Age columns and metadata-only row objects."""
    now = datetime.now(UTC)
    rows = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        rows.append(
            {
                "cells": [meta.get("name", ""), _age(meta.get("creationTimestamp"), now)],
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
        "columnDefinitions": [
            {
                "name": "Name",
                "type": "string",
                "format": "name",
                "description": "Name",
                "priority": 0,
            },
            {"name": "Age", "type": "string", "format": "", "description": "Age", "priority": 0},
        ],
        "rows": rows,
    }
