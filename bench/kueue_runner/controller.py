"""The controller of Kueue's runner (``runner/controller/controller.go``): finish
evictions, finish workloads on time.

It watches Workloads; remembers when it first saw each one ``Admitted`` (its Update
predicate) and reconciles the admitted, unfinished ones with 5 workers: an evicted one
gets its quota reservation cleared (``UnsetQuotaReservationWithCondition``:
``QuotaReserved=False`` reason ``Pending``, admission removed, ``Admitted=False``) when
that changes anything; an admitted one is finished (``Finished=True`` reason
``ByTest``) ``runtimeMs`` after it was first seen admitted, by a status write pinned to
the resourceVersion it read (a 409 retries with controller-runtime's per-item backoff,
5 ms doubling).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from queues.api.conditions import condition, is_true
from queues.backoff import BackoffPolicy

from .api import KUEUE, Api, parse_ts, rfc3339
from .generator import RUNNING_TIME_LABEL
from .recorder import Recorder

WORKERS = 5  # GroupKindConcurrency of Workload in the runner's manager
RETRY_BACKOFF = BackoffPolicy(base=0.005, cap=1000.0)
Obj = dict[str, Any]


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
