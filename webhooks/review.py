"""The vocabulary shared by every handler: request, verdict, field errors, mutation.

Handlers are plain synchronous functions ``(AdmissionRequest, HandlerContext) ->
Verdict`` over the raw JSON dicts of the request: no I/O, no pydantic on the job hot
path. This module gives them

* :class:`FieldErrors`, which formats denials exactly like apimachinery's
  ``field.ErrorList.ToAggregate()`` (``metadata.labels[kueue.x-k8s.io/queue-name]:
  Invalid value: "A_B": …``), so ``kubectl`` shows users the messages Kueue shows;
* :class:`Mutation`, a copy-on-write editor whose :meth:`Mutation.patch` diffs only
  the touched paths with ``jsonpatch.make_patch`` (small, deterministic patches that
  never rewrite fields the handler did not change);
* typed accessors that turn a malformed object (a label map that is a list, a string
  where an integer belongs) into :class:`MalformedObject` naming the field, which the
  server answers with a denial (code 400) instead of a crash.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonpatch

from .config import WebhookConfig
from .view import ModelView

JsonObj = dict[str, Any]

# Kueue label / annotation keys (docs/semantics.md §2).
MANAGED_LABEL_VALUE = "true"
DEFAULT_LOCAL_QUEUE = "default"
DEFAULT_PRIORITY_CLASS = "default"


class MalformedObject(ValueError):
    """The object in the review does not have the shape its kind requires."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(slots=True)
class AdmissionRequest:
    """The fields of ``AdmissionReview.request`` the handlers use."""

    uid: str
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    group: str
    version: str
    kind: str
    namespace: str
    name: str
    object: JsonObj | None
    old_object: JsonObj | None
    username: str = ""
    sub_resource: str = ""
    dry_run: bool = False


@dataclass(slots=True)
class HandlerContext:
    view: ModelView
    config: WebhookConfig
    #: the owners of the object under review, read before it is decided
    #: (:mod:`webhooks.handlers.owners`); None: no owner can be read (``--webhooks-only``)
    owners: OwnerReads | None = None


class OwnerReads(Protocol):
    """Owner objects read for one review: ``get`` answers from them (None: not there)."""

    def get(self, ref: Any) -> JsonObj | None: ...


@dataclass(slots=True)
class Verdict:
    """A handler's answer, turned into ``AdmissionReview.response`` by the server."""

    allowed: bool
    patch: list[JsonObj] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    code: int = 200
    reason: str = ""
    message: str = ""
    # More warnings, too slow to compute on the event loop (the quota edits' impact):
    # the server completes them off the loop within a deadline (see Deferred).
    deferred: Deferred | None = None


class Deferred(Protocol):
    """Warnings a handler leaves for the server to compute off the event loop.

    :meth:`snapshot` runs where the state is captured (on the event loop, or in a
    forked child whose memory is the snapshot) and returns the job; the job runs in a
    worker with a ``time.monotonic()`` deadline it should honour, returning at most a
    handful of lines.
    """

    def snapshot(self) -> Callable[[float | None], list[str]]: ...

    def failed(self, why: str) -> list[str]:
        """The warning to give when the job could not run or finish (``why``)."""
        ...


def allow(
    patch: list[JsonObj] | None = None,
    warnings: list[str] | None = None,
    deferred: Deferred | None = None,
) -> Verdict:
    return Verdict(True, patch or [], warnings or [], deferred=deferred)


def deny(
    message: str, *, code: int = 403, reason: str = "Forbidden", warnings: list[str] | None = None
) -> Verdict:
    return Verdict(False, [], warnings or [], code, reason, message)


Handler = Callable[[AdmissionRequest, HandlerContext], Verdict]


@dataclass(frozen=True, slots=True)
class WebhookSpec:
    """One webhook: its path, the kind it accepts (``request.kind``) and its handler."""

    path: str
    group: str
    version: str
    kind: str
    handler: Handler
    mutating: bool
    #: subresource writes decided with the object's owners read first (a pod's resize:
    #: is it a managed ancestor's?)
    reads_owners_on: tuple[str, ...] = ()
    #: whether a mutating CREATE is decided with the object's owners read first: the
    #: job kinds' and pods' handlers ask whether a managed ancestor admits the object;
    #: Kueue's own kinds never do (a Workload's owner is its job: no read for it)
    reads_owners_on_create: bool = True


# ---------------------------------------------------------------- field errors


def go_value(value: Any) -> str:
    """A bad value printed as apimachinery's field.Error does (%q strings, %v scalars)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def key_path(base: str, key: str) -> str:
    return f"{base}[{key}]"


class FieldErrors:
    """Collects field errors; :meth:`verdict` aggregates them like ``ToAggregate``."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.errors)

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.errors.append(f"{path}: Invalid value: {go_value(value)}: {detail}")

    def forbidden(self, path: str, detail: str) -> None:
        self.errors.append(f"{path}: Forbidden: {detail}")

    def required(self, path: str, detail: str = "") -> None:
        self.errors.append(
            f"{path}: Required value: {detail}" if detail else f"{path}: Required value"
        )

    def not_found(self, path: str, value: Any) -> None:
        self.errors.append(f"{path}: Not found: {go_value(value)}")

    def duplicate(self, path: str, value: Any) -> None:
        self.errors.append(f"{path}: Duplicate value: {go_value(value)}")

    def not_supported(self, path: str, value: Any, supported: list[str]) -> None:
        choices = ", ".join(go_value(s) for s in supported)
        self.errors.append(
            f"{path}: Unsupported value: {go_value(value)}: supported values: {choices}"
        )

    def immutable(self, path: str, value: Any) -> None:
        self.invalid(path, value, "field is immutable")

    def message(self) -> str:
        if len(self.errors) == 1:
            return self.errors[0]
        return "[" + ", ".join(self.errors) + "]"

    def verdict(self, warnings: list[str] | None = None) -> Verdict:
        if not self.errors:
            return allow(warnings=warnings)
        return deny(self.message(), warnings=warnings)


# ---------------------------------------------------------------- Go-compatible parsing

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + "(\\." + _DNS1123_LABEL + ")*"
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character "
    f"(e.g. 'example.com', regex used for validation is '{_DNS1123_SUBDOMAIN}')"
)
_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MAX = 2**63 - 1


def dns1123_subdomain_errors(value: str) -> list[str]:
    """apimachinery ``IsDNS1123Subdomain``."""
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(_DNS1123_SUBDOMAIN_MSG)
    return errs


def atoi(value: str) -> tuple[int | None, str]:
    """Go ``strconv.Atoi``: (value, "") or (None, Go's error text)."""
    if not _INT_RE.fullmatch(value):
        return None, f"strconv.Atoi: parsing {go_value(value)}: invalid syntax"
    n = int(value)
    if not -_INT64_MAX - 1 <= n <= _INT64_MAX:
        return None, f"strconv.Atoi: parsing {go_value(value)}: value out of range"
    return n, ""


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(value: str) -> tuple[bool, str]:
    """Go ``strconv.ParseBool``: (value, "") or (False, Go's error text)."""
    if value in _TRUE:
        return True, ""
    if value in _FALSE:
        return False, ""
    return False, f"strconv.ParseBool: parsing {go_value(value)}: invalid syntax"


# ---------------------------------------------------------------- typed accessors


def get_map(obj: Any, path: str, *keys: str) -> JsonObj:
    """The object at ``keys`` below ``obj`` ({} when absent or null)."""
    cur = obj
    walked = path
    for k in keys:
        if not isinstance(cur, dict):
            raise MalformedObject(walked, "must be an object")
        cur = cur.get(k)
        walked = f"{walked}.{k}" if walked else k
        if cur is None:
            return {}
    if not isinstance(cur, dict):
        raise MalformedObject(walked, "must be an object")
    return cur


def metadata_of(obj: JsonObj) -> JsonObj:
    meta = obj.get("metadata")
    if meta is None:
        return {}
    if meta.__class__ is not dict:
        raise MalformedObject("metadata", "must be an object")
    return meta


def string_map(obj: JsonObj, which: str) -> dict[str, str]:
    """``metadata.labels`` / ``metadata.annotations`` as a str->str map, validated."""
    value = metadata_of(obj).get(which)
    if value is None:
        return {}
    if value.__class__ is not dict:
        raise MalformedObject(f"metadata.{which}", "must be a map of strings")
    for k, v in value.items():
        if v.__class__ is not str:
            raise MalformedObject(f"metadata.{which}[{k}]", "must be a string")
    return value


def opt_int(obj: JsonObj, path: str, key: str) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise MalformedObject(f"{path}.{key}", f"must be an integer, got {go_value(v)}")
    return v


def opt_bool(obj: JsonObj, path: str, key: str) -> bool | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise MalformedObject(f"{path}.{key}", f"must be a boolean, got {go_value(v)}")
    return v


def opt_str(obj: JsonObj, path: str, key: str) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise MalformedObject(f"{path}.{key}", f"must be a string, got {go_value(v)}")
    return v


def get_list(obj: Any, path: str, key: str) -> list[Any]:
    if not isinstance(obj, dict):
        raise MalformedObject(path, "must be an object")
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise MalformedObject(f"{path}.{key}" if path else key, "must be a list")
    return v


def controller_owner(obj: JsonObj) -> JsonObj | None:
    """metav1.GetControllerOf: the owner reference with ``controller: true``."""
    refs = metadata_of(obj).get("ownerReferences")
    if not refs:
        return None
    if refs.__class__ is not list:
        raise MalformedObject("metadata.ownerReferences", "must be a list")
    for i, ref in enumerate(refs):
        if ref.__class__ is not dict:
            raise MalformedObject(f"metadata.ownerReferences[{i}]", "must be an object")
        if ref.get("controller") is True:
            return ref
    return None


def owner_is_managed(obj: JsonObj, config: WebhookConfig) -> bool:
    """IsOwnerManagedByKueueForObject: the controller owner is a Kueue-integrated kind
    (the pod webhook's warning; whether Kueue manages the object is
    :func:`webhooks.handlers.owners.has_managed_ancestor`)."""
    ref = controller_owner(obj)
    if ref is None:
        return False
    return (ref.get("apiVersion"), ref.get("kind")) in config.managed_owner_kinds


# ---------------------------------------------------------------- mutation


def _op_order(op: JsonObj) -> tuple[str, ...]:
    # list indices compare equal, so ops inside one list keep jsonpatch's order (their
    # indices depend on it); ops on different object keys are independent
    return tuple("" if t.isdigit() or t == "-" else t for t in str(op.get("path", "")).split("/"))


def _in_path_order(ops: list[JsonObj]) -> list[JsonObj]:
    """jsonpatch walks object keys in set order, which changes with the hash seed from
    one process to the next; sort the operations by path (stably) so the same review
    gets the same patch in every replica and every run."""
    return sorted(ops, key=_op_order)


def _project(doc: Any, paths: list[tuple[str, ...]]) -> JsonObj:
    """The sub-document of ``doc`` made of ``paths`` (absent stays absent)."""
    out: JsonObj = {}
    for path in paths:
        src, dst = doc, out
        for i, key in enumerate(path):
            if not isinstance(src, dict) or key not in src:
                break
            if i == len(path) - 1 or not isinstance(src[key], dict):
                dst[key] = src[key]
                break
            src = src[key]
            nxt = dst.get(key)
            if not isinstance(nxt, dict):
                nxt = dst[key] = {}
            dst = nxt
    return out


_MISSING = object()


def _probe(doc: Any, path: tuple[str, ...]) -> tuple[int, Any]:
    """How ``_project`` sees ``path`` in ``doc``: (depth reached, value copied there)."""
    src = doc
    for i, key in enumerate(path):
        if src.__class__ is not dict or key not in src:
            return i, _MISSING
        src = src[key]
        if i == len(path) - 1 or src.__class__ is not dict:
            return i + 1, src
    return len(path), _MISSING


class Mutation:
    """Copy-on-write edits of an object; :meth:`patch` is the RFC 6902 diff of them."""

    __slots__ = ("original", "obj", "_copied", "_touched")

    def __init__(self, obj: JsonObj) -> None:
        self.original = obj
        self.obj: JsonObj = dict(obj)
        self._copied: set[tuple[str, ...]] = set()
        self._touched: list[tuple[str, ...]] = []

    def _container(self, path: tuple[str, ...]) -> JsonObj:
        cur = self.obj
        for i, key in enumerate(path):
            prefix = path[: i + 1]
            nxt = cur.get(key)
            if nxt is not None and not isinstance(nxt, dict):
                raise MalformedObject(".".join(prefix), "must be an object")
            if prefix not in self._copied:
                nxt = dict(nxt) if nxt else {}
                cur[key] = nxt
                self._copied.add(prefix)
            cur = nxt  # type: ignore[assignment]
        return cur

    def set(self, path: tuple[str, ...], key: str, value: Any) -> None:
        self._container(path)[key] = value
        self._touched.append((*path, key))

    def set_label(self, key: str, value: str) -> None:
        self.set(("metadata", "labels"), key, value)

    def set_annotation(self, key: str, value: str) -> None:
        self.set(("metadata", "annotations"), key, value)

    def append_unique(self, path: tuple[str, ...], key: str, item: Any) -> None:
        """Append ``item`` to the list at ``path.key`` unless it is already there."""
        container = self._container(path)
        current = container.get(key)
        if current is None:
            current = []
        if not isinstance(current, list):
            raise MalformedObject(".".join((*path, key)), "must be a list")
        if item in current:
            return
        container[key] = [*current, item]
        self._touched.append((*path, key))

    def labels(self) -> dict[str, str]:
        value = get_map(self.obj, "", "metadata").get("labels")
        return value if isinstance(value, dict) else {}

    def patch(self) -> list[JsonObj]:
        """The RFC 6902 patch from the original to the edited object (treat as read-only)."""
        if not self._touched:
            return []
        paths = sorted(set(self._touched))
        # The projections are determined exactly by what each touched path reaches in the
        # original and in the edited object, so that is the cache key (repr is exact on
        # JSON values; the sentinel only ever appears as itself).
        key = tuple(
            (p, *_frozen(_probe(self.original, p)), *_frozen(_probe(self.obj, p))) for p in paths
        )
        cached = _PATCH_CACHE.get(key)
        if cached is None:
            src, dst = _project(self.original, paths), _project(self.obj, paths)
            cached = Patch(_in_path_order(jsonpatch.make_patch(src, dst).patch))
            if len(repr(key)) <= _PATCH_CACHE_MAX_KEY:
                if len(_PATCH_CACHE) >= _PATCH_CACHE_SIZE:
                    _PATCH_CACHE.clear()
                _PATCH_CACHE[key] = cached
        return cached


class Patch(list):  # type: ignore[type-arg]
    """A JSON patch (list of operations) that also carries its base64 JSON encoding."""

    __slots__ = ("b64",)

    def __init__(self, ops: list[JsonObj]) -> None:
        super().__init__(ops)
        raw = json.dumps(ops, separators=(",", ":")).encode()
        self.b64 = base64.b64encode(raw).decode("ascii")


# Admission traffic repeats the same few edits (add the queue label, set suspend, add
# the gate…) and ``jsonpatch.make_patch`` costs more than the rest of a review, so the
# patches of small (projection, projection) pairs are memoized. Bounded in entries and
# key size, so hostile input cannot grow it.
_PATCH_CACHE: dict[tuple[Any, ...], Patch] = {}
_SCALARS = (str, int, float, bool, type(None))


def _frozen(probe: tuple[int, Any]) -> tuple[int, Any]:
    """A probe as a hashable key part: scalars as they are (with their type, so 1, 1.0
    and True stay distinct), anything else by its repr (exact on JSON values)."""
    depth, value = probe
    if value is _MISSING:
        return depth, _MISSING
    if type(value) in _SCALARS:
        return depth, (type(value).__name__, value)
    return depth, repr(value)


_PATCH_CACHE_SIZE = 4096
_PATCH_CACHE_MAX_KEY = 2048
