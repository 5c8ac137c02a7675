"""What kube-apiserver's per-type "strategies" do to objects on create, update and delete.

Server-owned metadata (uid, creationTimestamp, generation, resourceVersion,
deletionTimestamp) is set here and cannot be changed by clients; ``generation`` moves
only when something outside ``metadata`` and ``status`` changes; the status subresource
splits writes so that ``/status`` changes only ``status`` and the main resource never
does; names and labels are validated with upstream's messages, because a controller
that writes an invalid label must fail in tests the way it fails on a cluster.
"""

from __future__ import annotations

import copy
import random
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from admission.apiserver_double import builtin

from .errors import ApiError, bad_request, internal, invalid
from .resources import ResourceType

Obj = dict[str, Any]

SERVER_OWNED_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def relabel(obj: Obj, rt: ResourceType, version: str) -> Obj:
    """The object as served at ``version`` (only ``apiVersion`` differs between versions)."""
    api_version = rt.api_version(version)
    if obj.get("apiVersion") == api_version:
        return obj
    return {**obj, "apiVersion": api_version}


def list_item(obj: Obj, rt: ResourceType, version: str) -> Obj:
    """Built-in list items omit kind/apiVersion on the wire, as kube-apiserver's do."""
    if rt.builtin:
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    return relabel(obj, rt, version)


def _check_type(rt: ResourceType, body: Obj) -> None:
    api_version = body.get("apiVersion")
    if api_version and api_version not in {rt.api_version(v) for v in rt.versions}:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({rt.api_version()})"
        )
    kind = body.get("kind")
    if kind and kind != rt.kind:
        raise bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )


def _metadata(body: Any) -> Obj:
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {type(body).__name__}")
    meta = body.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise bad_request("metadata: must be an object")
    return meta


def prepare_for_create(rt: ResourceType, body: Any, *, namespace: str | None) -> Obj:
    """Normalize a POST body into the object to admit and store (not yet validated)."""
    obj = copy.deepcopy(body)
    meta = _metadata(obj)
    _check_type(rt, obj)
    if rt.namespaced:
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    if meta.get("resourceVersion"):
        raise internal("resourceVersion should not be set on objects to be created")
    if not meta.get("name") and meta.get("generateName"):
        suffix = "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
        meta["name"] = f"{meta['generateName']}{suffix}"
    for key in SERVER_OWNED_METADATA:
        meta.pop(key, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_rfc3339()
    meta["generation"] = 1
    obj["apiVersion"] = rt.api_version()
    obj["kind"] = rt.kind
    if rt.status_subresource:
        obj.pop("status", None)
        if rt.plural == "pods":
            obj["status"] = {"phase": "Pending"}
        elif rt.plural == "namespaces":
            obj["status"] = {"phase": "Active"}
    if rt.plural == "namespaces":
        meta.setdefault("labels", {})[NAMESPACE_NAME_LABEL] = meta.get("name", "")
    return builtin.apply_defaults(rt, obj)


def prepare_for_update(rt: ResourceType, old: Obj, new: Any, *, subresource: str | None) -> Obj:
    """Merge a client's new object with the stored one per the status-subresource rules."""
    new_meta = _metadata(new)
    _check_type(rt, new)
    if subresource == "status":
        result = copy.deepcopy(old)
        if "status" in new:
            result["status"] = copy.deepcopy(new["status"])
        else:
            result.pop("status", None)
        return result
    if subresource == "resize":
        return _resized(rt, old, new)
    result = copy.deepcopy(new)
    meta = result["metadata"]
    old_meta = old["metadata"]
    for key in ("name", "namespace", *SERVER_OWNED_METADATA):
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    result["apiVersion"] = old["apiVersion"]
    result["kind"] = old["kind"]
    if rt.status_subresource:
        if "status" in old:
            result["status"] = copy.deepcopy(old["status"])
        else:
            result.pop("status", None)
    if rt.plural == "namespaces":
        meta.setdefault("labels", {})[NAMESPACE_NAME_LABEL] = meta["name"]
    if old_meta.get("deletionTimestamp"):
        added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if added:
            raise invalid(
                kind=rt.kind,
                group=rt.group,
                name=meta["name"],
                field="metadata.finalizers",
                value=None,
                why=f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)!r}",
            )
    builtin.apply_defaults(rt, result)
    if spec_changed(old, result):
        meta["generation"] = int(old_meta.get("generation") or 1) + 1
    return result


def _resized(rt: ResourceType, old: Obj, new: Obj) -> Obj:
    """``pods/resize`` (the ResizeStrategy's ``dropNonResizeUpdates``): the stored pod
    with only its containers' (and init containers') ``resources`` and ``resizePolicy``,
    and the pod-level ``resources``, taken from the request; ``generation`` bumped when
    they changed."""
    result = copy.deepcopy(old)
    new_spec, spec = new.get("spec") or {}, result.setdefault("spec", {})
    for key in ("initContainers", "containers"):
        wanted = {c.get("name"): c for c in new_spec.get(key) or [] if isinstance(c, dict)}
        for c in spec.get(key) or []:
            src = wanted.get(c.get("name"))
            if src is None:
                continue
            for field in ("resources", "resizePolicy"):
                if field in src:
                    c[field] = copy.deepcopy(src[field])
                else:
                    c.pop(field, None)
    if "resources" in new_spec:
        spec["resources"] = copy.deepcopy(new_spec["resources"])
    builtin.apply_defaults(rt, result)
    if spec_changed(old, result):
        meta = result["metadata"]
        meta["generation"] = int(old["metadata"].get("generation") or 1) + 1
    return result


def spec_changed(old: Obj, new: Obj) -> bool:
    """True when anything but metadata and status differs (what bumps ``generation``)."""
    ignored = ("metadata", "status", "apiVersion", "kind")
    return {k: v for k, v in old.items() if k not in ignored} != {
        k: v for k, v in new.items() if k not in ignored
    }


def same_content(old: Obj, new: Obj) -> bool:
    """True if a write would change nothing (kube-apiserver then skips it: no new RV)."""
    strip = ("resourceVersion", "managedFields")
    old_meta = {k: v for k, v in old["metadata"].items() if k not in strip}
    new_meta = {k: v for k, v in new["metadata"].items() if k not in strip}
    return old_meta == new_meta and {k: v for k, v in old.items() if k != "metadata"} == {
        k: v for k, v in new.items() if k != "metadata"
    }


def validate(rt: ResourceType, obj: Obj) -> None:
    """The metadata checks every kind gets upstream: names, label keys and values."""
    meta = obj["metadata"]
    name = meta.get("name") or ""
    if not name:
        raise invalid(
            kind=rt.kind, group=rt.group, name="", field="metadata.name", value=None,
            why="Required value: name or generateName is required",
        )  # fmt: skip
    pattern, limit, what = (
        (_DNS1123_LABEL, 63, "a lowercase RFC 1123 label")
        if rt.plural == "namespaces"
        else (_DNS1123_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain")
    )
    if len(name) > limit or not pattern.match(name):
        raise invalid(
            kind=rt.kind, group=rt.group, name=name, field="metadata.name", value=name,
            why=f"{what} must consist of lower case alphanumeric characters, '-' or '.', and "
            f"must start and end with an alphanumeric character (at most {limit} characters)",
        )  # fmt: skip
    for key, value in (meta.get("labels") or {}).items():
        if not _valid_qualified_name(key):
            raise invalid(
                kind=rt.kind, group=rt.group, name=name, field="metadata.labels", value=key,
                why="name part must consist of alphanumeric characters, '-', '_' or '.', and "
                "must start and end with an alphanumeric character (at most 63 characters), "
                "with an optional DNS subdomain prefix and '/'",
            )  # fmt: skip
        if (
            not isinstance(value, str)
            or len(value) > 63
            or (value and not _LABEL_NAME.match(value))
        ):
            raise invalid(
                kind=rt.kind, group=rt.group, name=name, field="metadata.labels", value=value,
                why="a valid label must be an empty string or consist of alphanumeric "
                "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                "character (at most 63 characters)",
            )  # fmt: skip
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str) or not _valid_qualified_name(key):
            raise invalid(
                kind=rt.kind, group=rt.group, name=name, field="metadata.annotations",
                value=key, why="annotation keys must be qualified names and values strings",
            )  # fmt: skip


def _valid_qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def check_identity(obj: Obj, *, name: str, namespace: str | None) -> None:
    """PUT bodies must name the object of the URL."""
    meta = _metadata(obj)
    if meta.get("name") and meta["name"] != name:
        raise bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    if namespace and meta.get("namespace") and meta["namespace"] != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )


def mark_deleting(obj: Obj) -> Obj:
    result = copy.deepcopy(obj)
    result["metadata"]["deletionTimestamp"] = now_rfc3339()
    result["metadata"]["deletionGracePeriodSeconds"] = 0
    return result


def check_preconditions(rt: ResourceType, obj: Obj, preconditions: Any) -> None:
    """DeleteOptions.preconditions: uid and resourceVersion must match (409 otherwise)."""
    if not preconditions:
        return
    if not isinstance(preconditions, dict):
        raise bad_request("preconditions: must be an object")
    meta = obj["metadata"]
    for field in ("uid", "resourceVersion"):
        want = preconditions.get(field)
        if want is not None and want != meta.get(field):
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {rt.qualified()} "{meta["name"]}": '
                f"Precondition failed: {field.upper() if field == 'uid' else 'ResourceVersion'} "
                f"in precondition: {want}, {field.upper() if field == 'uid' else 'ResourceVersion'} "
                f"in object meta: {meta.get(field)}",
                reason="Conflict",
            )
