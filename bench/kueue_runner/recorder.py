"""The recorder of Kueue's runner (``runner/recorder/recorder.go``).

Every Workload event updates that workload's state (time to admission at each admitted
transition, evictions); every ClusterQueue event integrates the previous event's
``flavorsUsage[0].resources[0]`` over the time since it.  It stops when generation is
done and no active ClusterQueue's last status shows pending or reserving workloads
(checked on every ClusterQueue event and every 5 s) -- and, our addition, every
workload the generator created has been seen finished.  Kueue's condition alone can
fire before the ClusterQueue statuses show the last workloads (a short run, or a
service slow to start, stops before they are even admitted); with the addition a run
never stops early, so the wall time can only be longer than Kueue's condition would
make it, never flattered.

:meth:`Recorder.summary` gives Kueue's summary fields: per ClusterQueue class
``cpuUsed``, ``nominalQuota``, the monitored time and ``usagePercent`` as the checker
computes it; per workload class ``count``, ``totalEvictions`` and the average time to
admission in **both** of Kueue's definitions: ``runnerObserved`` -- the recorder's own
event time minus its first sight of the workload, the definition when the published
ranges were calibrated -- and ``api`` -- ``Admitted.lastTransitionTime −
creationTimestamp``, current Kueue's, 1 s resolution.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from queues.api.conditions import condition, is_true

from .api import milli, parse_ts
from .generator import CLASS_LABEL

EXIT_CHECK = 5.0  # the recorder's periodic stop check
Obj = dict[str, Any]


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
