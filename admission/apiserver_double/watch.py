"""The watch endpoint: one watch, opened as the request asks and streamed as
newline-delimited JSON events over a chunked HTTP response.

Mirrors kube-apiserver's watch endpoint: the request's label and field selectors,
``resourceVersion`` to resume from and ``timeoutSeconds`` (:func:`serve_watch`); events
as ``{"type": ..., "object": ...}`` lines; ``BOOKMARK`` events carrying only
``metadata.resourceVersion`` when the client sent ``allowWatchBookmarks=true`` (as the
watch cache does: about once a minute, and once 2 s before the watch's timeout -- both
adjustable for tests); a too-old ``resourceVersion`` answered with HTTP 200 and a single
``ERROR`` event holding a 410 ``Status``.  Test hooks can hold deliveries (pause) or end
every watch, cleanly or by killing the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from .errors import ApiError, bad_request
from .request import Target
from .resources import ResourceType
from .responses import dumps
from .selectors import parse_field_selector, parse_label_selector
from .store import Drop, Store, Watcher
from .strategy import relabel


@dataclass(frozen=True, slots=True)
class WatchOptions:
    version: str
    timeout: float
    bookmarks: bool
    bookmark_interval: float  # the cacher's bookmarkFrequency (a minute upstream)
    bookmark_before_timeout: float = 2.0  # the "pretimeout" bookmark, 2 s upstream


def next_bookmark(now: float, deadline: float, options: WatchOptions) -> float | None:
    """``cacheWatcher.nextBookmarkTime``: a bookmark a ``bookmark_interval`` from now, or
    ``bookmark_before_timeout`` before the deadline if that is sooner; None once even
    that has passed (no more bookmarks on this watch)."""
    heartbeat = now + options.bookmark_interval
    heartbeat = min(heartbeat, deadline - options.bookmark_before_timeout)
    return heartbeat if heartbeat >= now else None


async def serve_watch(
    request: web.Request,
    target: Target,
    *,
    store: Store,
    max_seconds: float,
    bookmark_interval: float,
    bookmark_before_timeout: float,
    gate: Callable[[], Awaitable[object]],
) -> web.StreamResponse:
    """Open a watch on ``target`` as the request asks and stream it; ``max_seconds`` is
    the timeout when the client sets none (``--min-request-timeout``)."""
    query = request.query
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"), supported=target.rt.field_labels)
    timeout = max_seconds
    if query.get("timeoutSeconds"):
        try:
            timeout = float(query["timeoutSeconds"])  # honoured as asked, even if longer
        except ValueError:
            raise bad_request(
                f"timeoutSeconds: invalid value {query['timeoutSeconds']!r}"
            ) from None
    try:
        watcher = store.watch(
            target.rt, namespace=target.namespace, labels=labels, fields=fields,
            since=query.get("resourceVersion"),
        )  # fmt: skip
    except ApiError as error:
        if error.code != 410:
            raise
        return await stream_error(request, error)
    options = WatchOptions(
        version=target.version,
        timeout=timeout,
        bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
        bookmark_interval=bookmark_interval,
        bookmark_before_timeout=bookmark_before_timeout,
    )
    return await stream_watch(
        request, store=store, watcher=watcher, rt=target.rt, options=options, gate=gate
    )


async def _start(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    return response


async def stream_error(request: web.Request, error: ApiError) -> web.StreamResponse:
    """A watch that cannot start (410 Expired): 200, one ERROR event, end of stream."""
    response = await _start(request)
    await response.write((dumps({"type": "ERROR", "object": error.status()}) + "\n").encode())
    await response.write_eof()
    return response


async def stream_watch(
    request: web.Request,
    *,
    store: Store,
    watcher: Watcher,
    rt: ResourceType,
    options: WatchOptions,
    gate: Callable[[], Awaitable[object]],
) -> web.StreamResponse:
    """Deliver ``watcher``'s events until timeout, a drop, or the client going away."""
    loop = asyncio.get_running_loop()
    response = await _start(request)
    deadline = loop.time() + options.timeout
    bookmark_at = next_bookmark(loop.time(), deadline, options) if options.bookmarks else None

    async def send(kind: str, obj: dict) -> None:
        await response.write((dumps({"type": kind, "object": obj}) + "\n").encode())

    async def bookmark() -> None:
        obj = {
            "kind": rt.kind,
            "apiVersion": rt.api_version(options.version),
            "metadata": {"resourceVersion": str(store.revision)},
        }
        await send("BOOKMARK", obj)

    try:
        while True:
            now = loop.time()
            if now >= deadline:
                break
            wait = deadline - now
            if bookmark_at is not None:
                wait = max(0.0, min(wait, bookmark_at - now))
            try:
                item = await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                if bookmark_at is not None and loop.time() >= bookmark_at:
                    await gate()
                    if watcher.queue.empty():
                        await bookmark()
                    bookmark_at = next_bookmark(loop.time(), deadline, options)
                    if bookmark_at is not None and bookmark_at <= loop.time():
                        bookmark_at = None  # the pre-timeout bookmark was the last one
                continue
            if isinstance(item, Drop):
                if item.abrupt and request.transport is not None:
                    request.transport.abort()
                    return response
                break
            await gate()
            kind, obj = item
            await send(kind, relabel(obj, rt, options.version))
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        store.unwatch(watcher)
    return response
