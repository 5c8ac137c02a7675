"""``quartermaster demo``: the live service on an in-process API server, no cluster needed.

What ``simulate`` is to the engine, this is to the service: one command that starts the
API-server double (:mod:`admission.apiserver_double`, HTTPS on loopback, the project's
CRDs only, as a plain cluster after the install), runs the whole service against it as
``serve`` does (controller, scheduler, webhooks registered with the double, metrics, the
visibility API behind the double's aggregation layer, the dashboard), creates the
example organisation of ``manifests/examples/`` through the API (so schemas, CEL rules
and the webhooks check every object, as with ``kubectl apply``), and writes a kubeconfig
so that ``quartermaster list|why|stop|resume``, ``kubectl`` and a browser can be pointed
at it. :mod:`.demo_jobs` keeps it moving: a stand-in Job controller runs admitted Jobs
and a trickle of new Jobs arrives (``--no-jobs``: neither).

Nothing outlives the command: its files (certificates, kubeconfigs) live in a temporary
directory removed on exit, Ctrl-C stops it cleanly with exit code 130 (SIGTERM: 143).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from admission.apiserver_double import (
    DEFAULT_NAMESPACES,
    ApiServer,
    enable_aggregation,
    load_webhook_configurations,
    running_apiserver,
    write_kubeconfig,
)
from admission.apiserver_double.crds import CRD_DIR
from admission.config.schema import Config
from admission.kube.client.kueuectl_calls import UserApi

from .apply import Applied, create_directory
from .demo_jobs import RUN_SECONDS, SUBMIT_EVERY, run_jobs
from .listen_errors import listen_problem
from .options import ServiceOptions
from .service import Service
from .visibility import GROUP as VISIBILITY_GROUP

log = logging.getLogger("quartermaster.demo")

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
MANIFESTS = CRD_DIR.parent
"""The repository's ``manifests/`` (the double's CRDs come from its ``crd/``)."""
SERVICE_NAMESPACE = "quartermaster-system"
SERVICE_ROUTE = f"{SERVICE_NAMESPACE}/quartermaster-webhook-service"
SERVICE_ACCOUNT = f"system:serviceaccount:{SERVICE_NAMESPACE}:quartermaster"
DEFAULT_DASHBOARD_PORT = 8083  # the port `kubectl port-forward` reaches in the cluster
STARTUP_DEADLINE = 300.0  # seconds; only a guard against a service that never gets ready


class DemoError(Exception):
    """Something the user can fix (a flag, a missing checkout): one line, exit code 2."""


@dataclass(slots=True)
class DemoOptions:
    config: Config = field(default_factory=Config)
    host: str = "127.0.0.1"  # the dashboard's address
    port: int = DEFAULT_DASHBOARD_PORT  # the dashboard's port (0: any free port)
    kubeconfig_out: Path | None = None  # None: in the demo's temporary directory
    jobs: bool = True  # the stand-in Job controller and the trickle of new Jobs
    manifests: Path = MANIFESTS
    seed: int | None = None


@dataclass(slots=True)
class RunningDemo:
    """A started demo: what it prints."""

    server: ApiServer
    service: Service
    kubeconfig: Path
    user: UserApi  # the kubeconfig's client (the double's admin)
    applied: Applied

    @property
    def dashboard_url(self) -> str:
        return _url("http", self.service.options.dashboard_host, self.service.ports["dashboard"])

    @property
    def metrics_url(self) -> str:
        return _url("http", self.service.options.host, self.service.ports["metrics"]) + "metrics"


def _url(scheme: str, host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}/"


def check_inputs(options: DemoOptions) -> None:
    """What the demo reads and writes, checked before anything starts."""
    needed = (
        options.manifests / "crd" / "kustomization.yaml",
        options.manifests / "base" / "webhooks.yaml",
        options.manifests / "examples",
    )
    missing = [p for p in needed if not p.exists()]
    if missing:
        raise DemoError(
            f"{missing[0]} not found: the demo reads the repository's manifests/ (CRDs, "
            "webhook configurations, examples); run it from a clone installed with "
            "`pip install -e .`"
        )
    out = options.kubeconfig_out
    if out is not None:
        if out.exists():
            raise DemoError(
                f"--kubeconfig-out {out}: the file exists; the demo writes a new kubeconfig "
                "there and removes it when it stops, so give a path that does not exist"
            )
        if not out.parent.is_dir():
            raise DemoError(f"--kubeconfig-out {out}: no directory {out.parent}")
    if options.port != 0:
        _check_port(options.host, options.port)


def _check_port(host: str, port: int) -> None:
    """A clear error now rather than a dashboard that silently stays away."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            reason = os.strerror(err.errno) if err.errno else str(err)
            hint = " (--port 0 picks a free port)" if err.errno == errno.EADDRINUSE else ""
            raise DemoError(f"cannot listen on {host}:{port} (dashboard): {reason}{hint}") from None


@contextlib.asynccontextmanager
async def running_demo(options: DemoOptions, workdir: Path) -> AsyncIterator[RunningDemo]:
    """Start everything (files under ``workdir``); stop it all when the block ends."""
    from webhooks.server.certs import ensure_cert_dir, read_cert_dir

    cert_dir = workdir / "certs"
    # on the loop: nothing else runs yet, and a thread would outlive a cancelled start
    ensure_cert_dir(cert_dir, namespace=SERVICE_NAMESPACE)
    certs = read_cert_dir(cert_dir)
    webhooks = load_webhook_configurations(
        options.manifests / "base" / "webhooks.yaml", ca_bundle=certs.ca_bundle_b64
    )
    admin_token, service_token = secrets.token_hex(16), secrets.token_hex(16)
    async with running_apiserver(
        tls=True,
        admin_token=admin_token,  # not the well-known ADMIN_TOKEN: loopback is shared
        webhook_configurations=webhooks,
        tokens={service_token: SERVICE_ACCOUNT},
        namespaces=(*DEFAULT_NAMESPACES, SERVICE_NAMESPACE),
        record_requests=False,  # a demo left running keeps its memory bounded
        third_party_crds=False,
    ) as server:
        enable_aggregation(server)
        kubeconfig = options.kubeconfig_out or workdir / "kubeconfig"
        service_kubeconfig = workdir / "service.kubeconfig"
        service = Service(
            ServiceOptions(
                config=options.config,
                kubeconfig=str(service_kubeconfig),
                namespace=SERVICE_NAMESPACE,
                host="127.0.0.1",
                webhook_port=0,
                metrics_port=0,
                health_port=0,
                cert_dir=str(cert_dir),
                manage_certificates=False,  # the certificate is the demo's (cert_dir)
                inject_ca_bundle=False,  # and the webhook configurations carry its CA
                service_account_username=SERVICE_ACCOUNT,
                visibility_port=0,
                dashboard_port=options.port,
                dashboard_host=options.host,
                seed=options.seed,
            )
        )
        task: asyncio.Task[int] | None = None
        user: UserApi | None = None
        try:
            for path, token in ((kubeconfig, admin_token), (service_kubeconfig, service_token)):
                write_kubeconfig(path, server.url, token=token, ca_pem=server.ca_pem)
                path.chmod(0o600)  # a credential, if only for loopback
            task = asyncio.create_task(service.run(), name="service")
            await _until_serving(service, task)
            server.set_service_route(SERVICE_ROUTE, f"https://127.0.0.1:{service.ports['webhook']}")
            server.aggregator.register(
                VISIBILITY_GROUP,
                f"https://127.0.0.1:{service.ports['visibility']}",
                service=SERVICE_ROUTE,
                ca_pem=certs.ca_cert_pem,
            )
            user = await UserApi.connect(kubeconfig=str(kubeconfig))
            applied = await create_directory(user, options.manifests / "examples")
            yield RunningDemo(server, service, kubeconfig, user, applied)
        finally:
            service.stop()
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, timeout=30)
            if user is not None:
                await user.close()
            if options.kubeconfig_out is not None:
                options.kubeconfig_out.unlink(missing_ok=True)


async def _until_serving(service: Service, task: asyncio.Task[int]) -> None:
    """Until the service is ready and its webhook, visibility and dashboard servers
    listen; a service that stops meanwhile raises its error."""
    wanted = ("webhook", "visibility", "dashboard", "metrics")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTUP_DEADLINE
    while not (service.ready.is_set() and all(p in service.ports for p in wanted)):
        if task.done():
            task.result()  # its exception, if it failed
            raise RuntimeError(f"the service stopped while starting (exit code {task.result()})")
        if loop.time() > deadline:
            waiting = [p for p in wanted if p not in service.ports]
            if not service.ready.is_set():
                waiting.insert(0, "informers to sync")
            raise RuntimeError(
                f"the service did not start within {STARTUP_DEADLINE:.0f} s: waiting for "
                + ", ".join(waiting)
            )
        await asyncio.sleep(0.05)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def banner(demo: RunningDemo, *, jobs: bool, examples: Path) -> str:
    """What the demo prints once it runs: addresses, then lines to copy."""
    kc = str(demo.kubeconfig)
    visibility = f"/apis/{VISIBILITY_GROUP}/v1beta1/clusterqueues/vision-research/pendingworkloads"
    lines = [
        "Quartermaster demo: the admission service on an in-process Kubernetes API server",
        "(no cluster). It runs until Ctrl-C, then removes everything it created.",
        "",
        f"  dashboard       {demo.dashboard_url}",
        f"  metrics         {demo.metrics_url}",
        f"  visibility API  {visibility}  (through the API server)",
        f"  API server      {demo.server.url}",
        f"  kubeconfig      {kc}",
        "",
        f"Created from {_shown(examples)}/: {demo.applied.summary() or 'nothing'}.",
    ]
    for skipped in demo.applied.not_created:
        lines.append(f"  not created: {skipped}")
    if jobs:
        low, high = RUN_SECONDS
        lines.append(
            f"A stand-in Job controller runs every admitted Job for {low:.0f}-{high:.0f} s, and "
            f"a new example Job arrives every {SUBMIT_EVERY:.0f} s (--no-jobs: neither)."
        )
    else:
        lines.append("No Job runs or arrives (--no-jobs): admitted Jobs keep their quota.")
    lines += [
        "",
        "Try, in another terminal:",
        f"  quartermaster list clusterqueues --kubeconfig {kc}",
        f"  quartermaster list workloads -A --kubeconfig {kc}",
        f"  quartermaster why job/vision-pretrain-too-big -n vision-research --kubeconfig {kc}",
        f"  quartermaster stop clusterqueue research-cpu --kubeconfig {kc}",
        f"  quartermaster resume clusterqueue research-cpu --kubeconfig {kc}",
        f"  kubectl --kubeconfig {kc} get workloads -A",
        f"  kubectl --kubeconfig {kc} get --raw {visibility}",
        "",
    ]
    return "\n".join(lines)


async def serve_demo(
    options: DemoOptions, *, stop: asyncio.Event, started: asyncio.Event, out: TextIO
) -> None:
    """Run the demo until ``stop`` is set (``started`` once the banner is out)."""
    with tempfile.TemporaryDirectory(prefix="quartermaster-demo-") as tmp:
        try:
            async with running_demo(options, Path(tmp)) as demo:
                print(banner(demo, jobs=options.jobs, examples=options.manifests / "examples"),
                      file=out, flush=True)  # fmt: skip
                started.set()
                if options.jobs:
                    await run_jobs(demo.user.client, stop=stop, seed=options.seed)
                else:
                    await stop.wait()
        finally:
            # the service may still be writing its certificate files while it stops
            shutil.rmtree(tmp, ignore_errors=True)


async def _main(options: DemoOptions, out: TextIO) -> int:
    loop = asyncio.get_running_loop()
    stop, started = asyncio.Event(), asyncio.Event()
    received: list[int] = []

    def interrupted(sig: signal.Signals) -> None:
        received.append(EXIT_SIGNAL[sig])
        stop.set()

    for sig in EXIT_SIGNAL:
        loop.add_signal_handler(sig, interrupted, sig)
    demo = asyncio.create_task(serve_demo(options, stop=stop, started=started, out=out))
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({demo, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not demo.done() and not started.is_set():
            demo.cancel()  # interrupted while starting: the cleanup runs on cancel
        with contextlib.suppress(asyncio.CancelledError):
            await demo
    finally:
        stopped.cancel()
        for sig in EXIT_SIGNAL:
            loop.remove_signal_handler(sig)
    return received[0] if received else EXIT_OK


def run_demo(options: DemoOptions, *, out: TextIO = sys.stdout) -> int:
    """``quartermaster demo``: run until SIGINT (exit 130) or SIGTERM (exit 143)."""
    try:
        check_inputs(options)
        return asyncio.run(_main(options, out))
    except DemoError as err:
        print(f"quartermaster demo: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # before the signal handlers were in place
        return EXIT_SIGNAL[signal.SIGINT]
    except Exception as err:  # noqa: BLE001 - the CLI contract: exit 1 with the reason
        line = listen_problem(err) if isinstance(err, OSError) else None
        log.debug("quartermaster demo failed", exc_info=True)
        print(f"quartermaster demo: {line or err}", file=sys.stderr)
        return EXIT_INTERNAL
