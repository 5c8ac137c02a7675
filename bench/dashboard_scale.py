"""``dashboard-scale``: the live dashboard at 1,000 ClusterQueues and 50,000 pending
workloads (issue 17: "it must stay readable at 1,000 ClusterQueues and 50k pending").

The dashboard reads the service's in-memory model, so this benchmark builds that model
directly (an engine ``Cache``: a root cohort, 10 cohorts of 5 leaf cohorts of 20
ClusterQueues each, 2 flavors x 3 resources per ClusterQueue; 50,000 pending single-pod
workloads over the 1,000 LocalQueues, skewed so one ClusterQueue holds 5,000; a few
scheduling cycles admit what fits) and serves :class:`admission.serve.dashboard.Dashboard`
over real HTTP on loopback, as ``serve --dashboard-port`` does. Measured:

* ``pageLoad``: what the page fetches before it can draw (``/``, ``app.js``,
  ``app.css``, the first SSE ``summary`` event), wall ms and bytes;
* ``sseUpdate``: after one model change (a workload created), the time until the next
  event (a ``delta`` of the changed rows) reaches a connected client, and its size;
* ``summaryCpuMs``: the server's CPU to build and encode one summary (p50/max of 10):
  it runs on the event loop the webhooks share, once per push (at most 4 a second);
* ``pendingPageCpuMs``: one page of 100 pending workloads of the largest ClusterQueue
  at offset 0 and near its end.

Wall figures are this process's (client and server share it and the machine); CPU
figures are the server's work alone. Compare with itself over time.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from typing import Any

import aiohttp

COHORTS = 10
LEAVES = 5
CQS_PER_LEAF = 20  # 10 x 5 x 20 = 1,000 ClusterQueues
PENDING = 50_000
HOT_CQ_PENDING = 5_000  # the largest ClusterQueue's backlog
FLAVORS = ("on-demand", "spot")
RESOURCES = (("cpu", "64"), ("memory", "256Gi"), ("nvidia.com/gpu", "8"))


def documents() -> list[dict[str, Any]]:
    kueue = "kueue.x-k8s.io/v1beta2"
    docs: list[dict[str, Any]] = [
        {"apiVersion": kueue, "kind": "ResourceFlavor", "metadata": {"name": f}} for f in FLAVORS
    ]
    docs.append({"apiVersion": kueue, "kind": "Cohort", "metadata": {"name": "org"}, "spec": {}})
    for c in range(COHORTS):
        division = f"div-{c}"
        docs.append({"apiVersion": kueue, "kind": "Cohort", "metadata": {"name": division},
                     "spec": {"parentName": "org"}})  # fmt: skip
        for leaf_i in range(LEAVES):
            leaf = f"{division}-team-{leaf_i}"
            docs.append({"apiVersion": kueue, "kind": "Cohort", "metadata": {"name": leaf},
                         "spec": {"parentName": division}})  # fmt: skip
            for q in range(CQS_PER_LEAF):
                name = f"{leaf}-cq-{q}"
                flavors = [{"name": f, "resources": [
                    {"name": r, "nominalQuota": v, "borrowingLimit": v} for r, v in RESOURCES]}
                    for f in FLAVORS]  # fmt: skip
                docs.append({"apiVersion": kueue, "kind": "ClusterQueue",
                             "metadata": {"name": name},
                             "spec": {"cohortName": leaf, "namespaceSelector": {},
                                      "resourceGroups": [{
                                          "coveredResources": [r for r, _ in RESOURCES],
                                          "flavors": flavors}]}})  # fmt: skip
                docs.append({"apiVersion": kueue, "kind": "LocalQueue",
                             "metadata": {"name": "lq", "namespace": name},
                             "spec": {"clusterQueue": name}})  # fmt: skip
    return docs


def workload_doc(i: int, namespace: str, rng: random.Random) -> dict[str, Any]:
    cpu = rng.choice(["1", "2", "4", "8"])
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"wl-{i}", "namespace": namespace, "uid": f"uid-{i:07d}",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"queueName": "lq", "priority": rng.choice([0, 100, 1000]), "podSets": [{
            "name": "main", "count": rng.choice([1, 1, 2, 4]), "template": {"spec": {
                "containers": [{"name": "c", "image": "x", "resources": {
                    "requests": {"cpu": cpu, "memory": f"{int(cpu) * 4}Gi"}}}]}}}]},
    }  # fmt: skip


def build() -> tuple[Any, Any, str]:
    """(cache, scheduler, the largest ClusterQueue's name)."""
    from admission.config.schema import Config
    from admission.drivers.loader import load_documents
    from admission.drivers.plan import build_cache
    from queues.api.parse import parse_model

    rng = random.Random(17)
    cache = build_cache(
        load_documents([("dashboard-scale", i, d) for i, d in enumerate(documents())])
    )
    names = sorted(cache.cluster_queues)
    hot = names[0]
    for i in range(PENDING):
        cq = hot if i < HOT_CQ_PENDING else names[rng.randrange(len(names))]
        cache.add_workload(parse_model(workload_doc(i, cq, rng)))
    now = [1_767_225_600.0]
    scheduler = Config().make_scheduler(cache, clock=lambda: now[0], explain=True)
    for _ in range(5):
        now[0] += 1
        scheduler.schedule()
    return cache, scheduler, hot


async def _measure(dashboard: Any, cache: Any, hot: str) -> dict[str, Any]:
    from admission.serve.dashboard import pending_page, summary
    from queues.api.parse import parse_model

    ports: list[int] = []
    server = asyncio.create_task(
        dashboard.serve(host="127.0.0.1", port=0, ready=ports.append), name="dashboard"
    )
    while not ports:
        await asyncio.sleep(0.01)
    base = f"http://127.0.0.1:{ports[0]}"
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        loaded = 0
        for path in ("/", "/static/app.js", "/static/app.css"):
            async with session.get(base + path) as resp:
                loaded += len(await resp.read())
        async with session.get(base + "/events") as events:
            first = await _next_event(events)
            out["pageLoad"] = {
                "wallMs": round((time.perf_counter() - t0) * 1000, 1),
                "bytes": loaded + len(first),
                "summaryEventBytes": len(first),
            }
            # one model change: a workload created (the informer's path) and the head
            # of the hot queue admitted; the pusher notices within its interval
            wl = parse_model(workload_doc(10**6, hot, random.Random(1)))
            t1 = time.perf_counter()
            cache.add_workload(wl)
            dashboard.observe("workloads", "ADDED", wl.key, None, None)
            update = await _next_event(events)
            while update.startswith(b'{"time"') and b'"changed":[]' in update:
                update = await _next_event(events)  # the connect's own (empty) delta
            out["sseUpdate"] = {
                "wallMs": round((time.perf_counter() - t1) * 1000, 1),
                "bytes": len(update),
                "event": "delta" if b'"changed":' in update else "summary",
            }
    server.cancel()
    await asyncio.gather(server, return_exceptions=True)

    cpu = []
    for _ in range(10):
        c0 = time.process_time()
        json.dumps(summary(dashboard.source, dashboard.recent))
        cpu.append((time.process_time() - c0) * 1000)
    out["summaryCpuMs"] = {"p50": round(statistics.median(cpu), 1), "max": round(max(cpu), 1)}
    pages = {}
    total = len(cache.queues[hot])
    for label, offset in (("first", 0), ("last", max(0, total - 100))):
        c0 = time.process_time()
        page = pending_page(dashboard.source, hot, offset, 100)
        json.dumps(page)
        pages[label] = {"cpuMs": round((time.process_time() - c0) * 1000, 1),
                        "items": len(page["items"]), "offset": offset}  # fmt: skip
    out["pendingPageCpuMs"] = pages
    return out


_buffers: dict[int, bytearray] = {}


async def _next_event(resp: aiohttp.ClientResponse) -> bytes:
    """The next ``summary`` event's data (keep-alive comments skipped); events can be
    larger than aiohttp's line limit, so the stream is split here."""
    buf = _buffers.setdefault(id(resp), bytearray())
    while True:
        end = buf.find(b"\n\n")
        if end >= 0:
            event = bytes(buf[:end])
            del buf[: end + 2]
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    return line[6:]
            continue
        chunk = await resp.content.readany()
        if not chunk:
            raise RuntimeError("the event stream ended")
        buf += chunk


def run() -> dict[str, Any]:
    from admission.serve.dashboard import Dashboard, DashboardSource

    c0 = time.process_time()
    cache, scheduler, hot = build()
    build_cpu = time.process_time() - c0

    async def ready() -> None:
        return None

    tracker = scheduler.usage
    source = DashboardSource(
        cache,
        ready,
        lambda cq: tracker.lq_order_function(cq) if tracker is not None else None,
        lambda name, cohort: None,
    )
    dashboard = Dashboard(source)
    figures = asyncio.run(_measure(dashboard, cache, hot))
    return {
        "clusterQueues": len(cache.cluster_queues),
        "cohorts": len(cache.cohorts),
        "pending": sum(len(q) for q in cache.queues.values()),
        "admitted": len(cache.admitted),
        "largestQueue": {"name": hot, "pending": len(cache.queues[hot])},
        "buildCpuSeconds": round(build_cpu, 1),
        **figures,
    }
