"""waitForPodsReady: evict gangs that do not become ready in time (docs/semantics.md §4.6).

An admitted job is *ready* when its integration says all its pods are
(``Integration.pods_ready``: for a Job, ``status.ready + status.succeeded`` reaches its
pod count). One that is not ready ``timeout`` after its admission is evicted with reason
``PodsReadyTimeout`` and requeued with exponential backoff: ``requeueState.count``
grows by one and ``requeueAt = now + min(base·2^(count−1), max)``; its queue-order
timestamp becomes the eviction time (``requeuingStrategy.timestamp: Eviction``). Past
``backoffLimitCount`` requeues it is deactivated (``spec.active=false``) instead.
Time comes from the controller's injectable clock.
"""

from __future__ import annotations

import logging

from admission.config.durations import parse_duration
from admission.config.schema import Config
from admission.kube import objects as kobj
from admission.kube.client.resources import resource_of
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

    async def check(self) -> None:
        """Evict every admitted job-backed workload past its PodsReady timeout."""
        ctx = self.ctx
        opts = ctx.options.pods_ready
        if not opts.enabled:
            return
        await ctx.cache_ready()
        now = ctx.clock()
        self.ready &= set(ctx.cache.admitted)
        for key in list(ctx.cache.admitted):
            if key in self.ready or key in ctx.cache.evicting or key in ctx.sync.inflight:
                continue
            wl_obj = ctx.writer.workload(key)
            model = ctx.cache.workloads.get(key)
            if wl_obj is None or model is None or not kobj.has_quota(wl_obj):
                continue
            owner = owner_of(ctx, wl_obj)
            if owner is None or not owner[1]:
                continue  # readiness is only known for job objects
            integ, job_key, _ = owner
            job = ctx.writer.current(resource_of(integ), job_key)
            if job is None:
                continue
            count = sum(ps.count for ps in model.pod_sets)
            ready = integ.pods_ready(job, count)
            if ready is None:
                continue  # the kind does not report readiness
            if ready:
                self.ready.add(key)
                continue
            admitted_at = model.admission_time
            if admitted_at is None or now - admitted_at < opts.timeout:
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
