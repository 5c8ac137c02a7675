"""The AdmissionReview codec (admission.k8s.io/v1): the envelope read and the response written.

:func:`parse_review` checks the request envelope against the webhook it was sent to and
names what is wrong (:class:`BadReview`, which the server answers with HTTP 400);
:func:`encode_response` writes a verdict as the response body, with the patch base64
encoded. Neither does I/O or decides anything: the handlers decide.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from webhooks.review import AdmissionRequest, Verdict, WebhookSpec

_json_loads: Callable[[bytes | str], Any]
try:  # orjson parses a review ~3x faster than the stdlib; the stdlib is the fallback
    from orjson import loads as _json_loads
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _json_loads = json.loads

API_VERSION = "admission.k8s.io/v1"
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


class BadReview(ValueError):
    """The body is not a usable AdmissionReview for this path (HTTP 400)."""


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters (for a log line or a 400's reason)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_review(body: bytes, spec: WebhookSpec) -> AdmissionRequest:
    """Validate the AdmissionReview envelope; :class:`BadReview` names what is wrong."""
    try:
        doc = _json_loads(body)
    except RecursionError:
        raise BadReview("malformed JSON: nested too deeply") from None
    except ValueError as exc:
        raise BadReview(f"malformed JSON: {one_line(str(exc), 120)}") from None
    # Parsed JSON holds exact dicts, lists, strs, ints, floats, bools and None, so the
    # type checks below compare classes (cheaper than isinstance on the hot path).
    if doc.__class__ is not dict:
        raise BadReview("the body must be a JSON object (an AdmissionReview)")
    if doc.get("apiVersion") != API_VERSION:
        raise BadReview(
            f"unsupported apiVersion {one_line(repr(doc.get('apiVersion')), 80)}, expected {API_VERSION}"
        )
    if doc.get("kind") != "AdmissionReview":
        raise BadReview(
            f"unexpected kind {one_line(repr(doc.get('kind')), 80)}, expected AdmissionReview"
        )
    req = doc.get("request")
    if req.__class__ is not dict:
        raise BadReview("missing request" if req is None else "request must be an object")
    get = req.get
    uid = get("uid")
    if uid.__class__ is not str or not uid:
        raise BadReview("request.uid must be a non-empty string")
    kind = get("kind")
    if kind.__class__ is not dict:
        raise BadReview("request.kind must be an object {group, version, kind}")
    gvk = (kind.get("group") or "", kind.get("version"), kind.get("kind"))
    if gvk != (spec.group, spec.version, spec.kind):
        got = "/".join(str(x) for x in gvk)
        raise BadReview(
            one_line(
                f"unexpected kind {got} for {spec.path}, expected {spec.group}/{spec.version}/{spec.kind}"
            )
        )
    operation = get("operation")
    if operation.__class__ is not str or operation not in OPERATIONS:
        raise BadReview(f"request.operation must be one of {', '.join(sorted(OPERATIONS))}")
    obj = get("object")
    if obj is not None and obj.__class__ is not dict:
        raise BadReview("request.object must be an object")
    old = get("oldObject")
    if old is not None and old.__class__ is not dict:
        raise BadReview("request.oldObject must be an object")
    if obj is None and (operation == "CREATE" or operation == "UPDATE"):
        raise BadReview(f"request.object is required for {operation}")
    if old is None and operation == "UPDATE":
        raise BadReview("request.oldObject is required for UPDATE")
    namespace = get("namespace")
    if namespace is None:
        namespace = ""
    elif namespace.__class__ is not str:
        raise BadReview("request.namespace must be a string")
    name = get("name")
    if name is None:
        name = ""
    elif name.__class__ is not str:
        raise BadReview("request.name must be a string")
    sub_resource = get("subResource")
    if sub_resource is None:
        sub_resource = ""
    elif sub_resource.__class__ is not str:
        raise BadReview("request.subResource must be a string")
    dry_run = get("dryRun")
    if dry_run is None:
        dry_run = False
    elif dry_run.__class__ is not bool:
        raise BadReview("request.dryRun must be a boolean")
    user = get("userInfo")
    if user is None:
        username = ""
    elif user.__class__ is not dict:
        raise BadReview("request.userInfo must be an object")
    else:
        username = user.get("username") or ""
        if username.__class__ is not str:
            raise BadReview("request.userInfo.username must be a string")
    return AdmissionRequest(
        uid,
        operation,
        spec.group,
        spec.version,
        spec.kind,
        namespace,
        name,
        obj,
        old,
        username,
        sub_resource,
        dry_run,
    )


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The response AdmissionReview of ``verdict``, as a JSON document."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if verdict.allowed and verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = _patch_b64(verdict.patch)
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    if not verdict.allowed:
        response["status"] = {
            "code": verdict.code,
            "reason": verdict.reason,
            "message": verdict.message,
        }
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _patch_b64(patch: list[dict[str, Any]]) -> str:
    b64 = getattr(patch, "b64", None)
    if b64 is None:
        b64 = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode("ascii")
    return b64


_json_str: Callable[[str], str] = json.encoder.encode_basestring_ascii  # what json.dumps(str) runs
_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'


def encode_response(uid: str, verdict: Verdict) -> bytes:
    """The response body; the common allowed-without-warnings case is assembled directly."""
    if verdict.allowed and not verdict.warnings:
        uid_json = _json_str(uid).encode()
        if verdict.patch:
            patch = _patch_b64(verdict.patch).encode()
            return (
                _HEAD
                + uid_json
                + b',"allowed":true,"patchType":"JSONPatch","patch":"'
                + patch
                + b'"}}'
            )
        return _HEAD + uid_json + b',"allowed":true}}'
    return json.dumps(review_response(uid, verdict), separators=(",", ":")).encode()
