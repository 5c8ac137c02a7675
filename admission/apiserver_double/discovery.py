"""The non-resource endpoints: discovery, ``/version``, health probes and OpenAPI.

Clients read these before they touch a resource: the ``kubernetes`` client and kubectl
walk ``/api`` and ``/apis`` to learn the served group-versions and resources, kubectl
reads ``/openapi/v3`` to learn that the server validates fields, and probes read
``/healthz``, ``/livez`` and ``/readyz``.  Every answer is built from the
:class:`~.resources.Registry`, so a CRD installed or deleted shows at once.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from admission.apiserver_double import openapi

from .errors import ApiError
from .request import NOT_FOUND
from .resources import Registry
from .responses import json_response

Obj = dict[str, Any]
VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-quartermaster-double",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def non_resource(request: web.Request, registry: Registry) -> web.Response:
    """The answer to a GET of a non-resource path; 404 for a path nothing serves."""
    if request.method != "GET":
        raise ApiError(405, f"{request.method} is not allowed on {request.path}")
    segments = [s for s in request.path.split("/") if s]
    body: Obj | None = None
    if segments == ["api"]:
        body = registry.api_versions(request.host)
    elif segments == ["apis"]:
        body = registry.api_group_list()
    elif len(segments) == 2 and segments[0] == "api":
        body = registry.api_resource_list("", segments[1])
    elif len(segments) == 2 and segments[0] == "apis":
        body = registry.api_group(segments[1])
    elif len(segments) == 3 and segments[0] == "apis":
        body = registry.api_resource_list(segments[1], segments[2])
    elif segments == ["version"]:
        body = VERSION_INFO
    elif segments and segments[0] in ("healthz", "livez", "readyz"):
        return web.Response(text="ok")
    elif segments[:2] == ["openapi", "v3"]:
        body = openapi.document(registry, segments[2:])
    if body is None:
        raise NOT_FOUND
    return json_response(body)
