"""``quartermaster serve``: the admission service on one asyncio event loop.

Wires the configuration, the API client, one informer per watched resource, the cache
and scheduler, the controller, the webhook server (a view of the live cache), the
health and metrics endpoints and — with ``--leader-elect`` — the Lease. Every replica
serves webhooks and keeps its cache current; only the leader reconciles and schedules.

Restart safety comes from the design, not from this module: nothing is kept outside
the API, the cache is rebuilt from list+watch before the first cycle (admitted
Workloads charge their ``status.admission``), and every write is idempotent or pinned
to a resourceVersion.

SIGTERM/SIGINT drain: scheduling stops, in-flight writes get a few seconds to finish,
the Lease is released so a successor takes over at once, watches close, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import faulthandler
import logging
import os
import random
import signal
import socket
import sys
import uuid
from typing import Any

from aiohttp import web

from admission.config.dra import accounting
from admission.config.load import load_config
from admission.config.schema import ConfigError
from admission.engine.cache import Cache
from admission.kube.client.errors import ApiError
from admission.kube.client.ratelimit import TokenBucket
from admission.kube.client.resources import (
    API_SERVICES,
    MUTATING_WEBHOOKS,
    NODES,
    PODS,
    QUEUE_WATCHED,
    VALIDATING_WEBHOOKS,
    resource_of,
)
from admission.kube.client.rest import KubeClient, KubeconfigError
from admission.kube.control.context import BOUND_PODS, TAS_PODS, ControllerOptions
from admission.kube.control.dra_apis import DraApis, feed
from admission.kube.control.integrationgate import IntegrationGate
from admission.kube.control.leader import LeaderElector
from admission.kube.control.metrics import Metrics
from admission.kube.controller import Controller
from admission.kube.multikueue.manager import MultiKueue
from admission.kube.reconcilers.cabundle import CABundleReconciler
from admission.kube.reconcilers.topology_nodes import (
    BOUND_POD_SELECTOR,
    TAS_POD_SELECTOR,
    slim_node,
    slim_pod,
    slim_tas_pod,
)
from admission.kube.watch.cachesync import CacheView
from admission.kube.watch.informer import Informer, strip_managed_fields
from admission.kube.watch.slim import slimmer_for

from .events import EVENT_CALL, EventRecorder, no_event
from .heap import HeapFreezing
from .listen_errors import ListenError, listen_problem
from .looplag import LoopLagMonitor
from .options import (
    ServiceOptions,
    controller_options,
    options_from_args,
    service_account_username,
)

log = logging.getLogger("quartermaster.kube.service")

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2
WEBHOOK_CONFIGURATIONS = (
    (MUTATING_WEBHOOKS, "quartermaster-mutating-webhook-configuration"),
    (VALIDATING_WEBHOOKS, "quartermaster-validating-webhook-configuration"),
)
VISIBILITY_API_SERVICES = tuple(
    (API_SERVICES, f"{version}.visibility.kueue.x-k8s.io") for version in ("v1beta1", "v1beta2")
)
"""The visibility API's APIServices (manifests/base/visibility.yaml): their caBundle is
kept equal to our CA while the visibility API is served."""


class Service:
    """One running ``serve``: start with :meth:`run`, stop with :meth:`stop`."""

    def __init__(self, options: ServiceOptions) -> None:
        self.options = options
        self.ready = asyncio.Event()
        self.ports: dict[str, int] = {}
        self.metrics = Metrics()
        self._loop_lag = LoopLagMonitor(self.metrics.loop_lag, self.metrics.loop_lag_max)
        self.client: KubeClient | None = None
        self.controller: Controller | None = None
        self.multikueue: MultiKueue | None = None  # the admission-check controller of MultiKueue
        self.elector: LeaderElector | None = None
        self.ca_bundles: CABundleReconciler | None = None
        self.informers: dict[str, Informer] = {}
        self.gate: IntegrationGate | None = None  # runs the informers of CRD-backed kinds
        self.dra: DraApis | None = None  # the DRA objects quota reads, when served
        self.certs_loaded = False
        self._stop = asyncio.Event()
        self.events = EventRecorder()
        self._webhook_state: Any = None
        self.controller_options = ControllerOptions()
        self.exit_code = EXIT_OK
        self.visibility: Any = None  # the VisibilityServer, when enabled
        self.dashboard: Any = None  # the Dashboard, when enabled
        self._background: list[asyncio.Task[Any]] = []
        self.heap: HeapFreezing | None = None  # with options.freeze_heap

    def stop(self) -> None:
        self._stop.set()

    @property
    def core_informers(self) -> list[Informer]:
        """The informers readiness waits for: all but those of CRD-backed kinds."""
        gate = self.gate
        return [i for k, i in self.informers.items() if gate is None or not gate.is_gated(k)]

    @property
    def synced(self) -> bool:
        core = self.core_informers
        return bool(core) and all(i.synced.is_set() for i in core)

    # -- run ----------------------------------------------------------------------------------

    async def run(self) -> int:
        opts = self.options
        self.client = await KubeClient.connect(
            kubeconfig=opts.kubeconfig, configuration=opts.client_configuration
        )
        conn = opts.config.doc.clientConnection
        waited = self.metrics.rate_limit_wait
        self.client.limiter = TokenBucket(
            conn.qps,
            conn.burst,
            on_wait=lambda s, p: waited.labels("low" if p else "high").observe(s),
        )
        self.events.client = self.client
        # Events are rate-limited (and dropped) by the EventRecorder's own bucket, as
        # client-go's recorder has its own client: they never take a decision's token
        self.client.own_budget = frozenset({EVENT_CALL})
        tasks: list[asyncio.Task[Any]] = []
        leader_task: asyncio.Task[Any] | None = None
        try:
            self._build()
            assert self.controller is not None
            for inf in self.core_informers:
                tasks.append(asyncio.create_task(inf.run(), name=f"informer-{inf.name}"))
            assert self.gate is not None
            tasks.append(asyncio.create_task(self.gate.run(), name="integrations"))
            assert self.dra is not None
            tasks.append(asyncio.create_task(self.dra.run(), name="dra"))
            tasks.append(asyncio.create_task(self._serve_http(), name="health-metrics"))
            tasks.append(asyncio.create_task(self._loop_lag.run(), name="loop-lag"))
            if opts.webhooks:
                tasks.append(asyncio.create_task(self._serve_webhooks(), name="webhooks"))
            else:
                self.certs_loaded = True
            # The service's own servers and watches: one that fails stops the service.
            # The optional visibility API and dashboard log their failures and stay out.
            self._background = list(tasks)
            tasks += self._operator_endpoints()
            await self._wait(self._all_synced())
            if self._stop.is_set():
                return self.exit_code
            self.controller.sync.flush_objects()
            if self.heap is not None:
                self.heap.after_sync()
                tasks.append(asyncio.create_task(self.heap.run(), name="heap"))
            if self._webhook_state is not None:
                self._webhook_state.model_synced = True
            leader_task = asyncio.create_task(self._lead(), name="leader")
            await self._wait(self._ready_when_serving())
            self.ready.set()
            await self._wait(leader_task, stop_on_done=True)
        finally:
            await self._shutdown(leader_task, tasks)
        return self.exit_code

    async def _wait(self, aw: Any, *, stop_on_done: bool = False) -> None:
        """Wait for ``aw`` or a stop request, whichever comes first.

        A background task (informer, HTTP server, webhook server) that fails meanwhile
        ends the wait with its exception: a port already in use must stop the service,
        not leave it running without its health endpoint.
        """
        task = aw if isinstance(aw, asyncio.Task) else asyncio.ensure_future(aw)
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            while not task.done() and not stopper.done():
                watched = {t for t in self._background if not t.done()}
                await asyncio.wait({task, stopper, *watched}, return_when=asyncio.FIRST_COMPLETED)
                for t in self._background:
                    if t.done() and not t.cancelled() and t.exception() is not None:
                        if not task.done():
                            task.cancel()
                        raise t.exception()  # type: ignore[misc]
        finally:
            stopper.cancel()
            if not task.done() and not stop_on_done and self._stop.is_set():
                task.cancel()
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    async def _all_synced(self) -> None:
        dra = [self.dra.synced.wait()] if self.dra is not None else []
        await asyncio.gather(*(i.synced.wait() for i in self.core_informers), *dra)

    async def _ready_when_serving(self) -> None:
        while not self.certs_loaded:
            await asyncio.sleep(0.01)

    def _build(self) -> None:
        opts = self.options
        assert self.client is not None
        counter = self.metrics.api_requests
        self.client.on_request = lambda call: counter.labels(call).inc()
        retried = self.metrics.api_retries
        self.client.on_retry = lambda call, code: retried.labels(call, str(code)).inc()
        failed = self.metrics.api_errors
        self.client.on_error = lambda call, code: failed.labels(call, str(code)).inc()
        copts = opts.controller or controller_options(opts.config, opts.namespace)
        # the integrations are the configuration's, whoever built the options
        copts = dataclasses.replace(copts, frameworks=opts.config.frameworks)
        self.controller_options = copts
        rng = random.Random(opts.seed)
        watched = [
            (
                resource_of(i),
                i.label_selector(manage_without_queue_name=copts.manage_jobs_without_queue_name),
            )
            for i in copts.frameworks.integrations()
            if i.reconciler != "parent"  # read up owner chains only (a StatefulSet)
        ]
        for i in copts.frameworks.integrations():  # what their objects reference, whole
            watched += [(r, None) for r in i.references if all(r != w for w, _ in watched)]
        watched += [(res, None) for res in QUEUE_WATCHED]
        for res, selector in watched:
            self.informers[res.plural] = Informer(
                self.client,
                res,
                label_selector=selector,
                rng=random.Random(rng.random()),
                transform=slim_node if res is NODES else strip_managed_fields,
                slimmer=slimmer_for(res.plural, res.group),
                keep_recent=4096 if res.plural in ("jobs", "pods") else 0,
            )
        self.gate = IntegrationGate(
            client=self.client,
            informers=self.informers,
            integrations=copts.frameworks.integrations(),
            metrics=self.metrics,
            rng=random.Random(rng.random()),
        )
        # Topology-aware scheduling: every bound pod uses its node (slimmed to its usage).
        self.informers[BOUND_PODS] = Informer(
            self.client,
            PODS,
            field_selector=BOUND_POD_SELECTOR,
            rng=random.Random(rng.random()),
            transform=slim_pod,
        )
        # ... and the pods our started templates create wait for their topology domain
        self.informers[TAS_PODS] = Informer(
            self.client,
            PODS,
            label_selector=TAS_POD_SELECTOR,
            rng=random.Random(rng.random()),
            transform=slim_tas_pod,
        )
        config = opts.config
        cache = Cache(
            flavors={},
            cluster_queues={},
            cohorts={},
            local_queues={},
            namespaces={},
            resources=config.resources,  # Kueue's cache WithResourceTransformations
            dra=accounting(config.device_class_mappings),  # Kueue's WithPreprocessedDRAResources
        )
        clock = opts.clock
        self.controller = Controller(
            client=self.client,
            cache=cache,
            make_scheduler=lambda c: config.make_scheduler(c, clock=clock),
            informers=self.informers,
            metrics=self.metrics,
            options=copts,
            clock=clock,
            fair_sharing=config.fair_sharing is not None,
            progress=config.progress is not None,
        )
        self.controller.ctx.record_event = self.events.record if copts.events else no_event
        self.dra = DraApis(
            self.client,
            slices=True,
            on_object=feed(self.controller.sync),
            rng=random.Random(rng.random()),
        )
        controller = self.controller
        self.multikueue = MultiKueue(
            controller.ctx,
            config.multikueue,
            namespace=opts.namespace,
            leading=lambda: controller.leading,
            probe_interval=copts.tick * 10,
            resync=copts.tick * 60,
        )
        controller.observers.append(self.multikueue.observe)
        if opts.freeze_heap:
            self.heap = HeapFreezing(
                idle=controller.cache_ready,
                cycles=lambda: controller.stats["cycles"],
                period=copts.tick,
            )

    async def _lead(self) -> None:
        opts = self.options
        assert self.controller is not None and self.client is not None
        if not opts.leader_elect:
            self.metrics.leader.set(1)
            await self.controller.run_leader()
            return
        identity = opts.identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.elector = LeaderElector(
            self.client,
            namespace=opts.lease_namespace or opts.namespace,
            name=opts.lease_name,
            identity=identity,
            lease_duration=opts.lease_duration,
            renew_deadline=opts.renew_deadline,
            retry_period=opts.retry_period,
        )
        self.controller.ctx.fence = self.elector.holds
        election = asyncio.create_task(self.elector.run(), name="election")
        try:
            await self.elector.is_leader.wait()
            self.metrics.leader.set(1)
            leading = asyncio.create_task(self.controller.run_leader(), name="controller")
            lost = asyncio.create_task(self.elector.lost.wait())
            done, _ = await asyncio.wait({leading, lost}, return_when=asyncio.FIRST_COMPLETED)
            if lost in done:
                log.error("leadership lost: stopping so the cache is rebuilt on restart")
                self.exit_code = EXIT_INTERNAL
                leading.cancel()
                await asyncio.gather(leading, return_exceptions=True)
            else:
                lost.cancel()
                leading.result()
        finally:
            self.metrics.leader.set(0)
            election.cancel()
            await asyncio.gather(election, return_exceptions=True)

    async def _shutdown(
        self, leader_task: asyncio.Task[Any] | None, tasks: list[asyncio.Task[Any]]
    ) -> None:
        if leader_task is not None and not leader_task.done():
            leader_task.cancel()  # stops scheduling; in-flight writes drain in run_leader
            await asyncio.gather(leader_task, return_exceptions=True)
        if self.elector is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.elector.release(), timeout=5)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.multikueue is not None:
            await self.multikueue.stop()
        if self.client is not None:
            await self.client.close()
        if self.heap is not None:
            self.heap.release()

    # -- HTTP endpoints ---------------------------------------------------------------------------

    async def _serve_http(self) -> None:
        opts = self.options

        from webhooks.server.health import add_health_routes

        health = web.Application()
        add_health_routes(
            health,
            checks=lambda: [("informers", self.synced), ("certificates", self.certs_loaded)],
            details=self.gate.status_lines if self.gate is not None else None,
        )
        mapp = web.Application()
        add_health_routes(mapp, registry=self.metrics.registry)
        runners = []
        try:
            for name, app, port in (
                ("health", health, opts.health_port),
                ("metrics", mapp, opts.metrics_port),
            ):
                runner = web.AppRunner(app, access_log=None, handle_signals=False)
                await runner.setup()
                runners.append(runner)
                site = web.TCPSite(runner, opts.host, port)
                try:
                    await site.start()
                except OSError as err:
                    raise ListenError(f"{name} port", opts.host, port, err) from None
                self.ports[name] = runner.addresses[0][1]
                log.info("%s endpoint listening on http://%s:%d", name, opts.host, self.ports[name])
            await asyncio.Event().wait()
        finally:
            for r in runners:
                await r.cleanup()

    def _operator_endpoints(self) -> list[asyncio.Task[Any]]:
        """The visibility API and the dashboard, when enabled (their own ports)."""
        from .operator_endpoints import serve_dashboard, serve_visibility

        opts, tasks = self.options, []
        if opts.visibility_port is not None:
            tasks.append(asyncio.create_task(serve_visibility(self), name="visibility"))
        if opts.dashboard_port is not None:
            tasks.append(asyncio.create_task(serve_dashboard(self), name="dashboard"))
        return tasks

    async def _serve_webhooks(self) -> None:
        from webhooks.config import WebhookConfig
        from webhooks.server.certs import ensure_cert_dir
        from webhooks.server.entry import run_webhook_server
        from webhooks.server.health import WebhookState

        opts = self.options
        assert self.controller is not None
        copts = self.controller_options
        shared = opts.manage_certificates and await self._sync_certificates(first=True)
        if shared:
            asyncio.create_task(self._keep_certificates_fresh())
        elif opts.manage_certificates:
            # No Secret to share through: a certificate of our own (single replica, tests),
            # or the one already in the cert dir.
            await asyncio.to_thread(
                ensure_cert_dir,
                opts.cert_dir,
                service=opts.webhook_service,
                namespace=opts.namespace,
            )
        if opts.manage_certificates and opts.inject_ca_bundle:
            self._start_ca_bundle_reconciler()
        wh_config = WebhookConfig(
            service_namespace=opts.namespace,
            managed_jobs_namespace_selector=copts.managed_namespaces,
            manage_jobs_without_queue_name=copts.manage_jobs_without_queue_name,
            service_account_username=opts.service_account_username
            or service_account_username()
            or "",
            what_if_config=opts.config,  # impact warnings: the scheduler plan --config builds
            frameworks=copts.frameworks,
        )
        state = WebhookState(model_synced=self.synced)
        self._webhook_state = state

        def ready(port: int) -> None:
            self.ports["webhook"] = port
            self.certs_loaded = True

        await run_webhook_server(
            view=CacheView(self.controller.sync),
            config=wh_config,
            cert_dir=opts.cert_dir,
            host=opts.host,
            port=opts.webhook_port,
            ready_callback=ready,
            state=state,
            registry=self.metrics.registry,
            owners=self.controller.jobs.owners,
            quiet=self.controller.cache_ready,  # impact what-ifs never read a cycle's cache
        )

    async def _sync_certificates(self, *, first: bool = False) -> bool:
        """Copy (or issue, or rotate) the shared certificate; False when there is no
        Secret to share it through."""
        from .certsecret import sync_certificates

        opts = self.options
        assert self.client is not None
        try:
            result = await sync_certificates(
                self.client,
                namespace=opts.namespace,
                secret_name=opts.cert_secret,
                service=opts.webhook_service,
                cert_dir=opts.cert_dir,
            )
        except ApiError as err:
            if first and err.not_found:
                log.warning(
                    "Secret %s/%s not found: serving a certificate of this replica's own",
                    opts.namespace,
                    opts.cert_secret,
                )
                return False
            log.warning("webhook certificate not synced: %s", err)
            return not first
        if result.ca_changed and self.ca_bundles is not None:
            self.ca_bundles.ca_changed()
        return True

    async def _keep_certificates_fresh(self) -> None:
        while True:
            await asyncio.sleep(self.options.cert_check_seconds)
            await self._sync_certificates()

    def _start_ca_bundle_reconciler(self) -> None:
        """Keep our webhook configurations, and the visibility API's APIServices when it
        is served, trusting our CA (see :mod:`admission.kube.reconcilers.cabundle`)."""
        from webhooks.server.certs import CertError, read_cert_dir

        opts = self.options
        assert self.client is not None

        def ca_pem() -> bytes | None:
            try:
                return read_cert_dir(opts.cert_dir).ca_cert_pem
            except (CertError, OSError) as err:
                log.warning("no CA in %s to inject yet: %s", opts.cert_dir, err)
                return None

        self.ca_bundles = CABundleReconciler(
            self.client,
            (
                *WEBHOOK_CONFIGURATIONS,
                *(VISIBILITY_API_SERVICES if opts.visibility_port is not None else ()),
            ),
            ca_pem=ca_pem,
            period=opts.ca_bundle_period,
            rng=random.Random(opts.seed),
        )
        asyncio.create_task(self.ca_bundles.run(), name="cabundle")


def run_service(args: Any) -> int:
    """``quartermaster serve`` (without ``--webhooks-only``): run until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=os.environ.get("QUARTERMASTER_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    with contextlib.suppress(AttributeError, ValueError, RuntimeError):
        faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: every thread's stack to stderr
    try:
        config = load_config(getattr(args, "config", None))
    except ConfigError as err:
        print(f"quartermaster serve: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    options = options_from_args(args, config)

    async def main() -> int:
        service = Service(options)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, service.stop)
        return await service.run()

    profile_to = os.environ.get("QUARTERMASTER_PROFILE")  # a pstats file, for performance work
    try:
        if not profile_to:
            return asyncio.run(main())
        import cProfile

        profiler = cProfile.Profile()
        try:
            return profiler.runcall(asyncio.run, main())
        finally:
            profiler.dump_stats(profile_to)
    except KubeconfigError as err:
        print(f"quartermaster serve: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as err:
        line = listen_problem(err)
        if line is None:
            log.exception("quartermaster serve failed")
            line = str(err)
        print(f"quartermaster serve: {line}", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as err:  # noqa: BLE001 - the CLI contract: exit 1 with the reason
        log.exception("quartermaster serve failed")
        print(f"quartermaster serve: {err}", file=sys.stderr)
        return EXIT_INTERNAL
