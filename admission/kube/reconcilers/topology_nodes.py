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

**Node failure.** When a node named in an admitted workload's topology assignment is
deleted, or has been NotReady for ``NODE_FAILURE_DELAY`` (Kueue's 30 s), its pods are
moved to healthy nodes with room inside the same domain (Kueue's node replacement):
the new assignment is charged and written to ``status.admission``, with a
``NodeReplaced`` Event, and the replacement pods are ungated onto the new hosts. When
the domain has no room (or two of the workload's nodes failed at once) the workload is
evicted with reason ``NodeFailures`` and an Event, and is queued again, so it is placed
anew on healthy nodes. Pods are not ungated onto a failed node meanwhile.

**The topology ungater** (:class:`TopologyUngater`): the pods of a started job kind
(Job, JobSet, …) wait behind the ``kueue.x-k8s.io/topology`` gate and are ungated one
by one with their domain's node selector (``tas_ungate``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from admission.engine.tas.admission import node_replacement
from admission.engine.tas.domains import HOSTNAME
from admission.engine.tas.nodes import NodeInputError, node_from_object, pod_usage_from_object
from admission.integrations.framework.podset_info import PodSetInfo
from admission.integrations.kinds.pod import ungate_patch
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import JSON_PATCH, PODS
from admission.kube.control import work
from admission.kube.control.context import TAS_PODS, Context
from admission.kube.control.tas_ungate import topology_domains
from admission.kube.control.workloads import evict
from admission.kube.watch.grouped_pods import GroupedPods
from admission.kube.watch.informer import DELETED
from queues.api.conditions import condition, is_true
from queues.api.labels import PODSET as PODSET_LABEL
from queues.api.labels import WORKLOAD as WORKLOAD_ANNOTATION
from queues.api.progress import CHECKPOINT_ANNOTATION, DEADLINE_ANNOTATION
from queues.api.topology_assignment import to_v1beta2
from queues.model import TopologyAssignment
from queues.times import rfc3339_seconds

log = logging.getLogger("quartermaster.kube.topology")

Obj = dict[str, Any]
BOUND_POD_SELECTOR = "spec.nodeName!="
PROGRESS_ANNOTATIONS = frozenset({CHECKPOINT_ANNOTATION, DEADLINE_ANNOTATION})
NODE_FAILURE_DELAY = 30.0  # Kueue's tas.NodeFailureDelay
NODE_FAILURES = "NodeFailures"  # Kueue's WorkloadEvictedDueToNodeFailures


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
            if k.startswith("kueue.x-k8s.io/podset-") or k in PROGRESS_ANNOTATIONS
        },
    }
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


def _ready_since(node: Obj) -> tuple[bool, float | None]:
    c = condition(node, "Ready")
    if c is None:
        return True, None
    return c.get("status") == "True", rfc3339_seconds(c.get("lastTransitionTime"))


class TopologyWatch:
    """Informer handlers for Nodes and bound pods, and the node-failure check."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.failed: dict[str, float] = {}  # hostname -> when it counted as failed
        self._timers: dict[str, asyncio.TimerHandle] = {}

    # -- informer handlers --------------------------------------------------------------

    def on_node(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        ctx = self.ctx
        host = self._host(new if new is not None else old, key)
        if event == DELETED or new is None:
            ctx.sync.apply(lambda: ctx.cache.delete_node(key))
            self._node_failed(host)
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
        ready, since = _ready_since(new)
        timer = self._timers.pop(host, None)
        if timer is not None:
            timer.cancel()
        if ready:
            self.failed.pop(host, None)
            return
        waited = ctx.clock() - since if since is not None else NODE_FAILURE_DELAY
        if waited >= NODE_FAILURE_DELAY:
            self._node_failed(host)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timers[host] = loop.call_later(
            NODE_FAILURE_DELAY - waited, lambda: self._recheck(key, host)
        )

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

    # -- node failure ---------------------------------------------------------------------

    @staticmethod
    def _host(node: Obj | None, key: str) -> str:
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        return str(labels.get(HOSTNAME) or key)

    def _recheck(self, key: str, host: str) -> None:
        self._timers.pop(host, None)
        nodes = self.ctx.informers.get("nodes")
        obj = nodes.store.get(key) if nodes is not None else None
        if obj is None or not _ready_since(obj)[0]:
            self._node_failed(host)

    def _node_failed(self, host: str) -> None:
        self.failed.setdefault(host, self.ctx.clock())
        for wkey in self.affected(host):
            self.ctx.enqueue(work.NodeFailure(wkey))

    def affected(self, host: str) -> list[str]:
        """Admitted workloads whose topology assignment puts pods on ``host``."""
        out = []
        for wkey, charges in self.ctx.cache.tas_charged.items():
            for ch in charges:
                ta = ch.assignment
                if ta.levels[-1] == HOSTNAME and any(v[-1] == host for v, _ in ta.domains):
                    out.append(wkey)
                    break
        return sorted(out)

    async def handle(self, wkey: str) -> None:
        """A node of ``wkey``'s assignment failed: replace it inside its domain when
        capacity allows (Kueue's TASFailedNodeReplacement), else evict.

        One failed node at a time is replaced: its pods get the healthy nodes with room
        nearest the rest of the gang (``engine.topology.node_replacement``), the new
        assignment is charged at once and written to ``status.admission``, and the
        ungater then gives the replacement pods the new hosts. With no room there, or
        with two of its nodes failed at once, the workload is evicted with reason
        ``NodeFailures`` (Kueue's messages) and queued again."""
        ctx = self.ctx
        if ctx.writer.workload(wkey) is None:
            return
        hosts = self._failed_hosts(wkey)
        if not hosts:
            return
        if len(hosts) > 1:
            message = (
                "Workload eviction triggered due to multiple TAS assigned node failures, "
                "including: " + ", ".join(hosts)
            )
            if await evict(ctx, wkey, reason=NODE_FAILURES, message=message):
                log.info("evicted %s: node(s) %s failed", wkey, ", ".join(hosts))
            return
        host = hosts[0]
        await ctx.cache_ready()  # no cycle runs until the next await: the cache is ours
        wl = ctx.cache.workloads.get(wkey)
        if wl is None or wl.admission is None:
            return
        new, reason = node_replacement(ctx.cache.topology, ctx.cache.flavors, wl, host)
        if not new:
            message = f"Workload was evicted as there was no replacement for a failed node: {host}"
            log.info("workload %s: node %s failed and cannot be replaced: %s", wkey, host, reason)
            if await evict(ctx, wkey, reason=NODE_FAILURES, message=message):
                log.info("evicted %s: node %s failed", wkey, host)
            return
        old = ctx.cache.replace_topology_assignments(wkey, new)  # assumed until written
        try:
            written = await ctx.writer.update_status(wkey, lambda w: _with_assignments(w, new))
        except ApiError:
            ctx.sync.apply(lambda: ctx.cache.replace_topology_assignments(wkey, old))
            raise
        if written is None or not kobj.has_quota(written):
            ctx.sync.apply(lambda: ctx.cache.replace_topology_assignments(wkey, old))
            return
        added = sorted(
            {v[-1] for ta in new.values() for v, _ in ta.domains}
            - {v[-1] for ta in old.values() for v, _ in ta.domains}
        )
        message = f"Replaced failed node {host} in the topology assignment with {', '.join(added)}"
        log.info("workload %s: %s", wkey, message)
        ctx.record_event(written, "Normal", "NodeReplaced", message)
        ctx.enqueue(work.TasUngate(wkey))

    def _failed_hosts(self, wkey: str) -> list[str]:
        charges = self.ctx.cache.tas_charged.get(wkey) or []
        return sorted(
            {
                v[-1]
                for ch in charges
                if ch.assignment.levels[-1] == HOSTNAME
                for v, _ in ch.assignment.domains
                if v[-1] in self.failed
            }
        )


def _with_assignments(wl: Obj, new: dict[str, TopologyAssignment]) -> Obj | None:
    """The status with these podSets' topology assignments replaced (None: not
    admitted any more, nothing to write)."""
    adm = kobj.admission_of(wl)
    if adm is None or not kobj.has_quota(wl) or is_true(wl, kobj.EVICTED):
        return None
    psas = []
    for psa in adm.get("podSetAssignments") or []:
        ta = new.get(str(psa.get("name", "main"))) if isinstance(psa, dict) else None
        psas.append({**psa, "topologyAssignment": to_v1beta2(ta)} if ta is not None else psa)
    return {"admission": {**adm, "podSetAssignments": psas}}


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
