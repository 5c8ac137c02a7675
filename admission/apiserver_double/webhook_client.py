"""The double's HTTP client for webhooks: a request lost to a closed idle connection is
sent again, as Go's ``net/http`` transport (kube-apiserver's) does.

A keep-alive connection sits in the pool between calls; the webhook server may close it
as idle at the very moment a request goes out on it.  The request then never reaches a
handler and the client sees the connection end before any response.  Go's transport
retries such a request once on a new connection when the connection was reused and the
body can be sent again (``nothingWrittenError`` / ``errServerClosedIdle`` with
``GetBody`` set); a fresh connection that fails is a real failure and is not retried.
"""

from __future__ import annotations

import ssl
from types import SimpleNamespace
from typing import Any

import aiohttp

#: what a reused connection closed by its server looks like before any response arrives
_CLOSED_IDLE = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


async def _mark_reused(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
) -> None:
    if isinstance(ctx.trace_request_ctx, dict):
        ctx.trace_request_ctx["reused"] = True


def webhook_session() -> aiohttp.ClientSession:
    """A session whose requests learn whether they went out on a pooled connection."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_mark_reused)
    return aiohttp.ClientSession(trace_configs=[trace])


async def post_json(
    session: aiohttp.ClientSession,
    url: str,
    body: Any,
    *,
    ssl_context: ssl.SSLContext,
    server_hostname: str | None,
    timeout: aiohttp.ClientTimeout,
) -> tuple[int, Any]:
    """POST ``body`` and return (status, decoded JSON); sent once more on a new
    connection only when a reused one ended before the response began."""
    while True:
        attempt: dict[str, bool] = {}
        try:
            async with session.post(
                url,
                json=body,
                ssl=ssl_context,
                server_hostname=server_hostname,
                timeout=timeout,
                trace_request_ctx=attempt,
            ) as resp:
                attempt["responded"] = True
                if resp.status != 200:
                    return resp.status, None
                return resp.status, await resp.json(content_type=None)
        except _CLOSED_IDLE:
            if not attempt.get("reused") or attempt.get("responded"):
                raise
