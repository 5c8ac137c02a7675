"""``stack()`` on the real backend: the service exactly as in the Deployment.

The service runs on the test's event loop as on the double, but everything around it is
real: it authenticates as its service account (so the shipped RBAC in
``manifests/base/rbac.yaml`` is what lets it act), its requests pass through the
:class:`~tests.support.realserver.proxy.FaultProxy` to the real kube-apiserver, the webhook
configurations of ``manifests/base/webhooks.yaml`` are registered with
``clientConfig.url`` on loopback and *no* caBundle (the service's own CA injection
must make the API server trust it), and leader election is on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from admission.apiserver_double import load_webhook_configurations
from admission.apiserver_double.jobcontroller import finish_patches, rfc3339
from admission.config.schema import Config
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.control.context import ControllerOptions
from admission.serve.service import Service
from queues.api.conditions import is_true
from tests.support.double_client import kube_client_config
from webhooks.server.certs import ensure_cert_dir, read_cert_dir

from .cluster import KIND_PLURAL, RealCluster, RealServerView
from .controlplane import ADMIN_TOKEN, SERVICE_TOKEN, free_port, node_address
from .proxy import FaultProxy, compact_etcd

Obj = dict[str, Any]


def url_webhook_configurations(port: int) -> list[Obj]:
    """The shipped webhook configurations, pointed at ``https://127.0.0.1:port``."""
    from tests.support.kube_harness import WEBHOOKS_MANIFEST

    configs = load_webhook_configurations(WEBHOOKS_MANIFEST)
    for cfg in configs:
        for hook in cfg.get("webhooks") or []:
            svc = hook["clientConfig"].pop("service")
            hook["clientConfig"].pop("caBundle", None)
            hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{svc.get('path', '/')}"
    return configs


VISIBILITY_SERVICE = ("quartermaster-system", "quartermaster-webhook-service")


def register_visibility(
    view: RealServerView, address: str, port: int
) -> list[tuple[str, str, str | None]]:
    """Register the service's visibility API with the real aggregation layer, as the
    manifests do in a cluster: the shipped APIServices (their caBundle is the service's
    to inject), the Service they name, and, in place of the pod's address that the
    EndpointSlice controller would publish, an EndpointSlice naming ``address:port``
    (``--enable-aggregator-routing`` resolves the Service through it; loopback
    addresses are refused there). Returns what to delete afterwards as (plural, name,
    namespace)."""
    import yaml

    from tests.support.kube_harness import ROOT

    ns, name = VISIBILITY_SERVICE
    created: list[tuple[str, str, str | None]] = []
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"name": "visibility", "port": 8082, "targetPort": 8082}]},
    }
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-loopback",
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "visibility", "port": port, "protocol": "TCP"}],
    }
    for obj in (service, slice_):
        view.create(obj)
        created.append((KIND_PLURAL[obj["kind"]], obj["metadata"]["name"], ns))
    docs = yaml.safe_load_all((ROOT / "manifests/base/visibility.yaml").read_text())
    for doc in docs:
        if doc and doc.get("kind") == "APIService":
            if view.get_object("apiservices", doc["metadata"]["name"]) is None:
                view.create(doc)
            created.append(("apiservices", doc["metadata"]["name"], None))
    return created


def api_service_available(view: RealServerView, name: str) -> bool:
    obj = view.get_object("apiservices", name) or {}
    return is_true(obj, "Available")


class RealBackend:
    """What a test reaches as ``s.server`` on the real backend: the view's reads, the
    proxy's faults, and the cluster's own controls."""

    def __init__(self, cluster: RealCluster, proxy: FaultProxy) -> None:
        self.cluster = cluster
        self.view: RealServerView = cluster.view
        self.proxy = proxy
        self.url = cluster.cp.url
        self.closers: list[Callable[[], None]] = []

    # reads, as on the double
    def get_object(self, resource: str, name: str, namespace: str | None = None) -> Obj | None:
        return self.view.get_object(resource, name, namespace)

    def list_objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        return self.view.list_objects(resource, namespace)

    def put_object(self, obj: Obj) -> Obj:
        return self.view.create(obj)

    # faults, through the proxy
    def fail_next(self, count: int = 1, *, code: int = 500, **filters: Any) -> Any:
        return self.proxy.fail_next(count, code=code, **filters)

    def clear_faults(self) -> None:
        self.proxy.clear_faults()

    def drop_watches(self, *, abrupt: bool = False) -> int:
        return self.proxy.drop_watches(abrupt=abrupt)

    def pause(self) -> None:
        self.proxy.pause()

    def resume(self) -> None:
        self.proxy.resume()

    def compact(self) -> None:
        compact_etcd(self.cluster.cp.etcd_url)

    def request_count(self, *, verb: str | None = None, resource: str | None = None) -> int:
        return self.proxy.request_count(verb=verb, resource=resource)

    @property
    def requests(self) -> list[Any]:
        return self.proxy.requests

    def watch_invariants(self, checker: Any) -> None:
        """Check every Workload event of the real server with ``checker`` (a thread
        watching until the stack ends)."""
        stop = threading.Event()
        failures: list[BaseException] = []

        def watch() -> None:
            try:
                self.view.watch("workloads", checker.on_event, stop)
            except BaseException as exc:  # noqa: BLE001 - raised at the stack's end
                failures.append(exc)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()

        def close() -> None:
            stop.set()
            thread.join(timeout=10)
            if failures:
                raise failures[0]

        self.closers.append(close)

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """A kubeconfig for the real ``kubectl`` as the cluster admin."""
        from admission.apiserver_double import write_kubeconfig

        return write_kubeconfig(
            path, self.url, token=ADMIN_TOKEN, ca_pem=self.cluster.cp.ca_pem, namespace=namespace
        )

    def set_service_route(self, service: str, base_url: str) -> None:
        """Webhooks are registered by URL here; nothing to route."""

    async def finish_job(self, user: k.KubeClient, ns: str, name: str, *, succeeded: bool) -> None:
        """Finish a Job as the cluster would: with the Job controller running, its pods
        succeed (or fail) and the controller writes the Job's status; without it, the
        status is written as the Job controller writes it (the API server's Job status
        rules: ``SuccessCriteriaMet``/``FailureTarget`` first, ``startTime``,
        ``completionTime``)."""
        if self.cluster.controller_manager:
            await self._finish_pods(user, ns, name, succeeded=succeeded)
            return
        job = await user.get(kr.JOBS, name, namespace=ns)
        for patch in finish_patches(job, succeeded=succeeded):
            await user.patch(kr.JOBS, name, patch, namespace=ns, subresource="status")

    async def _finish_pods(
        self, user: k.KubeClient, ns: str, name: str, *, succeeded: bool
    ) -> None:
        phase = "Succeeded" if succeeded else "Failed"
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            pods = (await user.list(kr.PODS, namespace=ns, label_selector=f"job-name={name}"))[
                "items"
            ]
            live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
            if live:
                break
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"the Job controller created no pods for job {ns}/{name}")
            await asyncio.sleep(0.05)
        for pod in live:
            containers = (pod.get("spec") or {}).get("containers") or []
            statuses = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0 if succeeded else 1,
                            "reason": "Completed" if succeeded else "Error",
                            "startedAt": rfc3339(),
                            "finishedAt": rfc3339(),
                        }
                    },
                }
                for c in containers
            ]
            await user.patch(
                kr.PODS,
                pod["metadata"]["name"],
                {"status": {"phase": phase, "containerStatuses": statuses}},
                namespace=ns,
                subresource="status",
            )


@contextlib.asynccontextmanager
async def real_stack(
    cluster: RealCluster,
    tmp_path: Path,
    *,
    objects: Iterable[Obj] = (),
    config: Config | None = None,
    controller: ControllerOptions | None = None,
    webhooks: bool = True,
    before_start: Callable[[Any], None] | None = None,
    visibility: bool = False,
    crds: Iterable[str] = (),
    **overrides: Any,
) -> AsyncIterator[Any]:
    """``crds``: the operator CRDs of ``tests/support/crds/`` (by plural) the test needs,
    installed before the service starts (:meth:`RealCluster.install_crds`)."""
    from tests.support.kube_harness import SA_USERNAME, Stack, eventually, service_options, settled

    await asyncio.to_thread(cluster.install_crds, crds)
    await asyncio.to_thread(cluster.reset)
    cert_dir = tmp_path / "certs"
    ensure_cert_dir(cert_dir, namespace="quartermaster-system")
    view = cluster.view
    objs = [copy.deepcopy(o) for o in objects]
    for obj in objs:
        if obj.get("kind") == "Namespace":
            view.ensure_namespace(obj)
    for obj in objs:
        if obj.get("kind") != "Namespace":
            view.create(obj)
    proxy = FaultProxy(cluster.cp.url, cluster.cp.ca_pem)
    await proxy.start()
    backend = RealBackend(cluster, proxy)
    if before_start is not None:
        before_start(backend)
    if visibility:
        overrides.setdefault("visibility_port", 0)
        address = node_address()
        if address is None:
            pytest.skip("the aggregator needs a non-loopback address to reach the service")
        overrides.setdefault("host", "0.0.0.0")  # as in the pod: the endpoint is ours
    port = free_port()
    if webhooks:
        for cfg in url_webhook_configurations(port):
            view.create(cfg)
    opts = service_options(
        backend,
        cert_dir,
        config=config,
        controller=controller,
        client_configuration=kube_client_config(
            proxy.url, token=SERVICE_TOKEN, ca_pem=proxy.ca_pem
        ),
        **{
            "webhook_port": port,
            "inject_ca_bundle": True,
            "leader_elect": True,
            "service_account_username": SA_USERNAME,
            **overrides,
        },
    )
    opts.webhooks = webhooks
    service = Service(opts)
    task = asyncio.create_task(service.run())
    registered: list[tuple[str, str, str | None]] = []
    user = await k.KubeClient.connect(
        configuration=kube_client_config(
            cluster.cp.url, token=ADMIN_TOKEN, ca_pem=cluster.cp.ca_pem
        ),
        strict=False,
    )
    try:
        await eventually(lambda: service.ready.is_set() or task.done(), what="the service is ready")
        if task.done():
            task.result()
        await settled(service)
        if webhooks and opts.inject_ca_bundle:
            ca_b64 = base64.b64encode(read_cert_dir(cert_dir).ca_cert_pem).decode()

            def trusted() -> bool:
                for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
                    for cfg in view.list_objects(plural):
                        for hook in cfg.get("webhooks") or []:
                            if hook["clientConfig"].get("caBundle") != ca_b64:
                                return False
                return True

            await eventually(lambda: asyncio.to_thread(trusted), what="the service injected its CA")
        if visibility:
            await eventually(
                lambda: "visibility" in service.ports, what="the visibility API listens"
            )
            registered += await asyncio.to_thread(
                register_visibility, view, address, service.ports["visibility"]
            )
            for version in ("v1beta1", "v1beta2"):
                await eventually(
                    lambda v=version: asyncio.to_thread(
                        api_service_available, view, f"{v}.visibility.kueue.x-k8s.io"
                    ),
                    what=f"the aggregator reports {version}.visibility available",
                    timeout=60,
                )
        yield Stack(backend, service, user, cert_dir, task)  # type: ignore[arg-type]
    finally:
        service.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=20)
        await user.close()
        await proxy.stop()
        await asyncio.sleep(0.5)  # let the watches see the last writes
        for close in backend.closers:
            close()
        for plural, name, ns in registered:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(view.request, "DELETE", view.path(plural, name, ns))
        # nothing may call a webhook of a stopped service (the next reset deletes them)
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            with contextlib.suppress(Exception):
                await asyncio.to_thread(view.delete_all, plural)
