"""Wiring of the operator-facing endpoints of ``serve``: the visibility API and the
dashboard. Kept out of :mod:`.service` so the composition root only says *that* they
run; what they serve is in :mod:`.visibility` and :mod:`.dashboard`."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Protocol

from admission.kube.client.delegated_auth import DelegatedAuth
from admission.kube.client.rest import KubeClient
from admission.kube.controller import Controller

from .options import ServiceOptions


class Service(Protocol):
    """What the endpoints read of the running service (:class:`.service.Service`), and
    where they record themselves and their bound ports."""

    options: ServiceOptions
    client: KubeClient | None
    controller: Controller | None
    certs_loaded: bool
    ports: dict[str, int]
    visibility: Any
    dashboard: Any


log = logging.getLogger("quartermaster.serve")
VISIBILITY_PATH = "/apis/visibility.kueue.x-k8s.io/v1beta1"


async def serve_visibility(service: Service) -> None:
    """The aggregated visibility API on ``visibility_port``, with the webhook's serving
    certificate (the APIService points at the webhook Service's ``visibility`` port)."""
    from webhooks.server.certs import ensure_cert_dir

    from .visibility import VisibilityServer, source_of

    opts = service.options
    assert service.controller is not None and service.client is not None
    while not service.certs_loaded:  # the webhook server brought (or issued) the certificate
        await asyncio.sleep(0.05)
    cert_dir = Path(opts.cert_dir)
    if not (cert_dir / "tls.crt").exists():
        await asyncio.to_thread(
            ensure_cert_dir, cert_dir, service=opts.webhook_service, namespace=opts.namespace
        )
    server = VisibilityServer(source_of(service.controller), auth=DelegatedAuth(service.client))
    service.visibility = server

    def ready(port: int) -> None:
        service.ports["visibility"] = port
        log.info("visibility API listening on https://%s:%d%s", opts.host, port, VISIBILITY_PATH)

    assert opts.visibility_port is not None
    await server.serve(
        host=opts.host, port=opts.visibility_port, cert_dir=str(cert_dir), ready=ready
    )


async def serve_dashboard(service: Service) -> None:
    """The read-only dashboard on ``dashboard_host:dashboard_port`` (plain HTTP: it is
    bound to loopback in the pod and reached with ``kubectl port-forward``)."""
    from .dashboard import Dashboard

    opts = service.options
    assert service.controller is not None and opts.dashboard_port is not None
    dashboard = Dashboard.of_controller(service.controller, config=opts.config)
    service.dashboard = dashboard

    def ready(port: int) -> None:
        service.ports["dashboard"] = port
        log.info("dashboard listening on http://%s:%d/", opts.dashboard_host, port)

    await dashboard.serve(host=opts.dashboard_host, port=opts.dashboard_port, ready=ready)
