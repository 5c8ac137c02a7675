"""Several clusters at once for MultiKueue: a manager and its workers, each with its own
API server and its own service (``stack()``), on the double or on real control planes.

On the double every cluster is an API-server double; the workers serve HTTPS, since a
worker's kubeconfig must name a CA. On the real backend (``KUBEBUILDER_ASSETS``) the
manager is the session's control plane and each worker one more kube-apiserver + etcd
with a kube-controller-manager, so the worker's Job controller runs the pods
(:class:`RealWorkers`).

The manager reaches each worker through a :class:`~tests.support.realserver.proxy.FaultProxy`
(its kubeconfig, in a Secret of the service's namespace, names the proxy and the proxy's
CA): a test slows a worker, makes it refuse writes or disappear there, and counts the
requests the manager sends it. The MultiKueue objects are those of Kueue's
``setup_multikueue`` page: an AdmissionCheck ``sample-multikueue``, a MultiKueueConfig
and one MultiKueueCluster per worker.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from admission.config.schema import Config
from admission.kube.control.context import ControllerOptions
from tests.support.kube_harness import DOUBLE, ROOT, SERVICE_NS, Obj, Stack, stack
from tests.support.realserver.controlplane import assets_dir
from tests.support.realserver.proxy import FaultProxy

WORKERS = ("worker1", "worker2")
CHECK = "sample-multikueue"
MK_CONFIG = "multikueue-test"


def admission_check(name: str = CHECK, config: str = MK_CONFIG) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {
            "controllerName": "kueue.x-k8s.io/multikueue",
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                           "name": config},
        },
    }  # fmt: skip


def multikueue_config(clusters: Iterable[str], name: str = MK_CONFIG) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueConfig",
        "metadata": {"name": name},
        "spec": {"clusters": list(clusters)},
    }


def multikueue_cluster(name: str, secret: str) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueCluster",
        "metadata": {"name": name},
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret",
                                                  "location": secret}}},
    }  # fmt: skip


def kubeconfig_secret(name: str, url: str, ca_pem: bytes, token: str) -> Obj:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "worker", "cluster": {
            "server": url, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "multikueue-sa", "user": {"token": token}}],
        "contexts": [{"name": "worker", "context": {"cluster": "worker",
                                                     "user": "multikueue-sa"}}],
        "current-context": "worker",
    }  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": SERVICE_NS},
        "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(config).encode()).decode()},
    }


WORKER_RBAC = ROOT / "manifests" / "multikueue" / "worker-rbac.yaml"
WORKER_SA = ("quartermaster-system", "multikueue-sa")


def endpoint(s: Stack) -> tuple[str, bytes, str]:
    """(URL, CA, the manager's token) of a worker stack's API server. On a real control
    plane the token is the ServiceAccount's of ``manifests/multikueue/worker-rbac.yaml``
    (applied once), so the manager has exactly the documented rights there; the double
    does not authorize, its admin token stands in."""
    server: Any = s.server
    cluster = getattr(server, "cluster", None)
    if cluster is not None:  # the real backend
        if not getattr(cluster, "multikueue_rbac", False):
            cluster.kubectl("apply", "-f", str(WORKER_RBAC))
            cluster.multikueue_rbac = True
        ns, name = WORKER_SA
        answer = cluster.view.request(
            "POST",
            f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 86400}},
        )  # fmt: skip
        return cluster.cp.url, cluster.cp.ca_pem, str(answer["status"]["token"])
    from admission.apiserver_double import ADMIN_TOKEN

    return server.url, server.ca_pem, ADMIN_TOKEN


class RealWorkers:
    """Worker control planes for the real backend, started once per session."""

    def __init__(self, assets: Path, count: int = len(WORKERS)) -> None:
        from tests.support.realserver.cluster import RealCluster

        self.clusters: list[Any] = []
        try:
            for _ in range(count):
                self.clusters.append(RealCluster(assets))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for c in self.clusters:
            c.stop()


@dataclass
class MultiStack:
    manager: Stack
    workers: dict[str, Stack]
    links: dict[str, FaultProxy]  # the manager's way to each worker
    extra: list[Any] = field(default_factory=list)

    def copies(self, ns: str, name: str) -> dict[str, Obj]:
        """The worker copies of the manager's Workload ``ns/name``, by worker."""
        out = {}
        for worker, s in self.workers.items():
            obj = s.get("workloads", name, ns)
            if obj is not None:
                out[worker] = obj
        return out

    def jobs(self, ns: str, name: str, plural: str = "jobs") -> dict[str, Obj]:
        out = {}
        for worker, s in self.workers.items():
            obj = s.get(plural, name, ns)
            if obj is not None:
                out[worker] = obj
        return out


def real_workers_or_none() -> Iterator[Any]:
    """The body of a test module's ``real_workers`` fixture: worker control planes
    while the module runs when ``KUBEBUILDER_ASSETS`` names the binaries, else None."""
    assets = assets_dir()
    if assets is None:
        yield None
        return
    workers = RealWorkers(assets)
    try:
        yield workers
    finally:
        workers.stop()


def backends(backend: Any, real_workers: Any) -> Iterator[Any]:
    """The backend of each worker: the double, or a worker control plane."""
    if backend == DOUBLE:
        while True:
            yield DOUBLE
    yield from real_workers.clusters


@contextlib.asynccontextmanager
async def multi_stack(
    tmp_path: Path,
    *,
    backend: Any = DOUBLE,
    real_workers: RealWorkers | None = None,
    manager_objects: Iterable[Obj] = (),
    worker_objects: Iterable[Obj] = (),
    workers: Iterable[str] = WORKERS,
    config: Config | None = None,
    worker_config: Config | None = None,
    crds: Iterable[str] = (),
    manager_overrides: dict[str, Any] | None = None,
    controller: ControllerOptions | None = None,
) -> AsyncIterator[MultiStack]:
    """The workers' stacks (each with ``worker_objects``), then the manager's with
    ``manager_objects`` plus the MultiKueue objects and Secrets naming the workers.
    ``crds``: operator CRDs every cluster needs (JobSet...); ``controller``: every
    service's controller options (the harness's fast test timings when None)."""
    names = list(workers)
    worker_backends = backends(backend, real_workers)
    async with contextlib.AsyncExitStack() as exits:
        stacks: dict[str, Stack] = {}
        links: dict[str, FaultProxy] = {}
        tokens: dict[str, str] = {}
        for name in names:
            wb = next(worker_backends)
            kwargs: dict[str, Any] = {"tls": True} if wb == DOUBLE else {}
            if controller is not None:
                kwargs["controller"] = controller
            if worker_config is not None:
                kwargs["config"] = worker_config
            if crds:
                kwargs["crds"] = tuple(crds)
            stacks[name] = await exits.enter_async_context(
                stack(tmp_path / name, backend=wb, objects=list(worker_objects), **kwargs)
            )
            url, ca, token = endpoint(stacks[name])
            tokens[name] = token
            proxy = FaultProxy(url, ca)
            await proxy.start()
            exits.push_async_callback(proxy.stop)
            links[name] = proxy
        mk_objects: list[Obj] = [admission_check(), multikueue_config(names)]
        for name in names:
            mk_objects.append(kubeconfig_secret(
                f"{name}-secret", links[name].url, links[name].ca_pem, tokens[name]))  # fmt: skip
            mk_objects.append(multikueue_cluster(name, f"{name}-secret"))
        kwargs = dict(manager_overrides or {})
        if controller is not None:
            kwargs["controller"] = controller
        if crds:
            kwargs["crds"] = tuple(crds)
        manager = await exits.enter_async_context(
            stack(
                tmp_path / "manager",
                backend=backend,
                objects=[*mk_objects, *manager_objects],
                config=config,
                **kwargs,
            )
        )
        yield MultiStack(manager, stacks, links)
