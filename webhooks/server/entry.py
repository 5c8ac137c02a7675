"""The webhook server's entry points: serve over TLS until cancelled
(:func:`run_webhook_server`, which ``serve`` runs beside its controller) and
``quartermaster serve --webhooks-only`` (:func:`serve_webhooks_only`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from webhooks.config import WebhookConfig
from webhooks.handlers.owners import OwnerSource
from webhooks.server.app import CONNECTIONS_KEY, all_webhooks, build_app
from webhooks.server.certs import ReloadingSSLContext, ensure_cert_dir
from webhooks.server.health import WebhookState
from webhooks.server.site import GuardedSite, ServerLimits, raise_open_files_limit
from webhooks.view import InMemoryView, ModelView

log = logging.getLogger("quartermaster.webhooks")


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
    quiet: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve the webhooks over TLS until cancelled.

    Loads ``tls.crt``/``tls.key`` from ``cert_dir`` (reloading them when they change,
    checked every ``cert_check_interval`` seconds), then calls ``ready_callback`` with
    the bound port (useful with ``port=0``). ``state`` lets the caller flip
    ``model_synced`` once its cache is synced; without it the model counts as synced.
    ``quiet`` returns once no scheduling cycle changes ``view`` (see :func:`build_app`).
    """
    state = state if state is not None else WebhookState(model_synced=True)
    limits = limits or ServerLimits()
    soft, _hard = raise_open_files_limit()
    tls = ReloadingSSLContext(cert_dir)
    state.certs_loaded = True
    app = build_app(
        view=view,
        config=config,
        state=state,
        registry=registry,
        limits=limits,
        owners=owners,
        quiet=quiet,
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
