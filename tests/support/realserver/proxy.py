"""A fault-injecting TLS proxy between the service and a real kube-apiserver.

The double injects faults inside itself; a real API server cannot. This proxy gives the
fault and restart suites the same reach on the real backend: the service talks to the
proxy (its own TLS certificate, trusted through the client configuration's CA), which
forwards every request, headers and body unchanged, to the real server and streams the
answer back (watches included). The test controls it with the double's vocabulary:

* :meth:`fail_next` — answer the next N matching requests with an error (a ``Status``,
  or max-in-flight's plain-text 429: :mod:`admission.apiserver_double.hooks`);
* :meth:`drop_watches` — end every open watch, cleanly or by killing the connection;
* :meth:`pause` / :meth:`resume` — hold every new request (and watch data) meanwhile;
* :attr:`recorder` — every request seen, by Kubernetes verb and resource, to count
  what the service sends.

A real ``410 Expired`` comes from etcd compaction (:func:`compact_etcd`), not from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import aiohttp
from aiohttp import web

from admission.apiserver_double.certs import make_serving_cert
from admission.apiserver_double.hooks import (
    FaultInjector,
    FaultRule,
    RecordedRequest,
    RequestRecorder,
)
from admission.apiserver_double.responses import error_response

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


def classify(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str, str]:
    """(verb, resource[/sub], namespace, name) of a Kubernetes API request path."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        rest = parts[3:]
    else:
        return ("discovery" if method == "GET" else "other", "", "", "")
    ns = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        ns, rest = rest[1], rest[2:]
    if not rest:
        return ("discovery", "", ns, "")
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource += "/" + rest[2]
    if method == "GET":
        verb = "watch" if query.get("watch") in ("true", "1") else ("get" if name else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, "other"
        )
        if verb == "delete" and not name:
            verb = "deletecollection"
    return verb, resource, ns, name


class FaultProxy:
    def __init__(self, upstream: str, upstream_ca_pem: bytes) -> None:
        self.upstream = upstream.rstrip("/")
        self._upstream_ssl = ssl.create_default_context(cadata=upstream_ca_pem.decode())
        self.cert = make_serving_cert(
            ["localhost"], ip_addresses=["127.0.0.1"], ca_name="fault-proxy-ca"
        )
        self.faults = FaultInjector()
        self.recorder = RequestRecorder()
        self._running = asyncio.Event()
        self._running.set()
        # open watch streams -> (the handler task streaming it, its request)
        self._watches: dict[web.StreamResponse, tuple[asyncio.Task[Any] | None, web.Request]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    @property
    def ca_pem(self) -> bytes:
        return self.cert.ca_pem

    # -- the double's fault vocabulary ----------------------------------------------------------

    def fail_next(self, count: int = 1, *, code: int = 500, **filters: Any) -> FaultRule:
        return self.faults.add(count, code=code, **filters)

    def clear_faults(self) -> None:
        self.faults.clear()

    def drop_watches(self, *, abrupt: bool = False) -> int:
        """End every open watch: cleanly (the stream ends) or by killing the connection."""
        watches, self._watches = self._watches, {}
        for task, request in watches.values():
            if abrupt and request.transport is not None:
                request.transport.abort()
            if task is not None:
                task.cancel()
        return len(watches)

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.recorder.requests

    def request_count(self, *, verb: str | None = None, resource: str | None = None) -> int:
        return self.recorder.count(verb=verb, resource=resource)

    # -- serving --------------------------------------------------------------------------------

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._upstream_ssl, limit=0),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.cert.server_ssl_context())
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"https://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.drop_watches(abrupt=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await self._running.wait()
        query = dict(request.query)
        verb, resource, ns, name = classify(request.method, request.path, query)
        rec = RecordedRequest(
            method=request.method,
            path=request.path,
            query=query,
            content_type=request.content_type,
            verb=verb,
            resource=resource,
            namespace=ns,
            name=name,
            user="",
        )
        self.recorder.record(rec)
        fault = self.faults.check(rec)
        if fault is not None:
            rec.status = fault.code
            return error_response(fault)  # as the double answers it (kube-apiserver's shapes)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        assert self._session is not None
        upstream = await self._session.request(
            request.method,
            self.upstream + request.path_qs,
            data=body or None,
            headers=headers,
        )
        rec.status = upstream.status
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS}
        if verb != "watch":
            try:
                data = await upstream.read()
            finally:
                upstream.release()
            return web.Response(status=upstream.status, body=data, headers=out_headers)
        resp = web.StreamResponse(status=upstream.status, headers=out_headers)
        await resp.prepare(request)
        self._watches[resp] = (asyncio.current_task(), request)
        try:
            async for chunk in upstream.content.iter_any():
                await self._running.wait()
                await resp.write(chunk)
        except (asyncio.CancelledError, ConnectionResetError, aiohttp.ClientError):
            pass
        finally:
            self._watches.pop(resp, None)
            upstream.close()
        with contextlib.suppress(Exception):
            await resp.write_eof()
        return resp


def compact_etcd(etcd_url: str) -> int:
    """Compact etcd at its current revision: a watch resumed from before it gets 410."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(etcd_url + path, data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    rev = int(post("/v3/kv/range", {"key": "Lw=="})["header"]["revision"])  # key "/"
    try:
        post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
    except urllib.error.HTTPError as err:
        if err.code != 400:  # 400: already compacted at this revision (nothing new)
            raise
    return rev
