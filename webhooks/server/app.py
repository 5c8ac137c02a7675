"""The HTTPS AdmissionReview server (admission.k8s.io/v1): the aiohttp application.

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
API-server test double can call the handlers without HTTP. The envelope is read and
written by :mod:`webhooks.codec`; the server's entry points are in :mod:`.entry`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from admission.integrations.registry import ALL, Frameworks
from webhooks.codec import BadReview, encode_response, one_line, parse_review
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
from webhooks.server.connections import ConnectionTable
from webhooks.server.health import WebhookState, add_health_routes
from webhooks.server.metrics import WebhookMetrics
from webhooks.server.ratelog import RateLimitedLog
from webhooks.server.site import ServerLimits
from webhooks.view import ModelView

log = logging.getLogger("quartermaster.webhooks")

MAX_BODY_BYTES = 3 * 1024 * 1024


def all_webhooks(frameworks: Frameworks = ALL) -> list[WebhookSpec]:
    """Every webhook this server serves, in registration order: two per registered job
    integration (no-ops for those ``frameworks`` does not enable), then the quota CRs'."""
    return [*integration_webhooks(frameworks), *quota.WEBHOOKS]


_bad_request_log = RateLimitedLog()
_handler_error_log = RateLimitedLog()  # apart, so a flood of bad requests hides no bug


def bad_request(path: str, reason: str) -> None:
    """Log a refused request: one line, rate-limited, no traceback."""
    _bad_request_log(logging.WARNING, "bad request on %s: %s", path, one_line(reason, 200))


def run_handler(spec: WebhookSpec, req: AdmissionRequest, ctx: HandlerContext) -> Verdict:
    """The handler's verdict; a malformed object or a handler error becomes a denial."""
    if req.operation not in ("CREATE", "UPDATE"):
        return allow()
    try:
        return spec.handler(req, ctx)
    except MalformedObject as exc:
        return deny(f"{spec.kind} {one_line(req.name, 80)!r}: {exc}", code=400, reason="BadRequest")
    except Exception as exc:  # noqa: BLE001 - a handler bug must not take the server down
        # one line, rate-limited (a request can trigger it at will); the traceback at DEBUG
        _handler_error_log(
            logging.ERROR,
            "webhook %s failed on %s %s/%s (uid %s): %s: %s",
            spec.path,
            req.operation,
            one_line(req.namespace, 80),
            one_line(req.name, 80),
            one_line(req.uid, 80),
            type(exc).__name__,
            one_line(str(exc), 200),
        )
        log.debug("webhook %s handler traceback", spec.path, exc_info=True)
        return deny(
            f"internal error in webhook {spec.path}: {type(exc).__name__}: {one_line(str(exc))}",
            code=500,
            reason="InternalError",
        )


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
        bad_request(spec.path, f"{why}: {one_line(str(exc), 120)}")
        return 400, f"{why}\n".encode(), None, None
    if (
        owners is not None
        and (
            (spec.mutating and spec.reads_owners_on_create and req.operation == "CREATE")
            or (req.sub_resource and req.sub_resource in spec.reads_owners_on)
        )
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


STATE_KEY = web.AppKey("webhook_state", WebhookState)
METRICS_KEY = web.AppKey("webhook_metrics", WebhookMetrics)
RUNNER_KEY = web.AppKey("webhook_offloop", OffLoopRunner)
CONNECTIONS_KEY = web.AppKey("webhook_connections", ConnectionTable)


def build_app(
    *,
    view: ModelView,
    config: WebhookConfig,
    state: WebhookState | None = None,
    registry: CollectorRegistry | None = None,
    webhooks: list[WebhookSpec] | None = None,
    limits: ServerLimits | None = None,
    owners: OwnerSource | None = None,
    quiet: Callable[[], Awaitable[None]] | None = None,
) -> web.Application:
    """The aiohttp application with every webhook route and the health endpoints.

    ``owners`` reads the owners of an object under review (:mod:`.owners`): a mutating
    review of an object with a controller owner of a known kind reads its owner chain
    before it is decided. ``quiet`` returns once no scheduling cycle changes ``view``
    (``serve``: the controller's ``cache_ready``): impact what-ifs take their state then."""
    specs = webhooks if webhooks is not None else all_webhooks(config.frameworks)
    limits = limits or ServerLimits()
    ctx = HandlerContext(view=view, config=config)
    metrics = WebhookMetrics(registry or CollectorRegistry(), [s.path for s in specs])
    state = state if state is not None else WebhookState(model_synced=True)
    assert config.impact_deadline is not None
    runner = OffLoopRunner(config.impact_deadline, limits.what_if_mode, quiet=quiet)
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
