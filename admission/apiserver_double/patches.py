"""The PATCH flavours kube-apiserver accepts, selected by the request's Content-Type.

* ``application/merge-patch+json``: RFC 7386 (``null`` deletes, lists are replaced);
* ``application/json-patch+json``: RFC 6902 via :mod:`jsonpatch`; a failed ``test`` or a
  missing path is 422 with upstream's generic message;
* ``application/strategic-merge-patch+json``: a merge patch whose lists are merged by
  key for the few fields we touch (see :data:`MERGE_KEYS`), with the ``$patch``,
  ``$deleteFromPrimitiveList/`` and ``$setElementOrder/`` directives.  Upstream refuses
  it for custom resources (415); so does the double;
* ``application/apply-patch+yaml``: server-side apply, approximated as a merge patch of
  the applied configuration (no managed fields, no ownership conflicts).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import jsonpointer
import yaml

from .errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)

#: list field name → merge key (``patchMergeKey`` in the upstream Go types).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "ports": "containerPort",
    "conditions": "type",
    "webhooks": "name",
    "ownerReferences": "uid",
}
#: primitive lists with ``patchStrategy: merge`` (union on patch).
PRIMITIVE_MERGE_LISTS = frozenset({"finalizers"})


def parse_patch_body(content_type: str, raw: bytes) -> Any:
    """Decode a PATCH body; malformed bodies are 400 BadRequest."""
    try:
        if content_type == APPLY_PATCH:
            return yaml.safe_load(raw.decode())
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding {content_type} patch: {exc}") from exc


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Apply ``patch`` of the given type to a deep copy of ``target``."""
    if content_type == JSON_PATCH:
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise bad_request(f"{content_type} patch must be a JSON object, got {type(patch).__name__}")
    if content_type == STRATEGIC_MERGE_PATCH:
        return strategic_merge_patch(target, patch)
    if content_type in (MERGE_PATCH, APPLY_PATCH):
        return merge_patch(target, patch)
    raise ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: {', '.join(PATCH_TYPES)}",
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902 JSON patch; an operation that does not apply is 422, as upstream."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a JSON array of operations")
    result: Any = copy.deepcopy(target)
    try:
        for op in operations:  # one at a time, to name the operation that failed
            try:
                result = jsonpatch.JsonPatch([op]).apply(result, in_place=True)
            except jsonpatch.JsonPatchTestFailed as exc:
                raise _rejected(f"testing value {op.get('path')} failed: test failed") from exc
    except (jsonpatch.JsonPatchConflict, jsonpointer.JsonPointerException) as exc:
        raise _rejected(str(exc)) from exc
    except (jsonpatch.InvalidJsonPatch, TypeError, KeyError) as exc:
        raise bad_request(f"invalid json patch: {exc}") from exc
    if not isinstance(result, dict):
        raise _rejected("json patch replaced the whole object with a non-object")
    return result


def _rejected(detail: str) -> ApiError:
    """``NewGenericServerResponse(422, ...)``: kube-apiserver's answer to a JSON patch that
    does not apply (a failed ``test``, a missing path).  The message is generic; the
    patch library's error is only in ``details.causes``."""
    return ApiError(
        422,
        "the server rejected our request due to an error in our request",
        reason="Invalid",
        details={"causes": [{"message": detail}]},
    )


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Strategic merge patch restricted to the lists in :data:`MERGE_KEYS`."""
    result = _smp_map(target, patch)
    return result if result is not None else {}


def _smp_map(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
    result = copy.deepcopy(target)
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [x for x in result[field] if x not in (value or [])]
            continue
        old = result.get(key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _smp_map(old if isinstance(old, dict) else {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and key in MERGE_KEYS:
            result[key] = _smp_list(old if isinstance(old, list) else [], value, key)
        elif isinstance(value, list) and key in PRIMITIVE_MERGE_LISTS and isinstance(old, list):
            result[key] = old + [v for v in value if v not in old]
        else:
            result[key] = _strip_directives(value)
    return result


def _smp_list(old: list[Any], patch: list[Any], field: str) -> list[Any]:
    merge_key = MERGE_KEYS[field]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip_directives(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    items = copy.deepcopy(old)
    for entry in patch:
        if not isinstance(entry, dict) or merge_key not in entry:
            raise bad_request(
                f"strategic merge patch: every element of {field} needs the merge key "
                f"{merge_key!r}, got {entry!r}"
            )
        index = next(
            (
                i
                for i, it in enumerate(items)
                if isinstance(it, dict) and it.get(merge_key) == entry[merge_key]
            ),
            None,
        )
        if entry.get("$patch") == "delete":
            if index is not None:
                del items[index]
        elif index is None:
            items.append(_strip_directives(entry))
        else:
            merged = _smp_map(items[index], entry)
            if merged is not None:
                items[index] = merged
    return items


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
