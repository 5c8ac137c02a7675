"""What an HTTP request asks the API for: its resource, verb and body.

kube-apiserver's ``RequestInfoResolver`` turns a URL into group, version, namespace,
resource, name and subresource, and an HTTP method (with ``?watch``) into the verb
that RBAC, admission and audit see; the handlers then decode the body, accepting JSON
and YAML and answering 415 for protobuf and CBOR, so client-go falls back to JSON.
This module is that decoding for the double: a path the registry does not serve is 404
here, before any handler runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from admission.apiserver_double import schema

from .admission import UserInfo
from .errors import ApiError, bad_request
from .operations import WriteContext
from .resources import Registry, ResourceType

Obj = dict[str, Any]
NOT_FOUND = ApiError(404, "the server could not find the requested resource")
JSON_MEDIA_TYPES = ("application/json", "application/yaml", "")


@dataclass(frozen=True, slots=True)
class Target:
    """A resource request decoded from its URL."""

    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_target(registry: Registry, path: str) -> Target | None:
    """The resource ``path`` addresses, or None for a non-resource path (discovery,
    ``/version``, health, OpenAPI); 404 for a resource path nothing serves."""
    segments = [s for s in path.split("/") if s]
    if len(segments) >= 3 and segments[0] == "api":
        group, version, rest = "", segments[1], segments[2:]
    elif len(segments) >= 4 and segments[0] == "apis":
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        scoped = registry.lookup(group, version, rest[2])
        if scoped is not None and scoped.namespaced:
            namespace, rest = rest[1], rest[2:]
    rt = registry.lookup(group, version, rest[0])
    if rt is None or len(rest) > 3:
        raise NOT_FOUND
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if (namespace is not None and not rt.namespaced) or (
        rt.namespaced and name and namespace is None
    ):
        raise NOT_FOUND
    if subresource is not None and subresource not in rt.subresources():
        raise NOT_FOUND
    return Target(rt, version, namespace, name, subresource)


def request_verb(request: web.Request, target: Target) -> str:
    """The API verb of a resource request (405 for a method the resource has not)."""
    method = request.method
    if method == "GET":
        if target.name is not None:
            return "get"
        return "watch" if request.query.get("watch") in ("true", "1") else "list"
    verbs = {
        ("POST", False): "create",
        ("PUT", True): "update",
        ("PATCH", True): "patch",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
    }
    verb = verbs.get((method, target.name is not None))
    if verb is None:
        raise ApiError(405, f"{method} is not supported on {request.path}")
    return verb


def write_context(request: web.Request, target: Target, user: UserInfo) -> WriteContext:
    """The request's target, user, ``dryRun`` and ``fieldValidation`` as the write path
    takes them (an unsupported ``fieldValidation`` is 400 on every verb)."""
    query = request.query
    return WriteContext(
        rt=target.rt,
        version=target.version,
        namespace=target.namespace,
        name=target.name,
        subresource=target.subresource,
        user=user,
        dry_run="All" in query.getall("dryRun", []),
        field_validation=schema.field_validation(query.get("fieldValidation")),
    )


async def json_body(request: web.Request) -> Any:
    """The JSON request body; protobuf/CBOR are 415, so client-go falls back to JSON."""
    if request.content_type not in JSON_MEDIA_TYPES and request.can_read_body:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types "
            f"include: application/json, application/yaml (got {request.content_type})",
        )
    raw = await request.read()
    try:
        if request.content_type == "application/yaml":
            return yaml.safe_load(raw) if raw else None
        return json.loads(raw) if raw else None
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"the request body is not valid {request.content_type}: {exc}") from exc


async def delete_options(request: web.Request) -> Obj:
    """A DELETE's ``DeleteOptions``: the body, with ``propagationPolicy`` and
    ``orphanDependents`` from the query where the body has none."""
    body = await json_body(request)
    if body is not None and not isinstance(body, dict):
        raise bad_request("DeleteOptions must be a JSON object")
    options = dict(body or {})
    for key in ("propagationPolicy", "orphanDependents"):
        if key in request.query and key not in options:
            value = request.query[key]
            options[key] = value == "true" if key == "orphanDependents" else value
    return options
