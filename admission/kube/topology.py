"""Nodes, bound pods and node failures for topology-aware scheduling.

Placement reads what the cluster's nodes have free (``queues.topology``). This module
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
deleted, or has been NotReady for ``NODE_FAILURE_DELAY`` (Kueue's 30 s), the workload
is evicted with reason ``NodeFailures`` and an Event, and is queued again, so it is
placed anew on healthy nodes. (Kueue first tries to replace the failed node inside the
same domain; that replacement is not built here: see docs/semantics.md.)
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from queues.labels import POD_GROUP_POD_INDEX as POD_GROUP_INDEX_LABEL
from queues.labels import PODSET as PODSET_LABEL
from queues.labels import TOPOLOGY_GATE
from queues.progress import CHECKPOINT_ANNOTATION, DEADLINE_ANNOTATION
from queues.topology import HOSTNAME
from queues.topology_assignment import AssignmentFormError, from_v1beta2
from queues.topology_nodes import NodeInputError, node_from_object, pod_usage_from_object

from . import objects as o
from .context import Context
from .informer import DELETED

log = logging.getLogger("quartermaster.kube.topology")

Obj = dict[str, Any]
BOUND_PODS = "boundpods"  # the informer key of the bound-pods informer
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
        # TAS placement, and the training-progress signals (admission.kube.notices)
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
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True", o.parse_time(c.get("lastTransitionTime"))
    return True, None


class TopologyWatch:
    """Informer handlers for Nodes and bound pods, and the node-failure check."""

    def __init__(self, ctx: Context, *, enqueue_failure: Callable[[str], None]) -> None:
        self.ctx = ctx
        self.enqueue_failure = enqueue_failure
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
            self.enqueue_failure(wkey)

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
        """Evict ``wkey`` if a node of its assignment (still) counts as failed."""
        from .jobs import evict

        charges = self.ctx.cache.tas_charged.get(wkey) or []
        hosts = sorted(
            {
                v[-1]
                for ch in charges
                if ch.assignment.levels[-1] == HOSTNAME
                for v, _ in ch.assignment.domains
                if v[-1] in self.failed
            }
        )
        if not hosts or self.ctx.writer.workload(wkey) is None:
            return
        message = (
            "Workload was evicted as there was no replacement for a failed node: "
            + ", ".join(hosts)
        )
        if await evict(self.ctx, wkey, reason=NODE_FAILURES, message=message):
            log.info("evicted %s: node(s) %s failed", wkey, ", ".join(hosts))


# -- the topology ungater ---------------------------------------------------------------------


def _pod_index(pod: Obj) -> tuple[int, str, str]:
    """Kueue's ungater order: the pod index label when set, else creation time, name."""
    meta = pod.get("metadata") or {}
    raw = (meta.get("labels") or {}).get(POD_GROUP_INDEX_LABEL)
    try:
        idx = int(raw) if raw is not None else 2**31
    except ValueError:
        idx = 2**31
    return idx, str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


@dataclass(slots=True)
class _Slot:
    selector: dict[str, str]
    left: int


def topology_domains(
    admission: Obj | None, pods: list[Obj], role: Callable[[Obj], str]
) -> dict[str, dict[str, str]]:
    """Kueue's TopologyUngater assignment: for each pod of a podSet with a topology
    assignment, the node selector of its domain (pod key -> selector).

    Pods already running with a domain's selector keep it and fill that domain first;
    the gated pods, in index order, take the domains' remaining places in order."""
    out: dict[str, dict[str, str]] = {}
    for psa in (admission or {}).get("podSetAssignments") or []:
        wire = psa.get("topologyAssignment") if isinstance(psa, dict) else None
        if not wire:
            continue
        try:
            ta = from_v1beta2(wire)
        except AssignmentFormError as err:
            log.error("podSet %s: unreadable topologyAssignment: %s", psa.get("name"), err)
            continue
        name = str(psa.get("name", "main"))
        mine = [p for p in pods if role(p) == name]
        left = [
            _Slot(dict(zip(ta.levels, values, strict=True)), count) for values, count in ta.domains
        ]
        gated_pods = []
        for pod in mine:
            ns = (pod.get("spec") or {}).get("nodeSelector") or {}
            placed = next(
                (
                    d
                    for d in left
                    if d.left > 0 and all(ns.get(k) == v for k, v in d.selector.items())
                ),
                None,
            )
            if placed is not None and not _topology_gated(pod):
                placed.left -= 1
            else:
                gated_pods.append(pod)
        for pod in sorted(gated_pods, key=_pod_index):
            slot = next((d for d in left if d.left > 0), None)
            if slot is None:
                break  # more pods than assigned: the excess are never ungated
            slot.left -= 1
            out[o.ns_key(pod)] = dict(slot.selector)
    return out


def _topology_gated(pod: Obj) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, dict) and g.get("name") == TOPOLOGY_GATE for g in gates)
