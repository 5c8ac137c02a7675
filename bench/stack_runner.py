"""The full-stack benchmark's workload runner (Kueue's scheduler-performance runner).

Run as ``python -m bench.stack_runner --url URL --scenario FILE``: it creates the
scenario's Workloads against the API server in real time (each workloads set creates
one per ``creationIntervalMs``, the sets of a queue concurrently), watches them, and
marks each one ``Finished`` ``runtimeMs`` after it saw it admitted; an evicted
workload's timer is cancelled and it runs its whole runtime again once readmitted.
The queue objects must exist already (time zero is when this process starts creating).

It prints one JSON summary on stdout: wall time, per-class time to admission, per
ClusterQueue class usage (∫ admitted usage dt × 100 ÷ (Σ nominal × elapsed)).
Plain aiohttp on purpose: the runner is the cluster's users, not the product.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yaml

from admission.sim.scenario import US_PER_MS, Scenario, parse_generator

try:
    from orjson import loads
except ImportError:  # pragma: no cover
    loads = json.loads

WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2"


@dataclass(slots=True)
class Rec:
    namespace: str
    name: str
    cls: str
    cq: str
    cpu: int  # engine units (milli-cpu)
    runtime: float
    arrival: float  # scheduled, seconds after t0
    priority: int
    created: float | None = None
    admitted_since: float | None = None
    last_admission: float | None = None
    finished: float | None = None
    evictions: int = 0
    used: float = 0.0  # ∫ usage dt (milli-cpu × s)
    timer: asyncio.TimerHandle | None = None
    finishing: bool = False


@dataclass
class Runner:
    url: str
    scenario: Scenario
    concurrency: int = 64
    recs: dict[str, Rec] = field(default_factory=dict)
    t0: float = 0.0
    last_event: dict[str, float] = field(default_factory=dict)  # cq class -> time
    done: asyncio.Event = field(default_factory=asyncio.Event)
    remaining: int = 0
    errors: int = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def body(self, r: Rec) -> dict[str, Any]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": r.name, "namespace": r.namespace},
            "spec": {
                "queueName": r.cq,
                "priority": r.priority,
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "registry.k8s.io/pause:3.9",
                                        "resources": {"requests": {"cpu": f"{r.cpu}m"}},
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        }

    async def run(self) -> dict[str, Any]:
        sc = self.scenario
        for s in sc.workloads:
            wl = s.workload
            lq = sc.local_queues[f"{wl.namespace}/{wl.queue_name}"]
            cpu = sum(ps.requests.get("cpu", 0) * ps.count for ps in wl.pod_sets)
            self.recs[f"{wl.namespace}/{wl.name}"] = Rec(
                wl.namespace, wl.name, s.wl_class, lq.cluster_queue, cpu,
                s.runtime_us / 1e6, s.arrival_us / 1e6, wl.priority,
            )  # fmt: skip
        self.remaining = len(self.recs)
        connector = aiohttp.TCPConnector(limit=self.concurrency + 4)
        async with aiohttp.ClientSession(self.url, connector=connector) as http:
            async with http.get(f"{WORKLOADS}/workloads", params={"limit": "1"}) as resp:
                rv = (await resp.json())["metadata"]["resourceVersion"]
            self.t0 = time.monotonic()
            watcher = asyncio.create_task(self.watch(http, rv))
            creator = asyncio.create_task(self.create_all(http))
            await self.done.wait()
            wall = self.now()
            watcher.cancel()
            await asyncio.gather(watcher, creator, return_exceptions=True)
        return self.summary(wall)

    async def create_all(self, http: aiohttp.ClientSession) -> None:
        sem = asyncio.Semaphore(self.concurrency)
        tasks = []
        for rec in sorted(self.recs.values(), key=lambda r: (r.arrival, r.namespace, r.name)):
            delay = rec.arrival - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            await sem.acquire()
            tasks.append(asyncio.create_task(self.create(http, rec, sem)))
        await asyncio.gather(*tasks)

    async def create(self, http: aiohttp.ClientSession, rec: Rec, sem: asyncio.Semaphore) -> None:
        try:
            rec.created = self.now()
            self.last_event[self.scenario.class_of_cq(rec.cq)] = rec.created
            path = f"{WORKLOADS}/namespaces/{rec.namespace}/workloads"
            for _ in range(10):
                async with http.post(path, json=self.body(rec)) as resp:
                    if resp.status in (200, 201, 409):
                        return
                    self.errors += 1
                await asyncio.sleep(0.1)
        finally:
            sem.release()

    async def watch(self, http: aiohttp.ClientSession, rv: str) -> None:
        params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "3600"}
        while True:
            params["resourceVersion"] = rv
            try:
                async with http.get(
                    f"{WORKLOADS}/workloads",
                    params=params,
                    timeout=aiohttp.ClientTimeout(total=None),
                ) as resp:
                    async for line in resp.content:
                        if not line.strip():
                            continue
                        event = loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            rv = await self.relist(http)
                            break
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self.observe(http, obj)
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.1)

    async def relist(self, http: aiohttp.ClientSession) -> str:
        async with http.get(f"{WORKLOADS}/workloads") as resp:
            doc = await resp.json(loads=loads)
        for obj in doc.get("items") or []:
            self.observe(http, obj)
        return doc["metadata"]["resourceVersion"]

    def observe(self, http: aiohttp.ClientSession, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        rec = self.recs.get(f"{meta.get('namespace')}/{meta.get('name')}")
        if rec is None or rec.finished is not None:
            return
        status = obj.get("status") or {}
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        holds = bool(status.get("admission")) and conds.get("QuotaReserved") == "True"
        now = self.now()
        cq_class = self.scenario.class_of_cq(rec.cq)
        if conds.get("Finished") == "True":
            return
        if holds and rec.admitted_since is None:
            rec.admitted_since = rec.last_admission = now
            self.last_event[cq_class] = now
            loop = asyncio.get_running_loop()
            rec.timer = loop.call_later(
                rec.runtime, lambda: asyncio.ensure_future(self.finish(http, rec))
            )
        elif holds and conds.get("Evicted") == "True" and rec.timer is not None:
            rec.timer.cancel()  # being evicted: it stops running now
            rec.timer = None
        elif not holds and rec.admitted_since is not None:
            rec.used += (now - rec.admitted_since) * rec.cpu
            rec.admitted_since = None
            rec.evictions += 1
            self.last_event[cq_class] = now
            if rec.timer is not None:
                rec.timer.cancel()
                rec.timer = None

    async def finish(self, http: aiohttp.ClientSession, rec: Rec) -> None:
        rec.timer = None
        if rec.admitted_since is None or rec.finishing:
            return
        rec.finishing = True
        patch = [{"op": "add", "path": "/status/conditions/-", "value": {
            "type": "Finished", "status": "True", "reason": "Succeeded",
            "message": "runtime elapsed", "lastTransitionTime": "2026-01-01T00:00:00Z"}}]  # fmt: skip
        path = f"{WORKLOADS}/namespaces/{rec.namespace}/workloads/{rec.name}/status"
        headers = {"Content-Type": "application/json-patch+json"}
        try:
            for _ in range(20):
                async with http.patch(path, data=json.dumps(patch), headers=headers) as resp:
                    if resp.status == 200:
                        break
                    self.errors += 1
                await asyncio.sleep(0.05)
        finally:
            rec.finishing = False
        now = self.now()
        if rec.admitted_since is not None:
            rec.used += (now - rec.admitted_since) * rec.cpu
            rec.admitted_since = None
        rec.finished = now
        self.last_event[self.scenario.class_of_cq(rec.cq)] = now
        self.remaining -= 1
        if self.remaining == 0:
            self.done.set()

    def summary(self, wall: float) -> dict[str, Any]:
        sc = self.scenario
        per_class: dict[str, list[float]] = {}
        evictions: dict[str, int] = {}
        for r in self.recs.values():
            if r.last_admission is not None and r.created is not None:
                per_class.setdefault(r.cls, []).append(r.last_admission - r.created)
            evictions[r.cls] = evictions.get(r.cls, 0) + r.evictions
        classes = {}
        for c in sorted(per_class):
            vals = sorted(per_class[c])
            classes[c] = {
                "count": len(vals),
                "averageTimeToAdmissionMs": round(sum(vals) / len(vals) * 1000),
                "p95TimeToAdmissionMs": round(vals[max(0, -(-95 * len(vals) // 100) - 1)] * 1000),
                "totalEvictions": evictions.get(c, 0),
            }
        nominal: dict[str, int] = {}
        for name, cq in sc.cluster_queues.items():
            c = sc.class_of_cq(name)
            nominal[c] = nominal.get(c, 0) + sum(
                q.nominal
                for g in cq.resource_groups
                for f in g.flavors
                for r, q in f.resources.items()
                if r == "cpu"
            )
        used: dict[str, float] = {}
        for r in self.recs.values():
            c = sc.class_of_cq(r.cq)
            used[c] = used.get(c, 0.0) + r.used
        usage = {
            c: {
                "usagePercent": round(
                    used.get(c, 0.0) * 100 / (nominal[c] * self.last_event.get(c, wall)), 2
                )
            }
            for c in sorted(nominal)
            if nominal[c]
        }
        return {
            "wallMs": round(wall * 1000),
            "workloads": len(self.recs),
            "workloadClasses": classes,
            "clusterQueueClasses": usage,
            "runnerErrors": self.errors,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stack_runner")
    p.add_argument("--url", required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--concurrency", type=int, default=64)
    args = p.parse_args(argv)
    with open(args.scenario, encoding="utf-8") as f:
        scenario = parse_generator(yaml.safe_load(f), source=args.scenario)
    assert US_PER_MS == 1000
    result = asyncio.run(Runner(args.url, scenario, concurrency=args.concurrency).run())
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
