"""Create a manifest directory's objects through the API, as ``kubectl apply -f DIR``
does on a cluster that has none of them yet.

The files are read as kubectl reads a directory: ``*.yaml``, ``*.yml`` and ``*.json``,
not its subdirectories, in name order, every document in file order. Each object's kind
is mapped to its resource by API discovery, as kubectl's REST mapper does, so a kind
whose API is not served (a CRD that is not installed) is reported with kubectl's words
and skipped, and everything else is created with the caller's credentials and the
``last-applied-configuration`` annotation kubectl writes: the API server's admission
(schemas, CEL rules, the service's webhooks) sees each object as it would see
``kubectl``'s requests, and a later ``kubectl apply`` of an edited file patches what
this created.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from admission.kube.client.kueuectl_calls import ApiError, UserApi
from admission.kube.client.rest import Resource

Obj = dict[str, Any]
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_GO_HTML_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def with_last_applied(obj: Obj) -> Obj:
    """``obj`` as ``kubectl apply`` creates it: annotated with its own JSON (kubectl's
    ``GetModifiedConfiguration``: the object with that annotation removed and an empty
    ``annotations`` map, encoded as Go's ``encoding/json`` does, keys sorted, HTML
    characters escaped, a newline at the end)."""
    body = copy.deepcopy(obj)
    meta = body.setdefault("metadata", {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    meta["annotations"] = annotations
    encoded = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    annotations[LAST_APPLIED] = encoded.translate(_GO_HTML_ESCAPES) + "\n"
    return body


@dataclass(frozen=True, slots=True)
class NotCreated:
    """An object that was not created: where it came from and why."""

    source: str  # the file's name
    kind: str
    name: str  # ``namespace/name`` or ``name``
    reason: str
    unserved: bool = False  # its kind's API is not served (a CRD that is not installed)

    def __str__(self) -> str:
        return f"{self.kind} {self.name} ({self.source}): {self.reason}"


@dataclass(slots=True)
class Applied:
    """What :func:`create_directory` did."""

    created: Counter[str] = field(default_factory=Counter)  # kind -> objects created
    not_created: list[NotCreated] = field(default_factory=list)

    def summary(self) -> str:
        """``4 Namespace, 4 ResourceFlavor, ...`` in the order the kinds came."""
        return ", ".join(f"{n} {kind}" for kind, n in self.created.items())


def manifest_documents(directory: Path) -> Iterator[tuple[Path, Obj]]:
    """Every object of ``directory``'s manifest files, with its file (a ``kind: List``
    is unpacked); a document that is not an object with a kind raises ValueError
    naming the file."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
    for path in files:
        text = path.read_text()
        try:
            docs = [json.loads(text)] if path.suffix == ".json" else list(yaml.safe_load_all(text))
        except (ValueError, yaml.YAMLError) as err:
            raise ValueError(f"{path}: not valid {path.suffix[1:].upper()}: {err}") from None
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            if not isinstance(doc, dict) or not doc.get("kind") or not doc.get("apiVersion"):
                raise ValueError(f"{path}: document {i + 1}: an object needs apiVersion and kind")
            if doc["kind"] == "List":
                for item in doc.get("items") or []:
                    yield path, item
            else:
                yield path, doc


class RestMapper:
    """Kind -> resource by API discovery (``/api/v1``, ``/apis/GROUP/VERSION``), one
    request per API version."""

    def __init__(self, api: UserApi) -> None:
        self._api = api
        self._versions: dict[str, dict[str, Resource] | None] = {}

    async def resource(self, api_version: str, kind: str) -> Resource | None:
        """The resource serving ``kind`` in ``api_version``; None when it is not served."""
        if api_version not in self._versions:
            self._versions[api_version] = await self._discover(api_version)
        kinds = self._versions[api_version]
        return None if kinds is None else kinds.get(kind)

    async def _discover(self, api_version: str) -> dict[str, Resource] | None:
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            listing = await self._api.raw_get(path)
        except ApiError as err:
            if err.not_found:
                return None
            raise
        kinds: dict[str, Resource] = {}
        for entry in listing.get("resources") or []:
            name = str(entry.get("name") or "")
            if "/" in name or not entry.get("kind"):
                continue  # a subresource
            kinds[entry["kind"]] = Resource(
                group, version, name, entry["kind"], bool(entry.get("namespaced"))
            )
        return kinds


def _name_of(obj: Obj, res: Resource | None) -> str:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    namespace = meta.get("namespace")
    if namespace and (res is None or res.namespaced):
        return f"{namespace}/{name}"
    return name


async def create_directory(
    api: UserApi, directory: Path, *, default_namespace: str = "default"
) -> Applied:
    """Create every object of ``directory`` through ``api`` (see the module docstring).

    An object the server refuses is reported in :attr:`Applied.not_created` with the
    server's message, and the others are still created, as kubectl does; transport
    failures and server errors raise :class:`ApiError`.
    """
    mapper = RestMapper(api)
    applied = Applied()
    for path, obj in manifest_documents(directory):
        kind, api_version = str(obj["kind"]), str(obj["apiVersion"])
        res = await mapper.resource(api_version, kind)
        if res is None:
            applied.not_created.append(
                NotCreated(
                    path.name, kind, _name_of(obj, None),
                    f'no matches for kind "{kind}" in version "{api_version}": '
                    "its CustomResourceDefinition is not installed",
                    unserved=True,
                )
            )  # fmt: skip
            continue
        namespace = None
        if res.namespaced:
            namespace = (obj.get("metadata") or {}).get("namespace") or default_namespace
        try:
            await api.create(res, with_last_applied(obj), namespace=namespace)
        except ApiError as err:
            if err.status == 0 or err.status >= 500:
                raise
            applied.not_created.append(NotCreated(path.name, kind, _name_of(obj, res), err.message))
            continue
        applied.created[kind] += 1
    return applied
