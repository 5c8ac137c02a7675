"""Job ⇄ Workload reconciliation (Kueue's jobframework reconciler, docs/semantics.md §4.1).

Level-based: each call looks at the current Job and its Workload and does the one next
step that brings them in line, so a restart, a lost write or a duplicate event at any
point is harmless:

* a managed Job without a Workload gets one (owner reference, podSets, queue,
  priority); it is kept suspended and its pending Workload kept in sync with it;
* an admitted Workload starts its Job (``suspend=false``, the flavors' nodeSelector
  and tolerations, the podset label) — only ever after the admission was written;
* an evicted (or deactivated) Workload stops its Job (suspend, pod template restored
  from the Workload's copy) and, once the Job has no active pods, its admission is
  cleared and the quota released exactly once (``Cache.evicted``);
* a finished Job finishes its Workload (``Finished``) and releases the quota at once;
* a Workload whose Job is gone is deleted.
"""

from __future__ import annotations

import logging

from admission.integrations.job import JobError, workload_from_job, workload_name
from queues.model import Workload

from . import objects as o
from .client import WORKLOADS, ApiError
from .context import Context, Obj

log = logging.getLogger("quartermaster.kube.jobs")


class JobReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._bad: dict[str, str] = {}  # job key -> last composition error (logged once)
        # job key -> (job uid, job generation, workload uid, workload generation) last found
        # equivalent: Job status events (pods starting, ready) do not re-compose it
        self._equivalent: dict[str, tuple[str, int, str, int]] = {}

    # -- helpers ----------------------------------------------------------------------------

    def managed(self, job: Obj) -> bool:
        opts = self.ctx.options
        ns = o.meta(job).get("namespace") or "default"
        if ns in opts.excluded_namespaces:
            return False
        if opts.managed_namespaces is not None:
            labels = self.ctx.sync.namespaces.get(ns)
            have = {"kubernetes.io/metadata.name": ns, **(labels.labels if labels else {})}
            if not opts.managed_namespaces.matches(have):
                return False
        if o.job_queue_name(job):
            return True
        return opts.manage_jobs_without_queue_name

    def workload_key(self, job: Obj) -> str:
        m = o.meta(job)
        name = workload_name(owner_name=str(m.get("name")), owner_uid=str(m.get("uid") or ""))
        return f"{m.get('namespace') or 'default'}/{name}"

    def _compose(self, key: str, job: Obj) -> Workload | None:
        sync = self.ctx.sync
        try:
            wl = workload_from_job(
                job,
                workload_priority_classes=sync.workload_priority_classes,
                priority_classes=sync.priority_classes,
            )
        except JobError as err:
            if self._bad.get(key) != str(err):
                self._bad[key] = str(err)
                log.warning("cannot build a Workload for job %s: %s", key, err)
                self.ctx.record_event(job, "Warning", "ErrWorkloadCompose", str(err))
            return None
        self._bad.pop(key, None)
        return wl

    # -- the reconcile ------------------------------------------------------------------------

    async def reconcile_job(self, key: str) -> None:
        ctx = self.ctx
        job = ctx.writer.job(key)
        if job is None or not self.managed(job):
            self._equivalent.pop(key, None)
            return
        wkey = self.workload_key(job)
        ctx.job_index.setdefault(key, set()).add(wkey)
        wl = ctx.writer.workload(wkey)
        finished = o.job_finished(job)
        if finished is not None:
            await self._finish(wkey, wl, succeeded=finished[0], message=finished[1])
            return
        if wl is None or o.deleting(wl):
            if not o.job_suspended(job):
                await self._stop(key, job, original=None)
            if wl is None:
                await self._create(key, job, wkey)
            return
        first = ((wl.get("spec") or {}).get("podSets") or [{}])[0]
        original = first.get("template")
        # partial admission lowered the Job's parallelism: restored from the podSet count
        restore_par = first.get("count") if first.get("minCount") is not None else None
        if (
            o.has_quota(wl)
            and not o.is_true(wl, o.EVICTED)
            and o.is_active(wl)
            and wkey not in ctx.sync.inflight
            and await self._evict_if_changed(key, job, wkey, wl)
        ):
            return
        running = (
            o.has_quota(wl)
            and o.is_true(wl, o.ADMITTED)
            and not o.is_true(wl, o.EVICTED)
            and o.is_active(wl)
        )
        if running:
            if o.job_suspended(job):
                await self._start(key, job, wl)
            return
        if not o.job_suspended(job) or (
            o.job_needs_restore(job, original, parallelism=restore_par) and o.job_active(job) == 0
        ):
            job = await self._stop(key, job, original=original, parallelism=restore_par) or job
        if o.has_quota(wl) and wkey not in ctx.sync.inflight:
            if (o.is_true(wl, o.EVICTED) or not o.is_active(wl)) and o.job_active(job) == 0:
                await finish_eviction(ctx, wkey)
            return
        if wkey not in ctx.sync.inflight:
            await self._sync_spec(key, job, wkey, wl)

    async def _evict_if_changed(self, key: str, job: Obj, wkey: str, wl: Obj) -> bool:
        """A Job edited after admission (``spec.parallelism`` 1 -> 64, other requests)
        must not run on the admission of its old shape: that is a quota escape. Like
        Kueue's reconciler (``EquivalentToWorkload``), stop it: the Workload is evicted,
        the Job suspended and restored, and once stopped the pending Workload takes the
        Job's new shape and queues again."""
        sig = (
            str(o.meta(job).get("uid")),
            o.generation(job),
            str(o.meta(wl).get("uid")),
            o.generation(wl),
        )
        if self._equivalent.get(key) == sig:
            return False
        model = self._compose(key, job)
        if model is None:
            return False
        why = o.job_mismatch(wl, o.workload_for_job(job, model), started=not o.job_suspended(job))
        if why is None:
            self._equivalent[key] = sig
            return False
        self._equivalent.pop(key, None)
        message = f"The job no longer matches its admitted Workload: {why}"
        log.info("job %s: %s", key, message)
        self.ctx.record_event(job, "Normal", "NoMatchingWorkload", message)
        await evict(self.ctx, wkey, reason="NoMatchingWorkload", message=message)
        return True

    async def _create(self, key: str, job: Obj, wkey: str) -> None:
        ctx = self.ctx
        model = self._compose(key, job)
        if model is None:
            return
        body = o.workload_for_job(job, model)
        ns, _ = o.split_key(wkey)
        try:
            created = await ctx.client.create(WORKLOADS, body, namespace=ns)
        except ApiError as err:
            if err.conflict:  # already exists: the informer will deliver it
                return
            ctx.metrics.api_writes.labels("create-workload", "error").inc()
            log.warning("creating Workload %s for job %s failed: %s", wkey, key, err)
            if err.retryable:
                raise
            ctx.record_event(job, "Warning", "ErrWorkloadCompose", err.message)
            return
        ctx.metrics.api_writes.labels("create-workload", "ok").inc()
        created.setdefault("apiVersion", WORKLOADS.api_version)
        created.setdefault("kind", WORKLOADS.kind)
        ctx.writer.remember(WORKLOADS, wkey, created)
        ctx.sync.workload(wkey, created)
        ctx.record_event(job, "Normal", "CreatedWorkload", f"Created Workload: {wkey}")

    async def _sync_spec(self, key: str, job: Obj, wkey: str, wl: Obj) -> None:
        """Keep a pending Workload's spec (count, queue, priority, template) like its Job's."""
        model = self._compose(key, job)
        if model is None:
            return
        drift = o.workload_spec_drift(wl, o.workload_for_job(job, model))
        if drift is None:
            return
        ns, name = o.split_key(wkey)
        drift["metadata"] = {"resourceVersion": o.rv(wl)}
        try:
            new = await self.ctx.client.patch(WORKLOADS, name, drift, namespace=ns)
        except ApiError as err:
            if err.conflict or err.not_found:
                return  # a newer version is on its way: reconciled again then
            raise
        self.ctx.writer.remember(WORKLOADS, wkey, new)
        self.ctx.sync.workload(wkey, new)

    async def _start(self, key: str, job: Obj, wl: Obj) -> None:
        ctx = self.ctx
        names = o.flavors_of(o.admission_of(wl))
        flavors = [ctx.sync.flavors[n] for n in names if n in ctx.sync.flavors]
        if len(flavors) != len(names):
            log.warning("job %s: flavor(s) %s not found; not started yet", key, names)
            return
        patch = o.start_job_patch(job, flavors=flavors, parallelism=o.running_count(wl))
        new = await ctx.writer.patch_job(key, patch)
        if new is not None:
            ctx.metrics.api_writes.labels("start-job", "ok").inc()
            cq = (o.admission_of(wl) or {}).get("clusterQueue", "")
            ctx.record_event(job, "Normal", "Started", f"Admitted by clusterQueue {cq}")

    async def _stop(
        self, key: str, job: Obj, *, original: Obj | None, parallelism: int | None = None
    ) -> Obj | None:
        """Stop a Job the way the API server allows (Kueue's batch/Job ``Stop``).

        A Job's pod template may change only while the *stored* Job is suspended and has
        no ``status.startTime``, and the Job controller keeps ``startTime`` on suspend;
        one patch "suspend + restore the template" is refused (422) for any Job that has
        started. So: suspend; clear ``startTime`` through ``jobs/status``; then restore
        the template — once the Job controller reports no active pods, since from
        Kubernetes 1.36 (``MutableSchedulingDirectivesForSuspendedJobs``) the template
        of a suspended Job is mutable only with ``status.active == 0``; the Job's next
        status event brings us back here. Each step is skipped when already done, so a
        retry after a failed step resumes where it stopped. Returns the Job as last
        written (None when gone).
        """
        ctx = self.ctx
        new: Obj | None = job
        stopped_now = False
        if not o.job_suspended(job):
            new = await ctx.writer.patch_job(key, {"spec": {"suspend": True}})
            if new is None:
                return None
            stopped_now = True
        if o.job_start_time(new):
            new = await ctx.writer.patch_job(
                key, {"status": {"startTime": None}}, subresource="status"
            )
            if new is None:
                return None
        assert new is not None  # each step above returned when the Job was gone
        if (
            original is not None
            and o.job_active(new) == 0
            and o.job_needs_restore(new, original, parallelism=parallelism)
        ):
            new = await ctx.writer.patch_job(
                key, o.restore_job_patch(new, original, parallelism=parallelism)
            )
            if new is None:
                return None
        if stopped_now:
            ctx.metrics.api_writes.labels("stop-job", "ok").inc()
            ctx.record_event(job, "Normal", "Stopped", "Not admitted by cluster queue")
        return new

    async def _finish(self, wkey: str, wl: Obj | None, *, succeeded: bool, message: str) -> None:
        """Finished=True, then the quota is released at once (not when the informer
        delivers it): the API never shows the quota free while the Workload holds it."""
        ctx = self.ctx
        if wl is None or o.is_finished(wl) or wkey in ctx.sync.inflight:
            return
        now = ctx.clock()
        new = await ctx.writer.update_status(
            wkey,
            lambda w: (
                None
                if o.is_finished(w)
                else o.finished_status(w, succeeded=succeeded, now=now, message=message)
            ),
        )
        if new is None or not o.is_finished(new):
            return
        ctx.sync.workload(wkey, new)
        cq = (o.admission_of(new) or {}).get("clusterQueue")
        if cq:
            ctx.metrics.finished_total.labels(cq).inc()
        ctx.record_event(new, "Normal", "FinishedWorkload", "Workload finished")
        ctx.wake()

    finish = _finish  # the pod-group path finishes Workloads the same way (.podgroups)

    # -- workloads without (or without a live) job ----------------------------------------------

    async def reconcile_workload(self, wkey: str) -> None:
        ctx = self.ctx
        wl = ctx.writer.workload(wkey)
        if wl is None or o.deleting(wl) or o.is_finished(wl):
            return
        jobs = ctx.informers["jobs"]
        owner = o.owner_job(wl)
        uid = owner[1] if owner else o.job_uid_label(wl)
        job_key: str | None = owner[0] if owner else None
        if uid and not jobs.synced.is_set():
            return  # cannot tell an orphan from a job not listed yet
        if uid:
            job = ctx.writer.job(job_key) if job_key else None
            if job is None and job_key is None:
                job = next((j for j in jobs.store.values() if o.meta(j).get("uid") == uid), None)
                job_key = o.ns_key(job) if job is not None else None
            if job is None or o.meta(job).get("uid") != uid:
                await self._delete_orphan(wkey, wl)
                return
        if not o.has_quota(wl) or wkey in ctx.sync.inflight:
            return
        if not o.is_active(wl) and not o.is_true(wl, o.EVICTED):
            await evict(ctx, wkey, reason="Deactivated", message="The workload is deactivated")
            return
        if job_key is not None:
            ctx.enqueue("job", job_key)
            return
        if o.is_true(wl, o.EVICTED) or not o.is_active(wl):
            await finish_eviction(ctx, wkey)

    async def _delete_orphan(self, wkey: str, wl: Obj) -> None:
        ns, name = o.split_key(wkey)
        try:
            await self.ctx.client.delete(
                WORKLOADS, name, namespace=ns, uid=str(o.meta(wl).get("uid") or "") or None
            )
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise
        log.info("deleted Workload %s: its job is gone", wkey)
        self.ctx.sync.workload(wkey, None)


async def evict(
    ctx: Context,
    wkey: str,
    *,
    reason: str,
    message: str,
    preempted_reason: str | None = None,
    requeue_state: Obj | None = None,
    deactivate: bool = False,
) -> bool:
    """Write Evicted=True (the admission stays until the job is inactive)."""
    now = ctx.clock()

    def compute(w: Obj) -> Obj | None:
        if not o.has_quota(w) or o.is_true(w, o.EVICTED):
            return None
        status = o.evicted_status(
            w, reason=reason, message=message, now=now, preempted_reason=preempted_reason
        )
        if requeue_state is not None:
            status["requeueState"] = requeue_state
        return status

    try:
        new = await ctx.writer.update_status(wkey, compute)
    except ApiError as err:
        log.warning("evicting %s failed: %s", wkey, err)
        ctx.metrics.api_writes.labels("evict", "error").inc()
        ctx.sync.apply(lambda: ctx.cache.unmark_evicting(wkey))  # a later cycle may retry
        return False
    if new is None or not o.is_true(new, o.EVICTED):
        ctx.sync.apply(lambda: ctx.cache.unmark_evicting(wkey))
        return False
    ctx.sync.apply(lambda: ctx.cache.mark_evicting(wkey))
    adm = o.admission_of(new) or {}
    ctx.metrics.evicted_total.labels(adm.get("clusterQueue", ""), reason).inc()
    ctx.metrics.api_writes.labels("evict", "ok").inc()
    ctx.record_event(new, "Normal", f"EvictedDueTo{reason}", message)
    if deactivate:
        ns, name = o.split_key(wkey)
        try:
            new = await ctx.client.patch(WORKLOADS, name, {"spec": {"active": False}}, namespace=ns)
            ctx.writer.remember(WORKLOADS, wkey, new)
        except ApiError as err:
            log.warning("deactivating %s failed: %s", wkey, err)
    owner = o.owner_job(new)
    ctx.enqueue("job", owner[0]) if owner else ctx.enqueue("wl", wkey)
    return True


async def finish_eviction(ctx: Context, wkey: str) -> None:
    """The evicted workload's job is inactive: clear the admission, release the quota."""
    now = ctx.clock()
    try:
        new = await ctx.writer.update_status(
            wkey, lambda w: o.cleared_status(w, now=now) if o.has_quota(w) else None
        )
    except ApiError as err:
        log.warning("clearing the admission of %s failed: %s", wkey, err)
        raise
    if new is None or o.has_quota(new):
        return

    def release() -> None:
        ctx.cache.evicted(wkey)
        ctx.sync.workload(wkey, new)

    ctx.sync.apply(release)
    ctx.metrics.api_writes.labels("clear-admission", "ok").inc()
    ctx.wake()
