"""Progress-aware preemption in ``serve``: checkpoints in, notices and evictions out.

Only with the Configuration's ``progressAwarePreemption`` (admission.engine.preemption.checkpoint);
without it nothing here writes anything and preemption is Kueue's.

* **Checkpoints in** (every replica, into ``Cache.progress``): the
  ``quartermaster.io/last-checkpoint`` annotation (RFC 3339) of a job object, of any pod
  it controls (the latest across the gang counts; read from the bound-pods informer) or
  of the Workload, and the Workload's ``quartermaster.io/Checkpointed`` condition
  (queues.api.progress). A value that does not parse is logged and recorded as an Event on
  the object, and ignored: it never drops the workload.
* **Notice out** (the leader): a victim given a notice window gets a
  ``quartermaster.io/PreemptionNotice`` condition (status True, the deadline and the
  preemptor in its message) and the ``quartermaster.io/eviction-deadline`` annotation
  on the Workload, its job object and the job's running pods — a container sees it
  through the Downward API (a ``downwardAPI`` volume item on
  ``metadata.annotations['quartermaster.io/eviction-deadline']``) and can save and
  exit. It keeps running and keeps its quota.
* **Eviction** (the leader's ticker): at the deadline, or as soon as the victim reports
  a checkpoint newer than the notice, it is evicted as Kueue evicts a preempted
  workload (``Evicted``/``Preempted``, the notice's message plus why now); the notice
  condition turns False and the deadline annotations are removed. A victim that
  finishes meanwhile just finishes.
* **Requeue after preemption**: every preemption-driven eviction applies the
  ``requeuingStrategy`` of the workload's LocalQueue or ClusterQueue:
  ``status.requeueState`` (count, requeueAt — ``CacheSync`` keeps the workload out of
  the queue until then), or, past ``backoffLimitCount``, deactivation with the reason
  in the ``Evicted`` message and a ``RequeuingLimitExceeded`` Event.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from admission.engine.preemption.checkpoint import LostWork
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import PODS, WORKLOADS, resource_of
from admission.kube.control.context import BOUND_PODS
from admission.kube.control.workloads import evict, owner_of
from queues.api.conditions import condition, conditions, is_true
from queues.api.progress import (
    CHECKPOINT_ANNOTATION,
    DEADLINE_ANNOTATION,
    NOTICE_CONDITION,
    NOTICE_REASON,
    ProgressError,
    annotation_checkpoint,
    format_time,
    workload_progress,
)

if TYPE_CHECKING:
    from admission.engine.decisions import PreemptedDecision
    from admission.engine.preemption.checkpoint import ProgressAware
    from admission.kube.control.context import Context, Obj

log = logging.getLogger("quartermaster.kube.notices")

_NOTICE_MESSAGE = re.compile(r"to accommodate \S+ \((\w+)\): (.*)$", re.S)
JOB_SOURCE = "job"
WORKLOAD_SOURCE = "workload"


@dataclass(frozen=True, slots=True)
class RequeueWrite:
    """How a preemption-driven eviction is written under the requeue policy."""

    requeue_state: Obj | None = None
    deactivate: bool = False
    suffix: str = ""


class Notices:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.aware: ProgressAware | None = None  # the leader's scheduler.progress
        self._bad: dict[str, str] = {}  # object -> the bad value already reported
        # bound pods seen after their job's notice was written: pod key -> the deadline
        # they still lack (written on the next tick, see check)
        self._late_pods: dict[str, str] = {}

    # -- checkpoints in ----------------------------------------------------------------------

    def _report(self, wkey: str, source: str, at: float | None) -> None:
        ctx = self.ctx

        def apply() -> None:
            if ctx.cache.progress.report(wkey, source, at):
                log.info("%s checkpointed after its preemption notice: evicting it now", wkey)

        ctx.sync.apply(apply)

    def _parse(self, lower_kind: str, key: str, obj: Obj, read: Any) -> Any:
        """``read(obj)``, or None (reported once per bad value) when it does not parse."""
        try:
            value = read(obj)
        except ProgressError as err:
            text = str(err)
            if self._bad.get(f"{lower_kind} {key}") != text:
                self._bad[f"{lower_kind} {key}"] = text
                log.warning("%s %s: ignoring its progress signal: %s", lower_kind, key, text)
                self.ctx.record_event(obj, "Warning", "InvalidCheckpoint", text)
            return None
        self._bad.pop(f"{lower_kind} {key}", None)
        return value

    def on_workload(self, key: str, obj: Obj | None) -> None:
        if obj is None:
            return
        progress = self._parse("Workload", key, obj, workload_progress)
        self._report(key, WORKLOAD_SOURCE, progress.checkpoint if progress else None)
        owner = owner_of(self.ctx, obj)
        if owner is not None and owner[1]:  # the job may have reported before its Workload
            job = self.ctx.writer.current(resource_of(owner[0]), owner[1])
            if job is not None:
                at = self._parse(
                    owner[0].lower_kind,
                    owner[1],
                    job,
                    lambda j: annotation_checkpoint(kobj.meta(j).get("annotations")),
                )
                self._report(key, JOB_SOURCE, at)

    def on_job(self, lower_kind: str, key: str, obj: Obj | None) -> None:
        if obj is None:
            return
        at = self._parse(
            lower_kind, key, obj, lambda j: annotation_checkpoint(kobj.meta(j).get("annotations"))
        )
        for wkey in self.ctx.job_index.get((lower_kind, key)):
            self._report(wkey, JOB_SOURCE, at)

    def on_pod(self, key: str, obj: Obj | None, old: Obj | None) -> None:
        """A bound pod's checkpoint annotation counts for its controlling job's Workload."""
        pod = obj if obj is not None else old
        if pod is None:
            return
        if obj is None:
            self._late_pods.pop(key, None)  # gone: nothing left to annotate
        owner = owner_of(self.ctx, pod)
        if owner is None or not owner[1]:
            return
        at = None
        if obj is not None:
            at = self._parse(
                "Pod", key, obj, lambda p: annotation_checkpoint(kobj.meta(p).get("annotations"))
            )
        for wkey in self.ctx.job_index.get((owner[0].lower_kind, owner[1])):
            self._report(wkey, f"pod/{key}", at)
            if obj is not None:
                self._note_late_pod(wkey, key, obj)

    def _note_late_pod(self, wkey: str, key: str, pod: Obj) -> None:
        """A pod of a noticed job that lacks the deadline (bound, or seen by the informer,
        after the notice was written) gets it too: the deadline is for every running pod."""
        wl = self.ctx.writer.workload(wkey)
        if wl is None or is_true(wl, kobj.EVICTED) or not is_true(wl, NOTICE_CONDITION):
            return
        deadline = (kobj.meta(wl).get("annotations") or {}).get(DEADLINE_ANNOTATION)
        if (
            deadline
            and (kobj.meta(pod).get("annotations") or {}).get(DEADLINE_ANNOTATION) != deadline
        ):
            self._late_pods[key] = deadline

    # -- notices out ---------------------------------------------------------------------

    async def notify(self, d: PreemptedDecision) -> bool:
        """Notice the victim: condition and deadline annotation on the Workload, the
        deadline on its job and the job's pods. False when nothing was written."""
        ctx = self.ctx
        key = d.workload.key
        assert d.notice_deadline is not None
        deadline = format_time(d.notice_deadline)
        now = ctx.clock()
        message = (
            f"To be evicted at {deadline}, or as soon as it reports a checkpoint newer "
            f"than this notice ({CHECKPOINT_ANNOTATION}), to accommodate {d.by} ({d.reason}): "
            f"{d.message}"
        )

        def compute(w: Obj) -> Obj | None:
            if not kobj.has_quota(w) or is_true(w, kobj.EVICTED) or kobj.is_finished(w):
                return None
            if is_true(w, NOTICE_CONDITION):
                return None  # never noticed twice
            conds = kobj.set_condition(
                conditions(w),
                type_=NOTICE_CONDITION,
                status=True,
                reason=NOTICE_REASON,
                message=message,
                now=now,
                observed_generation=kobj.generation(w),
            )
            return {"conditions": conds}

        try:
            await self._annotate(WORKLOADS, key, deadline)
            new = await ctx.writer.update_status(key, compute)
        except ApiError as err:
            log.warning("noticing %s failed: %s", key, err)
            ctx.sync.apply(lambda: self._undo(key))
            return False
        if new is None or not is_true(new, NOTICE_CONDITION):
            ctx.sync.apply(lambda: self._undo(key))
            return False
        ctx.record_event(new, "Normal", "PreemptionNotice", message)
        ctx.metrics.notices_total.labels(d.cluster_queue).inc()
        await self._annotate_job(new, deadline)
        return True

    async def announce_deadline(self, wl: Obj, deadline: str | None) -> None:
        """The eviction deadline annotation on the Workload, its job and the job's pods
        (None removes it): a notice that is not a preemption's (a node failure's)."""
        await self._annotate(WORKLOADS, kobj.ns_key(wl), deadline)
        await self._annotate_job(wl, deadline)

    def _undo(self, key: str) -> None:
        cache = self.ctx.cache
        cache.progress.released(key)
        cache.unmark_evicting(key)

    async def _annotate(self, res: Any, key: str, deadline: str | None) -> None:
        ns, name = kobj.split_key(key)
        body = {"metadata": {"annotations": {DEADLINE_ANNOTATION: deadline}}}
        try:
            new = await self.ctx.client.patch(res, name, body, namespace=ns)
        except ApiError as err:
            if err.not_found:
                return
            raise
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        self.ctx.writer.remember(res, key, new)

    async def _annotate_job(self, wl: Obj, deadline: str | None) -> None:
        """The deadline on the job object and on its bound pods (best effort: a pod that
        is gone or not yet bound has nothing to save)."""
        ctx = self.ctx
        owner = owner_of(ctx, wl)
        if owner is None or not owner[1]:
            return
        integ, job_key, uid = owner
        try:
            await self._annotate(resource_of(integ), job_key, deadline)
        except ApiError as err:
            log.warning(
                "annotating %s %s with its eviction deadline failed: %s",
                integ.lower_kind,
                job_key,
                err,
            )
        pods = ctx.informers.get(BOUND_PODS)
        ns = kobj.split_key(job_key)[0]
        for pkey, pod in list(pods.store.items()) if pods is not None else []:
            if kobj.meta(pod).get("namespace") != ns:
                continue
            if not any(
                isinstance(r, dict) and r.get("controller") and r.get("uid") == uid
                for r in kobj.meta(pod).get("ownerReferences") or []
            ):
                continue
            try:
                await self._annotate(PODS, pkey, deadline)
            except ApiError as err:
                log.warning("annotating pod %s with its eviction deadline failed: %s", pkey, err)

    # -- evictions at the deadline or on a checkpoint ------------------------------------

    async def check(self) -> None:
        """Give late pods their deadline, and evict every noticed victim that is due (the
        leader's ticker)."""
        if self.aware is None:
            return
        ctx = self.ctx
        late, self._late_pods = self._late_pods, {}
        for pkey, deadline in late.items():
            try:
                await self._annotate(PODS, pkey, deadline)
            except ApiError as err:
                log.warning("annotating pod %s with its eviction deadline failed: %s", pkey, err)
        await ctx.cache_ready()
        book = ctx.cache.progress
        for key in book.due(ctx.clock()):
            wl = ctx.writer.workload(key)
            notice = book.notices.get(key)
            if wl is None or notice is None or is_true(wl, kobj.EVICTED):
                continue  # gone, or its eviction is already written
            yielded = book.yielded(key)
            why = (
                "it reported a checkpoint newer than its notice"
                if yielded
                else f"its notice deadline {format_time(notice.deadline)} passed"
            )
            cq = ctx.cache.admitted.get(key, "")
            trigger = "checkpoint" if yielded else "deadline"
            reason, message = notice.reason, notice.message
            if not message:  # a notice read back after a restart: its condition says
                text = str((condition(wl, NOTICE_CONDITION) or {}).get("message") or "")
                m = _NOTICE_MESSAGE.search(text)
                reason, message = (m.group(1), m.group(2)) if m else ("", text)
            if await self.evict(key, message=f"{message}; evicted now: {why}", reason=reason):
                ctx.metrics.noticed_evictions_total.labels(cq, trigger).inc()

    async def evict(self, key: str, *, message: str, reason: str) -> bool:
        """A preemption-driven eviction, with the requeue policy after preemption."""
        ctx = self.ctx
        rq = self.requeue(key)
        now = ctx.clock()
        cq = ctx.cache.admitted.get(key, "")
        lost = 0.0
        if self.aware is not None and cq:
            lost = LostWork(ctx.cache, self.aware.policy, now).of(key)[0]

        def notice_over(status: Obj) -> Obj:
            conds = status.get("conditions") or []
            if any(c.get("type") == NOTICE_CONDITION and c.get("status") == "True" for c in conds):
                status["conditions"] = kobj.set_condition(
                    conds,
                    type_=NOTICE_CONDITION,
                    status=False,
                    reason="Evicted",
                    message="The notice ended with the eviction",
                    now=now,
                )
            return status

        ok = await evict(
            ctx,
            key,
            reason="Preempted",
            message=message + rq.suffix,
            preempted_reason=reason or None,
            requeue_state=rq.requeue_state,
            deactivate=rq.deactivate,
            also=notice_over,
        )
        if ok:
            ctx.metrics.lost_work_total.labels(cq).inc(lost)
            wl = ctx.writer.workload(key)
            if rq.deactivate and wl is not None:
                ctx.record_event(wl, "Warning", "RequeuingLimitExceeded", rq.suffix.lstrip("; "))
            if wl is not None and DEADLINE_ANNOTATION in (kobj.meta(wl).get("annotations") or {}):
                try:
                    await self._annotate(WORKLOADS, key, None)
                    await self._annotate_job(wl, None)
                except ApiError as err:
                    log.warning("removing the eviction deadline of %s failed: %s", key, err)
        return ok

    def requeue(self, key: str) -> RequeueWrite:
        """The requeue policy after preemption for this workload (none: Kueue's)."""
        aware = self.aware
        ctx = self.ctx
        wl = ctx.cache.workloads.get(key)
        if aware is None or wl is None:
            return RequeueWrite()
        policy = aware.policy.requeue_for(wl, ctx.cache.admitted.get(key))
        if policy is None:
            return RequeueWrite()
        decision = policy.after_preemption(
            kobj.requeue_count(ctx.writer.workload(key)), ctx.clock()
        )
        if decision.deactivate:
            return RequeueWrite(deactivate=True, suffix=f"; {decision.message}")
        assert decision.requeue_at is not None
        return RequeueWrite(
            requeue_state={
                "count": decision.requeue_count,
                "requeueAt": kobj.rfc3339(decision.requeue_at),
            },
            suffix=f"; {decision.message}",
        )
