"""``python -m bench multikueue``: one manager and three workers, N Jobs (1,000; env
``QM_MK_WORKLOADS``) dispatched through MultiKueue (AllAtOnce, Kueue's default), from
their creation on the manager to their admission on a worker as the manager records it
(the check ``Ready``, ``status.clusterName`` set).

Each cluster is an API-server double with its own service in this process; with
``KUBEBUILDER_ASSETS`` set, real control planes (a kube-apiserver and etcd each, the
workers with a kube-controller-manager). The services' clients have Kueue's figure's
budget: ``clientConnection`` qps 1,000, burst 1,000, and the service's own timings (a
0.5 s tick: probes of the workers every 5 s, a resync every 30 s), not the test
harness's fast ones. The bench reads the manager's Workloads to see the end without
copying them (on the double, straight from its store; on a real control plane from a
watch), so that watching costs the services little of the CPU they share.

Figures:

* ``workloadsDispatchedPerSecond``: N over the time from the first Job's creation to
  the last Workload's remote admission;
* ``managerRequestsPerWorkload``: the manager service's requests to its own API server,
  per workload (the job's Workload, its admission, the check's writes, the job's start
  and status), and ``managerRequestsByCall``;
* ``workerRequestsPerWorkload``: the manager's requests to the workers (all three, read
  at the fault proxy on each link), per workload, and ``workerRequestsByCall``;
* ``cpuSeconds``: this process's CPU time, which holds the four services *and* (on the
  double) the four API servers; ``serviceCpuShare`` is not separable here.

Kueue's published figure (PR #13936: 1 manager + 3 envtest workers, clients at 1,000
QPS): 97-102 workloads/s; it publishes no request count. docs/benchmarks.md says what
the figures compare with.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

WORKERS = ("worker1", "worker2", "worker3")


def _objects(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from tests.e2e.test_e2e_multikueue import NS, manager_queue
    from tests.support.kube_harness import cluster_queue, flavor, local_queue, namespace

    manager = [namespace(NS), flavor("f"), manager_queue(cpu=n), local_queue(NS, "lq", "cq")]
    worker = [namespace(NS), flavor("f"), cluster_queue("cq", {"f": {"cpu": n}}),
              local_queue(NS, "lq", "cq")]  # fmt: skip
    return manager, worker


def _ready(wl: dict[str, Any]) -> bool:
    status = wl.get("status") or {}
    return bool(status.get("clusterName")) and any(
        e.get("state") == "Ready" for e in status.get("admissionChecks") or []
    )


class _Dispatched:
    """How many of the manager's Workloads in ``ns`` a worker admitted: on the double
    from its stored objects (read, not copied), on a real control plane from a watch
    (one decode per change, where a list a second would decode every Workload)."""

    def __init__(self, m: Any, ns: str) -> None:
        self.m, self.ns = m, ns
        self.store = getattr(m.manager.server, "store", None)
        self.ready: set[str] = set()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.store is not None:
            return
        from admission.kube.client import resources as k

        listed = await self.m.manager.user.list(k.WORKLOADS, namespace=self.ns)
        rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        self.task = asyncio.create_task(self._watch(rv))

    async def _watch(self, rv: str) -> None:
        from admission.kube.client import resources as k

        while True:
            async for event in self.m.manager.user.watch(k.WORKLOADS, resource_version=rv):
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                rv = str(meta.get("resourceVersion") or rv)
                if meta.get("namespace") == self.ns and event.get("type") != "DELETED":
                    if _ready(obj):
                        self.ready.add(str(meta.get("name")))

    def count(self) -> int:
        if self.store is None:
            return len(self.ready)
        rt = self.m.manager.server.registry.resolve("workloads")
        return sum(1 for w in self.store.list(rt, self.ns) if _ready(w))

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def _run(n: int, tmp: Path, *, refill: bool) -> dict[str, Any]:
    from admission.config.load import parse_config
    from admission.kube.client import resources as k
    from admission.kube.control.context import ControllerOptions
    from tests.e2e.test_e2e_multikueue import NS, mk_job
    from tests.support.kube_harness import DOUBLE, SERVICE_NS
    from tests.support.multicluster import RealWorkers, multi_stack
    from tests.support.realserver.controlplane import assets_dir

    doc: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "clientConnection": {"qps": 1000, "burst": 1000},
    }  # fmt: skip
    if refill:
        doc["schedulingRefill"] = {"enable": True}
    config = parse_config(doc)
    manager_objs, worker_objs = _objects(n)
    assets = assets_dir()
    backend: Any = DOUBLE
    real_workers = None
    if assets is not None:
        from tests.support.realserver.cluster import RealCluster

        backend = RealCluster(assets)
        real_workers = RealWorkers(assets, count=len(WORKERS))
    try:
        async with multi_stack(
            tmp,
            backend=backend,
            real_workers=real_workers,
            manager_objects=manager_objs,
            worker_objects=worker_objs,
            workers=WORKERS,
            config=config,
            worker_config=config,
            controller=ControllerOptions(excluded_namespaces=("kube-system", SERVICE_NS)),
        ) as m:
            client = m.manager.service.client
            assert client is not None
            before = Counter(client.counts)
            link_before = {w: len(p.requests) for w, p in m.links.items()}
            dispatched = _Dispatched(m, NS)
            await dispatched.start()
            cpu0, t0 = time.process_time(), time.monotonic()
            sem = asyncio.Semaphore(50)

            async def create(i: int) -> None:
                async with sem:
                    await m.manager.user.create(k.JOBS, mk_job(f"j{i:05d}"), namespace=NS)

            await asyncio.gather(*(create(i) for i in range(n)))
            created = time.monotonic()
            while True:
                done = dispatched.count()
                if done >= n:
                    break
                if time.monotonic() - t0 > 1800:
                    raise TimeoutError(f"only {done} of {n} dispatched in 30 minutes")
                await asyncio.sleep(0.2)
            t1, cpu1 = time.monotonic(), time.process_time()
            await dispatched.stop()
            wls = m.manager.server.list_objects("workloads", NS)
            manager_by_call = Counter(client.counts)
            manager_by_call.subtract(before)
            manager_by_call = +manager_by_call
            manager_requests = sum(manager_by_call.values())
            by_call: Counter[str] = Counter()
            for w, p in m.links.items():
                for r in p.requests[link_before[w] :]:
                    by_call[f"{r.verb} {r.resource}"] += 1
            per_worker = Counter(str((w.get("status") or {}).get("clusterName")) for w in wls)
            return {
                "backend": "real" if real_workers is not None else "double",
                "schedulingRefill": refill,
                "workloads": n,
                "workers": len(WORKERS),
                "wallSeconds": round(t1 - t0, 2),
                "creationSeconds": round(created - t0, 2),
                "workloadsDispatchedPerSecond": round(n / (t1 - t0), 1),
                "managerRequestsPerWorkload": round(manager_requests / n, 2),
                "managerRequestsByCall": dict(sorted(manager_by_call.items())),
                "workerRequestsPerWorkload": round(sum(by_call.values()) / n, 2),
                "workerRequestsByCall": dict(sorted(by_call.items())),
                "admittedPerWorker": dict(sorted(per_worker.items())),
                "cpuSeconds": round(cpu1 - cpu0, 2),
                "clientConnection": {"qps": 1000, "burst": 1000},
                "kueue": {"workloadsDispatchedPerSecond": "97-102", "source": "PR #13936"},
            }
    finally:
        if real_workers is not None:
            real_workers.stop()
            backend.stop()


def run() -> dict[str, Any]:
    n = int(os.environ.get("QM_MK_WORKLOADS", "1000"))
    with tempfile.TemporaryDirectory(prefix="qm-mk-bench-") as tmp:
        return asyncio.run(_run(n, Path(tmp), refill=bool(os.environ.get("QM_MK_REFILL"))))


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
