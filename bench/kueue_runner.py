"""Kueue's scheduler-performance runner, reproduced (``test/performance/scheduler/runner``).

Run as ``python -m bench.kueue_runner --url URL --config GENERATOR.yaml [--token T]
[--ca-file CA]``. It plays the cluster's users against the API server, as Kueue's
runner does against envtest, in its three parts (each mirrors a file there):

* **generator** (``runner/generator/generator.go``) — creates the ResourceFlavor ``rf``
  and, concurrently for every queue, its ClusterQueue (``{class}-{set}-{i}-{cohort}``,
  labelled with its class), a Namespace and a LocalQueue of the same name, then one
  task per workloads set that, ``count`` times for each template, *sleeps*
  ``creationIntervalMs`` and then creates the Workload (``{class}-{set}-{si}-{i}``,
  labels ``…-running-ms`` and ``…-class``, one podSet ``main`` requesting the cpu) —
  so the creation drifts by the create latency, exactly like ``<-time.After(delay)``
  followed by a synchronous ``c.Create``;
* **reconciler** (``runner/controller/controller.go``) — watches Workloads; remembers
  when it first saw each one ``Admitted`` (its Update predicate) and reconciles the
  admitted, unfinished ones with 5 workers: an evicted one gets its quota reservation
  cleared (``UnsetQuotaReservationWithCondition``: ``QuotaReserved=False`` reason
  ``Pending``, admission removed, ``Admitted=False``) when that changes anything; an
  admitted one is finished (``Finished=True`` reason ``ByTest``) ``runtimeMs`` after it
  was first seen admitted, by a status write pinned to the resourceVersion it read
  (a 409 retries with controller-runtime's per-item backoff, 5 ms doubling);
* **recorder** (``runner/recorder/recorder.go``) — every Workload event updates that
  workload's state (time to admission at each admitted transition, evictions); every
  ClusterQueue event integrates the previous event's ``flavorsUsage[0].resources[0]``
  over the time since it; it stops when generation is done and no active ClusterQueue's
  last status shows pending or reserving workloads (checked on every ClusterQueue event
  and every 5 s) — and, our addition, every workload the generator created has been
  seen finished. Kueue's condition alone can fire before the ClusterQueue statuses show
  the last workloads (a short run, or a service slow to start, stops before they are
  even admitted); with the addition a run never stops early, so the wall time can only
  be longer than Kueue's condition would make it, never flattered.

It prints one JSON summary: Kueue's summary fields (per ClusterQueue class
``cpuUsed``, ``nominalQuota``, the first and last event, and ``usagePercent`` as the
checker computes it; per workload class ``count``, ``totalEvictions`` and the average
time to admission in **both** of Kueue's definitions: ``runnerObserved`` — the
recorder's own event time minus its first sight of the workload, the definition when
the published ranges were calibrated — and ``api`` — ``Admitted.lastTransitionTime −
creationTimestamp``, current Kueue's, 1 s resolution), plus ``stopEpoch`` (wall clock
at the stop condition, for the caller's wall time) and the runner's request counts.
Plain aiohttp on purpose: the runner is the cluster's users, not the product.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yaml

from queues.api.conditions import condition, is_true
from queues.backoff import BackoffPolicy
from queues.times import rfc3339_seconds

try:
    from orjson import loads
except ImportError:  # pragma: no cover
    loads = json.loads

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
RUNNING_TIME_LABEL = "kueue.x-k8s.io/performance-scheduler-running-ms"
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"
CLEANUP_LABEL = "kueue.x-k8s.io/performance-scheduler-cleanup"
FLAVOR = "rf"
WORKERS = 5  # GroupKindConcurrency of Workload in the runner's manager
EXIT_CHECK = 5.0  # the recorder's periodic stop check
Obj = dict[str, Any]


def milli(quantity: Any) -> int:
    """A quantity's MilliValue (cpu here: "20" -> 20000, "500m" -> 500)."""
    from queues.quantity import parse_quantity

    if quantity in (None, ""):
        return 0
    return int(parse_quantity(str(quantity)) * 1000)


RETRY_BACKOFF = BackoffPolicy(base=0.005, cap=1000.0)


def parse_ts(text: Any) -> float | None:
    return rfc3339_seconds(str(text)) if text else None


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(int(ts), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the API ------------------------------------------------------------------------------------


class Api:
    """The few requests the runner sends; counts them (the runner is not rate-limited)."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url.rstrip("/")
        self.requests = 0
        self.errors = 0

    async def send(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        self.requests += 1
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            async with self.http.request(
                method, self.url + path, data=data, headers=headers
            ) as resp:
                raw = await resp.read()
                doc = loads(raw) if raw else None
                if resp.status >= 400:
                    self.errors += 1
                return resp.status, doc
        except (aiohttp.ClientError, TimeoutError) as err:
            self.errors += 1
            return 0, {"message": repr(err)}

    async def create(self, path: str, body: Obj) -> None:
        for attempt in range(20):
            status, doc = await self.send("POST", path, body)
            if status in (200, 201, 409):
                return
            await asyncio.sleep(min(1.0, 0.05 * 2**attempt))
        raise RuntimeError(f"create {path} failed: {status} {doc}")

    async def watch(self, plural: str, on_event: Any) -> None:
        """List, then watch from the list's resourceVersion; relist on 410 (an informer)."""
        path = f"{KUEUE}/{plural}"
        while True:
            status, doc = await self.send("GET", path)
            if status != 200:
                await asyncio.sleep(0.5)
                continue
            for obj in doc.get("items") or []:
                on_event("ADDED", obj)
            rv = doc["metadata"]["resourceVersion"]
            while rv is not None:
                rv = await self._watch_once(path, rv, on_event)

    async def _watch_once(self, path: str, rv: str, on_event: Any) -> str | None:
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "600"}  # fmt: skip
        self.requests += 1
        try:
            async with self.http.get(
                self.url + path, params=params, timeout=aiohttp.ClientTimeout(total=None)
            ) as resp:
                if resp.status == 410:
                    return None
                async for line in resp.content:
                    if not line.strip():
                        continue
                    event = loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        return None if obj.get("code") == 410 else rv
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        on_event(event["type"], obj)
        except (TimeoutError, aiohttp.ClientError):
            await asyncio.sleep(0.1)
        return rv


# -- the generator -------------------------------------------------------------------------------


def queue_objects(config: Obj) -> list[tuple[list[Obj], list[tuple[str, Obj]]]]:
    """Per queue: [ClusterQueue, Namespace, LocalQueue] and its workloads sets."""
    out = []
    for cset in config.get("cohorts") or []:
        for ci in range(int(cset.get("count", 1))):
            cohort = f"{cset['className']}-{ci}"
            for qsi, qs in enumerate(cset.get("queuesSets") or []):
                for qi in range(int(qs.get("count", 1))):
                    name = f"{qs['className']}-{qsi}-{qi}-{cohort}"
                    quota: Obj = {"name": "cpu", "nominalQuota": str(qs["nominalQuota"])}
                    if qs.get("borrowingLimit") not in (None, ""):
                        quota["borrowingLimit"] = str(qs["borrowingLimit"])
                    cq = {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "ClusterQueue",
                        "metadata": {"name": name, "labels": {
                            CLASS_LABEL: qs["className"], CLEANUP_LABEL: "true"}},
                        "spec": {
                            "cohortName": cohort,
                            "namespaceSelector": {},
                            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                                {"name": FLAVOR, "resources": [quota]}]}],
                            "preemption": {
                                "reclaimWithinCohort": qs.get("reclaimWithinCohort", "Never"),
                                "withinClusterQueue": qs.get("withinClusterQueue", "Never"),
                            },
                        },
                    }  # fmt: skip
                    ns = {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": name, "labels": {CLEANUP_LABEL: "true"}}}  # fmt: skip
                    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                          "metadata": {"name": name, "namespace": name},
                          "spec": {"clusterQueue": name}}  # fmt: skip
                    sets = [(name, ws) for ws in qs.get("workloadsSets") or []]
                    out.append(([cq, ns, lq], sets))
    return out


def workload_body(name: str, ns: str, wlt: Obj) -> Obj:
    """``MakeWorkload(name, ns).Queue(lq).Label(...).Priority(p).Request(cpu, r)``."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns, "labels": {
            RUNNING_TIME_LABEL: str(wlt["runtimeMs"]), CLASS_LABEL: wlt["className"]}},
        "spec": {
            "queueName": ns,
            "priority": int(wlt.get("priority", 0)),
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "pause",
                                "resources": {"requests": {"cpu": str(wlt["request"])}}}],
            }}}],
        },
    }  # fmt: skip


async def generate(api: Api, config: Obj, on_created: Callable[[], None] | None = None) -> None:
    await api.create(f"{KUEUE}/resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR, "labels": {CLEANUP_LABEL: "true"}}})  # fmt: skip

    async def one_queue(objs: list[Obj], sets: list[tuple[str, Obj]]) -> None:
        cq, ns, lq = objs
        await api.create(f"{KUEUE}/clusterqueues", cq)
        await api.create("/api/v1/namespaces", ns)
        await api.create(f"{KUEUE}/namespaces/{lq['metadata']['namespace']}/localqueues", lq)
        await asyncio.gather(*(one_set(queue, si, ws) for si, (queue, ws) in enumerate(sets)))

    async def one_set(queue: str, set_idx: int, ws: Obj) -> None:
        delay = int(ws.get("creationIntervalMs", 0)) / 1000
        path = f"{KUEUE}/namespaces/{queue}/workloads"
        for si in range(int(ws.get("count", 1))):
            for i, wlt in enumerate(ws.get("workloads") or []):
                await asyncio.sleep(delay)  # <-time.After(delay), then a synchronous Create
                await api.create(path, workload_body(f"{wlt['className']}-{set_idx}-{si}-{i}",
                                                     queue, wlt))  # fmt: skip
                if on_created is not None:
                    on_created()

    await asyncio.gather(*(one_queue(objs, sets) for objs, sets in queue_objects(config)))


# -- the recorder --------------------------------------------------------------------------------


@dataclass(slots=True)
class CQState:
    first: float
    last_time: float
    last_usage: int
    quota: int
    cls: str
    pending: int
    reserving: int
    active: bool
    used: int = 0  # mCPU × ms


@dataclass(slots=True)
class WLState:
    cls: str
    first: float
    admitted: bool = False
    evicted: bool = False
    finished: bool = False
    observed_ms: float | None = None  # runner-observed time to admission (last admission)
    api_ms: float | None = None  # Admitted.lastTransitionTime - creationTimestamp
    evictions: int = 0


@dataclass
class Recorder:
    cqs: dict[str, CQState] = field(default_factory=dict)
    wls: dict[str, WLState] = field(default_factory=dict)
    generation_done: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    stop_epoch: float = 0.0
    # wall clock of the first and the last admission the runner saw (any workload):
    # the stack's timeline says where a run's wall time went
    first_admission_epoch: float | None = None
    last_admission_epoch: float | None = None
    created: int = 0  # workloads the generator created
    finished: int = 0  # ... of which seen Finished
    last_finish_epoch: float | None = None  # when the runner saw the last one finish

    def record_cq(self, cq: Obj) -> None:
        now = time.time()
        st = cq.get("status") or {}
        usage_list = st.get("flavorsUsage") or []
        res = (usage_list[0].get("resources") or []) if usage_list else []
        usage = milli(res[0].get("total")) if res else 0
        groups = (cq.get("spec") or {}).get("resourceGroups") or []
        flavors = groups[0].get("flavors") or [] if groups else []
        quotas = flavors[0].get("resources") or [] if flavors else []
        quota = milli(quotas[0].get("nominalQuota")) if quotas else 0
        name = cq["metadata"]["name"]
        active = any(
            c.get("type") == "Active" and c.get("status") == "True"
            for c in st.get("conditions") or []
        )
        s = self.cqs.get(name)
        if s is None:
            s = self.cqs[name] = CQState(now, now, usage, quota, "", 0, 0, active)
        else:
            if s.last_usage > 0:
                s.used += s.last_usage * int((now - s.last_time) * 1000)
            s.last_time, s.last_usage, s.quota = now, usage, quota
        s.cls = ((cq.get("metadata") or {}).get("labels") or {}).get(CLASS_LABEL, "")
        s.pending = int(st.get("pendingWorkloads") or 0)
        s.reserving = int(st.get("reservingWorkloads") or 0)
        s.active = active
        self.check()

    def record_wl(self, wl: Obj) -> None:
        now = time.time()
        meta = wl.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        s = self.wls.get(uid)
        if s is None:
            s = self.wls[uid] = WLState(cls=(meta.get("labels") or {}).get(CLASS_LABEL, ""),
                                        first=now)  # fmt: skip
        admitted = is_true(wl, "Admitted")
        if admitted and not s.admitted:
            s.observed_ms = (now - s.first) * 1000
            if self.first_admission_epoch is None:
                self.first_admission_epoch = now
            self.last_admission_epoch = now
            created = parse_ts(meta.get("creationTimestamp"))
            at = parse_ts((condition(wl, "Admitted") or {}).get("lastTransitionTime"))
            if created is not None and at is not None and at >= created:
                s.api_ms = (at - created) * 1000
        evicted = is_true(wl, "Evicted")
        if evicted and not s.evicted:
            s.evictions += 1
        finished = is_true(wl, "Finished")
        if finished and not s.finished:
            self.finished += 1
            self.last_finish_epoch = now
        s.admitted, s.evicted, s.finished = admitted, evicted, finished

    def expect_more(self) -> bool:
        if self.finished < self.created:
            return True
        return any((s.pending > 0 or s.reserving > 0) and s.active for s in self.cqs.values())

    def note_created(self) -> None:
        self.created += 1

    def check(self) -> None:
        if self.generation_done and not self.stopped.is_set() and not self.expect_more():
            self.stop_epoch = time.time()
            self.stopped.set()

    async def ticker(self) -> None:
        while not self.stopped.is_set():
            await asyncio.sleep(EXIT_CHECK)
            self.check()

    def summary(self) -> Obj:
        cq_classes: dict[str, Obj] = {}
        for s in self.cqs.values():
            g = cq_classes.setdefault(
                s.cls, {"cpuUsed": 0, "nominalQuota": 0, "first": s.first, "last": s.last_time}
            )
            g["cpuUsed"] += s.used
            g["nominalQuota"] += s.quota
            g["first"] = min(g["first"], s.first)
            g["last"] = max(g["last"], s.last_time)
        for g in cq_classes.values():
            elapsed_ms = (g.pop("last") - g.pop("first")) * 1000
            g["monitoredMs"] = round(elapsed_ms)
            g["usagePercent"] = (
                round(g["cpuUsed"] * 100 / (g["nominalQuota"] * elapsed_ms), 2)
                if g["nominalQuota"] and elapsed_ms
                else None
            )
        wl_classes: dict[str, Obj] = {}
        for s in self.wls.values():
            c = wl_classes.setdefault(
                s.cls, {"count": 0, "totalEvictions": 0, "_obs": [], "_api": []}
            )
            c["count"] += 1
            c["totalEvictions"] += s.evictions
            c["_obs"].append(s.observed_ms or 0.0)  # Kueue's summary adds 0 when never admitted
            c["_api"].append(s.api_ms if s.api_ms is not None else (s.observed_ms or 0.0))
        for c in wl_classes.values():
            obs, api = c.pop("_obs"), c.pop("_api")
            c["averageTimeToAdmissionMs"] = {
                "runnerObserved": round(sum(obs) / len(obs)),
                "api": round(sum(api) / len(api)),
            }
        return {"clusterQueueClasses": cq_classes, "workloadClasses": wl_classes}


# -- the reconciler ------------------------------------------------------------------------------


class Reconciler:
    """``runner/controller/controller.go``: finish evictions, finish workloads on time."""

    def __init__(self, api: Api, recorder: Recorder) -> None:
        self.api = api
        self.recorder = recorder
        self.store: dict[str, Obj] = {}
        self.admitted_at: dict[str, float] = {}  # uid -> when first seen Admitted (Update)
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.failures: dict[str, int] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}

    def on_event(self, kind: str, wl: Obj) -> None:
        meta = wl.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self.store[key] = wl
        admitted = is_true(wl, "Admitted")
        if kind == "MODIFIED":  # the Update predicate keeps the admission time
            uid = str(meta.get("uid"))
            if admitted and uid not in self.admitted_at:
                self.admitted_at[uid] = time.time()
            elif not admitted:
                self.admitted_at.pop(uid, None)
        self.recorder.record_wl(wl)
        if admitted and not is_true(wl, "Finished"):
            self.add(key)

    def add(self, key: str) -> None:
        if key in self.dirty:
            return
        self.dirty.add(key)
        if key not in self.processing:
            self.queue.put_nowait(key)

    def add_after(self, key: str, delay: float) -> None:
        old = self.timers.pop(key, None)
        if old is not None:
            old.cancel()

        def fire() -> None:
            self.timers.pop(key, None)
            self.add(key)

        self.timers[key] = asyncio.get_running_loop().call_later(delay, fire)

    async def worker(self) -> None:
        while True:
            key = await self.queue.get()
            self.dirty.discard(key)
            self.processing.add(key)
            try:
                ok = await self.reconcile(key)
            finally:
                self.processing.discard(key)
                if key in self.dirty:
                    self.queue.put_nowait(key)
            if ok:
                self.failures.pop(key, None)
            else:  # controller-runtime's per-item exponential backoff: 5 ms, doubling
                n = self.failures[key] = self.failures.get(key, 0) + 1
                self.add_after(key, RETRY_BACKOFF.delay(n - 1))

    async def reconcile(self, key: str) -> bool:
        wl = self.store.get(key)
        if wl is None:
            return True
        meta = wl["metadata"]
        path = f"{KUEUE}/namespaces/{meta['namespace']}/workloads/{meta['name']}/status"
        now = time.time()
        if is_true(wl, "Evicted"):
            status = unset_quota_reservation(wl, now)
            if status is None:
                return True
            return await self._patch(path, wl, status)
        cond = condition(wl, "Admitted")
        if cond is None or cond.get("status") != "True":
            return True
        admitted = self.admitted_at.get(str(meta.get("uid")))
        if admitted is None:
            admitted = parse_ts(cond.get("lastTransitionTime")) or now
        runtime = int((meta.get("labels") or {}).get(RUNNING_TIME_LABEL) or 0) / 1000
        remaining = runtime - (now - admitted)
        if remaining > 0:
            self.add_after(key, remaining)
            return True
        conds = [c for c in (wl.get("status") or {}).get("conditions") or []
                 if c.get("type") != "Finished"]  # fmt: skip
        conds.append({"type": "Finished", "status": "True", "reason": "ByTest",
                      "message": "By test runner", "lastTransitionTime": rfc3339(now),
                      "observedGeneration": meta.get("generation", 1)})  # fmt: skip
        return await self._patch(path, wl, {"conditions": conds})

    async def _patch(self, path: str, wl: Obj, status: Obj) -> bool:
        body = {
            "metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]},
            "status": status,
        }
        code, _ = await self.api.send(
            "PATCH", path, body, content_type="application/merge-patch+json"
        )
        if code == 409:
            # Kueue's reconciler retries from its informer cache, which a Go process keeps
            # current; this Python runner's watch can lag under load, so it reads the
            # object instead (its own request, not the service's) before the backoff
            code, fresh = await self.api.send("GET", path.rsplit("/status", 1)[0])
            if code == 200 and fresh:
                key = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
                mine = self.store.get(key)
                if mine is None or int(fresh["metadata"]["resourceVersion"]) > int(
                    mine["metadata"]["resourceVersion"]
                ):
                    self.store[key] = fresh
            return False
        return code == 200 or code == 404


def unset_quota_reservation(wl: Obj, now: float) -> Obj | None:
    """``UnsetQuotaReservationWithCondition(wl, "Pending", "Evicted by the test runner")``:
    the status to write, or None when nothing would change."""
    st = wl.get("status") or {}
    conds = [dict(c) for c in st.get("conditions") or []]
    gen = (wl.get("metadata") or {}).get("generation", 1)
    changed = False

    def set_cond(type_: str, status: str, reason: str, message: str) -> None:
        nonlocal changed
        for c in conds:
            if c.get("type") == type_:
                if (c.get("status"), c.get("reason"), c.get("message"),
                        c.get("observedGeneration")) != (status, reason, message, gen):  # fmt: skip
                    if c.get("status") != status:
                        c["lastTransitionTime"] = rfc3339(now)
                    c.update(status=status, reason=reason, message=message,
                             observedGeneration=gen)  # fmt: skip
                    changed = True
                return
        conds.append({"type": type_, "status": status, "reason": reason, "message": message,
                      "lastTransitionTime": rfc3339(now), "observedGeneration": gen})  # fmt: skip
        changed = True

    set_cond("QuotaReserved", "False", "Pending", "Evicted by the test runner")
    if st.get("admission") is not None:
        changed = True
    if is_true(wl, "Admitted"):  # SyncAdmittedCondition: no reservation, not admitted
        set_cond("Admitted", "False", "NoReservation", "The workload has no reservation")
    if not changed:
        return None
    return {"conditions": conds, "admission": None}


# -- the run -------------------------------------------------------------------------------------


async def run(url: str, config: Obj, *, token: str | None, ca_file: str | None,
              timeout: float) -> Obj:  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    ctx: ssl.SSLContext | bool = False
    if url.startswith("https"):
        ctx = ssl.create_default_context(cafile=ca_file) if ca_file else False
    connector = aiohttp.TCPConnector(limit=256, ssl=ctx)
    started = time.time()
    async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
        api = Api(http, url)
        recorder = Recorder()
        reconciler = Reconciler(api, recorder)
        tasks = [
            asyncio.create_task(api.watch("workloads", reconciler.on_event)),
            asyncio.create_task(api.watch("clusterqueues", lambda _k, cq: recorder.record_cq(cq))),
            asyncio.create_task(recorder.ticker()),
            *(asyncio.create_task(reconciler.worker()) for _ in range(WORKERS)),
        ]
        gen_error: BaseException | None = None
        try:
            await generate(api, config, on_created=recorder.note_created)
        except BaseException as err:  # noqa: BLE001 - reported below
            gen_error = err
        recorder.generation_done = True
        generated = time.time()
        recorder.check()
        timed_out = False
        if gen_error is None:
            try:
                await asyncio.wait_for(recorder.stopped.wait(), timeout=timeout)
            except TimeoutError:
                timed_out = True
                recorder.stop_epoch = time.time()
        for t in tasks:
            t.cancel()
        for t in reconciler.timers.values():
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
    if gen_error is not None:
        raise gen_error
    return {
        **recorder.summary(),
        "startEpoch": started,
        "generatedEpoch": generated,
        "stopEpoch": recorder.stop_epoch,
        "firstAdmissionEpoch": recorder.first_admission_epoch,
        "lastAdmissionEpoch": recorder.last_admission_epoch,
        "lastFinishEpoch": recorder.last_finish_epoch,
        "timedOut": timed_out,
        "workloads": len(recorder.wls),
        "runnerRequests": api.requests,
        "runnerCpuSeconds": round(time.process_time(), 3),
        "runnerErrors": api.errors,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kueue_runner")
    p.add_argument("--url", required=True)
    p.add_argument("--config", required=True, help="Kueue's generator config (YAML)")
    p.add_argument("--token", default=None)
    p.add_argument("--ca-file", default=None)
    p.add_argument("--timeout", type=float, default=3600.0, help="maximum record time (s)")
    args = p.parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    result = asyncio.run(
        run(args.url, config, token=args.token, ca_file=args.ca_file, timeout=args.timeout)
    )
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
