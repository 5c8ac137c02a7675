"""Streams one watch: newline-delimited JSON events over a chunked HTTP response.

Mirrors kube-apiserver's watch endpoint: events as ``{"type": ..., "object": ...}``
lines; ``BOOKMARK`` events carrying only ``metadata.resourceVersion`` when the client
sent ``allowWatchBookmarks=true`` (periodically, and once more just before a
``timeoutSeconds`` close); a too-old ``resourceVersion`` answered with HTTP 200 and a
single ``ERROR`` event holding a 410 ``Status``.  Test hooks can hold deliveries
(pause) or end every watch, cleanly or by killing the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from .errors import ApiError
from .resources import ResourceType
from .responses import dumps
from .store import Drop, Store, Watcher
from .strategy import relabel


@dataclass(frozen=True, slots=True)
class WatchOptions:
    version: str
    timeout: float
    bookmarks: bool
    bookmark_interval: float


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
    gate: Callable[[], Awaitable[None]],
) -> web.StreamResponse:
    """Deliver ``watcher``'s events until timeout, a drop, or the client going away."""
    loop = asyncio.get_running_loop()
    response = await _start(request)
    deadline = loop.time() + options.timeout
    next_bookmark = loop.time() + options.bookmark_interval

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
            if options.bookmarks:
                wait = max(0.0, min(wait, next_bookmark - now))
            try:
                item = await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                if options.bookmarks and loop.time() >= next_bookmark:
                    await gate()
                    if watcher.queue.empty():
                        await bookmark()
                    next_bookmark = loop.time() + options.bookmark_interval
                continue
            if isinstance(item, Drop):
                if item.abrupt and request.transport is not None:
                    request.transport.abort()
                    return response
                break
            await gate()
            kind, obj = item
            await send(kind, relabel(obj, rt, options.version))
        if options.bookmarks and watcher.queue.empty() and loop.time() >= deadline:
            await bookmark()
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        store.unwatch(watcher)
    return response
