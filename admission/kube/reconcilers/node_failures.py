"""Node failures for every admitted workload (docs/semantics.md "Failures").

The rules are :mod:`queues.node_health`'s; this module watches Nodes and bound pods and
acts on the workloads whose pods a failed node hosts:

* **Which workloads a node hosts**: the hosts of a TAS workload's topology assignment,
  and the node of every bound pod of an admitted workload (its ``kueue.x-k8s.io/workload``
  annotation, or its controlling job object).
* **When**: on a Node event (deleted, Ready changed, taints changed), when a NotReady
  node reaches ``notReadyDelay`` (the ticker), and when a pod of an admitted workload
  is bound to a node that already failed.
* **TAS workloads** whose failed node is in their assignment: Kueue's node replacement
  (``status.unhealthyNodes`` names the node while a replacement is sought; a spare
  inside the required domain takes its pods and the new assignment is written without
  an eviction; the workload's pods pinned to or left on the failed node are failed so
  the job recreates them on the new host). No spare: evicted (``failFast``) or retried
  on the next ticks. A second node failing while one awaits replacement evicts.
* **Every other workload**: evicted with reason ``NodeFailures`` and Kueue's message
  naming the node; requeued without backoff (:func:`queues.node_health.counts_toward_backoff`).
  With progress-aware preemption on and the node still reachable (a taint), the
  workload first gets its ClusterQueue's notice window: the eviction deadline is
  announced on the Workload, its job and pods as for a preemption victim, and the
  eviction comes when it passes (or never, if the node recovers meanwhile).
* **Afterwards**: the failed nodes are remembered on the Workload
  (``quartermaster.io/avoid-nodes``) for ``avoidNodesFor``; a node failing
  ``flakyNode.workloads`` distinct workloads within the window gets a ``FlakyNode``
  Event and ``quartermaster_flaky_node_reports_total``.

Pods stuck terminating on unreachable nodes are :mod:`.stuck_pods`'.
"""

from __future__ import annotations

import logging
from typing import Any

from admission.engine.tas.admission import node_replacement
from admission.engine.tas.domains import HOSTNAME
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import PODS, WORKLOADS
from admission.kube.control import work
from admission.kube.control.context import BOUND_PODS, Context, Obj
from admission.kube.control.workloads import DeadlineNotices, evict, owner_of
from admission.kube.watch.informer import DELETED
from queues.api.conditions import is_true
from queues.api.labels import WORKLOAD as WORKLOAD_ANNOTATION
from queues.api.topology_assignment import to_v1beta2
from queues.model import Toleration, TopologyAssignment
from queues.node_health import (
    AVOID_NODES_ANNOTATION,
    NODE_FAILURES,
    AvoidedNodes,
    FlakyNodes,
    NodeState,
    node_failure,
    not_ready_for,
    reachable,
)

log = logging.getLogger("quartermaster.kube.nodefailures")

REPLACEMENT_RETRY = 5.0  # seconds between replacement attempts when failFast is off
POD_TERMINATED_CONDITION = "TerminatedByKueue"  # Kueue's node controller's pod condition
POD_TERMINATED_REASON = "UnschedulableOnAssignedNode"


def multiple_failures_message(hosts: list[str]) -> str:
    return (
        "Workload eviction triggered due to multiple TAS assigned node failures, including: "
        + ", ".join(hosts)
    )


def no_replacement_message(host: str) -> str:
    return f"Workload was evicted as there was no replacement for a failed node: {host}"


def unhealthy_nodes(wl: Obj | None) -> list[str]:
    """``status.unhealthyNodes`` names (Kueue's UnhealthyNode list)."""
    raw = ((wl or {}).get("status") or {}).get("unhealthyNodes") or []
    return [str(n["name"]) for n in raw if isinstance(n, dict) and n.get("name")]


def _cause(why: str) -> str:
    if why.endswith("was deleted"):
        return "NodeDeleted"
    if "NotReady" in why:
        return "NodeNotReady"
    return "NodeTainted"


class NodeFailures:
    def __init__(self, ctx: Context, *, tas_pods: Any = None) -> None:
        """``tas_pods(wkey)``: the workload's pods from the topology ungater (pending
        pods pinned to a host included)."""
        self.ctx = ctx
        self.policy = ctx.options.node_failures
        self.tas_pods = tas_pods
        self.notices: DeadlineNotices | None = None  # with progress-aware preemption
        self.states: dict[str, NodeState] = {}  # node name -> what failure reads of it
        self.name_of: dict[str, str] = {}  # hostname label -> node name
        self.deleted: set[str] = set()  # nodes deleted while hosting our pods
        self.due: dict[str, float] = {}  # NotReady node -> when its delay runs out
        self.pods_on: dict[str, set[str]] = {}  # node -> bound pod keys
        self.node_of_pod: dict[str, str] = {}
        self.retry_at: dict[str, float] = {}  # workload -> next replacement attempt
        self.acted_at: dict[str, float] = {}  # workload -> when a failure was acted on
        self.notice_until: dict[str, float] = {}  # workload -> its node failure's deadline
        self.flaky = FlakyNodes(
            workloads=self.policy.flaky_workloads, window=self.policy.flaky_window
        )

    # -- informer handlers (every replica) -----------------------------------------------

    def on_node(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        if not self.policy.enable:
            return
        obj = new if new is not None else old
        host = str(((kobj.meta(obj).get("labels")) or {}).get(HOSTNAME) or key)
        self.name_of[host] = key
        before = self.states.get(key)
        if event == DELETED or new is None:
            self.states.pop(key, None)
            self.due.pop(key, None)
            self.deleted.add(key)
            self._enqueue_affected(key)
            return
        self.deleted.discard(key)
        state = NodeState.of(key, new)
        self.states[key] = state
        if state.ready:
            self.due.pop(key, None)
        elif before is None or before.ready or key not in self.due:
            waited = not_ready_for(state, self.ctx.clock())
            self.due[key] = self.ctx.clock() + max(0.0, self.policy.not_ready_delay - waited)
        if before is None or (before.ready, before.taints) != (state.ready, state.taints):
            self._enqueue_affected(key)

    def on_pod(self, event: str, key: str, new: Obj | None, old: Obj | None) -> None:
        """A bound pod (the BOUND_PODS informer): index it by node."""
        if not self.policy.enable:
            return
        node = None if event == DELETED or new is None else (new.get("spec") or {}).get("nodeName")
        had = self.node_of_pod.pop(key, None)
        if had is not None:
            self.pods_on.get(had, set()).discard(key)
        if not node:
            return
        self.node_of_pod[key] = node
        self.pods_on.setdefault(node, set()).add(key)
        if had != node and self._suspect(node):
            wkey = self.workload_of_pod(new)
            if wkey is not None:
                self.ctx.enqueue(work.NodeFailure(wkey))

    def on_workload(self, key: str, obj: Obj | None) -> None:
        """Observe the recovery time once a workload evicted for a node failure runs again."""
        since = self.acted_at.get(key)
        if since is None:
            return
        if obj is None or kobj.is_finished(obj):
            self.acted_at.pop(key, None)
        elif kobj.has_quota(obj) and not is_true(obj, kobj.EVICTED) and is_true(obj, kobj.ADMITTED):
            self.acted_at.pop(key, None)
            self.ctx.metrics.node_failure_recovery.observe(max(0.0, self.ctx.clock() - since))

    # -- the ticker (leader) ---------------------------------------------------------------

    def check(self) -> None:
        """NotReady nodes whose delay ran out, and replacements to retry."""
        now = self.ctx.clock()
        for name, at in list(self.due.items()):
            if at <= now:
                del self.due[name]
                self._enqueue_affected(name)
        for wkey, at in list(self.retry_at.items()):
            if at <= now:
                del self.retry_at[wkey]
                self.ctx.enqueue(work.NodeFailure(wkey))

    # -- which workloads a node hosts -------------------------------------------------------

    def _suspect(self, name: str) -> bool:
        state = self.states.get(name)
        return name in self.deleted or (
            state is not None and (not state.ready or bool(state.taints))
        )

    def _enqueue_affected(self, name: str) -> None:
        # affected() reads the cache's charges, which a running cycle's thread changes:
        # looked up once the cycle has returned (at once when none runs)
        self.ctx.sync.apply(lambda: self._enqueue_workloads_on(name))

    def _enqueue_workloads_on(self, name: str) -> None:
        for wkey in self.affected(name):
            self.ctx.enqueue(work.NodeFailure(wkey))

    def host_of(self, name: str) -> str:
        state_host = next((h for h, n in self.name_of.items() if n == name), None)
        return state_host or name

    def affected(self, name: str) -> list[str]:
        """Admitted workloads with pods on node ``name`` (assigned or bound). Reads the
        cache: only while no scheduling cycle runs (``_enqueue_affected``)."""
        host = self.host_of(name)
        out: set[str] = set()
        for wkey, charges in self.ctx.cache.tas_charged.items():
            for ch in charges:
                ta = ch.assignment
                if ta.levels[-1] == HOSTNAME and any(v[-1] == host for v, _ in ta.domains):
                    out.add(wkey)
        bound = self.ctx.informers.get(BOUND_PODS)
        for pkey in self.pods_on.get(name, ()):
            pod = bound.store.get(pkey) if bound is not None else None
            owner = self.workload_of_pod(pod)
            if owner is not None:
                out.add(owner)
        return sorted(
            w for w in out if w in self.ctx.cache.admitted or w in self.ctx.cache.tas_charged
        )

    def workload_of_pod(self, pod: Obj | None) -> str | None:
        if pod is None:
            return None
        meta = kobj.meta(pod)
        ns = meta.get("namespace") or "default"
        name = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
        if name:
            return f"{ns}/{name}"
        owner = owner_of(self.ctx, pod)
        if owner is not None and owner[1]:
            for wkey in sorted(self.ctx.job_index.get((owner[0].lower_kind, owner[1]))):
                return wkey
        return None

    def _nodes_of(self, wkey: str) -> tuple[set[str], set[str]]:
        """(node names of the workload's TAS assignment, node names of its bound pods
        that still run: a pod terminating or terminated there is its job's past, not
        what this admission runs)."""
        tas: set[str] = set()
        for ch in self.ctx.cache.tas_charged.get(wkey) or []:
            if ch.assignment.levels[-1] == HOSTNAME:
                tas |= {self.name_of.get(v[-1], v[-1]) for v, _ in ch.assignment.domains}
        pods = {name for name in self.pods_on if self._running_on(wkey, name)}
        return tas, pods

    def _running_on(self, wkey: str, name: str) -> bool:
        bound = self.ctx.informers.get(BOUND_PODS)
        for pkey in self.pods_on.get(name, ()):
            pod = bound.store.get(pkey) if bound is not None else None
            if (
                pod is not None
                and self.workload_of_pod(pod) == wkey
                and not kobj.meta(pod).get("deletionTimestamp")
                and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ):
                return True
        return False

    def _tolerations(self, wkey: str) -> list[Toleration]:
        model = self.ctx.cache.workloads.get(wkey)
        if model is None:
            return []
        out = [t for ps in model.pod_sets for t in ps.tolerations]
        adm = model.admission
        for psa in adm.pod_set_assignments if adm is not None else ():
            for f in set(psa.flavors.values()):
                flavor = self.ctx.cache.flavors.get(f)
                if flavor is not None:
                    out += list(flavor.tolerations)
        return out

    def failed_nodes(self, wkey: str) -> dict[str, str]:
        """Node name -> why, for the workload's nodes that count as failed now."""
        tas, pods = self._nodes_of(wkey)
        now = self.ctx.clock()
        tolerations = self._tolerations(wkey)
        nodes_synced = (inf := self.ctx.informers.get("nodes")) is not None and inf.synced.is_set()
        out: dict[str, str] = {}
        for name in sorted(tas | pods):
            state = self.states.get(name)
            if state is None and not (name in self.deleted or nodes_synced):
                continue
            why = node_failure(
                state, name=name, now=now, policy=self.policy, tolerations=tolerations
            )
            if (
                why is not None
                and state is not None
                and not state.ready
                and self.policy.replace_on_pod_termination
                and self._running_on(wkey, name)
            ):
                continue  # Kueue's ReplaceNodeOnPodTermination: its pods there still run
            if why is not None:
                out[name] = why
        return out

    # -- acting (leader) ------------------------------------------------------------------

    async def handle(self, wkey: str) -> None:
        ctx = self.ctx
        if not self.policy.enable:
            return
        wl = ctx.writer.workload(wkey)
        if (
            wl is None
            or not kobj.has_quota(wl)
            or is_true(wl, kobj.EVICTED)
            or kobj.is_finished(wl)
        ):
            return
        await ctx.cache_ready()
        failed = self.failed_nodes(wkey)
        listed = unhealthy_nodes(wl)
        if not failed:
            self.notice_until.pop(wkey, None)  # the node recovered within the notice
            if listed:  # recovered before a replacement was found (Kueue's handleHealthyNode)
                await self._set_unhealthy(wkey, [])
            return
        tas, _ = self._nodes_of(wkey)
        hosts = sorted(self.host_of(n) for n in failed)
        if tas and set(failed) <= tas:
            bad = sorted(set(hosts) | set(listed))
            if len(bad) > 1:
                await self._evict(wkey, failed, multiple_failures_message(bad), "MultipleNodes")
                return
            await self._replace(wkey, wl, bad[0], failed)
            return
        if len(hosts) > 1:
            message = multiple_failures_message(hosts)
        else:
            message = no_replacement_message(hosts[0])
        if all(reachable(self.states.get(n)) for n in failed) and await self._noticed(
            wkey, wl, message
        ):
            return
        await self._evict(wkey, failed, message, _cause(next(iter(failed.values()))))

    async def _noticed(self, wkey: str, wl: Obj, message: str) -> bool:
        """Progress-aware preemption's notice window for a failure on nodes that still
        run the pods (a taint): the eviction deadline is announced as for a preemption
        victim, and the workload is evicted when it passes. True while it runs."""
        notices = self.notices
        aware = getattr(notices, "aware", None)
        if notices is None or aware is None:
            return False
        now = self.ctx.clock()
        deadline = self.notice_until.get(wkey)
        if deadline is None:
            cq = str((kobj.admission_of(wl) or {}).get("clusterQueue", ""))
            at = aware.notice_deadline(cq)
            if at is None:
                return False
            self.notice_until[wkey] = at
            self.retry_at[wkey] = at
            text = kobj.rfc3339(at)
            try:
                await notices.announce_deadline(wl, text)
            except ApiError as err:
                log.warning("announcing the eviction deadline of %s failed: %s", wkey, err)
            self.ctx.record_event(
                wl, "Normal", "NodeFailureNotice", f"To be evicted at {text}: {message}"
            )
            return True
        if now < deadline:
            self.retry_at[wkey] = deadline
            return True
        del self.notice_until[wkey]
        try:
            await notices.announce_deadline(wl, None)
        except ApiError as err:
            log.warning("removing the eviction deadline of %s failed: %s", wkey, err)
        return False

    async def _replace(self, wkey: str, wl: Obj, host: str, failed: dict[str, str]) -> None:
        ctx = self.ctx
        if host not in unhealthy_nodes(wl):
            await self._set_unhealthy(wkey, [host])
        # The write above let a scheduling cycle start: the cache and its TAS trees are
        # that cycle's (in its thread) until it returns. From here to the assumed
        # replacement nothing awaits, so no cycle starts in between either.
        await ctx.cache_ready()
        model = ctx.cache.workloads.get(wkey)
        if model is None or model.admission is None:
            return
        new, reason = node_replacement(ctx.cache.topology, ctx.cache.flavors, model, host)
        if not new:
            log.info("workload %s: node %s failed and cannot be replaced: %s", wkey, host, reason)
            if self.policy.fail_fast:
                await self._evict(wkey, failed, no_replacement_message(host), "NoReplacement")
            else:
                self.retry_at[wkey] = ctx.clock() + REPLACEMENT_RETRY
            return
        old = ctx.cache.replace_topology_assignments(wkey, new)  # assumed until written
        try:
            written = await ctx.writer.update_status(wkey, lambda w: _replaced(w, new))
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
        now = ctx.clock()
        for name in failed:
            self._flaky(name, wkey, now)
        ctx.metrics.node_failure_recovery.observe(0.0)
        await self._fail_pods(wkey, set(failed), {host})
        ctx.enqueue(work.TasUngate(wkey))

    async def _set_unhealthy(self, wkey: str, hosts: list[str]) -> None:
        def compute(w: Obj) -> Obj | None:
            if sorted(unhealthy_nodes(w)) == sorted(hosts) or not kobj.has_quota(w):
                return None
            return {"unhealthyNodes": [{"name": h} for h in sorted(hosts)] or None}

        await self.ctx.writer.update_status(wkey, compute)

    async def _evict(self, wkey: str, failed: dict[str, str], message: str, cause: str) -> None:
        ctx = self.ctx
        cq = str((kobj.admission_of(ctx.writer.workload(wkey)) or {}).get("clusterQueue", ""))
        if not await evict(ctx, wkey, reason=NODE_FAILURES, message=message):
            return
        log.info("evicted %s: %s", wkey, "; ".join(failed.values()))
        ctx.metrics.node_failure_evictions_total.labels(cq, cause).inc()
        now = ctx.clock()
        self.acted_at.setdefault(wkey, now)
        for name in failed:
            self._flaky(name, wkey, now)
        await self.remember(wkey, [self.host_of(n) for n in failed])

    def _flaky(self, name: str, wkey: str, now: float) -> None:
        count = self.flaky.record(name, wkey, now)
        if count is None:
            return
        message = (
            f"Node {name} failed {count} distinct workloads within "
            f"{self.policy.flaky_window:g}s; consider quarantining it"
        )
        log.warning("%s", message)
        self.ctx.metrics.flaky_nodes_total.labels(name).inc()
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        self.ctx.record_event(node, "Warning", "FlakyNode", message)

    async def remember(self, wkey: str, hosts: list[str]) -> None:
        """Write the bad-node memory on the Workload (its annotation), with an Event."""
        ctx = self.ctx
        duration = self.policy.avoid_for
        wl = ctx.writer.workload(wkey)
        if duration <= 0 or not hosts or wl is None:
            return
        now = ctx.clock()
        mem = AvoidedNodes.of(kobj.meta(wl).get("annotations")).remember(
            hosts, now=now, duration=duration
        )
        ns, name = kobj.split_key(wkey)
        body = {"metadata": {"annotations": {AVOID_NODES_ANNOTATION: mem.render()}}}
        try:
            new = await ctx.client.patch(WORKLOADS, name, body, namespace=ns)
        except ApiError as err:
            log.warning("remembering the failed nodes of %s failed: %s", wkey, err)
            return
        ctx.writer.remember(WORKLOADS, wkey, new)
        ctx.sync.workload(wkey, new)
        until = kobj.rfc3339(now + duration)
        message = f"Avoiding node(s) {', '.join(sorted(hosts))} until {until} after a node failure"
        ctx.record_event(new, "Normal", "AvoidingNodes", message)

    async def prune_memory(self, wkey: str) -> None:
        """Drop expired entries of a pending workload's memory (so placement counts them
        again)."""
        ctx = self.ctx
        wl = ctx.writer.workload(wkey)
        ann = kobj.meta(wl).get("annotations") or {}
        if AVOID_NODES_ANNOTATION not in ann:
            return
        mem = AvoidedNodes.of(ann)
        now = ctx.clock()
        active = mem.active(now)
        if len(active) == len(mem.until):
            return
        value = AvoidedNodes({n: mem.until[n] for n in active}).render() or None
        ns, name = kobj.split_key(wkey)
        body = {"metadata": {"annotations": {AVOID_NODES_ANNOTATION: value}}}
        try:
            new = await ctx.client.patch(WORKLOADS, name, body, namespace=ns)
        except ApiError as err:
            log.warning("pruning the failed nodes of %s failed: %s", wkey, err)
            return
        ctx.writer.remember(WORKLOADS, wkey, new)
        ctx.sync.workload(wkey, new)

    async def _fail_pods(self, wkey: str, names: set[str], hosts: set[str]) -> None:
        """Kueue's node controller: the workload's pods pinned to (not yet bound) or left
        on a failed node are marked Failed (``TerminatedByKueue``), so the job creates
        new ones, which the ungater sends to the new assignment."""
        ctx = self.ctx
        pods: dict[str, Obj] = {}
        for pod in self.tas_pods(wkey) if self.tas_pods is not None else ():
            spec = pod.get("spec") or {}
            pinned = (spec.get("nodeSelector") or {}).get(HOSTNAME)
            on = spec.get("nodeName")
            if (on and on in names) or (not on and pinned in hosts):
                pods[kobj.ns_key(pod)] = pod
        bound = ctx.informers.get(BOUND_PODS)
        for name in names:
            for pkey in self.pods_on.get(name, ()):
                pod = bound.store.get(pkey) if bound is not None else None
                if pod is not None and self.workload_of_pod(pod) == wkey:
                    pods.setdefault(pkey, pod)
        for pkey, pod in sorted(pods.items()):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            await fail_pod(ctx, pkey, "Pod terminated by Kueue NodeController due to node failure")


async def fail_pod(ctx: Context, pkey: str, message: str) -> None:
    """Mark a pod Failed with Kueue's ``TerminatedByKueue`` condition (a gone pod is fine)."""
    ns, name = kobj.split_key(pkey)
    body = {
        "status": {
            "phase": "Failed",
            "conditions": [
                {
                    "type": POD_TERMINATED_CONDITION,
                    "status": "True",
                    "reason": POD_TERMINATED_REASON,
                    "message": message,
                    "lastTransitionTime": kobj.rfc3339(ctx.clock()),
                }
            ],
        }
    }
    try:
        await ctx.client.patch(PODS, name, body, namespace=ns, subresource="status")
    except ApiError as err:
        if not err.not_found:
            raise
        return
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}}
    ctx.record_event(pod, "Normal", "PodTerminatedByKueue", message)


def _replaced(wl: Obj, new: dict[str, TopologyAssignment]) -> Obj | None:
    """The status with these podSets' topology assignments replaced and
    ``unhealthyNodes`` cleared (None: not admitted any more, nothing to write)."""
    adm = kobj.admission_of(wl)
    if adm is None or not kobj.has_quota(wl) or is_true(wl, kobj.EVICTED):
        return None
    psas = []
    for psa in adm.get("podSetAssignments") or []:
        ta = new.get(str(psa.get("name", "main"))) if isinstance(psa, dict) else None
        psas.append({**psa, "topologyAssignment": to_v1beta2(ta)} if ta is not None else psa)
    return {"admission": {**adm, "podSetAssignments": psas}, "unhealthyNodes": None}
