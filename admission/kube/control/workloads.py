"""Writes to a Workload that every reconciler shares: create and delete it for its job,
find the job object that owns it, evict it and release its quota once its job stopped.

Each write goes through ``Context.writer`` (read-your-writes) and tells the engine's
cache what it changed (``ctx.sync``), so the next scheduling cycle sees it at once.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from admission.integrations.framework.composition import (
    JOB_UID_LABEL,
    OWNER_GVK_ANNOTATION,
)
from admission.integrations.framework.interface import Integration
from admission.integrations.framework.podset_info import PodSetInfo
from admission.integrations.kinds.pod import is_group_workload
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import WORKLOADS
from admission.kube.control import work
from admission.kube.control.context import Context, Obj
from queues.api.conditions import is_true

if TYPE_CHECKING:
    from admission.engine.decisions import PreemptedDecision

log = logging.getLogger("quartermaster.kube.jobs")


class PreemptionNotices(Protocol):
    """Progress-aware preemption as the admission writer hands victims to it
    (``reconcilers.notices.Notices``)."""

    async def notify(self, d: PreemptedDecision) -> bool:
        """Notice the victim ``d`` (it is evicted later, at its deadline or checkpoint)."""
        ...

    async def evict(self, key: str, *, message: str, reason: str) -> bool:
        """Evict ``key`` now, with the requeue policy after preemption."""
        ...


class DeadlineNotices(Protocol):
    """Progress-aware preemption as node failures use it (``reconcilers.notices.Notices``):
    the engine's side (``aware``: its notice windows) and the deadline annotations."""

    aware: Any

    async def announce_deadline(self, wl: Obj, deadline: str | None) -> None:
        """The eviction deadline on the Workload, its job and pods (None removes it)."""
        ...


class ComposeErrors:
    """Objects whose Workload cannot be built: each error logged and recorded once."""

    def __init__(self, ctx: Context, lower_kind: str) -> None:
        self.ctx = ctx
        self.lower_kind = lower_kind
        self._last: dict[str, str] = {}

    def report(
        self, key: str, obj: Obj, err: Exception, *, reason: str = "ErrWorkloadCompose"
    ) -> None:
        if self._last.get(key) != str(err):
            self._last[key] = str(err)
            log.warning("cannot build a Workload for %s %s: %s", self.lower_kind, key, err)
            self.ctx.record_event(obj, "Warning", reason, str(err))

    def clear(self, key: str) -> None:
        self._last.pop(key, None)


async def create_workload(
    ctx: Context, wkey: str, body: Obj, *, owner: Obj, errors: ComposeErrors
) -> None:
    """Create the Workload ``body`` for ``owner``; a conflict means it exists already
    (the informer delivers it), a refusal is recorded on the owner."""
    ns, _ = kobj.split_key(wkey)
    try:
        created = await ctx.client.create(WORKLOADS, body, namespace=ns)
    except ApiError as err:
        if err.conflict:
            return
        ctx.metrics.api_writes.labels("create-workload", "error").inc()
        log.warning("creating Workload %s for %s %s failed: %s", wkey, errors.lower_kind,
                    kobj.ns_key(owner), err)  # fmt: skip
        if err.retryable:
            raise
        ctx.record_event(owner, "Warning", "ErrWorkloadCompose", err.message)
        return
    ctx.metrics.api_writes.labels("create-workload", "ok").inc()
    created.setdefault("apiVersion", WORKLOADS.api_version)
    created.setdefault("kind", WORKLOADS.kind)
    ctx.writer.remember(WORKLOADS, wkey, created)
    ctx.sync.workload(wkey, created)
    ctx.record_event(owner, "Normal", "CreatedWorkload", f"Created Workload: {wkey}")


async def delete_workload(ctx: Context, wkey: str, wl: Obj, *, why: str) -> None:
    """Delete a Workload whose job is gone (uid-pinned: never a newer namesake)."""
    ns, name = kobj.split_key(wkey)
    try:
        await ctx.client.delete(
            WORKLOADS, name, namespace=ns, uid=str(kobj.meta(wl).get("uid") or "") or None
        )
    except ApiError as err:
        if not (err.not_found or err.conflict):
            raise
    log.info("deleted Workload %s: %s", wkey, why)
    ctx.sync.workload(wkey, None)


def owner_of(ctx: Context, wl: Mapping[str, Any] | None) -> tuple[Integration, str, str] | None:
    """(integration, object key, uid) of the Workload's controlling job object, if it
    is of an enabled integration; else, from the ``job-uid`` label and the owner-kind
    annotation, (integration, "", uid) for a Workload whose owner reference is gone."""
    frameworks = ctx.options.frameworks
    meta = kobj.meta(wl)
    ns = meta.get("namespace") or "default"
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, dict) or not ref.get("controller"):
            continue
        integ = _integration_of(frameworks, str(ref.get("apiVersion") or ""), ref.get("kind"))
        if integ is not None:
            return integ, sys.intern(f"{ns}/{ref.get('name')}"), str(ref.get("uid") or "")
    uid = str((meta.get("labels") or {}).get(JOB_UID_LABEL) or "")
    if uid:
        gvk = str((meta.get("annotations") or {}).get(OWNER_GVK_ANNOTATION) or "batch/v1, Kind=Job")
        api_version, _, kind = gvk.partition(", Kind=")
        integ = _integration_of(frameworks, api_version, kind or "Job")
        if integ is not None:
            return integ, "", uid
    return None


def _integration_of(frameworks: Any, api_version: str, kind: Any) -> Integration | None:
    """The enabled object integration of ``kind`` in ``api_version``'s group (any version)."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    for integ in frameworks.integrations():
        if integ.reconciler == "object" and integ.kind == kind and integ.resource.group == group:
            return integ
    return None


def enqueue_owner(ctx: Context, wkey: str, wl: Mapping[str, Any] | None) -> None:
    """Queue what starts or stops the job of Workload ``wkey``: its job object or its
    pod group (a standalone Workload has nothing to start)."""
    owner = owner_of(ctx, wl)
    if owner is not None and owner[1]:
        ctx.enqueue(work.Job(owner[0].lower_kind, owner[1]))
    elif is_group_workload(wl):
        ctx.enqueue(work.PodGroup(wkey))


def apply_pod_set_updates(info: PodSetInfo, wl: Mapping[str, Any]) -> str | None:
    """Add to ``info`` what the Workload's AdmissionChecks ask of its podSet
    (``status.admissionChecks[].podSetUpdates``: labels, annotations, nodeSelector,
    tolerations; Kueue's ``getPodSetsInfoFromStatus``). A key one sets that the podSet
    has with another value is an error (returned, ``info`` then partly merged): Kueue
    does not start such a job and finishes its Workload (``FailedToStart``)."""
    for check in ((wl.get("status") or {}).get("admissionChecks")) or []:
        if not isinstance(check, dict):
            continue
        for update in check.get("podSetUpdates") or []:
            if not isinstance(update, dict) or update.get("name") != info.name:
                continue
            conflict = kobj.pod_set_update_conflict(
                info.labels, info.annotations, info.node_selector, update
            )
            if conflict is not None:
                return f"in admission check {json.dumps(check.get('name'))}: {conflict}"
            info.annotations.update(update.get("annotations") or {})
            info.labels.update(update.get("labels") or {})
            info.node_selector.update(update.get("nodeSelector") or {})
            for t in update.get("tolerations") or []:
                if t not in info.tolerations:
                    info.tolerations.append(t)
            break
    return None


def runs_nothing(wl: Obj) -> bool:
    """A standalone Workload (no owner, no job-uid label or owner annotation, not a pod
    group): nothing runs on its admission that has to be stopped first, so an eviction
    can release its quota in the same write (one request instead of two)."""
    meta = kobj.meta(wl)
    return (
        not meta.get("ownerReferences")
        and not (meta.get("labels") or {}).get(JOB_UID_LABEL)
        and not (meta.get("annotations") or {}).get(OWNER_GVK_ANNOTATION)
        and not is_group_workload(wl)
    )


async def evict(
    ctx: Context,
    wkey: str,
    *,
    reason: str,
    message: str,
    preempted_reason: str | None = None,
    requeue_state: Obj | None = None,
    deactivate: bool = False,
    also: Callable[[Obj], Obj] | None = None,
) -> bool:
    """Write Evicted=True (the admission stays until the job is inactive; a standalone
    Workload's is cleared in the same write). Nothing is written for a Workload that
    finished or lost its quota meanwhile, and then nothing is released either: an
    ``Evicted=True`` on a copy without quota is an earlier eviction's (the workload was
    queued again since, and may be being admitted), not this one's."""
    now = ctx.clock()
    held: dict[str, str] = {}  # the ClusterQueue it held quota in (the write may clear it)

    def compute(w: Obj) -> Obj | None:
        held.clear()
        if not kobj.has_quota(w) or is_true(w, kobj.EVICTED) or kobj.is_finished(w):
            return None
        held["cq"] = str((kobj.admission_of(w) or {}).get("clusterQueue", ""))
        status = kobj.evicted_status(
            w, reason=reason, message=message, now=now, preempted_reason=preempted_reason
        )
        if (
            also is not None
        ):  # e.g. the end of a preemption notice (admission.kube.reconcilers.notices)
            status = also(status)
        if requeue_state is not None:
            status["requeueState"] = requeue_state
        if runs_nothing(w) and not deactivate:  # deactivation releases after spec.active lands
            evicted = {**w, "status": {**(w.get("status") or {}), **status}}
            cleared = kobj.cleared_status(evicted, now=now, requeue_state=requeue_state)
            if "admissionChecks" in status:  # reset to Pending by the eviction
                cleared["admissionChecks"] = status["admissionChecks"]
            for key in ("clusterName", "nominatedClusterNames"):  # reset by the eviction
                if key in status:
                    cleared[key] = None
            status = cleared
        return status

    try:
        new = await ctx.writer.update_status(wkey, compute)
    except ApiError as err:
        log.warning("evicting %s failed: %s", wkey, err)
        ctx.metrics.api_writes.labels("evict", "error").inc()
        ctx.sync.apply(lambda: ctx.cache.unmark_evicting(wkey))  # a later cycle may retry
        return False
    wrote = bool(held)  # compute returned a status, and it was written
    if new is None or not is_true(new, kobj.EVICTED) or not (wrote or kobj.has_quota(new)):
        ctx.sync.apply(lambda: ctx.cache.unmark_evicting(wkey))
        return False
    if kobj.has_quota(new):
        ctx.sync.apply(lambda: ctx.cache.mark_evicting(wkey))
    else:
        _released(ctx, wkey, new)
    why = f"{reason} ({preempted_reason})" if preempted_reason else reason
    log.info("evicted %s from ClusterQueue %s: %s: %s", wkey, held.get("cq", ""), why, message)
    ctx.metrics.evicted_total.labels(held.get("cq", ""), reason).inc()
    ctx.metrics.api_writes.labels("evict", "ok").inc()
    ctx.record_event(new, "Normal", f"EvictedDueTo{reason}", message)
    if deactivate:
        ns, name = kobj.split_key(wkey)
        try:
            new = await ctx.client.patch(WORKLOADS, name, {"spec": {"active": False}}, namespace=ns)
            ctx.writer.remember(WORKLOADS, wkey, new)
        except ApiError as err:
            log.warning("deactivating %s failed: %s", wkey, err)
    owner = owner_of(ctx, new)
    if owner is not None and owner[1]:
        ctx.enqueue(work.Job(owner[0].lower_kind, owner[1]))
    else:
        ctx.enqueue(work.Workload(wkey))
    return True


async def finish_workload(
    ctx: Context, wkey: str, wl: Obj | None, *, succeeded: bool, message: str, reason: str = ""
) -> None:
    """Finished=True (a job or a pod group ended), then the quota is released at once
    (not when the informer delivers it): the API never shows the quota free while the
    Workload holds it."""
    if wl is None or kobj.is_finished(wl) or wkey in ctx.sync.inflight:
        return
    now = ctx.clock()
    new = await ctx.writer.update_status(
        wkey,
        lambda w: (
            None
            if kobj.is_finished(w)
            else kobj.finished_status(
                w, succeeded=succeeded, now=now, message=message, reason=reason
            )
        ),
    )
    if new is None or not kobj.is_finished(new):
        return
    ctx.sync.workload(wkey, new)
    cq = (kobj.admission_of(new) or {}).get("clusterQueue")
    if cq:
        ctx.metrics.finished_total.labels(cq).inc()
    ctx.record_event(new, "Normal", "FinishedWorkload", "Workload finished")
    ctx.wake()


async def finish_eviction(ctx: Context, wkey: str) -> None:
    """The evicted workload's job is inactive: clear the admission, release the quota."""
    now = ctx.clock()
    try:
        new = await ctx.writer.update_status(
            wkey,
            lambda w: (
                kobj.cleared_status(w, now=now)
                if kobj.has_quota(w) and not kobj.is_finished(w)  # a finished one keeps it
                else None
            ),
        )
    except ApiError as err:
        log.warning("clearing the admission of %s failed: %s", wkey, err)
        raise
    if new is None or kobj.has_quota(new):
        return
    _released(ctx, wkey, new)
    ctx.metrics.api_writes.labels("clear-admission", "ok").inc()


def _released(ctx: Context, wkey: str, new: Obj) -> None:
    """The admission is cleared in the API: release the quota, requeue the workload."""

    def release() -> None:
        ctx.cache.evicted(wkey)
        ctx.sync.workload(wkey, new)

    ctx.sync.apply(release)
    ctx.wake()
