"""waitForPodsReady: evict gangs that do not become ready in time (docs/semantics.md §4.6).

An admitted job is *ready* when its integration says all its pods are
(``Integration.pods_ready``: for a Job, ``status.ready + status.succeeded`` reaches its
pod count). One that is not ready ``timeout`` after its admission is evicted with reason
``PodsReadyTimeout`` and requeued with exponential backoff: ``requeueState.count``
grows by one and ``requeueAt = now + min(base·2^(count−1), max)``; its queue-order
timestamp becomes the eviction time (``requeuingStrategy.timestamp: Eviction``). Past
``backoffLimitCount`` requeues it is deactivated (``spec.active=false``) instead.
Time comes from the controller's injectable clock.

The check runs every tick over the admitted workloads; one found not ready and not yet
due is looked at again only when its Workload or its job changes or its timeout comes
(:meth:`~admission.kube.control.writer.Writer.stamp`), so a tick costs little however
many admitted jobs wait for their pods.
"""

from __future__ import annotations

import logging
from typing import Any

from admission.config.durations import parse_duration
from admission.config.schema import Config
from admission.kube import objects as kobj
from admission.kube.client.resources import WORKLOADS, resource_of
from admission.kube.control.context import Context, PodsReadyOptions
from admission.kube.control.workloads import evict, owner_of

log = logging.getLogger("quartermaster.kube.podsready")


def pods_ready_options(config: Config) -> PodsReadyOptions:
    """Kueue's defaults when the section is absent (enabled, 30m); ``enable: false`` turns it off."""
    section = config.doc.waitForPodsReady
    if section is None:
        return PodsReadyOptions()
    rq = section.requeuingStrategy
    return PodsReadyOptions(
        enabled=section.enable is not False,
        timeout=parse_duration(section.timeout),
        backoff_base=float(rq.backoffBaseSeconds),
        backoff_max=float(rq.backoffMaxSeconds),
        backoff_limit=rq.backoffLimitCount,
        requeue_by_creation=rq.timestamp == "Creation",
    )


class PodsReadyWatcher:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.ready: set[str] = set()  # workloads whose pods were all ready once
        # not ready, not due: key -> (due at, the job (None: none), the stamps it was
        # judged on)
        self.waiting: dict[str, tuple[float, Any, str, tuple[Any, ...]]] = {}

    def _stamps(self, key: str, res: Any, job_key: str) -> tuple[Any, ...]:
        writer = self.ctx.writer
        if res is None:  # no job object: the Workload alone decided
            return writer.stamp(WORKLOADS, key)
        return (*writer.stamp(WORKLOADS, key), *writer.stamp(res, job_key))

    def _unchanged(self, key: str, now: float) -> bool:
        """Whether ``key`` was judged not ready, is not due, and nothing changed since."""
        entry = self.waiting.get(key)
        if entry is None:
            return False
        due, res, job_key, stamps = entry
        if now < due and all(a is b for a, b in zip(stamps, self._stamps(key, res, job_key),
                                                     strict=True)):  # fmt: skip
            return True
        del self.waiting[key]
        return False

    async def check(self) -> None:
        """Evict every admitted job-backed workload past its PodsReady timeout."""
        ctx = self.ctx
        opts = ctx.options.pods_ready
        if not opts.enabled:
            return
        await ctx.cache_ready()
        now = ctx.clock()
        admitted = set(ctx.cache.admitted)
        self.ready &= admitted
        for key in [k for k in self.waiting if k not in admitted]:
            del self.waiting[key]
        for key in admitted:
            if key in self.ready or key in ctx.cache.evicting or key in ctx.sync.inflight:
                continue
            if self._unchanged(key, now):
                continue
            wl_obj = ctx.writer.workload(key)
            model = ctx.cache.workloads.get(key)
            if wl_obj is None or model is None or not kobj.has_quota(wl_obj):
                continue
            owner = owner_of(ctx, wl_obj)
            if owner is None or not owner[1]:  # readiness is only known for job objects
                self.waiting[key] = (float("inf"), None, "", self._stamps(key, None, ""))
                continue
            integ, job_key, _ = owner
            res = resource_of(integ)
            stamps = self._stamps(key, res, job_key)
            job = ctx.writer.current(res, job_key)
            if job is None:  # not seen yet: its arrival changes the stamps
                self.waiting[key] = (float("inf"), res, job_key, stamps)
                continue
            count = sum(ps.count for ps in model.pod_sets)
            ready = integ.pods_ready(job, count)
            admitted_at = model.admission_time
            if ready is None:  # the kind does not report readiness
                self.waiting[key] = (float("inf"), res, job_key, stamps)
                continue
            if ready:
                self.ready.add(key)
                continue
            if admitted_at is None or now - admitted_at < opts.timeout:
                due = float("inf") if admitted_at is None else admitted_at + opts.timeout
                self.waiting[key] = (due, res, job_key, stamps)
                continue
            await self._timeout(key, wl_obj, now)

    async def _timeout(self, key: str, wl_obj: kobj.Obj, now: float) -> None:
        ctx = self.ctx
        opts = ctx.options.pods_ready
        count = kobj.requeue_count(wl_obj) + 1
        message = f"Exceeded the PodsReady timeout {key}"
        if opts.backoff_limit is not None and count > opts.backoff_limit:
            log.info("%s: PodsReady timeout past the requeue limit; deactivating", key)
            await evict(
                ctx,
                key,
                reason="Deactivated",
                message=f"{message}; deactivated: the requeuing limit was exceeded",
                deactivate=True,
            )
            return
        requeue_state = {
            "count": count,
            "requeueAt": kobj.rfc3339(now + opts.backoff.requeue_delay(count)),
        }
        log.info("%s: PodsReady timeout; requeue #%d", key, count)
        await evict(
            ctx, key, reason="PodsReadyTimeout", message=message, requeue_state=requeue_state
        )
