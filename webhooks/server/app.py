"""The HTTPS AdmissionReview server (admission.k8s.io/v1) and its entry points.

One aiohttp application serves every webhook at Kueue's paths, plus ``/healthz``,
``/readyz`` and ``/metrics``. The contract with the API server (AdmissionReview v1):

* a well-formed review always gets HTTP 200 with ``response.uid`` echoed; the decision,
  a base64 RFC 6902 patch, warnings and a denial's ``status`` are inside;
* a request that is not a usable review (not JSON, no ``request``, wrong ``kind`` or
  ``apiVersion``, an object of the wrong kind for the path) gets HTTP 400 with a
  one-line reason; a body over 3 MiB gets 413;
* a handler that raises never becomes a 500: the review is denied with the error
  (the webhook configuration's ``failurePolicy`` then decides) and the error is logged.

:func:`process_review` is the whole decision as a pure function of the body, so the
API-server test double can call the handlers without HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import signal
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Metric, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from admission.integrations.framework.registry import ALL, Frameworks
from webhooks.config import WebhookConfig
from webhooks.handlers import quota
from webhooks.handlers.generic import integration_webhooks
from webhooks.handlers.offloop import OffLoopRunner, run_inline
from webhooks.handlers.owners import OwnerSource, needs_owners, read_owners
from webhooks.review import (
    AdmissionRequest,
    HandlerContext,
    MalformedObject,
    Verdict,
    WebhookSpec,
    allow,
    deny,
)
from webhooks.server.certs import ReloadingSSLContext, ensure_cert_dir
from webhooks.server.connections import ConnectionTable
from webhooks.server.ratelog import RateLimitedLog
from webhooks.server.site import GuardedSite, ServerLimits, raise_open_files_limit
from webhooks.view import InMemoryView, ModelView

_json_loads: Callable[[bytes | str], Any]
try:  # orjson parses a review ~3x faster than the stdlib; the stdlib is the fallback
    from orjson import loads as _json_loads
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _json_loads = json.loads

log = logging.getLogger("quartermaster.webhooks")

API_VERSION = "admission.k8s.io/v1"
MAX_BODY_BYTES = 3 * 1024 * 1024
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


def all_webhooks(frameworks: Frameworks = ALL) -> list[WebhookSpec]:
    """Every webhook this server serves, in registration order: two per registered job
    integration (no-ops for those ``frameworks`` does not enable), then the quota CRs'."""
    return [*integration_webhooks(frameworks), *quota.WEBHOOKS]


@dataclass(slots=True)
class WebhookState:
    """Readiness inputs: ``/readyz`` is 200 only when both are true."""

    certs_loaded: bool = False
    model_synced: bool = False


class BadReview(ValueError):
    """The body is not a usable AdmissionReview for this path (HTTP 400)."""


class _PathStats:
    __slots__ = ("codes", "buckets", "total", "sum", "denials")

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # last one: +Inf only
        self.total = 0
        self.sum = 0.0
        self.denials = 0


class WebhookMetrics:
    """Prometheus series of one app, in its own registry (controller-runtime's names).

    Requests are counted in plain integers on the event loop (no locks on the hot path)
    and turned into metric families only when ``/metrics`` is scraped.
    """

    def __init__(self, registry: CollectorRegistry, paths: Iterable[str]) -> None:
        self.registry = registry
        self._stats = {p: _PathStats() for p in paths}
        registry.register(self)

    def observe(self, path: str, status: int, seconds: float, denied: bool) -> None:
        st = self._stats[path]
        st.codes[status] = st.codes.get(status, 0) + 1
        st.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        st.total += 1
        st.sum += seconds
        if denied:
            st.denials += 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "controller_runtime_webhook_requests",
            "Admission requests served, by webhook path and HTTP status code.",
            labels=["webhook", "code"],
        )
        latency = HistogramMetricFamily(
            "controller_runtime_webhook_latency_seconds",
            "Time to answer an admission request, by webhook path.",
            labels=["webhook"],
        )
        denials = CounterMetricFamily(
            "quartermaster_webhook_denials",
            "Admission requests answered with allowed=false, by webhook path.",
            labels=["webhook"],
        )
        for path, st in self._stats.items():
            for code, n in sorted(st.codes.items()):
                requests.add_metric([path, str(code)], n)
            cumulative, running = [], 0
            for bound, n in zip((*LATENCY_BUCKETS, float("inf")), st.buckets, strict=True):
                running += n
                cumulative.append((floatToGoString(bound), running))
            latency.add_metric([path], cumulative, st.sum)
            denials.add_metric([path], st.denials)
        yield requests
        yield latency
        yield denials


_bad_request_log = RateLimitedLog()
_handler_error_log = RateLimitedLog()  # apart, so a flood of bad requests hides no bug


def bad_request(path: str, reason: str) -> None:
    """Log a refused request: one line, rate-limited, no traceback."""
    _bad_request_log(logging.WARNING, "bad request on %s: %s", path, _one_line(reason, 200))


# ---------------------------------------------------------------- envelope


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_review(body: bytes, spec: WebhookSpec) -> AdmissionRequest:
    """Validate the AdmissionReview envelope; :class:`BadReview` names what is wrong."""
    try:
        doc = _json_loads(body)
    except RecursionError:
        raise BadReview("malformed JSON: nested too deeply") from None
    except ValueError as exc:
        raise BadReview(f"malformed JSON: {_one_line(str(exc), 120)}") from None
    # Parsed JSON holds exact dicts, lists, strs, ints, floats, bools and None, so the
    # type checks below compare classes (cheaper than isinstance on the hot path).
    if doc.__class__ is not dict:
        raise BadReview("the body must be a JSON object (an AdmissionReview)")
    if doc.get("apiVersion") != API_VERSION:
        raise BadReview(
            f"unsupported apiVersion {_one_line(repr(doc.get('apiVersion')), 80)}, expected {API_VERSION}"
        )
    if doc.get("kind") != "AdmissionReview":
        raise BadReview(
            f"unexpected kind {_one_line(repr(doc.get('kind')), 80)}, expected AdmissionReview"
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
            _one_line(
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


def run_handler(spec: WebhookSpec, req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    """The handler's verdict; a malformed object or a handler error becomes a denial."""
    if req.operation not in ("CREATE", "UPDATE"):
        return allow()
    try:
        return spec.handler(req, ctx)
    except MalformedObject as exc:
        return deny(
            f"{spec.kind} {_one_line(req.name, 80)!r}: {exc}", code=400, reason="BadRequest"
        )
    except Exception as exc:  # noqa: BLE001 - a handler bug must not take the server down
        # one line, rate-limited (a request can trigger it at will); the traceback at DEBUG
        _handler_error_log(
            logging.ERROR,
            "webhook %s failed on %s %s/%s (uid %s): %s: %s",
            spec.path,
            req.operation,
            _one_line(req.namespace, 80),
            _one_line(req.name, 80),
            _one_line(req.uid, 80),
            type(exc).__name__,
            _one_line(str(exc), 200),
        )
        log.debug("webhook %s handler traceback", spec.path, exc_info=True)
        return deny(
            f"internal error in webhook {spec.path}: {type(exc).__name__}: {_one_line(str(exc))}",
            code=500,
            reason="InternalError",
        )


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
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


def process_review(
    body: bytes, spec: WebhookSpec, ctx: HandlerContext
) -> tuple[int, bytes, Verdict | None]:
    """HTTP status, response body and verdict (None for a 400) for one review body.

    Deferred warnings (a quota edit's impact) are computed inline, without a deadline:
    the server itself uses :func:`begin_review` and computes them off its event loop.
    """
    status, out, req, verdict = begin_review(body, spec, ctx)
    if req is None or verdict is None:
        return status, out, verdict
    if verdict.deferred is not None:
        verdict.warnings = [*verdict.warnings, *run_inline(verdict.deferred)]
        verdict.deferred = None
    return finish_review(spec, req, verdict)


def begin_review(
    body: bytes, spec: WebhookSpec, ctx: HandlerContext, *, owners: OwnerSource | None = None
) -> tuple[int, bytes, AdmissionRequest | None, Verdict | None]:
    """Parse and decide: a 400's status and body, or the request and its verdict (whose
    ``deferred`` warnings, if any, are still to be computed). With ``owners``, a
    mutating review whose object has an owner chain to walk is parsed only (verdict
    None): the caller reads the owners and decides."""
    try:
        req = parse_review(body, spec)
    except BadReview as exc:
        bad_request(spec.path, str(exc))
        return 400, (str(exc) + "\n").encode("utf-8", "backslashreplace"), None, None
    except Exception as exc:  # noqa: BLE001 - an envelope we failed to foresee is still a 400
        why = f"unreadable AdmissionReview: {type(exc).__name__}"
        bad_request(spec.path, f"{why}: {_one_line(str(exc), 120)}")
        return 400, f"{why}\n".encode(), None, None
    if (
        owners is not None
        and spec.mutating
        and req.operation == "CREATE"
        and needs_owners(req.object, ctx)
    ):
        return 200, b"", req, None
    return 200, b"", req, run_handler(spec, req, ctx)


def finish_review(
    spec: WebhookSpec, req: AdmissionRequest, verdict: Verdict
) -> tuple[int, bytes, Verdict]:
    """The 200 response body for a decided review."""
    try:
        return 200, encode_response(req.uid, verdict), verdict
    except Exception as exc:  # noqa: BLE001 - e.g. a warning that is not a string
        bad_request(spec.path, f"unencodable verdict: {type(exc).__name__}")
        verdict = deny(
            f"internal error in webhook {spec.path}: cannot encode the response: {type(exc).__name__}",
            code=500,
            reason="InternalError",
        )
        return 200, encode_response(req.uid, verdict), verdict


# ---------------------------------------------------------------- aiohttp app

STATE_KEY = web.AppKey("webhook_state", WebhookState)
METRICS_KEY = web.AppKey("webhook_metrics", WebhookMetrics)
RUNNER_KEY = web.AppKey("webhook_offloop", OffLoopRunner)
CONNECTIONS_KEY = web.AppKey("webhook_connections", ConnectionTable)


def add_health_routes(
    app: web.Application,
    *,
    checks: Callable[[], list[tuple[str, bool]]] | None = None,
    registry: CollectorRegistry | None = None,
    details: Callable[[], list[str]] | None = None,
) -> None:
    """``/healthz`` (alive), ``/readyz`` (503 naming what it waits for; then the
    ``details`` lines, such as which integrations run) and ``/metrics`` (Prometheus, when
    a registry is given): shared by the webhook server and ``serve``."""

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        missing = [name for name, ok in (checks() if checks else []) if not ok]
        more = "".join(f"{line}\n" for line in (details() if details else []))
        if missing:
            return web.Response(
                status=503, text=f"not ready: waiting for {' and '.join(missing)}\n{more}"
            )
        return web.Response(text=f"ok\n{more}")

    async def metrics_route(_request: web.Request) -> web.Response:
        assert registry is not None
        resp = web.Response(body=generate_latest(registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    if checks is not None:
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
    if registry is not None:
        app.router.add_get("/metrics", metrics_route)


def build_app(
    *,
    view: ModelView,
    config: WebhookConfig,
    state: WebhookState | None = None,
    registry: CollectorRegistry | None = None,
    webhooks: list[WebhookSpec] | None = None,
    limits: ServerLimits | None = None,
    owners: OwnerSource | None = None,
) -> web.Application:
    """The aiohttp application with every webhook route and the health endpoints.

    ``owners`` reads the owners of an object under review (:mod:`.owners`): a mutating
    review of an object with a controller owner of a known kind reads its owner chain
    before it is decided."""
    specs = webhooks if webhooks is not None else all_webhooks(config.frameworks)
    limits = limits or ServerLimits()
    ctx = HandlerContext(view=view, config=config)
    metrics = WebhookMetrics(registry or CollectorRegistry(), [s.path for s in specs])
    state = state if state is not None else WebhookState(model_synced=True)
    assert config.impact_deadline is not None
    runner = OffLoopRunner(config.impact_deadline, limits.what_if_mode)
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[STATE_KEY] = state
    app[METRICS_KEY] = metrics
    app[RUNNER_KEY] = runner
    connections = ConnectionTable(trust_window=limits.trust_window)
    app[CONNECTIONS_KEY] = connections

    too_large = f"request body over {MAX_BODY_BYTES} bytes\n".encode()
    encoded = (
        b"request bodies with a Content-Encoding are not accepted "
        b"(the API server never compresses an AdmissionReview)\n"
    )
    slow = b"request body not received in time\n"

    def refuse(path: str, status: int, body: bytes) -> web.Response:
        """Answer without reading (the rest of) the body and close the connection:
        with lingering_time 0 the server does not drain what the client still sends."""
        bad_request(path, f"HTTP {status}: {body.decode().strip()}")
        resp = web.Response(status=status, body=body, content_type="text/plain")
        resp.force_close()
        return resp

    def make_route(spec: WebhookSpec) -> Callable[[web.Request], Any]:
        path = spec.path
        observe = metrics.observe

        async def route(request: web.Request) -> web.Response:
            start = perf_counter()
            if request.headers.get("Content-Encoding", "identity").lower() != "identity":
                observe(path, 415, perf_counter() - start, False)
                return refuse(path, 415, encoded)
            length = request.content_length
            if length is not None and length > MAX_BODY_BYTES:
                observe(path, 413, perf_counter() - start, False)
                return refuse(path, 413, too_large)
            try:
                async with asyncio.timeout(limits.body_timeout):
                    raw = await request.read()
            except web.HTTPRequestEntityTooLarge:
                observe(path, 413, perf_counter() - start, False)
                return refuse(path, 413, too_large)
            except TimeoutError:
                observe(path, 408, perf_counter() - start, False)
                return refuse(path, 408, slow)
            status, body, req, verdict = begin_review(raw, spec, ctx, owners=owners)
            if req is not None and verdict is None:  # its owners are read first
                assert owners is not None
                rctx = await read_owners(req.object or {}, ctx, owners)
                verdict = run_handler(spec, req, rctx)
            if req is not None and verdict is not None:
                if verdict.deferred is not None:
                    more = await runner.run(verdict.deferred)
                    verdict.warnings = [*verdict.warnings, *more]
                    verdict.deferred = None
                status, body, verdict = finish_review(spec, req, verdict)
            denied = verdict is not None and not verdict.allowed
            observe(path, status, perf_counter() - start, denied)
            if status == 200:
                return web.Response(body=body, content_type="application/json")
            return web.Response(status=status, body=body, content_type="text/plain")

        return route

    for spec in specs:
        app.router.add_post(spec.path, connections.track(make_route(spec)))

    add_health_routes(
        app,
        checks=lambda: [("certificates", state.certs_loaded), ("model", state.model_synced)],
        registry=metrics.registry,
    )
    return app


async def run_webhook_server(
    *,
    view: ModelView,
    config: WebhookConfig,
    cert_dir: str | os.PathLike[str],
    host: str = "0.0.0.0",
    port: int = 9443,
    ready_callback: Callable[[int], None] | None = None,
    state: WebhookState | None = None,
    registry: CollectorRegistry | None = None,
    cert_check_interval: float = 10.0,
    limits: ServerLimits | None = None,
    owners: OwnerSource | None = None,
) -> None:
    """Serve the webhooks over TLS until cancelled.

    Loads ``tls.crt``/``tls.key`` from ``cert_dir`` (reloading them when they change,
    checked every ``cert_check_interval`` seconds), then calls ``ready_callback`` with
    the bound port (useful with ``port=0``). ``state`` lets the caller flip
    ``model_synced`` once its cache is synced; without it the model counts as synced.
    """
    state = state if state is not None else WebhookState(model_synced=True)
    limits = limits or ServerLimits()
    soft, _hard = raise_open_files_limit()
    tls = ReloadingSSLContext(cert_dir)
    state.certs_loaded = True
    app = build_app(
        view=view, config=config, state=state, registry=registry, limits=limits, owners=owners
    )
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **limits.handler_kwargs())
    await runner.setup()
    try:
        site = GuardedSite(
            runner,
            host,
            port,
            ssl_context=tls.context,
            backlog=4096,
            limits=limits,
            table=app[CONNECTIONS_KEY],
        )
        await site.start()
        log.debug("open files limit %d", soft)
        bound = runner.addresses[0][1]
        log.info("webhook server listening on %s:%d", host, bound)
        if ready_callback is not None:
            ready_callback(bound)
        while True:
            await asyncio.sleep(cert_check_interval)
            if tls.check():
                log.info("reloaded serving certificate from %s", cert_dir)
            elif tls.last_error:
                log.warning("serving certificate not reloaded: %s", tls.last_error)
    finally:
        await runner.cleanup()


def serve_webhooks_only(
    paths: list[str],
    *,
    cert_dir: str,
    port: int,
    host: str,
    config: WebhookConfig | None = None,
    inputs: Any = None,
    on_ready: Callable[[int, list[str]], None] | None = None,
) -> None:
    """``quartermaster serve --webhooks-only``: model from YAML, self-signed certs.

    Loads the objects with ``admission.drivers.loader.load_paths`` (or takes ``inputs``
    the caller already loaded, e.g. from standard input), writes a CA and serving
    certificate to ``cert_dir`` unless present, prints ``ready`` once listening and
    serves until SIGINT/SIGTERM.
    """
    if inputs is None:
        from admission.drivers.loader import load_paths

        inputs = load_paths(paths)
    view = InMemoryView.from_inputs(inputs)
    ensure_cert_dir(cert_dir)
    webhook_config = config or WebhookConfig()

    async def main() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, task.cancel)

        def ready(port: int) -> None:
            print("ready", flush=True)
            if on_ready is not None:  # (the bound port, every webhook path)
                on_ready(port, [spec.path for spec in all_webhooks(webhook_config.frameworks)])

        with contextlib.suppress(asyncio.CancelledError):
            await run_webhook_server(
                view=view,
                config=webhook_config,
                cert_dir=cert_dir,
                host=host,
                port=port,
                ready_callback=ready,
            )

    asyncio.run(main())
