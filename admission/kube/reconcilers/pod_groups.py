"""Plain Pod gangs ⇄ Workloads (Kueue's pod-group integration, docs/semantics.md §2, §3.4).

Frameworks that create bare pods (Ray, MPI, Spark, Argo, …) get all-or-nothing
admission by labelling their pods ``kueue.x-k8s.io/pod-group-name`` and annotating
them ``kueue.x-k8s.io/pod-group-total-count``; the pod webhook keeps each managed pod
behind the scheduling gate ``kueue.x-k8s.io/admission`` with the finalizer
``kueue.x-k8s.io/managed``. This module is the controller side, level-based like
:mod:`.jobs`: each call looks at the group's pods (the Pods informer, managed pods
only) and its Workload and does the next step:

* once the group's live pods reach the total count, one Workload named after the
  group is created: one podSet per pod role — the ``kueue.x-k8s.io/podset`` label its
  parent's webhook wrote (a LeaderWorkerSet's ``leader``/``worker``), else the pod's shape
  (``main`` when all pods are alike) —, the queue from the ``queue-name`` label,
  priority resolved as for Jobs;
* an admitted Workload (only ever after the admission write succeeded) ungates every
  pod of the group, adding its podSet's flavors' nodeSelector and tolerations — the
  additions a gated pod allows — in one JSON patch guarded by ``test`` operations;
* all pods Succeeded/Failed finish the Workload (``Succeeded`` if all succeeded) and
  release its quota at once, as a job's does (:func:`admission.kube.control.workloads.finish_workload`);
  then the finalizers of the terminated pods are removed;
* an evicted (or deactivated) Workload gets its pods deleted (Kueue's behaviour for
  plain pods; the finalizer is lifted from deleting pods) and, once none is left
  running, its admission is cleared and the quota released (:func:`.jobs.finish_eviction`);
* a Workload without quota whose pods are all gone is deleted (what the garbage
  collector does to Kueue's pod-owned group Workloads) — but a serving group's
  Workload is owned by its StatefulSet or LeaderWorkerSet (an owner reference and
  Kueue's ``job-owner-*`` annotations, added to one made before) and is kept while that
  object exists and runs the group: a preempted StatefulSet's pods are deleted and
  recreated, and wait at the gate for the same Workload to be admitted again; it is
  deleted with its owner (the garbage collector) or with the group's last pod once the
  owner no longer runs the group (scaled down);
* ``pod-group-fast-admission``: the Workload is built from the first pod, for the
  group's total count (a StatefulSet creates its pods one by one);
  ``pod-group-serving``: the group never finishes — its controller replaces terminated
  or evicted pods, which wait at the gate for the next admission (an eviction deletes
  the running pods only, and releases the quota once none is left running).

* a single pod labelled ``prebuilt-workload-name`` runs on that Workload, taking it as
  its own (a MultiKueue worker's copy);
* MultiKueue: on the manager, the pods of a Workload with a MultiKueue check are never
  ungated (Kueue's ``ShouldSkipLocalExecution``: their copies run on a worker); on a
  worker, a manager's Workload copy (label ``multikueue-origin``) is kept while it has
  no pods yet (they are created once it is admitted), and the pods of a StatefulSet or
  LeaderWorkerSet copied by a manager (labelled ``multikueue-origin``) never get a
  Workload of their own: they wait for the manager's copy of their group's (Kueue's
  StatefulSet and LeaderWorkerSet reconcilers make none for such an object);

* a single managed pod (no group name: a Deployment's) is a group of one with its own
  Workload ``pod-<name>-<hash>``, controlled by the pod; a deleted one is let go at once
  (Kueue's finalize of a deleted job) and its Workload ends with it.

Gaps against Kueue: no ownerReferences from a group's Workload to its pods; no
``retriable-in-group`` handling; a pending Workload is not resized when pods change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from admission.integrations.framework.fields import controller_ref
from admission.integrations.framework.podset_info import PodSetInfo, flavor_info
from admission.integrations.framework.requests import beyond_pod_set, pod_set_asks
from admission.integrations.kinds.admitted_by_pods import PodOwnerIntegration
from admission.integrations.kinds.pod import (
    DEFAULT_POD_SET,
    GROUP_TOTAL_COUNT_ANNOTATION,
    POD_SELECTOR,
    PodGroupError,
    fast_admission,
    gated,
    group_key,
    is_group_workload,
    is_single_pod,
    pod_set_names,
    role_key,
    serving,
    shape_of,
    succeeded,
    terminated,
    total_count,
    unfinalize_patch,
    ungate_patch,
    workload_for_group,
)
from admission.integrations.ownership import OwnerRef
from admission.integrations.registry import BY_FRAMEWORK
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import ADMISSION_CHECKS, PODS, WORKLOADS
from admission.kube.client.rest import JSON_PATCH
from admission.kube.control import work
from admission.kube.control.context import Context, Obj
from admission.kube.control.tas_ungate import topology_domains
from admission.kube.control.workloads import (
    ComposeErrors,
    create_workload,
    delete_workload,
    finish_eviction,
    finish_workload,
)
from admission.kube.watch.grouped_pods import GroupedPods
from admission.kube.watch.owners import OwnerReader
from queues.api.conditions import is_true
from queues.api.labels import MULTIKUEUE_CONTROLLER, MULTIKUEUE_ORIGIN, POD_SUSPENDING_PARENT
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL

log = logging.getLogger("quartermaster.kube.podgroups")

__all__ = ["POD_SELECTOR", "PodGroupReconciler", "is_group_workload", "shape_of"]


# -- the reconciler --------------------------------------------------------------------------


def _queue_of(owner: Obj) -> str:
    queue = (kobj.meta(owner).get("labels") or {}).get(QUEUE_NAME_LABEL)
    return queue if isinstance(queue, str) else ""


def _owner_refs(ctx: Context, wl: Obj) -> list[tuple[PodOwnerIntegration, Obj]]:
    """The Workload's owner references to objects of enabled pod-owner integrations."""
    out = []
    for ref in kobj.meta(wl).get("ownerReferences") or []:
        if not isinstance(ref, dict):
            continue
        integ = ctx.options.frameworks.integration_for(
            str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        )
        if isinstance(integ, PodOwnerIntegration):
            out.append((integ, ref))
    return out


class PodGroupReconciler:
    """Reconciles pod groups, keyed ``namespace/group-name`` (= the Workload's key)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.owners = OwnerReader(
            client=ctx.client, informers=ctx.informers, frameworks=ctx.options.frameworks
        )
        self.grouped = GroupedPods(PODS.plural)  # group key -> its pods
        self.errors = ComposeErrors(ctx, "pod group")
        self._held: dict[str, str] = {}  # pod key -> why it stays gated (said once)

    # -- events and reads ---------------------------------------------------------------------

    def on_pod(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        """Pods informer handler: keep the group index, queue the group."""
        if new is None:
            self._held.pop(key, None)
        gkey = group_key(new or old)
        if gkey is None:
            return
        self.grouped.on_event(event, key, gkey)
        self.ctx.enqueue(work.PodGroup(gkey))

    def owns(self, wkey: str) -> bool:
        """Whether the Workload ``wkey`` is a pod group's (reconciled here, not as a Job's)."""
        return is_group_workload(self.ctx.writer.workload(wkey))

    def group_keys(self) -> list[str]:
        return self.grouped.groups()

    def pods(self, gkey: str) -> list[Obj]:
        return self.grouped.pods(self.ctx.informers, gkey)

    # -- the reconcile ------------------------------------------------------------------------

    async def reconcile(self, gkey: str) -> None:
        ctx = self.ctx
        inf = ctx.informers.get(PODS.plural)
        if inf is None or not inf.synced.is_set():
            return  # cannot tell a missing pod from one not listed yet
        wl = ctx.writer.workload(gkey)
        pods = self.pods(gkey)
        if wl is not None and not is_group_workload(wl):
            if len(pods) == 1 and is_single_pod(pods[0]) and not controller_ref(wl):
                await self._own(gkey, wl, pods[0])  # a prebuilt Workload: the pod's now
            return  # a Workload of the same name that is not a group's: leave it alone
        live = [p for p in pods if not terminated(p) and not kobj.deleting(p)]
        never_ran = [p for p in pods if kobj.deleting(p) and gated(p)]
        if never_ran:  # a deleted pod that never ran has nothing left to account for
            await self._unfinalize(never_ran)
        if wl is None:
            if pods and all(terminated(p) or kobj.deleting(p) for p in pods):
                await self._unfinalize(p for p in pods)
            elif live:
                await self._create(gkey, live)
            return
        if kobj.deleting(wl):
            return
        if kobj.is_finished(wl):
            await self._unfinalize(p for p in pods if terminated(p) or kobj.deleting(p))
            return
        if gkey in ctx.sync.inflight:
            return
        holds = kobj.has_quota(wl)
        evicting = holds and (is_true(wl, kobj.EVICTED) or not kobj.is_active(wl))
        if evicting:
            await self._stop(gkey, pods)
            return
        if not pods:
            if MULTIKUEUE_ORIGIN in (kobj.meta(wl).get("labels") or {}):
                return  # a MultiKueue manager's copy: its pods come once it is admitted
            if await self._kept_by_owner(gkey, wl):
                return  # a serving group between its pods: its owner recreates them
            if holds and not _owner_refs(ctx, wl):
                await finish_workload(
                    ctx, gkey, wl, succeeded=False, message="The pods were deleted"
                )
            else:  # a serving group never finishes: its Workload goes with the group
                await self._delete_workload(gkey, wl)
            return
        if serving(pods[0]) and not _owner_refs(ctx, wl):
            await self._adopt(gkey, wl, pods[0])
        elif not holds:
            wl = await self._follow_owner(gkey, wl)
        ended = [p for p in pods if terminated(p)]
        if is_single_pod(pods[0]):  # Kueue's finalize of a deleted job: the pod goes
            await self._unfinalize(p for p in pods if kobj.deleting(p) and not terminated(p))
        if serving(pods[0]):  # never finished: its controller replaces ended and deleted pods
            await self._unfinalize(p for p in pods if terminated(p) or kobj.deleting(p))
        elif ended and not [p for p in pods if not terminated(p)]:
            ok = all(succeeded(p) for p in ended)
            n_ok = sum(1 for p in ended if succeeded(p))
            message = f"Pods succeeded: {n_ok}/{len(ended)}."
            await finish_workload(ctx, gkey, wl, succeeded=ok, message=message)
            new = ctx.writer.workload(gkey)
            if kobj.is_finished(new):
                await self._unfinalize(ended)
            return
        keep, excess = self._split_excess(wl, live)
        if excess and not await self._owner_runs(gkey, wl, len(live)):
            await self._delete_excess(gkey, excess)
        if holds and is_true(wl, kobj.ADMITTED) and kobj.is_active(wl):
            if not self._runs_elsewhere(wl):
                await self._ungate(gkey, wl, keep)

    def _runs_elsewhere(self, wl: Obj) -> bool:
        """A Workload with a MultiKueue check runs on a worker: its pods here stay gated
        (Kueue's ``admissioncheck.ShouldSkipLocalExecution``)."""
        inf = self.ctx.informers.get(ADMISSION_CHECKS.plural)
        checks = inf.store if inf is not None else {}
        return any(
            ((checks.get(str(e.get("name"))) or {}).get("spec") or {}).get("controllerName")
            == MULTIKUEUE_CONTROLLER
            for e in (wl.get("status") or {}).get("admissionChecks") or []
        )

    def _role_of(self, wl: Obj, live: list[Obj]) -> Callable[[Obj], str]:
        """podSet name of each pod: by its shape, or ``main`` for a one-podSet group."""
        names = pod_set_names(live) if live else {}
        wl_sets = {ps.get("name") for ps in (wl.get("spec") or {}).get("podSets") or []}
        if wl_sets == {DEFAULT_POD_SET}:
            return lambda pod: DEFAULT_POD_SET
        return lambda pod: names.get(role_key(pod), DEFAULT_POD_SET)

    def _split_excess(self, wl: Obj, live: list[Obj]) -> tuple[list[Obj], list[Obj]]:
        """Pods the Workload counts, and the rest: a group may not run more pods than
        its Workload charges (``pod-group-total-count``). Per podSet, running pods are
        kept first, then the oldest gated ones; the newest are excess (Kueue's
        ``cleanupExcessPods``)."""
        counts = {
            str(ps.get("name")): int(ps.get("count") or 0)
            for ps in (wl.get("spec") or {}).get("podSets") or []
        }
        role = self._role_of(wl, live)
        order = sorted(
            live,
            key=lambda p: (
                gated(p),
                str(kobj.meta(p).get("creationTimestamp") or ""),
                kobj.ns_key(p),
            ),
        )
        keep: list[Obj] = []
        excess: list[Obj] = []
        for pod in order:
            r = role(pod)
            if counts.get(r, 0) > 0:
                counts[r] -= 1
                keep.append(pod)
            else:
                excess.append(pod)
        return keep, excess

    async def _delete_excess(self, gkey: str, pods: list[Obj]) -> None:
        for pod in pods:
            if not gated(pod):
                continue  # never delete a running pod here; only gated ones are extra
            ns, name = kobj.split_key(kobj.ns_key(pod))
            uid = str(kobj.meta(pod).get("uid") or "") or None
            try:
                await self.ctx.client.delete(PODS, name, namespace=ns, uid=uid)
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise
            log.info("pod group %s: deleted excess pod %s", gkey, name)
            self.ctx.record_event(
                pod, "Normal", "ExcessPodDeleted", f"Excess pod of group {gkey} deleted"
            )

    async def _create(self, gkey: str, live: list[Obj]) -> None:
        ctx = self.ctx
        try:
            totals = {total_count(p) for p in live}
            if len(totals) != 1:
                raise PodGroupError(
                    f"pod group {gkey}: metadata.annotations"
                    f'["{GROUP_TOTAL_COUNT_ANNOTATION}"]: pods disagree: {sorted(totals)}'
                )
            total = totals.pop()
            fast = all(fast_admission(p) for p in live)
            if len(live) < total and not fast:
                return  # the gang is not complete yet
            members = await self._whole_templates(sorted(live, key=kobj.ns_key)[:total])
            if members is None:
                return  # a pod went away: reconciled again on its event
            owner = await self._group_owner(members[0])  # whole: a slim pod lacks lws labels
            if owner is not None:
                if owner[1] is None:
                    return  # pods of a deleted owner: they go with it (so does its Workload)
                if MULTIKUEUE_ORIGIN in (kobj.meta(owner[1]).get("labels") or {}):
                    return  # a MultiKueue copy's: they run on the manager's Workload copy
                total = owner[0].group_size(owner[1]) or total  # a resized set: as it is now
                members = members[:total]
            if len(members) < total:  # fast admission: the others are like the first
                members += [members[0]] * (total - len(members))
            body = workload_for_group(
                gkey,
                members,
                workload_priority_classes=ctx.sync.workload_priority_classes,
                priority_classes=ctx.sync.priority_classes,
            )
        except PodGroupError as err:
            self.errors.report(gkey, live[0], err)
            return
        if owner is not None and owner[1] is not None:
            ref, annotations = owner[0].owner_metadata(owner[1])
            if queue := _queue_of(owner[1]):
                body["spec"]["queueName"] = queue
            body["metadata"].setdefault("ownerReferences", []).append(ref)
            body["metadata"].setdefault("annotations", {}).update(annotations)
        self.errors.clear(gkey)
        await create_workload(ctx, gkey, body, owner=live[0], errors=self.errors)

    async def _whole_templates(self, pods: list[Obj]) -> list[Obj] | None:
        """``pods`` with the first of each shape whole: its spec becomes the podSet's
        template, and the informer keeps slim pods (:mod:`.slim`)."""
        inf = self.ctx.informers[PODS.plural]
        seen: set[str] = set()
        out: list[Obj] = []
        for pod in pods:
            shape = role_key(pod)
            if shape not in seen:
                seen.add(shape)
                full = await inf.full(kobj.ns_key(pod), at_least=kobj.rv(pod))
                if full is None:
                    return None
                pod = full
            out.append(pod)
        return out

    async def _ungate(self, gkey: str, wl: Obj, live: list[Obj]) -> None:
        ctx = self.ctx
        adm = kobj.admission_of(wl)
        # podSet names come from the Workload when all its podSets are shapes of these pods
        role = self._role_of(wl, live)
        infos: dict[str, PodSetInfo] = {}
        started = 0
        domains = topology_domains(wl, live, role)  # TAS podSets: each pod's domain
        counted = pod_set_asks(wl)
        for pod in live:
            if not gated(pod):
                continue
            ps = role(pod)
            if (why := beyond_pod_set(pod, counted.get(ps))) is not None:
                self._hold(pod, f"Pod {kobj.ns_key(pod)} stays gated: {why}")
                continue
            if ps not in infos:
                wanted = kobj.flavors_of(adm, ps)
                flavors = [ctx.sync.flavors[n] for n in wanted if n in ctx.sync.flavors]
                if len(flavors) != len(wanted):
                    log.warning(
                        "pod group %s: flavor(s) %s not found; not ungated yet", gkey, wanted
                    )
                    return
                infos[ps] = flavor_info(ps, 0, flavors)
            patch, kept = ungate_patch(pod, infos[ps], domains.get(kobj.ns_key(pod)))
            for k in kept:
                log.warning("pod %s: nodeSelector %s kept (its flavor wants another value)",
                            kobj.ns_key(pod), k)  # fmt: skip
            if patch is not None and await self._patch(pod, patch):
                started += 1
        if started:
            ctx.metrics.api_writes.labels("ungate-pods", "ok").inc()
            cq = (adm or {}).get("clusterQueue", "")
            ctx.record_event(wl, "Normal", "Started", f"Admitted by clusterQueue {cq}")

    def _hold(self, pod: Obj, message: str) -> None:
        """A pod left gated because it asks for more than its Workload counted: said once
        per pod (an event on it), as long as it waits."""
        if self._held.get(kobj.ns_key(pod)) != message:
            self._held[kobj.ns_key(pod)] = message
            log.warning("%s", message)
            self.ctx.record_event(pod, "Warning", "ExceedsWorkload", message)

    async def _stop(self, gkey: str, pods: list[Obj]) -> None:
        """Evicted: delete the group's pods; release the quota once none is running."""
        ctx = self.ctx
        keep_gated = bool(pods) and serving(pods[0])  # replacements wait at the gate
        for pod in pods:
            if keep_gated and gated(pod):
                continue
            if not terminated(pod) and not kobj.deleting(pod):
                ns, name = kobj.split_key(kobj.ns_key(pod))
                uid = str(kobj.meta(pod).get("uid") or "") or None
                try:
                    await ctx.client.delete(PODS, name, namespace=ns, uid=uid)
                except ApiError as err:
                    if not (err.not_found or err.conflict):
                        raise
        await self._unfinalize(p for p in pods if kobj.deleting(p) or terminated(p))
        remaining = [
            p for p in self.pods(gkey) if not terminated(p) and not (keep_gated and gated(p))
        ]
        if not remaining:
            await finish_eviction(ctx, gkey)

    # -- a serving group's owner (its StatefulSet, its LeaderWorkerSet) ------------------------

    def _parent_of(self, pod: Obj) -> PodOwnerIntegration | None:
        """The enabled integration whose serving group ``pod`` is in (its webhook's
        ``pod-suspending-parent`` annotation), if any."""
        if not serving(pod):
            return None
        parent = (kobj.meta(pod).get("annotations") or {}).get(POD_SUSPENDING_PARENT)
        integ = BY_FRAMEWORK.get(str(parent or ""))
        if isinstance(integ, PodOwnerIntegration) and self.ctx.options.frameworks.is_enabled(integ):
            return integ
        return None

    async def _group_owner(self, pod: Obj) -> tuple[PodOwnerIntegration, Obj | None] | None:
        """The object whose serving group ``pod`` is in, read: None for a plain group
        (or an owner of a disabled integration); ``(integration, None)`` when the owner
        is gone or being deleted (its pods go with it)."""
        integ = self._parent_of(pod)
        found = integ.group_owner(pod) if integ is not None else None
        if integ is None or found is None:
            return None
        ns, _ = kobj.split_key(kobj.ns_key(pod))
        owner = await self.owners(OwnerRef(integ.api_version, integ.kind, ns, *found))
        if (
            owner is None
            or kobj.deleting(owner)
            or (found[1] and kobj.meta(owner).get("uid") != found[1])
        ):
            return integ, None
        return integ, dict(owner)

    async def _kept_by_owner(self, gkey: str, wl: Obj) -> bool:
        """Whether the Workload's owner exists and still runs the group (Kueue keeps a
        serving group's Workload while its owner lives; the garbage collector ends it)."""
        owned = await self._owner(gkey, wl) if _owner_refs(self.ctx, wl) else None
        return owned is not None and owned[0].keeps_group(owned[1], kobj.split_key(gkey)[1])

    async def _owner(self, gkey: str, wl: Obj) -> tuple[PodOwnerIntegration, Obj] | None:
        """The Workload's owner (by its owner reference, UID checked), if it exists."""
        ns, _ = kobj.split_key(gkey)
        for integ, ref in _owner_refs(self.ctx, wl):
            uid = str(ref.get("uid") or "")
            owner = await self.owners(
                OwnerRef(integ.api_version, integ.kind, ns, str(ref.get("name") or ""), uid)
            )
            if owner is not None and kobj.meta(owner).get("uid") == uid:
                return integ, dict(owner)
        return None

    async def _owner_runs(self, gkey: str, wl: Obj, pods: int) -> bool:
        """Whether the Workload's owner runs this many pods in the group (a set resized
        just as its Workload was admitted): they are not excess, they wait at the gate
        (deleted, they would only be made again)."""
        owned = await self._owner(gkey, wl) if _owner_refs(self.ctx, wl) else None
        return owned is not None and (owned[0].group_size(owned[1]) or 0) >= pods

    async def _follow_owner(self, gkey: str, wl: Obj) -> Obj:
        """A pending Workload of a serving group is kept like its owner says now: its
        queue (the owner's ``queue-name``), and the count of a one-podSet group (a
        resized StatefulSet: its webhook lets ``replicas`` change while the Workload
        holds no quota). Kueue's StatefulSet reconciler keeps the queue so. Returns the
        Workload as it is now."""
        owned = await self._owner(gkey, wl) if _owner_refs(self.ctx, wl) else None
        if owned is None:
            return wl
        integ, owner = owned
        spec = wl.get("spec") or {}
        pod_sets = spec.get("podSets") or []
        ops: list[Obj] = []
        size = integ.group_size(owner)
        if len(pod_sets) == 1 and size and pod_sets[0].get("count") != size:
            ops.append({"op": "replace", "path": "/spec/podSets/0/count", "value": size})
        queue = _queue_of(owner)
        if queue and spec.get("queueName") != queue:
            ops.append({"op": "add", "path": "/spec/queueName", "value": queue})
        if not ops:
            return wl
        guard = {"op": "test", "path": "/metadata/resourceVersion", "value": kobj.rv(wl)}
        # the informer's Workload is slim: only these fields are written
        new = await self._patch_workload(gkey, [guard, *ops], content_type=JSON_PATCH)
        if new is None:
            return wl
        log.info("pod group %s: Workload follows its %s: %s", gkey, integ.kind,
                 [op["path"] for op in ops])  # fmt: skip
        return new

    async def _patch_workload(self, gkey: str, patch: Any, **kw: Any) -> Obj | None:
        """The Workload patched and remembered; None when a newer version is on its way
        (a conflict, a failed ``test``, gone): the group is reconciled again then."""
        ns, name = kobj.split_key(gkey)
        try:
            new = await self.ctx.client.patch(WORKLOADS, name, patch, namespace=ns, **kw)
        except ApiError as err:
            if err.conflict or err.not_found or err.status == 422:
                return None
            raise
        self.ctx.writer.remember(WORKLOADS, gkey, new)
        self.ctx.sync.workload(gkey, new)
        return dict(new)

    async def _adopt(self, gkey: str, wl: Obj, pod: Obj) -> None:
        """A serving group's Workload made without its owner (by an older version): the
        owner reference and annotations added, as Kueue's StatefulSet reconciler does."""
        if self._parent_of(pod) is None:
            return
        whole = await self._whole_templates([pod])  # a slim pod lacks the lws labels
        owner = await self._group_owner(whole[0]) if whole else None
        if owner is None or owner[1] is None:
            return
        ref, annotations = owner[0].owner_metadata(owner[1])
        refs = [r for r in kobj.meta(wl).get("ownerReferences") or [] if r.get("uid") != ref["uid"]]
        patch = {"metadata": {"resourceVersion": kobj.rv(wl), "ownerReferences": [*refs, ref],
                              "annotations": annotations}}  # fmt: skip
        await self._patch_workload(gkey, patch)

    async def _own(self, gkey: str, wl: Obj, pod: Obj) -> None:
        """A single pod takes the prebuilt Workload it names (Kueue's
        ``EnsurePrebuiltWorkloadOwnership``): it is the pod's from then on."""
        ref = {"apiVersion": "v1", "kind": "Pod", "name": kobj.meta(pod).get("name"),
               "uid": kobj.meta(pod).get("uid"), "controller": True,
               "blockOwnerDeletion": True}  # fmt: skip
        refs = [*(kobj.meta(wl).get("ownerReferences") or []), ref]
        await self._patch_workload(gkey, {"metadata": {"resourceVersion": kobj.rv(wl),
                                                       "ownerReferences": refs}})  # fmt: skip

    async def _delete_workload(self, gkey: str, wl: Obj) -> None:
        await delete_workload(self.ctx, gkey, wl, why="the pods of its group are gone")

    async def _unfinalize(self, pods: Any) -> None:
        for pod in list(pods):
            patch = unfinalize_patch(pod)
            if patch is not None:
                await self._patch(pod, patch)

    async def _patch(self, pod: Obj, patch: list[Obj]) -> bool:
        """One guarded JSON patch; a failed ``test`` (422) or a gone pod is not an error:
        a newer version is on its way and the group is reconciled again then."""
        key = kobj.ns_key(pod)
        ns, name = kobj.split_key(key)
        try:
            new = await self.ctx.client.patch(
                PODS, name, patch, namespace=ns, content_type=JSON_PATCH
            )
        except ApiError as err:
            if err.not_found or err.conflict or err.status == 422:
                return False
            raise
        if isinstance(new, dict) and kobj.meta(new).get("name"):
            new.setdefault("apiVersion", PODS.api_version)
            new.setdefault("kind", PODS.kind)
            gone = kobj.deleting(new) and not kobj.meta(new).get("finalizers")
            self.grouped.wrote(key, None if gone else new)
        return True
