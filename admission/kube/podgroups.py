"""Plain Pod gangs ⇄ Workloads (Kueue's pod-group integration, docs/semantics.md §2, §3.4).

Frameworks that create bare pods (Ray, MPI, Spark, Argo, …) get all-or-nothing
admission by labelling their pods ``kueue.x-k8s.io/pod-group-name`` and annotating
them ``kueue.x-k8s.io/pod-group-total-count``; the pod webhook keeps each managed pod
behind the scheduling gate ``kueue.x-k8s.io/admission`` with the finalizer
``kueue.x-k8s.io/managed``. This module is the controller side, level-based like
:mod:`.jobs`: each call looks at the group's pods (the Pods informer, managed pods
only) and its Workload and does the next step:

* once the group's live pods reach the total count, one Workload named after the
  group is created: one podSet per pod shape (``main`` when all pods are alike), the
  queue from the ``queue-name`` label, priority resolved as for Jobs;
* an admitted Workload (only ever after the admission write succeeded) ungates every
  pod of the group, adding its podSet's flavors' nodeSelector and tolerations — the
  additions a gated pod allows — in one JSON patch guarded by ``test`` operations;
* all pods Succeeded/Failed finish the Workload (``Succeeded`` if all succeeded) and
  release its quota at once, through the Job path (:meth:`.jobs.JobReconciler.finish`);
  then the finalizers of the terminated pods are removed;
* an evicted (or deactivated) Workload gets its pods deleted (Kueue's behaviour for
  plain pods; the finalizer is lifted from deleting pods) and, once none is left
  running, its admission is cleared and the quota released (:func:`.jobs.finish_eviction`);
* a Workload without quota whose pods are all gone is deleted (what the garbage
  collector does to Kueue's pod-owned group Workloads).

Gaps against Kueue: single (ungrouped) managed pods get no Workload; no ownerReferences
from the Workload to the pods; no ``fast-admission``, ``serving`` or
``retriable-in-group`` handling; a pending Workload is not resized when pods change.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from admission.integrations.job import QUEUE_NAME_LABEL, JobError, workload_priority
from queues.labels import ADMISSION_GATE
from queues.labels import IS_GROUP_WORKLOAD as IS_GROUP_WORKLOAD_ANNOTATION
from queues.labels import MANAGED as MANAGED_LABEL
from queues.labels import MANAGED as POD_FINALIZER
from queues.labels import POD_GROUP_NAME as GROUP_NAME_LABEL
from queues.labels import POD_GROUP_TOTAL_COUNT as GROUP_TOTAL_COUNT_ANNOTATION
from queues.labels import ROLE_HASH as ROLE_HASH_ANNOTATION
from queues.model import ResourceFlavor
from queues.pods import PodSpecError, podset_from_template
from queues.quantity import QuantityError

from . import objects as o
from .client import JSON_PATCH, PODS, WORKLOADS, ApiError
from .context import Context, Obj
from .informer import DELETED, newer, rv_at_least
from .jobs import JobReconciler, finish_eviction

log = logging.getLogger("quartermaster.kube.podgroups")

POD_SELECTOR = f"{MANAGED_LABEL}=true"
DEFAULT_POD_SET = "main"
_SHAPE_FIELDS = ("nodeSelector", "affinity", "tolerations", "runtimeClassName", "priority")
_TERMINATED = ("Succeeded", "Failed")


class PodGroupError(ValueError):
    """A pod group whose pods cannot make a Workload (named pod and field in the message)."""


# -- pure helpers on raw pods ---------------------------------------------------------------


def group_key(pod: Mapping[str, Any] | None) -> str | None:
    """``namespace/group-name`` of a pod in a gang, None for other pods."""
    labels = o.meta(pod).get("labels") or {}
    name = labels.get(GROUP_NAME_LABEL)
    if not isinstance(name, str) or not name:
        return None
    return f"{o.meta(pod).get('namespace') or 'default'}/{name}"


def is_group_workload(wl: Mapping[str, Any] | None) -> bool:
    return (o.meta(wl).get("annotations") or {}).get(IS_GROUP_WORKLOAD_ANNOTATION) == "true"


def terminated(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in _TERMINATED


def succeeded(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) == "Succeeded"


def _gate_index(pod: Mapping[str, Any]) -> int | None:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    for i, g in enumerate(gates):
        if isinstance(g, dict) and g.get("name") == ADMISSION_GATE:
            return i
    return None


def gated(pod: Mapping[str, Any]) -> bool:
    return _gate_index(pod) is not None


def _finalizer_index(pod: Mapping[str, Any]) -> int | None:
    for i, f in enumerate(o.meta(pod).get("finalizers") or []):
        if f == POD_FINALIZER:
            return i
    return None


def total_count(pod: Mapping[str, Any]) -> int:
    """The pod's ``pod-group-total-count`` annotation; PodGroupError when absent or bad."""
    raw = (o.meta(pod).get("annotations") or {}).get(GROUP_TOTAL_COUNT_ANNOTATION)
    where = f'pod {o.ns_key(pod)}: metadata.annotations["{GROUP_TOTAL_COUNT_ANNOTATION}"]'
    if raw is None:
        raise PodGroupError(f"{where}: required")
    try:
        n = int(str(raw).strip())
    except ValueError:
        raise PodGroupError(f"{where}: expected an integer, got {raw!r}") from None
    if n < 1:
        raise PodGroupError(f"{where}: must be at least 1, got {n}")
    return n


def shape_of(pod: Mapping[str, Any]) -> str:
    """The pod's role: the webhook's ``role-hash`` annotation, else a hash of the
    admission-relevant spec (containers' requests, scheduling constraints)."""
    ann = (o.meta(pod).get("annotations") or {}).get(ROLE_HASH_ANNOTATION)
    if isinstance(ann, str) and ann:
        return ann
    spec = pod.get("spec") or {}
    shape: Obj = {k: spec[k] for k in _SHAPE_FIELDS if spec.get(k) is not None}
    for key in ("initContainers", "containers"):
        shape[key] = [
            {f: c.get(f) for f in ("image", "resources") if isinstance(c, dict)}
            for c in spec.get(key) or []
        ]
    raw = json.dumps(shape, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:8]


def pod_set_names(pods: list[Obj]) -> dict[str, str]:
    """shape -> podSet name: ``main`` when all pods are alike, else the shapes."""
    shapes = sorted({shape_of(p) for p in pods})
    if len(shapes) == 1:
        return {shapes[0]: DEFAULT_POD_SET}
    return {s: s for s in shapes}


def _template(pod: Mapping[str, Any]) -> Obj:
    spec = copy.deepcopy(pod.get("spec") or {})
    for key in ("schedulingGates", "nodeName"):
        spec.pop(key, None)
    tmpl: Obj = {"spec": spec}
    labels = {
        k: v
        for k, v in (o.meta(pod).get("labels") or {}).items()
        if not str(k).startswith("kueue.x-k8s.io/")
    }
    if labels:
        tmpl["metadata"] = {"labels": labels}
    return tmpl


def workload_for_group(
    gkey: str,
    pods: list[Obj],
    *,
    workload_priority_classes: Mapping[str, Any],
    priority_classes: Mapping[str, Any],
) -> Obj:
    """The Workload for a complete group: one podSet per shape (pods sorted by name)."""
    if not pods:
        raise PodGroupError(f"pod group {gkey}: no pods")
    pods = sorted(pods, key=o.ns_key)
    first = pods[0]
    labels = o.meta(first).get("labels") or {}
    ns, name = o.split_key(gkey)
    names = pod_set_names(pods)
    by_shape: dict[str, list[Obj]] = {}
    for p in pods:
        by_shape.setdefault(shape_of(p), []).append(p)
    pod_sets: list[Obj] = []
    for shape, members in sorted(by_shape.items(), key=lambda kv: names[kv[0]]):
        tmpl = _template(members[0])
        ref = o.ns_key(members[0])
        if not (tmpl["spec"].get("containers") or []):
            raise PodGroupError(f"pod {ref}: spec.containers: at least one container is required")
        try:
            podset_from_template(name=names[shape], count=len(members), template=tmpl)
        except (QuantityError, PodSpecError) as err:
            raise PodGroupError(f"pod {ref}: spec: {err}") from err
        pod_sets.append({"name": names[shape], "count": len(members), "template": tmpl})
    try:
        pc_name, pc_kind, priority = workload_priority(
            labels=labels,
            pod_spec=first.get("spec") or {},
            ref=o.ns_key(first),
            workload_priority_classes=workload_priority_classes,
            priority_classes=priority_classes,
        )
    except JobError as err:
        raise PodGroupError(str(err).replace("job ", "pod ", 1)) from err
    spec: Obj = {
        "podSets": pod_sets,
        "queueName": str(labels.get(QUEUE_NAME_LABEL) or ""),
        "priority": priority,
    }
    if pc_name:
        group = "scheduling.k8s.io" if pc_kind == "PriorityClass" else "kueue.x-k8s.io"
        spec["priorityClassRef"] = {"group": group, "kind": pc_kind, "name": pc_name}
    body: Obj = {
        "apiVersion": o.KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": {IS_GROUP_WORKLOAD_ANNOTATION: "true"},
        },
        "spec": spec,
    }
    return body


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def ungate_patch(pod: Mapping[str, Any], *, flavors: list[ResourceFlavor]) -> list[Obj] | None:
    """JSON patch lifting the admission gate and adding the flavors' nodeSelector and
    tolerations (the changes a gated pod allows); None when the pod is not gated.
    A nodeSelector key the pod already sets to another value is left alone."""
    idx = _gate_index(pod)
    if idx is None:
        return None
    spec = pod.get("spec") or {}
    ops: list[Obj] = [
        {"op": "test", "path": f"/spec/schedulingGates/{idx}/name", "value": ADMISSION_GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{idx}"},
    ]
    have_ns = spec.get("nodeSelector") or {}
    add_ns: dict[str, str] = {}
    for flv in flavors:
        for k, v in flv.node_labels.items():
            if k not in have_ns:
                add_ns[k] = v
            elif have_ns[k] != v:
                log.warning(
                    "pod %s: nodeSelector %s=%s kept (flavor wants %s)",
                    o.ns_key(pod),
                    k,
                    have_ns[k],
                    v,
                )
    if add_ns and not spec.get("nodeSelector"):
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": add_ns})
    else:
        ops += [
            {"op": "add", "path": f"/spec/nodeSelector/{_pointer(k)}", "value": v}
            for k, v in add_ns.items()
        ]
    have_tol = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    new_tol: list[Obj] = []
    for flv in flavors:
        for t in flv.tolerations:
            tj = o.toleration_json(t)
            if tj not in have_tol and tj not in new_tol:
                new_tol.append(tj)
    if new_tol and not spec.get("tolerations"):
        ops.append({"op": "add", "path": "/spec/tolerations", "value": new_tol})
    else:
        ops += [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in new_tol]
    return ops


def unfinalize_patch(pod: Mapping[str, Any]) -> list[Obj] | None:
    """JSON patch removing our finalizer; None when the pod does not carry it."""
    idx = _finalizer_index(pod)
    if idx is None:
        return None
    path = f"/metadata/finalizers/{idx}"
    return [{"op": "test", "path": path, "value": POD_FINALIZER}, {"op": "remove", "path": path}]


# -- the reconciler --------------------------------------------------------------------------


class PodGroupReconciler:
    """Reconciles pod groups, keyed ``namespace/group-name`` (= the Workload's key)."""

    def __init__(self, ctx: Context, jobs: JobReconciler) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self.index: dict[str, set[str]] = {}  # group key -> pod keys
        self.latest: dict[str, Obj] = {}  # pod key -> our last write (read-your-writes)
        self._bad: dict[str, str] = {}  # group key -> last composition error (logged once)

    # -- events and reads ---------------------------------------------------------------------

    def on_pod(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        """Pods informer handler: keep the group index, queue the group."""
        gkey = group_key(new or old)
        if gkey is None:
            return
        if event == DELETED:
            self.latest.pop(key, None)
            members = self.index.get(gkey)
            if members is not None:
                members.discard(key)
                if not members:
                    del self.index[gkey]
        else:
            self.index.setdefault(gkey, set()).add(key)
        self.ctx.enqueue("podgroup", gkey)

    def owns(self, wkey: str) -> bool:
        """Whether the Workload ``wkey`` is a pod group's (reconciled here, not as a Job's)."""
        return is_group_workload(self.ctx.writer.workload(wkey))

    def group_keys(self) -> list[str]:
        return list(self.index)

    def _pod(self, key: str) -> Obj | None:
        inf = self.ctx.informers.get(PODS.plural)
        stored = inf.get(key) if inf is not None else None
        mine = self.latest.get(key)
        if mine is None:
            return stored
        if stored is not None and rv_at_least(stored, o.rv(mine)):
            del self.latest[key]
            return stored
        return newer(stored, mine)

    def pods(self, gkey: str) -> list[Obj]:
        out = [p for k in sorted(self.index.get(gkey, ())) if (p := self._pod(k)) is not None]
        return out

    # -- the reconcile ------------------------------------------------------------------------

    async def reconcile(self, gkey: str) -> None:
        ctx = self.ctx
        inf = ctx.informers.get(PODS.plural)
        if inf is None or not inf.synced.is_set():
            return  # cannot tell a missing pod from one not listed yet
        wl = ctx.writer.workload(gkey)
        if wl is not None and not is_group_workload(wl):
            return  # a Workload of the same name that is not a group's: leave it alone
        pods = self.pods(gkey)
        live = [p for p in pods if not terminated(p) and not o.deleting(p)]
        never_ran = [p for p in pods if o.deleting(p) and gated(p)]
        if never_ran:  # a deleted pod that never ran has nothing left to account for
            await self._unfinalize(never_ran)
        if wl is None:
            if pods and all(terminated(p) or o.deleting(p) for p in pods):
                await self._unfinalize(p for p in pods)
            elif live:
                await self._create(gkey, live)
            return
        if o.deleting(wl):
            return
        if o.is_finished(wl):
            await self._unfinalize(p for p in pods if terminated(p) or o.deleting(p))
            return
        if gkey in ctx.sync.inflight:
            return
        holds = o.has_quota(wl)
        evicting = holds and (o.is_true(wl, o.EVICTED) or not o.is_active(wl))
        if evicting:
            await self._stop(gkey, pods)
            return
        if not pods:
            if holds:
                await self.jobs.finish(gkey, wl, succeeded=False, message="The pods were deleted")
            else:
                await self._delete_workload(gkey, wl)
            return
        ended = [p for p in pods if terminated(p)]
        if ended and not [p for p in pods if not terminated(p)]:
            ok = all(succeeded(p) for p in ended)
            n_ok = sum(1 for p in ended if succeeded(p))
            message = f"Pods succeeded: {n_ok}/{len(ended)}."
            await self.jobs.finish(gkey, wl, succeeded=ok, message=message)
            new = ctx.writer.workload(gkey)
            if o.is_finished(new):
                await self._unfinalize(ended)
            return
        keep, excess = self._split_excess(wl, live)
        if excess:
            await self._delete_excess(gkey, excess)
        if holds and o.is_true(wl, o.ADMITTED) and o.is_active(wl):
            await self._ungate(gkey, wl, keep)

    def _role_of(self, wl: Obj, live: list[Obj]) -> Callable[[Obj], str]:
        """podSet name of each pod: by its shape, or ``main`` for a one-podSet group."""
        names = pod_set_names(live) if live else {}
        wl_sets = {ps.get("name") for ps in (wl.get("spec") or {}).get("podSets") or []}
        if wl_sets == {DEFAULT_POD_SET}:
            return lambda pod: DEFAULT_POD_SET
        return lambda pod: names.get(shape_of(pod), DEFAULT_POD_SET)

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
            key=lambda p: (gated(p), str(o.meta(p).get("creationTimestamp") or ""), o.ns_key(p)),
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
            ns, name = o.split_key(o.ns_key(pod))
            uid = str(o.meta(pod).get("uid") or "") or None
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
            if len(live) < total:
                return  # the gang is not complete yet
            body = workload_for_group(
                gkey,
                sorted(live, key=o.ns_key)[:total],
                workload_priority_classes=ctx.sync.workload_priority_classes,
                priority_classes=ctx.sync.priority_classes,
            )
        except PodGroupError as err:
            if self._bad.get(gkey) != str(err):
                self._bad[gkey] = str(err)
                log.warning("cannot build a Workload for pod group %s: %s", gkey, err)
                ctx.record_event(live[0], "Warning", "ErrWorkloadCompose", str(err))
            return
        self._bad.pop(gkey, None)
        ns, _ = o.split_key(gkey)
        try:
            created = await ctx.client.create(WORKLOADS, body, namespace=ns)
        except ApiError as err:
            if err.conflict:
                return  # already exists: the informer will deliver it
            ctx.metrics.api_writes.labels("create-workload", "error").inc()
            if err.retryable:
                raise
            log.warning("creating Workload for pod group %s failed: %s", gkey, err)
            ctx.record_event(live[0], "Warning", "ErrWorkloadCompose", err.message)
            return
        ctx.metrics.api_writes.labels("create-workload", "ok").inc()
        created.setdefault("apiVersion", WORKLOADS.api_version)
        created.setdefault("kind", WORKLOADS.kind)
        ctx.writer.remember(WORKLOADS, gkey, created)
        ctx.sync.workload(gkey, created)
        ctx.record_event(created, "Normal", "CreatedWorkload", f"Created Workload: {gkey}")

    async def _ungate(self, gkey: str, wl: Obj, live: list[Obj]) -> None:
        ctx = self.ctx
        adm = o.admission_of(wl)
        # podSet names come from the Workload when all its podSets are shapes of these pods
        role = self._role_of(wl, live)
        started = 0
        for pod in live:
            if not gated(pod):
                continue
            ps = role(pod)
            wanted = o.flavors_of(adm, ps)
            flavors = [ctx.sync.flavors[n] for n in wanted if n in ctx.sync.flavors]
            if len(flavors) != len(wanted):
                log.warning("pod group %s: flavor(s) %s not found; not ungated yet", gkey, wanted)
                return
            patch = ungate_patch(pod, flavors=flavors)
            if patch is not None and await self._patch(pod, patch):
                started += 1
        if started:
            ctx.metrics.api_writes.labels("ungate-pods", "ok").inc()
            cq = (adm or {}).get("clusterQueue", "")
            ctx.record_event(wl, "Normal", "Started", f"Admitted by clusterQueue {cq}")

    async def _stop(self, gkey: str, pods: list[Obj]) -> None:
        """Evicted: delete the group's pods; release the quota once none is running."""
        ctx = self.ctx
        for pod in pods:
            if not terminated(pod) and not o.deleting(pod):
                ns, name = o.split_key(o.ns_key(pod))
                uid = str(o.meta(pod).get("uid") or "") or None
                try:
                    await ctx.client.delete(PODS, name, namespace=ns, uid=uid)
                except ApiError as err:
                    if not (err.not_found or err.conflict):
                        raise
        await self._unfinalize(p for p in pods if o.deleting(p) or terminated(p))
        remaining = [p for p in self.pods(gkey) if not terminated(p)]
        if not remaining:
            await finish_eviction(ctx, gkey)

    async def _delete_workload(self, gkey: str, wl: Obj) -> None:
        ns, name = o.split_key(gkey)
        uid = str(o.meta(wl).get("uid") or "") or None
        try:
            await self.ctx.client.delete(WORKLOADS, name, namespace=ns, uid=uid)
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise
        log.info("deleted Workload %s: the pods of its group are gone", gkey)
        self.ctx.sync.workload(gkey, None)

    async def _unfinalize(self, pods: Any) -> None:
        for pod in list(pods):
            patch = unfinalize_patch(pod)
            if patch is not None:
                await self._patch(pod, patch)

    async def _patch(self, pod: Obj, patch: list[Obj]) -> bool:
        """One guarded JSON patch; a failed ``test`` (422) or a gone pod is not an error:
        a newer version is on its way and the group is reconciled again then."""
        key = o.ns_key(pod)
        ns, name = o.split_key(key)
        try:
            new = await self.ctx.client.patch(
                PODS, name, patch, namespace=ns, content_type=JSON_PATCH
            )
        except ApiError as err:
            if err.not_found or err.conflict or err.status == 422:
                return False
            raise
        if isinstance(new, dict) and o.meta(new).get("name"):
            new.setdefault("apiVersion", PODS.api_version)
            new.setdefault("kind", PODS.kind)
            if o.deleting(new) and not o.meta(new).get("finalizers"):
                self.latest.pop(key, None)
            else:
                self.latest[key] = new
        return True
