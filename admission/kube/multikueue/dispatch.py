"""The admission-check controller ``kueue.x-k8s.io/multikueue``: one manager Workload
and its copies on the workers (Kueue's ``wlReconciler.reconcileGroup``).

The manager reserved quota for the Workload and gave it a ``Pending`` entry for the
check (the service's admission-check machinery). Then, in order:

1. no quota held any more, or finished: every remote copy (Workload and job) is
   removed;
2. a remote copy finished: the job's last status is copied to the manager's job and
   the manager's Workload finishes with the remote condition's reason and message;
3. a remote copy was evicted while the check was ``Ready``: the check goes ``Retry``
   ("Workload evicted on worker cluster: ...") and the service evicts and requeues;
4. a remote copy is admitted (the first to be admitted wins): every other copy is
   removed, the job is created on the winner (or its status copied back), and the
   check goes ``Ready`` ("The workload was admitted on "<worker>"") with
   ``status.clusterName`` set and ``nominatedClusterNames`` cleared; when that makes
   every check of the Workload Ready, the same write admits it (``Admitted=True``, as
   the service's admission-check machinery would write it next: Kueue's workload
   controller writes it apart), and the service counts and follows that admission
   once;
5. the check is ``Ready`` but no admitted copy is visible: if the worker is lost, wait
   ``workerLostTimeout`` from when it was lost, then ``Retry`` ("Admitting remote
   lost"); if it answers, ``Retry`` at once ("Admitting remote no longer exists");
6. otherwise the dispatcher nominates workers (:mod:`.dispatchers`) and a Workload copy
   is created on each nominated worker and removed from the others.

The manager's own job carries ``managedBy: kueue.x-k8s.io/multikueue`` (else the check
is ``Rejected``: "The owner is not managed by Kueue: ..."), so its controllers leave it
alone; the service starts it once the Workload is admitted, as any job. A pod group has
no ``managedBy``: its pods on the manager stay gated, and each is copied (:mod:`.pods`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import WORKLOADS
from admission.kube.client.rest import KubeClient, Obj
from admission.kube.multikueue.adapters import Adapter
from admission.kube.multikueue.pods import POD_GROUPS, PodGroupAdapter, adapter_of_kind, owner_name
from admission.kube.multikueue.pods import owner_kind as kind_of
from admission.kube.multikueue.remote import RemoteCluster
from queues.api.conditions import condition, is_true
from queues.api.labels import JOB_UID, MULTIKUEUE_ORIGIN, PREBUILT_WORKLOAD
from queues.times import rfc3339_seconds

log = logging.getLogger("quartermaster.kube.multikueue")

PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
EVENT_REASON = "MultiKueue"
MAX_MESSAGE = 32768


@dataclass(slots=True)
class Group:
    """The manager's Workload, its check's entry, and its copies on the workers."""

    key: str
    local: Obj
    check: str
    state: Obj
    workers: list[str]  # the check's MultiKueueConfig, in order
    remotes: dict[str, RemoteCluster]  # connected workers of ``workers``
    copies: dict[str, Obj] = field(default_factory=dict)  # worker -> its copy
    unavailable: list[str] = field(default_factory=list)
    lost: dict[str, float] = field(default_factory=dict)  # unavailable worker -> since
    whole: Obj | None = None  # the whole Workload, once a status write answered it
    # the manager's job of a kind not watched here (a StatefulSet, a LeaderWorkerSet), as
    # the reconcile read it from the API: read once, then used by the nomination and the
    # copy to the worker (None: a watched kind's job, whole or slim, or none read)
    job: Obj | None = None

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]


AdmitWith = Callable[[str, Obj, list[Obj], float], list[Obj] | None]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the reconcile needs next: ``after`` seconds to look again (None: on events)."""

    after: float | None = None
    reasons: tuple[str, ...] = ()


def first_true(copies: Mapping[str, Obj], type_: str) -> tuple[str, Obj] | None:
    """The worker whose copy has condition ``type_`` True the earliest (Kueue's
    ``bestMatchByCondition``)."""
    best: tuple[float, str, Obj] | None = None
    for worker, wl in sorted(copies.items()):
        if not is_true(wl, type_):
            continue
        at = rfc3339_seconds((condition(wl, type_) or {}).get("lastTransitionTime")) or 0.0
        if best is None or at < best[0]:
            best = (at, worker, wl)
    return None if best is None else (best[1], best[2])


def remote_workload(local: Obj, origin: str) -> Obj:
    """The Workload copy created on a worker (Kueue's ``cloneForCreate``)."""
    meta = local.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != JOB_UID}
    labels[MULTIKUEUE_ORIGIN] = origin
    new_meta: Obj = {"name": meta.get("name"), "namespace": meta.get("namespace"),
                     "labels": labels}  # fmt: skip
    if meta.get("annotations"):
        new_meta["annotations"] = dict(meta["annotations"])
    return {
        "apiVersion": local.get("apiVersion", WORKLOADS.api_version),
        "kind": "Workload",
        "metadata": new_meta,
        "spec": dict(local.get("spec") or {}),
    }


def replacing(old: Obj, new: Obj) -> Obj:
    """A merge patch that turns ``old`` into ``new`` (keys ``new`` lacks, at any depth
    of maps, set to null: a merge patch would keep them)."""
    out: Obj = {k: None for k in old if k not in new}
    for k, v in new.items():
        was = old.get(k)
        out[k] = replacing(was, v) if isinstance(v, dict) and isinstance(was, dict) else v
    return out


class Dispatch:
    """Reconciles one Workload group at a time (the manager calls :meth:`reconcile`)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        origin: str,
        worker_lost_timeout: float,
        nominate: Callable[[Group], Any],
        record_event: Callable[..., None],
        clock: Callable[[], float],
        full: Callable[[str], Awaitable[Obj | None]],
        full_job: Callable[[str, str], Awaitable[Obj | None]],
        written: Callable[[str, Obj], None] = lambda _key, _obj: None,
        group_pods: Callable[[str], list[Obj]] = lambda _key: [],
        admit_with: AdmitWith = lambda _key, _wl, _checks, _now: None,
        admitted: Callable[[str, Obj, float], None] = lambda _key, _wl, _now: None,
    ) -> None:
        self.client = client
        self.origin = origin
        self.worker_lost_timeout = worker_lost_timeout
        self.nominate = nominate  # async (group) -> (names or None, after, reasons)
        self.record_event = record_event
        self.clock = clock
        self.full = full  # the manager's whole Workload (the informer keeps a slim one)
        self.full_job = full_job  # (plural, key) -> the manager's whole job
        # (key, Workload) after each write of ours: the next reconcile, which the
        # copies' events may start before the watch brings the write back, reads it
        # instead of the older copy and does not write the same again (a 409)
        self.written = written
        self.group_pods = group_pods  # Workload key -> the manager's pods of its group
        # (key, Workload, its checks with ours Ready, now) -> the conditions that admit it
        # in the same write (None: the checks do not admit it yet), and what follows
        # such a write, once (the service's own admission write then finds it done)
        self.admit_with = admit_with
        self.admitted = admitted

    # -- remote objects -------------------------------------------------------------------

    async def remove_remote(self, remote: RemoteCluster, key: str, owner_kind: str) -> None:
        """Delete the job copy and the Workload copy of ``key`` from a worker (a job
        there of the same name that this manager did not make is left alone: Kueue's
        ``DeleteRemoteObjectIfOwned``)."""
        ns, _, name = key.partition("/")
        adapter = adapter_of_kind(owner_kind)
        copy_ = remote.workload(key)
        owner = self.owner_name(copy_)
        targets = []
        if adapter is POD_GROUPS:  # every pod copy of the group
            selector = f"{PREBUILT_WORKLOAD}={name},{MULTIKUEUE_ORIGIN}={self.origin}"
            pods = await remote.client.list(adapter.resource, namespace=ns,
                                            label_selector=selector)  # fmt: skip
            targets += [(adapter.resource, str(p["metadata"]["name"])) for p in pods["items"]]
        elif adapter is not None and owner and await remote.owns(adapter.resource, ns, owner):
            targets.append((adapter.resource, owner))
        if copy_ is None or not kobj.deleting(copy_):  # else its deletion is under way
            targets.append((WORKLOADS, name))
        for res, obj_name in targets:
            try:
                await remote.client.delete(res, obj_name, namespace=ns)
            except ApiError as err:
                if not err.not_found:
                    raise
        remote.forget(key)

    @staticmethod
    def owner_name(wl: Obj | None) -> str:
        return owner_name(wl)

    def _is_copy(self, obj: Obj) -> bool:
        """Whether a worker's object is a copy this manager made (as the job informer,
        which lists only those, would see it)."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels.get(MULTIKUEUE_ORIGIN) == self.origin

    # -- the manager's Workload -------------------------------------------------------------

    async def patch_status(self, group: Group, status: Obj) -> Obj | None:
        rv = (group.local.get("metadata") or {}).get("resourceVersion")
        body: Obj = {"status": status}
        if rv:
            body["metadata"] = {"resourceVersion": rv}
        try:
            new = await self.client.patch(
                WORKLOADS, group.name, body, namespace=group.namespace, subresource="status"
            )
        except ApiError as err:
            if err.status in (404, 409):
                return None  # gone, or changed since: its event brings it back
            raise
        group.local = new
        group.whole = new
        self.written(group.key, new)
        return new

    def _checks_with(
        self, group: Group, state: str, message: str, at: float | None = None
    ) -> list[Obj]:
        out = []
        now = kobj.rfc3339(self.clock() if at is None else at)
        for entry in ((group.local.get("status") or {}).get("admissionChecks")) or []:
            if entry.get("name") == group.check:
                entry = dict(entry)
                if entry.get("state") != state:
                    entry["lastTransitionTime"] = now
                entry["state"] = state
                entry["message"] = message[:MAX_MESSAGE]
            out.append(entry)
        return out

    async def set_state(self, group: Group, state: str, message: str, **extra: Any) -> bool:
        """Kueue's ``updateACS``: our entry's state and message ("..., Previously: ...")."""
        message = f'{message}, Previously: "{group.state.get("state")}"'
        now = self.clock()
        checks = self._checks_with(group, state, message, now)
        status: Obj = {"admissionChecks": checks, **extra}
        admitting = self.admit_with(group.key, group.local, checks, now) if state == READY else None
        if admitting is not None:  # the last check Ready: Admitted=True in the same write
            status["conditions"] = admitting
        new = await self.patch_status(group, status)
        if new is not None:
            self.record_event(new, "Normal", EVENT_REASON, message)
            if admitting is not None and is_true(new, "Admitted"):
                self.admitted(group.key, new, now)
        return new is not None

    async def explain(self, group: Group, message: str) -> None:
        """Our entry's message while it is Pending (the dispatcher's reasons, which
        ``why`` and ``list`` show with the check)."""
        if group.state.get("state") != PENDING or group.state.get("message") == message:
            return
        await self.patch_status(group, {"admissionChecks": self._checks_with(group, PENDING,
                                                                             message)})  # fmt: skip

    async def reject(self, group: Group, message: str) -> None:
        await self.set_state(group, REJECTED, message)

    # -- the reconcile ----------------------------------------------------------------------

    async def reconcile(self, group: Group, job: Obj | None, adapter: Adapter | None) -> Outcome:
        local = group.local
        owner_kind = kind_of(local)
        if kobj.is_finished(local) or not kobj.has_quota(local) or kobj.deleting(local):
            for worker in list(group.copies):
                await self.remove_remote(group.remotes[worker], group.key, owner_kind)
            if group.unavailable:
                return Outcome(after=self.worker_lost_timeout)
            return Outcome()
        if adapter is None:
            await self.reject(
                group, f'No multikueue adapter found for owner kind "{owner_kind or "none"}"'
            )
            return Outcome()
        if job is None:
            return Outcome()  # the job is not seen yet (or is being deleted)
        why = adapter.unmanaged_reason(job)
        if why:
            await self.reject(group, f"The owner is not managed by Kueue: {why}")
            return Outcome()
        state = group.state.get("state")

        finished = first_true(group.copies, "Finished")
        if finished is not None:
            worker, copy_ = finished
            theirs = await self.sync_job(group.remotes[worker], group, job, adapter)
            if theirs is not None and not adapter.finished(theirs):
                return Outcome(after=1.0)  # its last status is not written yet
            cond = condition(copy_, "Finished") or {}
            conds = kobj.set_condition(
                list((local.get("status") or {}).get("conditions") or []),
                type_="Finished",
                status=True,
                reason=str(cond.get("reason") or "Succeeded"),
                message=str(cond.get("message") or ""),
                now=self.clock(),
                observed_generation=kobj.generation(local),
            )
            await self.patch_status(group, {"conditions": conds})
            return Outcome()

        evicted = first_true(group.copies, "Evicted")
        if evicted is not None and state == READY and not is_true(local, "Evicted"):
            worker = str((local.get("status") or {}).get("clusterName") or evicted[0])
            await self.set_state(
                group,
                RETRY,
                f'Workload evicted on worker cluster: "{worker}", resetting for re-admission',
            )
            return Outcome()

        admitted = first_true(group.copies, "Admitted")
        chosen = str((local.get("status") or {}).get("clusterName") or "")
        if chosen and is_true(group.copies.get(chosen), "Admitted"):
            admitted = (chosen, group.copies[chosen])  # a copy from before is not the winner
        if admitted is None and state == READY:
            worker = str((local.get("status") or {}).get("clusterName") or "")
            if worker and worker in group.unavailable:
                lost = group.lost.get(worker, self.clock())
                wait = self.worker_lost_timeout - (self.clock() - lost)
                if wait > 0:
                    return Outcome(after=wait)
                await self.set_state(group, RETRY, "Admitting remote lost")
                return Outcome()
            await self.set_state(group, RETRY, "Admitting remote no longer exists")
            return Outcome()

        if admitted is not None:
            winner = admitted[0]
            for worker in list(group.copies):
                if worker != winner:
                    await self.remove_remote(group.remotes[worker], group.key, owner_kind)
            await self.sync_job(group.remotes[winner], group, job, adapter)
            if state not in (READY, RETRY, REJECTED):
                status = local.get("status") or {}
                if status.get("clusterName") not in (None, winner):
                    return Outcome()  # immutable once set
                await self.set_state(
                    group,
                    READY,
                    f'The workload was admitted on "{winner}"',
                    clusterName=winner,
                    nominatedClusterNames=None,
                )
            return Outcome(after=self.worker_lost_timeout)

        if state != PENDING or is_true(local, "Evicted"):
            return Outcome()
        nominated, after, reasons = await self.nominate(group)
        if nominated is None:
            return Outcome(after=after, reasons=reasons)
        missing = [w for w in group.remotes if w in nominated and w not in group.copies]
        for worker, remote in group.remotes.items():
            if worker not in nominated and worker in group.copies:
                await self.remove_remote(remote, group.key, owner_kind)
        if missing:
            # the nomination's write answered the whole Workload: no read for the copy
            whole = group.whole or await self.full(group.key)
            if whole is None:
                return Outcome()
            body = remote_workload(whole, self.origin)
            results = await asyncio.gather(
                *(group.remotes[w].client.create(WORKLOADS, body, namespace=group.namespace)
                  for w in missing),
                return_exceptions=True,
            )  # fmt: skip
            for worker, result in zip(missing, results, strict=True):
                if isinstance(result, dict):
                    group.remotes[worker].created(group.key, result)
                    continue
                if isinstance(result, ApiError) and result.status == 409:
                    continue
                if isinstance(result, BaseException):
                    log.info("%s: no copy on %s yet: %s", group.key, worker, result)
                    after = min(after or 5.0, 5.0)
        return Outcome(after=after, reasons=reasons)

    async def sync_job(
        self, remote: RemoteCluster, group: Group, job: Obj, adapter: Adapter
    ) -> Obj | None:
        """Create the job on the worker, or copy its status back (``SyncJob``); the
        worker's job as read (None: it was just created, or is gone). A pod group:
        each of its pods, and the worker's pod that says whether the group finished
        (an unfinished one first)."""
        if not isinstance(adapter, PodGroupAdapter):
            return await self._sync_one(remote, group, job, adapter)
        deciding: Obj | None = None
        missing = False
        for pod in self.group_pods(group.key) or [job]:
            theirs = await self._sync_one(remote, group, pod, adapter)
            if theirs is None:
                missing = True
            elif deciding is None or (adapter.finished(deciding) and not adapter.finished(theirs)):
                deciding = theirs
        return None if missing else deciding

    async def _sync_one(
        self, remote: RemoteCluster, group: Group, job: Obj, adapter: Adapter
    ) -> Obj | None:
        ns = group.namespace
        name = str((job.get("metadata") or {}).get("name"))
        known, theirs = remote.job(adapter.resource, f"{ns}/{name}")
        if not known:
            try:
                theirs = await remote.client.get(adapter.resource, name, namespace=ns)
            except ApiError as err:
                if not err.not_found:
                    raise
            if theirs is not None and not self._is_copy(theirs):
                theirs = None  # the worker's own object: never read as the copy
        if theirs is None:
            if kobj.is_finished(group.local) or first_true(group.copies, "Finished"):
                return None  # gone after it finished: not created again
            whole = group.job or await self.full_job(adapter.resource.plural, f"{ns}/{name}")
            if whole is None:
                return None
            body = adapter.remote_copy(whole, group.name, self.origin)
            try:
                await remote.client.create(adapter.resource, body, namespace=ns)
            except ApiError as err:
                if err.status != 409:
                    raise
            return None
        status = adapter.status_to_copy(job, theirs)
        if status is not None:
            body = {"status": replacing(job.get("status") or {}, status)}
            await self.client.patch(
                adapter.resource, name, body, namespace=ns, subresource="status"
            )
        return theirs
