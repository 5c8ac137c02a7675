"""The resource verbs but watch: a decoded request to its HTTP answer.

Reads (``get``, ``list``) come straight from the store: label and field selectors,
``limit``/``continue`` pagination over the latest state, and the Table kubectl asks for
with its printer columns.  Writes (``create``, ``update``, ``patch``, ``delete``,
``deletecollection``) decode the body and hand it to :class:`~.operations.Operations`,
which runs the write path (defaulting, admission, validation, the store); here is only
what the HTTP answer adds: 415 for an unknown patch type, the ``Status`` a deleted
custom resource answers with, the list a collection delete returns.  Watches stream
from :mod:`.watch`.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from aiohttp import web

from .errors import ApiError, bad_request
from .operations import Operations, WriteContext
from .patches import PATCH_TYPES, parse_patch_body
from .request import Target, delete_options, json_body
from .resources import ResourceType
from .responses import json_response, table, wants_table
from .selectors import parse_field_selector, parse_label_selector
from .store import Store
from .strategy import list_item, relabel

Obj = dict[str, Any]


async def serve_resource(
    request: web.Request,
    target: Target,
    *,
    verb: str,
    ctx: WriteContext,
    store: Store,
    operations: Operations,
) -> web.StreamResponse:
    """Answer ``verb`` (any but ``watch``) on ``target``."""
    query = request.query
    rt, version = target.rt, target.version
    if verb == "list":
        return _list(request, target, store)
    if verb == "get":
        obj = relabel(store.require(rt, target.namespace or "", target.name or ""), rt, version)
        if wants_table(request.headers.get("Accept", "")):
            return json_response(
                table(
                    [obj], resource_version=str(store.revision),
                    columns=rt.printer_columns.get(version, ()),
                )
            )  # fmt: skip
        return json_response(obj)
    if verb == "create":
        result = await operations.create(ctx, await json_body(request))
    elif verb == "update":
        result = await operations.update(ctx, await json_body(request))
    elif verb == "patch":
        content_type = request.content_type
        if content_type not in PATCH_TYPES:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: {', '.join(PATCH_TYPES)}",
            )
        patch = parse_patch_body(content_type, await request.read())
        result = await operations.patch(
            ctx, content_type, patch, field_manager=query.get("fieldManager")
        )
    elif verb == "delete":
        result = await operations.delete(ctx, await delete_options(request))
        if result.removed and not rt.builtin:
            return json_response(_success_status(rt, result.obj), warnings=result.warnings)
    elif verb == "deletecollection":
        return await _delete_collection(request, target, ctx, store, operations)
    else:
        raise ApiError(405, f"{request.method} is not supported on {request.path}")
    return json_response(
        relabel(result.obj, rt, version), status=result.status, warnings=result.warnings
    )


def selected(request: web.Request, target: Target, store: Store) -> list[Obj]:
    """The stored objects of ``target`` that the request's selectors match."""
    labels = parse_label_selector(request.query.get("labelSelector"))
    fields = parse_field_selector(
        request.query.get("fieldSelector"), supported=target.rt.field_labels
    )
    return [
        obj
        for obj in store.list(target.rt, target.namespace)
        if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)
    ]


def _list(request: web.Request, target: Target, store: Store) -> web.Response:
    rt, version = target.rt, target.version
    items = selected(request, target, store)
    metadata: Obj = {"resourceVersion": str(store.revision)}
    items = _paginate(request, items, metadata)
    if wants_table(request.headers.get("Accept", "")):
        return json_response(
            table(
                items, resource_version=metadata["resourceVersion"],
                columns=rt.printer_columns.get(version, ()),
            )
        )  # fmt: skip
    return json_response(
        {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version(version),
            "metadata": metadata,
            "items": [list_item(obj, rt, version) for obj in items],
        }
    )


async def _delete_collection(
    request: web.Request,
    target: Target,
    ctx: WriteContext,
    store: Store,
    operations: Operations,
) -> web.Response:
    options = await delete_options(request)
    deleted = []
    warnings: list[str] = []
    for obj in selected(request, target, store):
        one = WriteContext(
            rt=ctx.rt, version=ctx.version, namespace=obj["metadata"].get("namespace"),
            name=obj["metadata"]["name"], subresource=None, user=ctx.user, dry_run=ctx.dry_run,
        )  # fmt: skip
        result = await operations.delete(one, options)
        warnings += result.warnings
        deleted.append(list_item(result.obj, ctx.rt, ctx.version))
    body = {
        "kind": f"{ctx.rt.kind}List",
        "apiVersion": ctx.rt.api_version(ctx.version),
        "metadata": {"resourceVersion": str(store.revision)},
        "items": deleted,
    }
    return json_response(body, warnings=warnings)


def _success_status(rt: ResourceType, obj: Obj) -> Obj:
    meta = obj["metadata"]
    details: Obj = {"name": meta["name"], "kind": rt.plural, "uid": meta.get("uid")}
    if rt.group:
        details["group"] = rt.group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def _paginate(request: web.Request, items: list[Obj], metadata: Obj) -> list[Obj]:
    """``limit``/``continue`` over the (namespace, name)-sorted list (served from the latest state)."""
    token = request.query.get("continue")
    if token:
        try:
            start = json.loads(base64.urlsafe_b64decode(token.encode()))["start"]
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise bad_request(f"continue: invalid token {token!r}") from None
        items = [
            o for o in items if [o["metadata"].get("namespace", ""), o["metadata"]["name"]] >= start
        ]
    limit = request.query.get("limit")
    if limit:
        try:
            size = int(limit)
        except ValueError:
            raise bad_request(f"limit: invalid value {limit!r}") from None
        if 0 < size < len(items):
            nxt = items[size]["metadata"]
            start = [nxt.get("namespace", ""), nxt["name"]]
            metadata["continue"] = base64.urlsafe_b64encode(
                json.dumps({"start": start}).encode()
            ).decode()
            metadata["remainingItemCount"] = len(items) - size
            items = items[:size]
    return items
