"""The dashboard's live updates at scale (issue 17): after the first full ``summary``
event a client gets ``delta`` events with only the tree rows that changed, and the
state it rebuilds from them equals a fresh summary; a client that fell behind gets the
whole state again. Over real HTTP against the dashboard's aiohttp app."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from admission.drivers.loader import load_documents
from admission.drivers.plan import build_cache
from admission.engine.cache import Cache
from admission.serve.dashboard import (
    Dashboard,
    DashboardSource,
    Recent,
    summary,
)
from queues import model as m
from queues.api.parse import parse_model

KUEUE = "kueue.x-k8s.io/v1beta2"


def _cache(cqs: int = 40) -> Cache:
    docs: list[dict[str, Any]] = [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "f"}},
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "org"}, "spec": {}},
    ]
    for i in range(cqs):
        docs.append({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": f"cq-{i}"},
                     "spec": {"cohortName": "org", "namespaceSelector": {}, "resourceGroups": [{
                         "coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [
                             {"name": "cpu", "nominalQuota": "4"}]}]}]}})  # fmt: skip
        docs.append({"apiVersion": KUEUE, "kind": "LocalQueue",
                     "metadata": {"name": "lq", "namespace": f"cq-{i}"},
                     "spec": {"clusterQueue": f"cq-{i}"}})  # fmt: skip
    return build_cache(load_documents([("test", i, d) for i, d in enumerate(docs)]))


def _workload(name: str, cq: str) -> m.Workload:
    doc = {"apiVersion": KUEUE, "kind": "Workload",
           "metadata": {"name": name, "namespace": cq, "uid": name,
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {
               "spec": {"containers": [{"name": "c", "resources": {
                   "requests": {"cpu": "1"}}}]}}}]}}  # fmt: skip
    wl = parse_model(doc)
    assert isinstance(wl, m.Workload)
    return wl


class Events:
    """An SSE client of ``/events`` that splits the stream itself (events are large)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.buf = bytearray()

    async def next(self) -> tuple[str, dict[str, Any]]:
        while True:
            end = self.buf.find(b"\n\n")
            if end >= 0:
                raw = bytes(self.buf[:end]).decode()
                del self.buf[: end + 2]
                fields = dict(line.split(": ", 1) for line in raw.split("\n") if ": " in line)
                if "event" in fields:
                    return fields["event"], json.loads(fields["data"])
                continue
            chunk = await asyncio.wait_for(self.resp.content.readany(), 10)
            assert chunk, "the event stream ended"
            self.buf += chunk


def test_updates_are_deltas_of_the_rows_that_changed_and_rebuild_the_summary() -> None:
    cache = _cache()

    async def ready() -> None:
        return None

    dashboard = Dashboard(DashboardSource(cache, ready, lambda cq: None, lambda n, c: None))

    async def main() -> None:
        ports: list[int] = []
        server = asyncio.create_task(dashboard.serve(host="127.0.0.1", port=0, ready=ports.append))
        while not ports:
            await asyncio.sleep(0.01)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{ports[0]}/events") as resp:
                    events = Events(resp)
                    kind, state = await events.next()
                    assert kind == "summary" and len(state["nodes"]) == 41
                    # one ClusterQueue gets a pending workload
                    wl = _workload("w1", "cq-7")
                    cache.add_workload(wl)
                    dashboard.observe("workloads", "ADDED", wl.key, None, None)
                    while True:  # the connect itself may cause an empty delta first
                        kind, delta = await events.next()
                        assert kind == "delta"
                        if delta["changed"]:
                            break
                    names = {(r["kind"], r["name"]) for r in delta["changed"]}
                    assert ("ClusterQueue", "cq-7") in names
                    assert len(names) <= 2  # the queue and its cohort, not the tree
                    index = {(n["kind"], n["name"]): i for i, n in enumerate(state["nodes"])}
                    for row in delta["changed"]:
                        state["nodes"][index[(row["kind"], row["name"])]] = row
                    fresh = json.loads(json.dumps(summary(dashboard.source, dashboard.recent)))
                    assert state["nodes"] == fresh["nodes"]
                    assert delta["pending"] == fresh["pending"] == 1
                    # a new ClusterQueue changes the tree's shape: a full summary again
                    other = _cache(41)
                    cache.update_objects(
                        cluster_queues=other.cluster_queues, local_queues=other.local_queues
                    )
                    dashboard.observe("clusterqueues", "ADDED", "cq-40", None, None)
                    kind, state = await events.next()
                    while kind == "delta" and not state["changed"]:
                        kind, state = await events.next()
                    assert kind == "summary" and len(state["nodes"]) == 42
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)

    asyncio.run(main())


def test_recent_events_keep_kueue_messages_whole() -> None:
    """A preemption message names the preemptor, its UIDs and both Cohort paths: the
    page shows it whole; only a message beyond any Kueue writes is cut, visibly."""
    paths = "/".join(f"cohort-{i}" for i in range(40))
    message = (
        "Preempted to accommodate a workload (UID: 5c1f0e0a-1111-4000-8000-000000000001, "
        "JobUID: 5c1f0e0a-2222-4000-8000-000000000002) due to reclamation within the "
        f"cohort; preemptor path: /{paths}/llm-research; preemptee path: /{paths}/vision"
    )
    assert len(message) > 600
    recent = Recent()

    def evicted(text: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": "Evicted", "status": "True",
                                           "reason": "Preempted", "message": text}]}}  # fmt: skip

    recent.observe("workloads", "MODIFIED", "ns/a", evicted(message), None)
    recent.observe("workloads", "MODIFIED", "ns/b", evicted("x" * 100_000), None)
    huge, whole = recent.events
    assert whole["kind"] == "preempted" and whole["message"] == message
    assert len(huge["message"]) <= 10_000 and huge["message"].endswith("…")
