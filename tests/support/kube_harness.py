"""Test harness for ``serve``: the API-server double, the real service, a user client.

``async with stack(tmp_path, objects=...) as s`` starts, on the test's event loop, the
API-server double (calling the service's real webhook server over HTTPS with the
webhook configurations of ``manifests/base/webhooks.yaml``) and the whole service
(``admission.serve.service.Service``) talking to it through the real
``kubernetes.aio`` client. ``s.user`` is a client with a user's rights for the test's
own requests; :func:`eventually` polls a condition (a deadline guards against hangs;
nothing asserts on time).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admission.apiserver_double import (
    DEFAULT_NAMESPACES,
    ApiServer,
    load_webhook_configurations,
    running_apiserver,
)
from admission.apiserver_double.jobcontroller import finish_patches
from admission.config.schema import Config
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.control.context import ControllerOptions
from admission.serve.options import ServiceOptions
from admission.serve.service import Service
from queues.api.conditions import is_true
from tests.support.double_client import kube_client_config
from webhooks.server.certs import ensure_cert_dir, read_cert_dir

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = "double"
"""The ``backend`` of :func:`stack` for the in-repo API-server double."""
WEBHOOKS_MANIFEST = ROOT / "manifests" / "base" / "webhooks.yaml"
SERVICE_NS = "quartermaster-system"
SA_USERNAME = f"system:serviceaccount:{SERVICE_NS}:quartermaster"
CONTROLLER_TOKEN = "controller-token"
SERVICE_ROUTE = f"{SERVICE_NS}/quartermaster-webhook-service"


class _AllTestCrds(tuple):  # type: ignore[type-arg]
    """The default of ``stack(crds=...)``: on the double, every CRD of ``tests/support/crds/``."""


ALL_TEST_CRDS: Iterable[str] = _AllTestCrds()


def operator_crds(plurals: Iterable[str]) -> list[Obj]:
    """The CRDs of ``tests/support/crds/`` for the resources ``plurals`` (a plural not found
    there is an error in the test)."""
    from admission.apiserver_double.crds import TEST_CRD_DIR, load_crds

    by_plural = {c["spec"]["names"]["plural"]: c for c in load_crds(TEST_CRD_DIR)}
    wanted = list(plurals)
    unknown = sorted(set(wanted) - set(by_plural))
    if unknown:
        raise ValueError(f"no CRD in tests/support/crds/ for {', '.join(unknown)}")
    return [copy.deepcopy(by_plural[p]) for p in wanted]


Obj = dict[str, Any]


def namespace(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def flavor(name: str, **node_labels: str) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": node_labels} if node_labels else {},
    }


def cluster_queue(
    name: str,
    quotas: dict[str, dict[str, Any]],
    *,
    cohort: str | None = None,
    preemption: Obj | None = None,
    borrowing_limit: str | None = None,
) -> Obj:
    """``quotas``: flavor -> {resource: nominal quota}; one resource group."""
    resources = sorted({r for q in quotas.values() for r in q})
    flavors = []
    for flv, q in quotas.items():
        rs = []
        for r in resources:
            entry: Obj = {"name": r, "nominalQuota": str(q.get(r, 0))}
            if borrowing_limit is not None:
                entry["borrowingLimit"] = borrowing_limit
            rs.append(entry)
        flavors.append({"name": flv, "resources": rs})
    spec: Obj = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": resources, "flavors": flavors}],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(ns: str, name: str, cq: str) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterQueue": cq},
    }


def priority_class(name: str, value: int) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def job(
    ns: str,
    name: str,
    *,
    queue: str | None,
    cpu: str = "1",
    parallelism: int = 1,
    priority_class: str | None = None,
    suspend: bool = False,
) -> Obj:
    labels = {}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "suspend": suspend,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": cpu}},
                        }
                    ],
                }
            },
        },
    }


def workload(
    ns: str, name: str, *, queue: str, pod_sets: list[tuple[str, int, str]], priority: int = 0
) -> Obj:
    """A standalone Workload; ``pod_sets``: (name, count, cpu per pod)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [
                {
                    "name": ps,
                    "count": count,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}
                            ],
                        }
                    },
                }
                for ps, count, cpu in pod_sets
            ],
        },
    }


def admitted(obj: Obj | None) -> bool:
    return bool(((obj or {}).get("status") or {}).get("admission")) and is_true(
        obj, "QuotaReserved"
    )


async def eventually(
    check: Callable[[], Any], *, what: str, timeout: float = 30.0, interval: float = 0.02
) -> Any:
    """Poll ``check`` (sync or async) until it returns a truthy value; the deadline only
    guards against a hang."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        last = check()
        if isinstance(last, Awaitable):
            last = await last
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(interval)


async def settled(service: Service) -> None:
    """Wait until the service has read the CRDs and synced the informers of the kinds
    they serve: readiness does not wait for those, and a test starts from a steady
    state (no list of a just-started informer still in flight)."""
    gate = service.gate
    assert gate is not None
    await eventually(gate.settled, what="the integrations whose CRD is installed run")


@dataclass
class Stack:
    server: ApiServer
    service: Service
    user: k.KubeClient
    cert_dir: Path
    task: asyncio.Task[int]
    extra: list[Any] = field(default_factory=list)

    def get(self, resource: str, name: str, ns: str | None = None) -> Obj | None:
        return self.server.get_object(resource, name, ns)

    def workloads(self, ns: str | None = None) -> list[Obj]:
        return self.server.list_objects("workloads", ns)

    def workload_of_job(self, ns: str, job_name: str) -> Obj | None:
        for wl in self.workloads(ns):
            for ref in wl["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("name") == job_name:
                    return wl
        return None

    def kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """A kubeconfig for the real ``kubectl`` against this stack's API server."""
        if hasattr(self.server, "write_kubeconfig"):
            return self.server.write_kubeconfig(path, namespace=namespace)  # type: ignore[no-any-return]
        from admission.apiserver_double import write_kubeconfig

        return write_kubeconfig(path, self.server.url, namespace=namespace)

    async def finish_job(self, ns: str, name: str, *, succeeded: bool = True) -> None:
        """Play the Job controller: mark the Job Complete (or Failed)."""
        if hasattr(self.server, "finish_job"):  # the real backend knows its Job controller
            await self.server.finish_job(self.user, ns, name, succeeded=succeeded)
            return
        job = self.server.get_object("jobs", name, ns)
        assert job is not None, f"no Job {ns}/{name}"
        # in the Job controller's order (the double enforces 1.32's Job status rules)
        for patch in finish_patches(job, succeeded=succeeded):
            await self.user.patch(kr.JOBS, name, patch, namespace=ns, subresource="status")


VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_ROLES = ROOT / "manifests" / "base" / "visibility-rbac.yaml"


def enable_aggregation(server: ApiServer) -> None:
    """Give the double kube-apiserver's aggregation layer (a front-proxy PKI, the
    ``extension-apiserver-authentication`` ConfigMap) and the shipped user roles of
    the visibility API (for its SubjectAccessReviews)."""
    import yaml

    from admission.apiserver_double import enable_aggregation as front_proxy

    front_proxy(server)
    for doc in yaml.safe_load_all(VISIBILITY_ROLES.read_text()):
        if doc and doc.get("kind") in ("ClusterRole", "Role"):
            server.put_object(doc)


def service_options(
    server: Any,
    cert_dir: Path,
    *,
    config: Config | None = None,
    controller: ControllerOptions | None = None,
    client_configuration: Any = None,
    **overrides: Any,
) -> ServiceOptions:
    ctl = controller or ControllerOptions(
        status_interval=0.2, tick=0.05, pending_delay=0.02, schedule_batch=0.0
    )
    if controller is None:
        ctl.excluded_namespaces = ("kube-system", SERVICE_NS)
    fields: dict[str, Any] = {
        "config": config or Config(),
        "client_configuration": client_configuration
        or kube_client_config(
            server.url, token=CONTROLLER_TOKEN, ca_pem=getattr(server, "ca_pem", None)
        ),
        "namespace": SERVICE_NS,
        "host": "127.0.0.1",
        "webhook_port": 0,
        "metrics_port": 0,
        "health_port": 0,
        "cert_dir": str(cert_dir),
        "inject_ca_bundle": False,
        "service_account_username": SA_USERNAME,
        "seed": 7,
        "controller": ctl,
    }
    fields.update(overrides)
    return ServiceOptions(**fields)


@contextlib.asynccontextmanager
async def stack(
    tmp_path: Path,
    *,
    backend: Any = DOUBLE,
    objects: Iterable[Obj] = (),
    config: Config | None = None,
    controller: ControllerOptions | None = None,
    webhooks: bool = True,
    watch_window: int = 1000,
    before_start: Callable[[Any], None] | None = None,
    visibility: bool = False,
    crds: Iterable[str] = ALL_TEST_CRDS,
    tls: bool = False,
    **overrides: Any,
) -> AsyncIterator[Stack]:
    """The service against ``backend``: the double (``DOUBLE``) or a
    :class:`tests.support.realserver.cluster.RealCluster` (the ``backend`` fixture gives both).

    ``crds``: the job kinds' operator CRDs (``tests/support/crds/``, by plural) installed before
    the service starts; ``()`` is a plain cluster with only the project's CRDs. The
    double installs every one unless told; the real backend installs only those a test
    names (once per session), so a test needing one says so.

    ``visibility=True`` also runs the visibility API, registered with the backend's
    aggregation layer (the double's :class:`~admission.apiserver_double.delegation.Aggregator`,
    with a front-proxy PKI of its own; on the real backend an ``APIService``).

    ``tls=True``: the double serves HTTPS (its CA is ``server.ca_pem``), as a real
    API server does; a MultiKueue worker must, its kubeconfig naming a CA."""
    if not isinstance(backend, str):
        from tests.support.realserver.stack import real_stack

        async with real_stack(
            backend,
            tmp_path,
            crds=() if crds is ALL_TEST_CRDS else tuple(crds),
            objects=objects,
            config=config,
            controller=controller,
            webhooks=webhooks,
            before_start=before_start,
            visibility=visibility,
            **overrides,
        ) as s:
            yield s
        return
    cert_dir = tmp_path / "certs"
    ensure_cert_dir(cert_dir, namespace=SERVICE_NS)
    ca_b64 = read_cert_dir(cert_dir).ca_bundle_b64
    configs = load_webhook_configurations(WEBHOOKS_MANIFEST, ca_bundle=ca_b64) if webhooks else []
    # the CRDs a test names are installed first: its objects may be of their kinds
    installed = [] if crds is ALL_TEST_CRDS else operator_crds(crds)
    async with running_apiserver(
        objects=[*installed, *(copy.deepcopy(o) for o in objects)],
        webhook_configurations=configs,
        tokens={CONTROLLER_TOKEN: SA_USERNAME},
        namespaces=(*DEFAULT_NAMESPACES, SERVICE_NS),
        watch_window=watch_window,
        bookmark_interval=0.5,
        third_party_crds=crds is ALL_TEST_CRDS,
        tls=tls,
    ) as server:
        if visibility:
            enable_aggregation(server)
            overrides.setdefault("visibility_port", 0)
        if before_start is not None:
            before_start(server)
        opts = service_options(server, cert_dir, config=config, controller=controller, **overrides)
        opts.webhooks = webhooks
        service = Service(opts)
        task = asyncio.create_task(service.run())
        user = await k.KubeClient.connect(
            configuration=kube_client_config(server.url, ca_pem=server.ca_pem), strict=False
        )
        current: Stack | None = None
        try:
            await eventually(
                lambda: service.ready.is_set() or task.done(), what="the service is ready"
            )
            if task.done():
                task.result()
            await settled(service)
            if webhooks:
                server.set_service_route(
                    SERVICE_ROUTE, f"https://127.0.0.1:{service.ports['webhook']}"
                )
            if visibility:
                await eventually(
                    lambda: "visibility" in service.ports, what="the visibility API listens"
                )
                server.aggregator.register(
                    VISIBILITY_GROUP,
                    f"https://127.0.0.1:{service.ports['visibility']}",
                    service=SERVICE_ROUTE,
                    ca_pem=read_cert_dir(cert_dir).ca_cert_pem,
                )
            current = Stack(server, service, user, cert_dir, task)
            yield current
        finally:
            if current is not None:  # the test may have restarted the service
                service, task = current.service, current.task
            service.stop()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=20)
            await user.close()
