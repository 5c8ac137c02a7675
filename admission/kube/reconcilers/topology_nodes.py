"""Nodes, bound pods and node failures for topology-aware scheduling.

Placement reads what the cluster's nodes have free (``admission.engine.tas.domains``). This module
feeds it from two informers the service runs besides its own objects' (Kueue's
tas nodesCache, pod_usage_controller and node_controller):

* **Nodes** (all of them: a flavor selects nodes by labels, and which labels matter
  changes with the flavors). Only labels, taints, ``unschedulable``, Ready and
  allocatable are kept (``slim_node``), as Kueue's ``copyAndStripNode``.
* **Bound pods** — ``fieldSelector=spec.nodeName!=``: a pod uses its node once it is
  bound, whatever manages it, until it finishes. Pods of TAS podSets are skipped (their
  Workload's topology assignment already counts them). Only what usage needs is kept
  (``slim_pod``): a cluster's pods are many.

Node failures (replacement of a TAS workload's failed node included) are
:mod:`.node_failures`'.

**The topology ungater** (:class:`TopologyUngater`): the pods of a started job kind
(Job, JobSet, …) wait behind the ``kueue.x-k8s.io/topology`` gate and are ungated one
by one with their domain's node selector (``tas_ungate``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from admission.engine.tas.nodes import NodeInputError, node_from_object, pod_usage_from_object
from admission.integrations.framework.podset_info import PodSetInfo
from admission.integrations.kinds.pod import ungate_patch
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import PODS
from admission.kube.client.rest import JSON_PATCH
from admission.kube.control import work
from admission.kube.control.context import TAS_PODS, Context
from admission.kube.control.tas_ungate import topology_domains
from admission.kube.watch.grouped_pods import GroupedPods
from admission.kube.watch.informer import DELETED
from queues.api.conditions import is_true
from queues.api.labels import PODSET as PODSET_LABEL
from queues.api.labels import SAFE_TO_FORCEFULLY_DELETE
from queues.api.labels import WORKLOAD as WORKLOAD_ANNOTATION
from queues.api.progress import CHECKPOINT_ANNOTATION, DEADLINE_ANNOTATION

log = logging.getLogger("quartermaster.kube.topology")

Obj = dict[str, Any]
BOUND_POD_SELECTOR = "spec.nodeName!="
# kept of a bound pod's annotations: training progress (.notices), its TAS Workload and
# the opt-in to being force-failed when stuck terminating (.node_failures, .stuck_pods)
KEPT_ANNOTATIONS = frozenset(
    {CHECKPOINT_ANNOTATION, DEADLINE_ANNOTATION, WORKLOAD_ANNOTATION, SAFE_TO_FORCEFULLY_DELETE}
)


def slim_node(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {k: meta[k] for k in ("name", "labels", "resourceVersion", "uid") if k in meta},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {
            "allocatable": status.get("allocatable") or {},
            "conditions": [
                c
                for c in status.get("conditions") or []
                if isinstance(c, dict) and c.get("type") == "Ready"
            ],
        },
    }


def slim_pod(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    containers = [
        {"name": c.get("name"), "resources": c.get("resources") or {}}
        | ({"restartPolicy": c["restartPolicy"]} if "restartPolicy" in c else {})
        for c in spec.get("containers") or []
        if isinstance(c, dict)
    ]
    init = [
        {"name": c.get("name"), "resources": c.get("resources") or {}}
        | ({"restartPolicy": c["restartPolicy"]} if "restartPolicy" in c else {})
        for c in spec.get("initContainers") or []
        if isinstance(c, dict)
    ]
    slim_spec: Obj = {"nodeName": spec.get("nodeName"), "containers": containers}
    if init:
        slim_spec["initContainers"] = init
    for k in ("overhead", "resources"):
        if k in spec:
            slim_spec[k] = spec[k]
    ann = meta.get("annotations") or {}
    slim_meta: Obj = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "resourceVersion": meta.get("resourceVersion"),
        # TAS placement, and the training-progress signals (admission.kube.reconcilers.notices)
        "annotations": {
            k: v
            for k, v in ann.items()
            if k.startswith("kueue.x-k8s.io/podset-") or k in KEPT_ANNOTATIONS
        },
    }
    for k in ("deletionTimestamp", "deletionGracePeriodSeconds"):  # stuck terminating?
        if k in meta:
            slim_meta[k] = meta[k]
    if PODSET_LABEL in (meta.get("labels") or {}):
        # a pod of an admitted job: its job object (its checkpoints count for that job's
        # Workload, and it gets the job's eviction deadline); other pods keep no owner
        owner = [
            {k: r[k] for k in ("apiVersion", "kind", "name", "uid", "controller") if k in r}
            for r in meta.get("ownerReferences") or []
            if isinstance(r, dict) and r.get("controller")
        ]
        if owner:
            slim_meta["ownerReferences"] = owner
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": slim_meta,
        "spec": slim_spec,
        "status": {"phase": (obj.get("status") or {}).get("phase")},
    }


class TopologyWatch:
    """Informer handlers for Nodes and bound pods: what placement counts as capacity."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    # -- informer handlers --------------------------------------------------------------

    def on_node(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        ctx = self.ctx
        if event == DELETED or new is None:
            ctx.sync.apply(lambda: ctx.cache.delete_node(key))
            return
        try:
            node = node_from_object(new)
        except NodeInputError as err:
            log.error("ignoring Node %s: %s", key, err)
            return

        def apply() -> None:
            if ctx.cache.set_node(node):  # a heartbeat changes nothing placement reads
                ctx.wake()

        ctx.sync.apply(apply)

    def on_pod(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        ctx = self.ctx
        usage = None
        if event != DELETED and new is not None:
            try:
                usage = pod_usage_from_object(new)
            except NodeInputError as err:
                log.warning("pod %s: its usage is not counted: %s", key, err)

        def apply() -> None:
            if ctx.cache.set_pod(key, usage):  # its node's capacity is free again
                ctx.wake()

        ctx.sync.apply(apply)


# -- the topology ungater for job kinds ------------------------------------------------------

TAS_POD_SELECTOR = PODSET_LABEL  # Kueue's podset label: every pod started from our templates


def slim_tas_pod(obj: Obj) -> Obj:
    """What the ungater reads of a job kind's pod: its Workload annotation and index
    labels, podSet label, gates, node selector, phase."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **{k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                    "creationTimestamp", "deletionTimestamp") if k in meta},
            "labels": dict(meta.get("labels") or {}),
            "annotations": {
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if k.startswith("kueue.x-k8s.io/") or k.startswith("batch.kubernetes.io/")
            },
        },
        "spec": {k: spec[k] for k in ("schedulingGates", "nodeSelector", "nodeName") if k in spec},
        "status": {"phase": (obj.get("status") or {}).get("phase")},
    }  # fmt: skip


def workload_key_of_pod(pod: Obj | None) -> str | None:
    """``namespace/workload`` of a TAS pod (Kueue's ``kueue.x-k8s.io/workload`` annotation)."""
    meta = (pod or {}).get("metadata") or {}
    name = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
    return f"{meta.get('namespace') or 'default'}/{name}" if name else None


def admitted_by_tas(wl: Obj | None) -> bool:
    """Kueue's IsAdmittedByTAS: admitted, and a podSet has a topology assignment."""
    adm = kobj.admission_of(wl)
    return (
        wl is not None
        and is_true(wl, kobj.ADMITTED)
        and any(
            isinstance(psa, dict) and psa.get("topologyAssignment")
            for psa in (adm or {}).get("podSetAssignments") or []
        )
    )


class TopologyUngater:
    """Kueue's TopologyUngater for the job kinds (Job, JobSet, the Kubeflow and Ray
    kinds …): their started templates carry the topology gate and the Workload
    annotation (``integrations.base.tas_info``), so every pod they create waits; each is
    ungated, once, with its assigned domain's node selector (:mod:`admission.kube.control.tas_ungate`), so
    the kube-scheduler puts it inside the domain placement charged. Pod groups ungate
    their own pods (:mod:`.podgroups`), with the same assignment.

    Keyed by Workload; reads pods from the ``taspods`` informer (pods labelled
    ``kueue.x-k8s.io/podset``), with read-your-writes: a pod this replica ungated is not
    ungated again from a stale informer copy (Kueue's expectations)."""

    def __init__(self, ctx: Context, *, unhealthy: Callable[[str], set[str]]) -> None:
        self.ctx = ctx
        self.unhealthy = unhealthy  # workload key -> nodes awaiting a replacement
        self.grouped = GroupedPods(TAS_PODS)  # workload key -> its pods

    def on_pod(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        wkey = workload_key_of_pod(new or old)
        if wkey is None:
            return
        self.grouped.on_event(event, key, wkey)
        self.ctx.enqueue(work.TasUngate(wkey))

    def pods(self, wkey: str) -> list[Obj]:
        return self.grouped.pods(self.ctx.informers, wkey)

    async def reconcile(self, wkey: str) -> None:
        ctx = self.ctx
        inf = ctx.informers.get(TAS_PODS)
        if inf is None or not inf.synced.is_set():
            return
        wl = ctx.writer.workload(wkey)
        if not admitted_by_tas(wl) or is_true(wl, kobj.EVICTED) or kobj.deleting(wl):
            return  # not (or no longer) placed: an evicted job is being stopped
        assert wl is not None
        pods = [p for p in self.pods(wkey) if not kobj.deleting(p)]
        domains = topology_domains(
            wl, pods, lambda p: str((kobj.meta(p).get("labels") or {}).get(PODSET_LABEL) or ""),
            unhealthy=self.unhealthy(wkey),
        )  # fmt: skip
        ungated = 0
        for pod in pods:
            selector = domains.get(kobj.ns_key(pod))
            if selector is None:
                continue
            patch, kept = ungate_patch(pod, PodSetInfo(name="", count=0), selector)
            for k in kept:
                log.warning("pod %s: nodeSelector %s kept (its domain wants another value)",
                            kobj.ns_key(pod), k)  # fmt: skip
            if patch is not None and await self._patch(pod, patch):
                ungated += 1
        if ungated:
            ctx.metrics.api_writes.labels("ungate-pods", "ok").inc()
            log.info("workload %s: %d pod(s) ungated into their topology domains", wkey, ungated)

    async def _patch(self, pod: Obj, patch: list[Obj]) -> bool:
        key = kobj.ns_key(pod)
        ns, name = kobj.split_key(key)
        try:
            new = await self.ctx.client.patch(
                PODS, name, patch, namespace=ns, content_type=JSON_PATCH
            )
        except ApiError as err:
            if err.not_found or err.conflict or err.status == 422:
                return False  # a newer version is on its way: reconciled again then
            raise
        if isinstance(new, dict) and kobj.meta(new).get("name"):
            self.grouped.wrote(key, slim_tas_pod(new))
        return True
