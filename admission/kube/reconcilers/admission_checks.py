"""A Workload that reserved quota, through its AdmissionChecks to admission (or back).

Kueue's workload controller for checks (``reconcileSyncAdmissionChecks``,
``SyncAdmittedCondition``, ``reconcileCheckBasedEviction``); the decisions are the
engine's (:mod:`admission.engine.admission_checks`), this module writes them:

* the Workload's ``status.admissionChecks`` lists exactly the checks its reservation
  needs (a ``Pending`` entry added for a new one, a stale one dropped);
* every check ``Ready``: ``Admitted=True`` (event ``Admitted``, metric
  ``kueue_admission_checks_wait_time_seconds``), then its job starts; a check's
  controller of the service's own (MultiKueue) writes that ``Admitted=True`` with the
  last check's ``Ready`` (:func:`admitting_conditions`) and then calls :func:`admitted`,
  so this reconciler finds it admitted and writes nothing;
* a check ``Retry``: evicted with reason ``AdmissionCheck`` (the eviction resets the
  checks to ``Pending``), ``status.requeueState.requeueAt`` set to the retry time the
  checks asked for, the quota released once its job is stopped;
* a check ``Rejected``: ``DeactivationTarget=True`` (reason ``AdmissionCheck``, event
  ``AdmissionCheckRejected``), then ``spec.active=false``; the job reconciler evicts the
  deactivated workload with reason ``DeactivatedDueToAdmissionCheck``.

What an admission-check controller writes, and how, is in the engine module's
docstring.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from admission.engine.admission_checks import Action, checks_for, sync_states, verdict
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import WORKLOADS
from admission.kube.control import work
from admission.kube.control.context import Context, Obj
from admission.kube.control.workloads import enqueue_owner, evict
from admission.kube.control.writer import Abandon
from queues.api.conditions import condition, conditions, is_true
from queues.times import rfc3339_seconds

log = logging.getLogger("quartermaster.kube.checks")

CHECK_EVICTION_REASON = "AdmissionCheck"


class CheckReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def concerns(self, wl: Obj | None) -> bool:
        """Whether the Workload holds quota and has, or needs, admission checks, or is
        not admitted yet (the controller enqueues only those)."""
        if wl is None or not kobj.has_quota(wl) or kobj.is_finished(wl):
            return False
        if (
            (wl.get("status") or {}).get("admissionChecks")
            or is_true(wl, kobj.DEACTIVATION_TARGET)
            or not is_true(wl, kobj.ADMITTED)
        ):
            return True
        cq = self.ctx.sync.cluster_queues.get(
            str((kobj.admission_of(wl) or {}).get("clusterQueue"))
        )
        return cq is not None and bool(cq.admission_checks)

    async def reconcile(self, key: str) -> None:
        ctx = self.ctx
        wl = ctx.writer.workload(key)
        if wl is None or not _may_act(ctx, key, wl):
            return
        if not kobj.is_active(wl):
            return  # the job reconciler evicts a deactivated workload
        if is_true(wl, kobj.DEACTIVATION_TARGET):
            await self._deactivate(key)
            return
        required = _required(ctx, key, wl)
        if required is None:
            return  # its ClusterQueue is gone: its checks cannot be known
        now = ctx.clock()
        states, changed = sync_states(kobj.check_states(wl), required, now)
        if changed:
            await self._write(key, lambda w: self._synced(w, required, now))
            return
        v = verdict(states, required, admitted=is_true(wl, kobj.ADMITTED))
        if v.action == Action.ADMIT:
            await self._admit(key, wl)
        elif v.action == Action.RETRY:
            await self._retry(key, wl, v.message, v.requeue_at)
        elif v.action == Action.REJECT:
            await self._reject(key, v.message)

    # -- writes ---------------------------------------------------------------------------

    async def _write(self, key: str, compute: Callable[[Obj], Obj | None]) -> Obj | None:
        try:
            return await self.ctx.writer.update_status(key, compute)
        except Abandon:
            return None

    def _synced(self, w: Obj, required: tuple[str, ...], now: float) -> Obj | None:
        if not kobj.has_quota(w) or kobj.is_finished(w) or is_true(w, kobj.EVICTED):
            return None
        states, changed = sync_states(kobj.check_states(w), required, now)
        if not changed:
            return None
        return {"admissionChecks": kobj.check_states_json(states, w) or None}

    async def _admit(self, key: str, wl: Obj) -> None:
        ctx = self.ctx
        now = ctx.clock()

        def compute(w: Obj) -> Obj | None:
            if not kobj.has_quota(w) or is_true(w, kobj.ADMITTED) or is_true(w, kobj.EVICTED):
                return None
            if kobj.check_states(w) != kobj.check_states(wl):
                raise Abandon  # a check moved since: decide again on its event
            conds = kobj.admitted_condition(
                conditions(w), admitted=True, now=now, gen=kobj.generation(w)
            )
            return {"conditions": conds}

        new = await self._write(key, compute)
        if new is None or not is_true(new, kobj.ADMITTED):
            return
        admitted(ctx, key, new, now)

    async def _retry(self, key: str, wl: Obj, message: str, requeue_at: float | None) -> None:
        ctx = self.ctx
        state: Obj | None = None
        if requeue_at is not None and requeue_at > ctx.clock():
            prev = (wl.get("status") or {}).get("requeueState") or {}
            current = kobj.requeue_at(wl)
            at = requeue_at if current is None else max(current, requeue_at)
            state = {**(prev if isinstance(prev, dict) else {}), "requeueAt": kobj.rfc3339(at)}
        log.info("%s: %s", key, message)
        await evict(ctx, key, reason=CHECK_EVICTION_REASON, message=message, requeue_state=state)

    async def _reject(self, key: str, message: str) -> None:
        ctx = self.ctx
        now = ctx.clock()

        def compute(w: Obj) -> Obj | None:
            if not kobj.has_quota(w) or is_true(w, kobj.DEACTIVATION_TARGET):
                return None
            conds = kobj.set_condition(
                conditions(w),
                type_=kobj.DEACTIVATION_TARGET,
                status=True,
                reason=CHECK_EVICTION_REASON,
                message=message,
                now=now,
                observed_generation=kobj.generation(w),
            )
            return {"conditions": conds}

        new = await self._write(key, compute)
        if new is None or not is_true(new, kobj.DEACTIVATION_TARGET):
            return
        log.info("%s: deactivated: %s", key, message)
        ctx.record_event(new, "Warning", "AdmissionCheckRejected", f"Deactivated due to {message}")
        await self._deactivate(key)

    async def _deactivate(self, key: str) -> None:
        """``spec.active=false`` for a workload with ``DeactivationTarget=True``."""
        ctx = self.ctx
        ns, name = kobj.split_key(key)
        try:
            new = await ctx.client.patch(WORKLOADS, name, {"spec": {"active": False}}, namespace=ns)
        except ApiError as err:
            if err.not_found:
                return
            raise
        new.setdefault("apiVersion", WORKLOADS.api_version)
        new.setdefault("kind", WORKLOADS.kind)
        ctx.writer.remember(WORKLOADS, key, new)
        ctx.enqueue(work.Workload(key))  # the job reconciler evicts it


def _may_act(ctx: Context, key: str, wl: Obj) -> bool:
    """Whether the checks of Workload ``key`` are this reconciler's to act on now: its
    quota held, not finished, deleted or evicted, and not being written by the scheduler."""
    return (
        kobj.has_quota(wl)
        and not kobj.is_finished(wl)
        and not kobj.deleting(wl)
        and key not in ctx.sync.inflight
        and not is_true(wl, kobj.EVICTED)
    )


def _required(ctx: Context, key: str, wl: Obj) -> tuple[str, ...] | None:
    """The checks Workload ``key``'s reservation needs (None: its ClusterQueue or its
    admission is not known)."""
    model = ctx.cache.workloads.get(key)
    cq = ctx.sync.cluster_queues.get(str((kobj.admission_of(wl) or {}).get("clusterQueue")))
    if cq is None or model is None or model.admission is None:
        return None
    return checks_for(cq, model.admission)


# -- admission written with the last check's Ready -----------------------------------------


def admitting_conditions(
    ctx: Context, key: str, wl: Obj, checks: list[Obj], now: float
) -> list[Obj] | None:
    """The conditions to write with ``checks`` (the Workload's ``status.admissionChecks``
    as a check's controller is about to write it) when they admit it: ``Admitted=True``
    as :class:`CheckReconciler` would write it once it saw them, so a controller that
    writes the last check's ``Ready`` saves the Workload that write (None: they do
    not admit it, or the reconciler would not act on it now). After the write, call
    :func:`admitted` once."""
    if (
        not _may_act(ctx, key, wl)
        or not kobj.is_active(wl)
        or is_true(wl, kobj.DEACTIVATION_TARGET)
        or is_true(wl, kobj.ADMITTED)
    ):
        return None
    required = _required(ctx, key, wl)
    if required is None:
        return None
    states, changed = sync_states(kobj.check_states({"status": {"admissionChecks": checks}}),
                                  required, now)  # fmt: skip
    if changed or verdict(states, required).action != Action.ADMIT:
        return None
    return kobj.admitted_condition(conditions(wl), admitted=True, now=now,
                                   gen=kobj.generation(wl))  # fmt: skip


def admitted(ctx: Context, key: str, new: Obj, now: float) -> None:
    """What follows the write that admitted Workload ``key`` through its checks (by
    :class:`CheckReconciler`, or by a check's controller with :func:`admitting_conditions`),
    once: the admission metrics, the cache's view, the ``Admitted`` event, and its job
    queued to start."""
    cq = str((kobj.admission_of(new) or {}).get("clusterQueue", ""))
    reserved = rfc3339_seconds(
        (condition(new, kobj.QUOTA_RESERVED) or {}).get("lastTransitionTime")
    )
    waited = max(0.0, now - reserved) if reserved is not None else 0.0
    ctx.metrics.admitted_total.labels(cq).inc()
    ctx.metrics.admission_checks_wait.labels(cq).observe(waited)
    model = ctx.cache.workloads.get(key)
    if model is not None:
        model.admitted = True
        ctx.metrics.admission_wait.labels(cq).observe(max(0.0, now - model.queue_order_time))
    ctx.sync.workload(key, new)
    log.info("admitted %s in ClusterQueue %s: its admission checks are ready", key, cq)
    ctx.record_event(
        new,
        "Normal",
        "Admitted",
        f"Admitted by ClusterQueue {cq}, wait time since reservation was {waited:.0f}s",
    )
    enqueue_owner(ctx, key, new)  # start its job
