"""``serve-memory``: what a pending Job costs in ``serve``'s memory (docs/benchmarks.md).

A cluster with a long backlog holds many suspended Jobs that use no quota at all; every
replica keeps each of them (its Job, its Workload, the engine's view) in memory, so the
cost per pending Job decides how large a backlog fits under the Deployment's memory
limit. This benchmark:

1. starts the in-repo API-server double with 8 team namespaces, LocalQueues and
   ClusterQueues in one cohort, with quota for only a few of the Jobs;
2. runs ``serve`` with no Jobs until it is quiet: ``rssEmptyMiB``;
3. seeds ``N`` suspended Jobs with realistic, varied pod templates
   (:mod:`bench.jobgen`, ~1.5 KB each, different in every Job) and starts ``serve``
   again: it creates the N Workloads, admits what fits and writes every pending reason;
   once it has made no request for 10 s: ``rssFreshMiB``;
4. restarts ``serve`` (the usual case: a new replica or a rollout with the backlog in
   place); once synced and quiet: ``rssMiB``.

``bytesPerPendingWorkload`` = (RSS after the restart − rssEmptyMiB) / N, and the same
for the fresh run. Targets: RSS < 512 MiB and < 3 KB per pending workload at N = 100k.
``QM_SERVE_MEMORY_JOBS`` overrides N (e.g. for a quick look).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.jobgen import TEAMS, realistic_job, template_bytes
from bench.serve_process import ServeProcess
from bench.stack import TOKEN, USERNAME

JOBS = 100_000
CONFIG = {  # the budget must not be what the run measures: the double is the limit here
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "clientConnection": {"qps": 2000, "burst": 2000},
}


def queue_objects() -> list[dict[str, Any]]:
    from tests.support.kube_harness import cluster_queue, flavor, local_queue, namespace

    objs: list[dict[str, Any]] = [
        flavor("h100", **{"nvidia.com/gpu.product": "H100"}),
        flavor("a100", **{"nvidia.com/gpu.product": "A100"}),
    ]
    for team in TEAMS:
        quota = {"cpu": 96, "memory": "512Gi", "nvidia.com/gpu": 8}
        objs.append(cluster_queue(f"cq-{team}", {"h100": quota, "a100": quota}, cohort="org"))
        objs.append(namespace(f"team-{team}"))
        objs.append(local_queue(f"team-{team}", "training", f"cq-{team}"))
    return objs


def job(i: int) -> dict[str, Any]:
    """Job number ``i`` of the backlog (its team's namespace, the team's LocalQueue)."""
    return realistic_job(i, namespace=f"team-{TEAMS[i % len(TEAMS)]}", queue="training")


@contextlib.contextmanager
def cel_rules_off() -> Iterator[None]:
    """The double evaluates the CRDs' CEL rules on every write with cel-python (~10 ms
    per Workload): 100k Workloads and their status writes would take the double, not the
    service, an hour. The objects here are all alike and valid (the e2e tests check the
    rules), so this benchmark turns them off; what it measures is the service."""
    from admission.apiserver_double import schema

    saved = schema._cel_errors
    schema._cel_errors = lambda *_a, **_k: []  # type: ignore[assignment]
    try:
        yield
    finally:
        schema._cel_errors = saved  # type: ignore[assignment]


def _seed(server: Any, chunk: list[dict[str, Any]], *, with_workloads: bool) -> None:
    """Store ``chunk``'s Jobs, and with ``with_workloads`` the Workload the service
    would create for each (what a restarted replica finds)."""
    from admission.integrations.framework.composition import compose
    from admission.integrations.kinds.job import JOB

    for job in chunk:
        stored = server.put_object(job)
        if with_workloads:
            _, body = compose(JOB, stored, workload_priority_classes={}, priority_classes={})
            server.put_object(body)


def _count_workloads(server: Any) -> tuple[int, int]:
    """(Workloads, pending ones) in the double's store (read in place: no copies)."""
    stored = server.store.list(server.registry.resolve("workloads"), None)
    pending = sum(1 for w in stored if not (w.get("status") or {}).get("admission"))
    return len(stored), pending


def _measure(serve: ServeProcess, *, quiet_for: float) -> dict[str, Any]:
    t0 = time.monotonic()
    serve.start(ready_timeout=1800)
    ready = time.monotonic() - t0
    waited = serve.wait_quiet(quiet_for=quiet_for, timeout=3600)
    out = {
        "rssMiB": serve.rss_mib(),
        "peakRssMiB": serve.peak_rss_mib(),
        "readySeconds": round(ready, 1),
        "quietAfterSeconds": round(ready + waited, 1),
        "cpuSeconds": serve.cpu_seconds(),
        "serviceRequests": int(serve.metric("quartermaster_api_requests_total")),
    }
    serve.stop()
    print(f"serve-memory: {serve.name}: {out}", file=sys.stderr, flush=True)
    return out


def run() -> dict[str, Any]:
    from admission.apiserver_double import start_apiserver

    n = int(os.environ.get("QM_SERVE_MEMORY_JOBS", JOBS))
    fresh_run = os.environ.get("QM_SERVE_MEMORY_FRESH") == "1"
    with (
        cel_rules_off(),
        tempfile.TemporaryDirectory(prefix="qm-serve-memory-") as tmp,
        start_apiserver(
            objects=queue_objects(),
            tokens={TOKEN: USERNAME},
            watch_window=2 * n + 1000,
            record_requests=False,
            bookmark_interval=5.0,
        ) as api,
    ):
        work = Path(tmp)
        kubeconfig = api.write_kubeconfig(work / "kubeconfig", token=TOKEN)

        def serve(name: str) -> ServeProcess:
            return ServeProcess(kubeconfig=kubeconfig, workdir=work, name=name, config=CONFIG)

        empty = _measure(serve("empty"), quiet_for=5.0)
        t0 = time.monotonic()
        sizes = []
        batch = 50  # the double answers a call within 30 s, even on a busy machine
        gc.disable()  # millions of acyclic dicts: full collections would stall the double
        for start in range(0, n, batch):
            chunk = [job(i) for i in range(start, min(n, start + batch))]
            sizes += [template_bytes(j) for j in chunk]
            api.call(lambda s, chunk=chunk: _seed(s, chunk, with_workloads=not fresh_run))
        gc.enable()
        gc.freeze()
        seeded = time.monotonic() - t0
        fresh = _measure(serve("fresh"), quiet_for=10.0) if fresh_run else None
        restart = _measure(serve("restart"), quiet_for=10.0)
        workloads, pending = api.call(_count_workloads)
        first = job(0)
        sample = api.call(
            lambda s: s.get_object(
                "jobs", first["metadata"]["name"], first["metadata"]["namespace"]
            )
        )
    base = empty["rssMiB"]
    mib = 1024 * 1024
    return {
        "jobs": n,
        "workloads": workloads,
        "pendingWorkloads": pending,
        "templateBytesMean": round(sum(sizes) / len(sizes)) if sizes else 0,
        "storedTemplateBytes": template_bytes(sample) if sample else 0,
        "rssEmptyMiB": base,
        "rssFreshMiB": fresh["rssMiB"] if fresh else None,
        "rssMiB": restart["rssMiB"],
        "peakRssMiB": max(restart["peakRssMiB"], fresh["peakRssMiB"] if fresh else 0),
        "bytesPerPendingWorkload": round((restart["rssMiB"] - base) * mib / n) if n else 0,
        "bytesPerPendingWorkloadFresh": (
            round((fresh["rssMiB"] - base) * mib / n) if n and fresh else None
        ),
        "seedSeconds": round(seeded, 1),
        "fresh": fresh,
        "restart": restart,
        "targets": {"rssMiB": 512, "bytesPerPendingWorkload": 3072},
    }
