"""The probe endpoints: ``/healthz``, ``/readyz`` and ``/metrics``, shared by the webhook
server and ``serve``'s health port."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


@dataclass(slots=True)
class WebhookState:
    """Readiness inputs: ``/readyz`` is 200 only when both are true."""

    certs_loaded: bool = False
    model_synced: bool = False


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
