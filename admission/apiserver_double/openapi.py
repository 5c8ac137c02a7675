"""The OpenAPI v3 documents kubectl reads before it writes, in outline.

kubectl validates what it creates, applies or edits (``--validate=strict``, its
default) on the server when the server says it can: it looks up, in
``/openapi/v3/<group-version>``, the PATCH operation of the object's kind (its
``x-kubernetes-group-version-kind``) and whether that operation takes the
``fieldValidation`` query parameter (cli-runtime's ``queryParamVerifierV3``). If so it
sends ``fieldValidation=Strict`` and the server refuses unknown and duplicate fields
(:mod:`.schema`, D2); if not it validates on the client, with the OpenAPI v2 schemas the
double does not serve, and fails.

So the double serves, for every served group-version, the operations of its resources
with their group-version-kind and their query parameters -- what kube-apiserver
publishes minus the schemas of the objects (``components`` is empty): enough for
kubectl's writes, not for ``kubectl explain`` (README, D11).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .resources import Registry, ResourceType

Obj = dict[str, Any]
WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _query(*names: str) -> list[Obj]:
    return [
        {"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}} for n in names
    ]


def _operations(rt: ResourceType, version: str) -> dict[str, Obj]:
    """The collection and item paths of ``rt`` with their write operations."""
    gvk = {"group": rt.group, "version": version, "kind": rt.kind}
    base = "/" + _gv_path(rt.group, version)
    if rt.namespaced:
        base += "/namespaces/{namespace}"
    collection, item = f"{base}/{rt.plural}", f"{base}/{rt.plural}/{{name}}"

    def op(*params: str) -> Obj:
        return {
            "x-kubernetes-group-version-kind": gvk,
            "parameters": _query(*params),
            "responses": {"200": {"description": "OK"}},
        }

    paths: dict[str, Obj] = {
        collection: {"get": op("labelSelector", "fieldSelector"), "post": op(*WRITE_PARAMETERS)},
        item: {
            "get": op(),
            "put": op(*WRITE_PARAMETERS),
            "patch": op("force", *WRITE_PARAMETERS),
            "delete": op("dryRun", "propagationPolicy"),
        },
    }
    for sub in rt.subresources():
        paths[f"{item}/{sub}"] = {
            "get": op(),
            "put": op(*WRITE_PARAMETERS),
            "patch": op("force", *WRITE_PARAMETERS),
        }
    return paths


def group_version_document(registry: Registry, group: str, version: str) -> Obj | None:
    """``/openapi/v3/apis/<group>/<version>`` (``/openapi/v3/api/v1`` for the core
    group); None when nothing is served there."""
    served = [rt for rt in registry.types if rt.group == group and version in rt.versions]
    if not served:
        return None
    paths: dict[str, Obj] = {}
    for rt in served:
        paths.update(_operations(rt, version))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def root_document(registry: Registry) -> Obj:
    """``/openapi/v3``: every served group-version's document, with a hash of its
    contents in the URL (kubectl caches the documents by that URL)."""
    paths: dict[str, Obj] = {}
    for group, versions in registry.group_versions().items():
        for version in versions:
            doc = group_version_document(registry, group, version)
            digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
            gv = _gv_path(group, version)
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest.upper()}"}
    return {"paths": paths}


def document(registry: Registry, segments: list[str]) -> Obj | None:
    """The document at ``/openapi/v3/...`` (``segments`` after ``openapi/v3``)."""
    if not segments:
        return root_document(registry)
    if len(segments) == 2 and segments[0] == "api":
        return group_version_document(registry, "", segments[1])
    if len(segments) == 3 and segments[0] == "apis":
        return group_version_document(registry, segments[1], segments[2])
    return None
