"""Job ⇄ Workload reconciliation for every job kind (Kueue's jobframework reconciler,
docs/semantics.md §4.1).

One reconciler drives every integration whose objects each get one Workload
(``Integration.reconciler == "object"``: batch/v1 Job, JobSet, …): what differs
between kinds — where the pod templates are, how suspension and completion show, the
steps of a stop — comes from the integration (:mod:`admission.integrations`).

Level-based: each call looks at the current object and its Workload and does the one
next step that brings them in line, so a restart, a lost write or a duplicate event
at any point is harmless:

* a managed object without a Workload gets one (owner reference, podSets, queue,
  priority); it is kept suspended and its pending Workload kept in sync with it;
* an admitted Workload starts its object (unsuspended, each podSet's template with
  its flavors' nodeSelector and tolerations and the podset label) — only ever after
  the admission was written;
* an evicted (or deactivated) Workload stops its object (suspended, templates
  restored from the Workload's copy) and, once the object has no active pods, its
  admission is cleared and the quota released exactly once (``Cache.evicted``);
* a finished object finishes its Workload (``Finished``) and releases the quota at once;
* a Workload whose object is gone is deleted;
* a job naming a prebuilt Workload runs on that one, never on one of its own
  (:mod:`.prebuilt`);
* an object with a managed ancestor up its controller-owner chain is left to that
  ancestor's integration (a JobSet's Jobs are admitted once, as the JobSet; a
  TrainJob's JobSet as the TrainJob), and suspended while it runs without the
  ancestor being admitted (:mod:`admission.integrations.ownership`).
"""

from __future__ import annotations

import logging
import sys
from functools import partial

from admission.integrations.framework.composition import (
    compose,
)
from admission.integrations.framework.fields import IntegrationError, set_path
from admission.integrations.framework.interface import Integration
from admission.integrations.framework.podset_info import (
    PodSetInfo,
    flavor_info,
    original_info,
    tas_info,
)
from admission.integrations.ownership import (
    OwnerRef,
    OwnershipError,
    controller_ref,
    managed_ancestor_async,
)
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import WORKLOADS, resource_of
from admission.kube.client.rest import Resource
from admission.kube.control import work
from admission.kube.control.context import Context, Obj
from admission.kube.control.workloads import (
    ComposeErrors,
    apply_pod_set_updates,
    create_workload,
    delete_workload,
    evict,
    finish_eviction,
    finish_workload,
    owner_of,
)
from admission.kube.reconcilers.prebuilt import PrebuiltWorkloads, prebuilt_name
from admission.kube.watch.owners import OwnerReader
from queues.api.conditions import is_true
from queues.api.labels import PODSET as PODSET_LABEL
from queues.api.labels import QUEUE_NAME as QUEUE_NAME_LABEL
from queues.model import HOLD_AND_DRAIN, Workload
from queues.node_health import AvoidedNodes, avoid_in_start_patch

log = logging.getLogger("quartermaster.kube.jobs")


class JobReconciler:
    """Reconciles the objects of every enabled "object" integration, keyed by kind."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.kinds: dict[str, Integration] = {
            i.lower_kind: i
            for i in ctx.options.frameworks.integrations()
            if i.reconciler == "object"
        }
        self.resources: dict[str, Resource] = {w: resource_of(i) for w, i in self.kinds.items()}
        self.errors = {w: ComposeErrors(ctx, w) for w in self.kinds}
        self.owners = OwnerReader(
            client=ctx.client, informers=ctx.informers, frameworks=ctx.options.frameworks
        )
        # object key -> (uid, generation, workload uid, workload generation, references)
        # last found equivalent: status events (pods starting, ready) do not re-compose it
        self._equivalent: dict[tuple[str, str], tuple[str, int, str, int, str]] = {}
        self.prebuilt = PrebuiltWorkloads(
            ctx, lambda i, k, obj: (self._compose(i, k, obj) or (None, None))[1]
        )

    # -- helpers ----------------------------------------------------------------------------

    def managed(self, integ: Integration, obj: Obj) -> bool:
        opts = self.ctx.options
        if integ.skip(obj):
            return False
        ns = kobj.meta(obj).get("namespace") or "default"
        if ns in opts.excluded_namespaces:
            return False
        if opts.managed_namespaces is not None:
            labels = self.ctx.sync.namespaces.get(ns)
            have = {"kubernetes.io/metadata.name": ns, **(labels.labels if labels else {})}
            if not opts.managed_namespaces.matches(have):
                return False
        if (kobj.meta(obj).get("labels") or {}).get(QUEUE_NAME_LABEL):
            return True
        return opts.manage_jobs_without_queue_name

    def lookup(self, res: Resource, namespace: str | None, name: str) -> Obj | None:
        """An object a job references (``Integration.references``), from its informer."""
        inf = self.ctx.informers.get(res.plural)
        if inf is None:
            return None
        return inf.store.get(f"{namespace}/{name}" if res.namespaced else name)

    def resolved(self, integ: Integration, key: str, obj: Obj) -> Obj | None:
        """``obj`` with what it references at hand (``Integration.resolve``); None (the
        error reported on the object) when a reference is missing."""
        if not integ.references:
            return obj
        try:
            return dict(integ.resolve(obj, self.lookup))
        except IntegrationError as err:
            self.errors[integ.lower_kind].report(key, obj, err)
            return None

    async def ancestor(self, integ: Integration, key: str, obj: Obj) -> Obj | None | bool:
        """The top-level managed ancestor that admits ``obj`` (Kueue's
        ``FindAncestorJobManagedByKueue``); None: ``obj`` is top-level; False: the chain
        cannot be decided (reported on the object)."""
        if controller_ref(obj) is None:
            return None
        opts = self.ctx.options
        walk = partial(managed_ancestor_async, obj, frameworks=opts.frameworks,
                       manage_without_queue_name=opts.manage_jobs_without_queue_name)  # fmt: skip
        try:
            disowned: list[OwnerRef] = []
            found = await walk(self.owners, disowned_by=disowned)
            if disowned:  # decided on a cached owner: decide again on fresh reads
                found = await walk(self.owners.fresh)
        except OwnershipError as err:
            self.errors[integ.lower_kind].report(key, obj, err, reason=err.reason)
            return False
        return dict(found) if found is not None else None

    async def _suspend_child(self, integ: Integration, key: str, obj: Obj, ancestor: Obj) -> None:
        """Kueue's ``shouldSuspendChildJob``: a running child whose managed ancestor has
        no admitted (not finished) Workload must not run outside quota: suspend it."""
        if integ.is_suspended(obj) or integ.finished(obj) is not None:
            return
        parent = self.ctx.options.frameworks.integration_for(
            str(ancestor.get("apiVersion") or ""), str(ancestor.get("kind") or "")
        )
        if parent is None or parent.reconciler != "object":
            return  # an external framework's (its controller decides), or a pod owner's
        wl = self.ctx.writer.workload(
            f"{kobj.meta(ancestor).get('namespace') or 'default'}/{parent.workload_name(ancestor)}"
        )
        if wl is not None and not kobj.is_finished(wl) and is_true(wl, kobj.ADMITTED):
            return
        patch: Obj = {}
        set_path(patch, integ.suspend_path, True)
        if await self._patch(integ, key, patch) is not None:
            self.ctx.record_event(obj, "Normal", "Suspended", "Kueue managed child job suspended")

    def current(self, lower_kind: str, key: str) -> Obj | None:
        return self.ctx.writer.current(self.resources[lower_kind], key)

    def workload_key(self, integ: Integration, obj: Obj) -> str:
        name = prebuilt_name(obj) or integ.workload_name(obj)
        return sys.intern(f"{kobj.meta(obj).get('namespace') or 'default'}/{name}")

    def _compose(self, integ: Integration, key: str, obj: Obj) -> tuple[Workload, Obj] | None:
        """The Workload for ``obj``: (model, API body); None (reported) on bad input."""
        sync = self.ctx.sync
        errors = self.errors[integ.lower_kind]
        try:
            composed = compose(
                integ,
                obj,
                workload_priority_classes=sync.workload_priority_classes,
                priority_classes=sync.priority_classes,
            )
        except IntegrationError as err:
            errors.report(key, obj, err)
            return None
        errors.clear(key)
        return composed

    # -- the reconcile ------------------------------------------------------------------------

    async def reconcile(self, lower_kind: str, key: str) -> None:
        ctx = self.ctx
        integ = self.kinds[lower_kind]
        obj = self.current(lower_kind, key)
        if obj is None or not self.managed(integ, obj):
            self._equivalent.pop((lower_kind, key), None)
            return
        resolved = self.resolved(integ, key, obj)
        if resolved is None:
            return
        obj = resolved
        ancestor = await self.ancestor(integ, key, obj)
        if ancestor is not None:  # its ancestor's integration admits it (a JobSet's Jobs)
            self._equivalent.pop((lower_kind, key), None)
            if ancestor is not False:
                assert isinstance(ancestor, dict)
                await self._suspend_child(integ, key, obj, ancestor)
            return
        wkey = self.workload_key(integ, obj)
        ctx.job_index.add((lower_kind, key), wkey)
        wl = ctx.writer.workload(wkey)
        prebuilt = bool(prebuilt_name(obj))
        if prebuilt and not await self.prebuilt.usable(integ, key, obj, wkey, wl):
            if not integ.is_suspended(obj) and integ.finished(obj) is None:
                await self._stop(integ, key, obj, originals=None)
            return
        finished = integ.finished(obj)
        if finished is not None:
            await finish_workload(
                self.ctx, wkey, wl, succeeded=finished.succeeded, message=finished.message
            )
            return
        if wl is None or kobj.deleting(wl):
            if not integ.is_suspended(obj):
                await self._stop(integ, key, obj, originals=None)
            if wl is None:
                await self._create(integ, key, obj, wkey)
            return
        if await self._sync_reclaimable(integ, obj, wkey, wl):
            return
        originals = [original_info(ps) for ps in (wl.get("spec") or {}).get("podSets") or []]
        if (
            kobj.has_quota(wl)
            and not is_true(wl, kobj.EVICTED)
            and kobj.is_active(wl)
            and wkey not in ctx.sync.inflight
            and await self._evict_if_changed(integ, key, obj, wkey, wl)
        ):
            return
        running = (
            kobj.has_quota(wl)
            and is_true(wl, kobj.ADMITTED)
            and not is_true(wl, kobj.EVICTED)
            and kobj.is_active(wl)
        )
        if running:
            if integ.is_suspended(obj):
                await self._start(integ, key, obj, wl)
            return
        if integ.stop_step(obj, originals) is not None:
            obj = await self._stop(integ, key, obj, originals=originals) or obj
        if kobj.has_quota(wl) and wkey not in ctx.sync.inflight:
            if not kobj.is_active(wl) and not is_true(wl, kobj.EVICTED):
                ctx.enqueue(work.Workload(wkey))  # evicted first, with its reason
                return
            if (is_true(wl, kobj.EVICTED) or not kobj.is_active(wl)) and not integ.is_active(obj):
                await finish_eviction(ctx, wkey)
            return
        if wkey not in ctx.sync.inflight and not prebuilt:  # a prebuilt one is not rewritten
            await self._sync_spec(integ, key, obj, wkey, wl)

    async def _sync_reclaimable(self, integ: Integration, obj: Obj, wkey: str, wl: Obj) -> bool:
        """Kueue's reconciler step 4: ``status.reclaimablePods`` as the object reports its
        finished pods (capped at each podSet's count), so their quota is released before
        the whole object finishes. True when it was written."""
        counts = {str(ps.get("name")): int(ps.get("count") or 0)
                  for ps in (wl.get("spec") or {}).get("podSets") or []}  # fmt: skip
        want = [
            {"name": name, "count": min(n, counts[name])}
            for name, n in integ.reclaimable_pods(obj).items()
            if name in counts and n > 0
        ]
        have = [
            {"name": r.get("name"), "count": r.get("count")}
            for r in (wl.get("status") or {}).get("reclaimablePods") or []
            if isinstance(r, dict)
        ]
        if sorted(want, key=str) == sorted(have, key=str) or kobj.is_finished(wl):
            return False
        new = await self.ctx.writer.update_status(
            wkey, lambda w: None if kobj.is_finished(w) else {"reclaimablePods": want or None}
        )
        if new is None:
            return False
        self.ctx.sync.workload(wkey, new)
        return True

    async def _evict_if_changed(
        self, integ: Integration, key: str, obj: Obj, wkey: str, wl: Obj
    ) -> bool:
        """An object edited after admission (``spec.parallelism`` 1 -> 64, other
        requests) must not run on the admission of its old shape: that is a quota
        escape. Like Kueue's reconciler (``EquivalentToWorkload``), stop it: the
        Workload is evicted, the object suspended and restored, and once stopped the
        pending Workload takes the object's new shape and queues again."""
        sig = (
            str(kobj.meta(obj).get("uid")),
            kobj.generation(obj),
            str(kobj.meta(wl).get("uid")),
            kobj.generation(wl),
            kobj.references_key(integ, obj),  # a TrainJob's runtime edited after its start
        )
        if self._equivalent.get((integ.lower_kind, key)) == sig:
            return False
        composed = self._compose(integ, key, obj)
        if composed is None:  # reported on the object; running, it is counted on nothing
            why: str | None = "it no longer makes a valid Workload (its events say why)"
        else:
            why = kobj.job_mismatch(wl, composed[1], started=not integ.is_suspended(obj))
        if why is None:
            self._equivalent[(integ.lower_kind, key)] = sig
            return False
        self._equivalent.pop((integ.lower_kind, key), None)
        message = f"The job no longer matches its admitted Workload: {why}"
        log.info("%s %s: %s", integ.lower_kind, key, message)
        self.ctx.record_event(obj, "Normal", "NoMatchingWorkload", message)
        await evict(self.ctx, wkey, reason="NoMatchingWorkload", message=message)
        return True

    async def _whole(self, integ: Integration, key: str, obj: Obj) -> Obj | None:
        """``obj`` whole: the informers of the numerous kinds keep slim copies
        (:mod:`.slim`), and a Workload carries its job's whole pod templates."""
        inf = self.ctx.informers.get(self.resources[integ.lower_kind].plural)
        if inf is None or inf.slimmer is None:
            return obj
        whole = await inf.full(key, at_least=kobj.rv(obj))
        return self.resolved(integ, key, whole) if whole is not None else None

    async def _create(self, integ: Integration, key: str, obj: Obj, wkey: str) -> None:
        whole = await self._whole(integ, key, obj)
        if whole is None:
            return  # gone: its deletion event follows
        composed = self._compose(integ, key, whole)
        if composed is not None:
            await create_workload(
                self.ctx, wkey, composed[1], owner=obj, errors=self.errors[integ.lower_kind]
            )

    async def _sync_spec(self, integ: Integration, key: str, obj: Obj, wkey: str, wl: Obj) -> None:
        """Keep a pending Workload's spec (count, queue, priority, template) like its job's."""
        composed = self._compose(integ, key, obj)
        if composed is None:
            return
        drift = kobj.workload_spec_drift(wl, composed[1])
        if drift is None:
            return
        if kobj.carries_slim_template(drift):  # a changed template is written whole
            whole = await self._whole(integ, key, obj)
            composed = self._compose(integ, key, whole) if whole is not None else None
            drift = kobj.workload_spec_drift(wl, composed[1]) if composed is not None else None
            if drift is None:
                return
        ns, name = kobj.split_key(wkey)
        drift["metadata"] = {"resourceVersion": kobj.rv(wl)}
        try:
            new = await self.ctx.client.patch(WORKLOADS, name, drift, namespace=ns)
        except ApiError as err:
            if err.conflict or err.not_found:
                return  # a newer version is on its way: reconciled again then
            raise
        self.ctx.writer.remember(WORKLOADS, wkey, new)
        self.ctx.sync.workload(wkey, new)

    def admitted_infos(self, wl: Obj) -> list[PodSetInfo] | None:
        """Each podSet's PodSetInfo from the Workload's admission and its AdmissionChecks'
        podSetUpdates (None: a flavor is not known yet). Raises ``ValueError`` when an
        update conflicts with what the podSet gets (the job cannot start)."""
        adm = kobj.admission_of(wl)
        infos = []
        for ps in (wl.get("spec") or {}).get("podSets") or []:
            name = str(ps.get("name") or "main")
            names = kobj.flavors_of(adm, name)
            flavors = [self.ctx.sync.flavors[n] for n in names if n in self.ctx.sync.flavors]
            if len(flavors) != len(names):
                log.warning(
                    "workload %s: flavor(s) %s not found; not started yet", kobj.ns_key(wl), names
                )
                return None
            count = kobj.running_count(wl, name)
            info = flavor_info(
                name, count if count is not None else int(ps.get("count") or 0), flavors
            )
            if kobj.topology_assignment_of(adm, name) is not None:
                tas_info(info, wl_name=kobj.meta(wl).get("name") or "", pod_set=ps)
            conflict = apply_pod_set_updates(info, wl)
            if conflict is not None:
                raise ValueError(conflict)
            infos.append(info)
        return infos

    async def _start(self, integ: Integration, key: str, obj: Obj, wl: Obj) -> None:
        ctx = self.ctx
        try:
            infos = self.admitted_infos(wl)
        except ValueError as err:  # Kueue: no point retrying; the Workload fails
            log.warning("%s %s: not started: %s", integ.lower_kind, key, err)
            await finish_workload(ctx, kobj.ns_key(wl), wl, succeeded=False, message=str(err),
                                  reason="FailedToStart")  # fmt: skip
            return
        if infos is None:
            return
        try:
            patch = integ.run_patch(obj, infos)
        except (IntegrationError, ValueError) as err:  # podSets changed under us
            log.warning("%s %s: not started: %s", integ.lower_kind, key, err)
            return
        # bad-node memory (queues.node_health): the nodes it failed on stay excluded
        avoid = AvoidedNodes.of(kobj.meta(wl).get("annotations")).active(ctx.clock())
        patch = avoid_in_start_patch(obj, patch, avoid, podset_label=PODSET_LABEL)
        new = await self._patch(integ, key, patch)
        if new is not None:
            ctx.metrics.api_writes.labels("start-job", "ok").inc()
            cq = (kobj.admission_of(wl) or {}).get("clusterQueue", "")
            ctx.record_event(obj, "Normal", "Started", f"Admitted by clusterQueue {cq}")

    async def _stop(
        self, integ: Integration, key: str, obj: Obj, *, originals: list[PodSetInfo] | None
    ) -> Obj | None:
        """Run the integration's stop steps (``Integration.stop_step``) until the object
        is stopped or the next step must wait (a Job's pods still running). Each step is
        skipped when already done, so a retry after a failed step resumes where it
        stopped. Returns the object as last written (None when gone)."""
        ctx = self.ctx
        new: Obj | None = obj
        was_running = not integ.is_suspended(obj)
        for _ in range(4):  # a stop has at most three steps (batch/v1 Job)
            assert new is not None
            step = integ.stop_step(new, originals)
            if step is None:
                break
            new = await self._patch(integ, key, step.patch, subresource=step.subresource)
            if new is None:
                return None
        if was_running and new is not None and integ.is_suspended(new):
            ctx.metrics.api_writes.labels("stop-job", "ok").inc()
            ctx.record_event(obj, "Normal", "Stopped", "Not admitted by cluster queue")
        return new

    async def _patch(
        self, integ: Integration, key: str, body: Obj, *, subresource: str | None = None
    ) -> Obj | None:
        return await self.ctx.writer.patch_object(
            self.resources[integ.lower_kind], key, body, subresource=subresource
        )

    # -- workloads without (or without a live) job ----------------------------------------------

    async def reconcile_workload(self, wkey: str) -> None:
        ctx = self.ctx
        wl = ctx.writer.workload(wkey)
        if wl is None or kobj.deleting(wl) or kobj.is_finished(wl):
            return
        owner = owner_of(ctx, wl)
        job_key: str | None = None
        if owner is not None:
            integ, job_key, uid = owner
            inf = ctx.informers[integ.resource.plural]
            if not inf.synced.is_set():
                return  # cannot tell an orphan from a job not listed yet
            job = self.current(integ.lower_kind, job_key) if job_key else None
            if job is None and not job_key:
                job = next((j for j in inf.store.values() if kobj.meta(j).get("uid") == uid), None)
                job_key = kobj.ns_key(job) if job is not None else None
            if job is None or kobj.meta(job).get("uid") != uid:
                await delete_workload(ctx, wkey, wl, why="its job is gone")
                return
        if not kobj.has_quota(wl) or wkey in ctx.sync.inflight:
            return
        if not kobj.is_active(wl) and not is_true(wl, kobj.EVICTED):
            reason, message = kobj.deactivation_eviction(wl)
            await evict(ctx, wkey, reason=reason, message=message,
                        also=kobj.without_deactivation_target)  # fmt: skip
            return
        drained = drained_queue(ctx, wl)
        if drained is not None and not is_true(wl, kobj.EVICTED):
            await evict(ctx, wkey, reason=f"{drained}Stopped", message=f"The {drained} is stopped")
            return
        if owner is not None and job_key:
            ctx.enqueue(work.Job(owner[0].lower_kind, job_key))
            return
        if is_true(wl, kobj.EVICTED) or not kobj.is_active(wl):
            await finish_eviction(ctx, wkey)


def drained_queue(ctx: Context, wl: Obj) -> str | None:
    """``"ClusterQueue"`` or ``"LocalQueue"`` when the queue holding this workload's quota
    has ``stopPolicy: HoldAndDrain``: Kueue evicts its admitted workloads (reasons
    ``ClusterQueueStopped`` / ``LocalQueueStopped``); ``Hold`` keeps them running."""
    cq = ctx.sync.cluster_queues.get((kobj.admission_of(wl) or {}).get("clusterQueue", ""))
    if cq is not None and cq.stop_policy == HOLD_AND_DRAIN:
        return "ClusterQueue"
    queue = (wl.get("spec") or {}).get("queueName")
    lq = ctx.sync.local_queues.get(f"{kobj.meta(wl).get('namespace')}/{queue}")
    if lq is not None and lq.stop_policy == HOLD_AND_DRAIN:
        return "LocalQueue"
    return None
