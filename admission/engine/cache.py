"""The engine's in-memory state: objects, the cohort tree, admissions and what they hold
(the pending queues are its base, :class:`admission.engine.queue_manager.QueueManager`).

One ``Cache`` is what every driver feeds: ``plan`` loads it from files, the simulator
from a scenario, the controller from informers. The scheduler reads it and records
its decisions in it ("assumes" them, as Kueue does) so that the next cycle sees them;
drivers report back what really happened (an eviction finished, a workload finished,
a status write failed) through the methods here.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence

from admission.engine import messages
from admission.engine.admission_checks import checks_for, inactive_checks, reset_on_eviction
from admission.engine.progress import WORKLOAD_SOURCE, Notice, ProgressBook
from admission.engine.queue_manager import PendingStatus, QueueManager
from admission.engine.tas.admission import (
    ChosenPodSet,
    TasCharge,
    leaf_usage,
    still_fits,
    tas_charges,
)
from admission.engine.tas.domains import Node, PodUsage, TopologyState, Usage, add_usage
from admission.engine.vocabulary import PendingReason
from queues.dra import DraAccounting
from queues.model import (
    STOP_NONE,
    Admission,
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    FlavorResource,
    LocalQueue,
    Namespace,
    ResourceFlavor,
    Topology,
    TopologyAssignment,
    Workload,
)
from queues.transformations import ResourceTransformer
from queues.tree import CohortTree

Row = tuple[str, Workload, int, dict[FlavorResource, int]]
"""An admitted workload as the victim searches read it: key, workload, priority, usage."""
CandidateOrder = tuple[int, float, str]
"""Its place in Kueue's CandidatesOrdering: priority, then the negated admission time
(most recently admitted first), then the UID (or the key)."""
RankedRow = tuple[CandidateOrder, Row]
# A ClusterQueue's admitted workloads for the victim searches (see admitted_rows): the
# rows in admission order, their lowest priority, and the rows with their order.
KeptRows = tuple[list[Row], int, list[RankedRow]]


def ranked_row(wl: Workload, usage: dict[FlavorResource, int]) -> RankedRow:
    """``wl``'s row and order while it holds ``usage``, built once per admission (what it
    reads does not change until the workload is charged again): a cycle's victim searches
    rebuild a ClusterQueue's lists after every admission there, and building these
    tuples anew each time made most of what a cycle left for the collector to walk."""
    key = wl.key
    row = (key, wl, wl.priority, usage)
    return (wl.priority, -(wl.admission_time or 0.0), wl.uid or key), row


class Cache(QueueManager):
    """Objects, the quota tree, admitted workloads and TAS usage; the pending queues are
    the :class:`QueueManager` it extends."""

    def __init__(
        self,
        *,
        flavors: Mapping[str, ResourceFlavor],
        cluster_queues: Mapping[str, ClusterQueue],
        cohorts: Mapping[str, Cohort],
        local_queues: Mapping[str, LocalQueue],
        namespaces: Mapping[str, Namespace] | None = None,
        resources: ResourceTransformer | None = None,
        dra: DraAccounting | None = None,
        admission_checks: Mapping[str, AdmissionCheck] | None = None,
    ) -> None:
        # Kueue's workload info options (Configuration.resources): every workload's
        # requests are what they are for quota once it enters the cache, DRA devices
        # included (queues.dra; it applies the transformations itself).
        self.resources = resources if resources else None
        self.dra = dra
        if dra is not None:
            dra.transformer = self.resources
        self.flavors: dict[str, ResourceFlavor] = dict(flavors)
        self.cluster_queues: dict[str, ClusterQueue] = dict(cluster_queues)
        self.cohorts: dict[str, Cohort] = dict(cohorts)
        self.local_queues: dict[str, LocalQueue] = dict(local_queues)
        # None: every namespace exists with only its metadata.name label.
        self.namespaces: dict[str, Namespace] | None = (
            dict(namespaces) if namespaces is not None else None
        )
        self.admission_checks: dict[str, AdmissionCheck] = dict(admission_checks or {})
        self.tree = CohortTree(self.cluster_queues, self.cohorts)
        self._init_queues()
        self.workloads: dict[str, Workload] = {}
        self.admitted: dict[str, str] = {}  # workload key -> ClusterQueue charged
        self.usage_of: dict[str, dict[FlavorResource, int]] = {}  # what each admission holds
        # ClusterQueue -> admitted keys (in admission order), each with its ranked_row
        self.by_cq: dict[str, dict[str, RankedRow]] = {}
        # ClusterQueue -> its admitted workloads as the victim searches read them
        # (:meth:`admitted_rows`), kept until the admissions there change.
        self._rows: dict[str, KeptRows | None] = {}
        # ClusterQueue -> priority -> admitted usage: a cheap bound on what preemption
        # could ever free, checked before the candidate search.
        self.prio_usage: dict[str, dict[int, dict[FlavorResource, int]]] = {}
        self.evicting: dict[str, str] = {}  # preempted, still holding quota: key -> preemptor
        self.inactive: dict[str, PendingStatus] = {}
        # ClusterQueue -> the reason of its Active=False condition, when Kueue names one
        # the pending message does not carry (AdmissionCheckNotFound, ...)
        self.inactive_reasons: dict[str, str] = {}
        self._same_tree: dict[str, list[str]] = {}
        # Topology-aware scheduling: Topologies, Nodes, bound pods and what each admitted
        # workload's topology assignments hold (released exactly as charged).
        self.topology = TopologyState()
        self.tas_charged: dict[str, list[TasCharge]] = {}
        # Checkpoints and preemption notices (admission.engine.preemption.checkpoint): only read
        # when progress-aware preemption is configured.
        self.progress = ProgressBook()
        self._refresh_derived()

    # -- objects ----------------------------------------------------------------

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        if self.namespaces is None:
            return {"kubernetes.io/metadata.name": name}
        ns = self.namespaces.get(name)
        return ns.labels if ns is not None else None

    def update_objects(
        self,
        *,
        flavors: Mapping[str, ResourceFlavor] | None = None,
        cluster_queues: Mapping[str, ClusterQueue] | None = None,
        cohorts: Mapping[str, Cohort] | None = None,
        local_queues: Mapping[str, LocalQueue] | None = None,
        namespaces: Mapping[str, Namespace] | None = None,
        admission_checks: Mapping[str, AdmissionCheck] | None = None,
    ) -> None:
        """Replace object sets; any change is a capacity event (parked workloads wake).

        Only what a change can affect is redone: the cohort tree is rebuilt (and usage
        re-charged from the admissions) when ClusterQueues or Cohorts change, and only
        the pending workloads whose route changed (their LocalQueue was added, removed
        or re-pointed, or their ClusterQueue came or went) are routed again. Namespace
        labels are read at nomination, so a Namespace edit re-routes nothing, and
        every queue keeps its order and its waiting preemptor's head position.
        """
        changed = False
        tree_changed = False
        flavors_changed = flavors is not None and flavors != self.flavors
        if flavors is not None and flavors_changed:
            self.flavors = dict(flavors)
            self.topology.keep_snapshots(self.flavors)  # a deleted flavor's tree is freed
            changed = True
        if cohorts is not None and cohorts != self.cohorts:
            self.cohorts = dict(cohorts)
            changed = tree_changed = True
        if namespaces is not None and namespaces != self.namespaces:
            self.namespaces = dict(namespaces)
            changed = True
        checks_changed = admission_checks is not None and admission_checks != self.admission_checks
        if admission_checks is not None and checks_changed:
            self.admission_checks = dict(admission_checks)
            changed = True
        old_routes = {k: lq.cluster_queue for k, lq in self.local_queues.items()}
        if local_queues is not None and local_queues != self.local_queues:
            self.local_queues = dict(local_queues)
            changed = True
        old_cqs = set(self.cluster_queues)
        if cluster_queues is not None and cluster_queues != self.cluster_queues:
            self.cluster_queues = dict(cluster_queues)
            changed = tree_changed = True
        if not changed:
            return
        replaced: CohortTree | None = None
        if tree_changed:
            # Usage is re-charged from the admissions, so ClusterQueues may come and go.
            replaced, self.tree = self.tree, CohortTree(self.cluster_queues, self.cohorts)
            for key, cq in self.admitted.items():
                if cq in self.tree.queues:
                    self.tree.add_usage(cq, self.usage_of[key])
        # Re-route what may route differently now.
        new_routes = {k: lq.cluster_queue for k, lq in self.local_queues.items()}
        moved_lqs = {
            k
            for k in old_routes.keys() | new_routes.keys()
            if old_routes.get(k) != new_routes.get(k)
        }
        new_cqs = set(self.cluster_queues)
        pending: list[Workload] = list(self.unroutable.values())
        self.unroutable = {}
        for name in old_cqs - new_cqs:
            q = self.queues.pop(name, None)
            if q is not None:
                pending += list(q.workloads())
        for name in new_cqs - old_cqs:
            self.queues[name] = self._new_queue(name)
        if moved_lqs:
            for q in self.queues.values():
                for lq_key in moved_lqs:
                    pending += q.take_local_queue(lq_key)
        for wl in pending:
            self._route(wl)
        if tree_changed or flavors_changed or checks_changed:
            self._refresh_derived()
        self.requeue_all()  # (the wake index held nodes of the replaced tree)
        if replaced is not None:
            replaced.retire()  # freed by reference counting, frozen or not (gc_pause)

    def _refresh_derived(self) -> None:
        self._same_tree = {}
        self._tree_of = {}
        by_root: dict[str, list[str]] = {}
        for name, node in self.tree.queues.items():
            root = node.root().name + ("/c" if node.parent else "/q")
            by_root.setdefault(root, []).append(name)
            self._tree_of[name] = root
        for names in by_root.values():
            for n in names:
                self._same_tree[n] = names
        self._refile_parked()
        self.inactive = {}
        self.inactive_reasons = {}
        for name, cq in self.cluster_queues.items():
            node = self.tree.queues[name]
            missing = sorted(
                {
                    fq.name
                    for g in cq.resource_groups
                    for fq in g.flavors
                    if fq.name not in self.flavors
                }
            )
            if cq.stop_policy != STOP_NONE:
                self.inactive[name] = PendingStatus(
                    PendingReason.SUSPENDED, messages.cluster_queue_stopped(name)
                )
            elif node.disabled_reason:
                self.inactive[name] = PendingStatus(
                    PendingReason.MISCONFIGURED,
                    messages.cluster_queue_inactive(name, node.disabled_reason),
                )
            elif missing:
                self.inactive[name] = PendingStatus(
                    PendingReason.MISCONFIGURED,
                    messages.cluster_queue_inactive(name, messages.flavors_not_found(missing)),
                )
            elif no_topology := self._missing_topologies(cq):
                # Kueue's TopologyNotFound: a TAS flavor whose Topology does not exist.
                self.inactive[name] = PendingStatus(
                    PendingReason.MISCONFIGURED, messages.cluster_queue_inactive(name, no_topology)
                )
            elif (unusable := inactive_checks(cq, self.admission_checks)) is not None:
                # Kueue: a missing or inactive AdmissionCheck stops the ClusterQueue.
                self.inactive_reasons[name] = unusable[0]
                self.inactive[name] = PendingStatus(
                    PendingReason.MISCONFIGURED, messages.cluster_queue_inactive(name, unusable[1])
                )

    def checks_for(self, cq: str, admission: Admission | None) -> tuple[str, ...]:
        """The AdmissionChecks a workload of ``cq`` with ``admission`` must pass
        (:func:`admission.engine.admission_checks.checks_for`)."""
        spec = self.cluster_queues.get(cq)
        return checks_for(spec, admission) if spec is not None else ()

    def _missing_topologies(self, cq: ClusterQueue) -> str:
        names = sorted(
            {
                messages.topology_not_found(flv.topology_name, flv.name)
                for g in cq.resource_groups
                for fq in g.flavors
                if (flv := self.flavors.get(fq.name)) is not None
                and flv.topology_name is not None
                and flv.topology_name not in self.topology.topologies
            }
        )
        return ", ".join(names)

    # -- topology-aware scheduling --------------------------------------------------

    def set_topologies(self, topologies: Mapping[str, Topology]) -> None:
        """Replace the Topologies (a capacity event: ClusterQueues may become active)."""
        if dict(topologies) == self.topology.topologies:
            return
        self.topology.set_topologies(topologies)
        self._refresh_derived()
        self.requeue_all()

    def set_node(self, node: Node) -> bool:
        """A node was added or changed (a capacity event when placement sees a change:
        a node's heartbeat is none). True when it changed."""
        if not self.topology.set_node(node):
            return False
        self.requeue_all()
        return True

    def delete_node(self, name: str) -> None:
        self.topology.delete_node(name)

    def set_pod(self, key: str, pod: PodUsage | None) -> bool:
        """A bound pod not placed by TAS (None: gone, finished or unbound). True when
        capacity was freed (a capacity event)."""
        before = key in self.topology.pods
        if pod is None and not before:
            return False
        self.topology.set_pod(pod, key)
        if before and pod is None:
            self.requeue_all()  # its capacity is free again
            return True
        return False

    def _charge_tas(self, wl: Workload, sign: int) -> None:
        if sign > 0:
            adm = wl.admission
            if adm is None:
                return
            charges = tas_charges(
                wl,
                [(p.name, p.flavors, p.topology_assignment) for p in adm.pod_set_assignments],
                self.flavors,
            )
            if not charges:
                return
            self.tas_charged[wl.key] = charges
        else:
            charges = self.tas_charged.pop(wl.key, [])
        for ch in charges:
            self.topology.charge(ch.flavor, ch.assignment, ch.per_pod, sign)

    def replace_topology_assignments(
        self, key: str, assignments: Mapping[str, TopologyAssignment]
    ) -> dict[str, TopologyAssignment]:
        """An admitted workload's podSets get new topology assignments (a failed node
        replaced): its TAS charge moves with them. Returns the old ones (to undo)."""
        wl = self.workloads.get(key)
        if wl is None or wl.admission is None or key not in self.admitted:
            return {}
        self._charge_tas(wl, -1)
        old: dict[str, TopologyAssignment] = {}
        psas = wl.admission.pod_set_assignments
        for i, psa in enumerate(psas):
            new = assignments.get(psa.name)
            if new is not None and psa.topology_assignment is not None:
                old[psa.name] = psa.topology_assignment
                psas[i] = dataclasses.replace(psa, topology_assignment=new)
        self._charge_tas(wl, +1)
        return old

    def topology_still_fits(
        self,
        wl: Workload,
        pod_sets: Sequence[ChosenPodSet],
        extra: Mapping[str, Mapping[tuple[str, ...], Usage]],
    ) -> str:
        """Kueue's TAS Fits check at admission time, with ``extra`` (this cycle's earlier
        admissions) taken too: "" or where the pods no longer fit."""
        charges = tas_charges(wl, [(p.name, p.flavors, p.topology) for p in pod_sets], self.flavors)
        if not charges:
            return ""
        return still_fits(self.topology, self.flavors, charges, extra)

    def topology_assume(
        self,
        wl: Workload,
        pod_sets: Sequence[ChosenPodSet],
        into: dict[str, dict[tuple[str, ...], Usage]],
    ) -> None:
        """Add what the assignment's topology placements hold to ``into`` (a cycle's
        not yet committed TAS usage)."""
        charges = tas_charges(wl, [(p.name, p.flavors, p.topology) for p in pod_sets], self.flavors)
        for flavor, per_leaf in leaf_usage(charges).items():
            dest = into.setdefault(flavor, {})
            for key, usage in per_leaf.items():
                add_usage(dest.setdefault(key, {}), usage)

    # -- workloads --------------------------------------------------------------

    def add_workload(self, wl: Workload) -> None:
        """A new or re-read workload: charge its admission or queue it.

        A workload holding quota is charged whether or not it is active: a deactivated
        workload keeps its quota until its eviction finishes (``evicted``), on every
        path, including a cache rebuilt after a restart. An inactive workload without
        quota is only remembered, never queued.
        """
        if self.resources is not None:
            self.resources.apply(wl)  # idempotent: recomputed from the declared requests
        if self.dra is not None:
            self.dra.apply(wl)  # idempotent too
        old = self.workloads.get(wl.key)
        held: dict[FlavorResource, int] | None = None
        reprioritised = False
        if old is not None and wl.key in self.admitted:
            # Re-read while admitted (Kueue's cache UpdateWorkload: delete the old
            # object, add the new one): charge the new object, so a priority change is
            # what preemption sees, without charging twice. An eviction in progress stays.
            held = self.usage_of[wl.key]
            reprioritised = old.priority != wl.priority
            self._uncharge(wl.key, old)
        self.workloads[wl.key] = wl
        if wl.last_checkpoint is not None:
            self.progress.report(wl.key, WORKLOAD_SOURCE, wl.last_checkpoint)
        if wl.admission is not None:
            if wl.noticed_at is not None and wl.eviction_deadline is not None:
                # a notice in flight (read back from the Workload): never given twice
                self.progress.notice(wl.key, Notice(wl.noticed_at, wl.eviction_deadline))
                self.evicting.setdefault(wl.key, "")
            cq = wl.admission.cluster_queue
            usage = wl.admitted_usage()  # less the reclaimable pods (docs/semantics.md §4.1)
            self.admitted[wl.key] = cq
            self.usage_of[wl.key] = usage
            self.by_cq.setdefault(cq, {})[wl.key] = ranked_row(wl, usage)
            self._rows.pop(cq, None)
            self._count_priority(cq, wl.priority, usage, +1)
            if cq in self.tree.queues:
                self.tree.add_usage(cq, usage)
            self._charge_tas(wl, +1)
            if held is None or reprioritised:
                self._own_admission(cq, wl.priority)
            if held is not None and cq in self.tree.queues:
                freed = {fr: v - usage.get(fr, 0) for fr, v in held.items() if usage.get(fr, 0) < v}
                if freed:
                    self.capacity_event(cq, freed)  # its reclaimable pods gave quota back
            return
        if wl.active:
            self._route(wl)

    def dra_changed(self) -> None:
        """A DeviceClass, ResourceClaimTemplate, ResourceClaim or ResourceSlice changed:
        count the DRA devices of every workload without quota again and queue it anew."""
        dra = self.dra
        if dra is None:
            return
        for key, wl in list(self.workloads.items()):
            if key in self.admitted or not any(dra.uses_dra(ps) for ps in wl.pod_sets):
                continue
            probe = copy.copy(wl)  # counted again on a copy: the queued object keeps its hash
            dra.apply(probe)
            if [(p.requests, p.dra_error) for p in probe.pod_sets] == [
                (p.requests, p.dra_error) for p in wl.pod_sets
            ]:
                continue  # nothing changed for it: left where it waits
            self.remove_pending(key)
            self.add_workload(wl)

    def park(self, key: str) -> None:
        """Take a pending workload out of scheduling while it waits out a backoff (a
        requeue time, repeated refusals): not queued, no pending reason, not a
        preemptor. It comes back through :meth:`add_workload`."""
        if key in self.admitted:
            raise ValueError(f"workload {key} holds quota: it cannot be parked")
        self.remove_pending(key)
        self.workloads.pop(key, None)
        self.status.pop(key, None)
        self.preemptors.discard(key)

    def mark_evicting(self, key: str) -> None:
        """An eviction of ``key`` was written: it keeps its quota until it completes."""
        self.evicting.setdefault(key, "")

    def unmark_evicting(self, key: str) -> None:
        """The eviction was not written (or no longer applies): a later cycle may retry."""
        self.evicting.pop(key, None)

    def assume(self, wl: Workload, cq: str, usage: dict[FlavorResource, int]) -> None:
        """Record an admission decided by the scheduler (before the driver writes it)."""
        self.admitted[wl.key] = cq
        self.usage_of[wl.key] = usage
        self.by_cq.setdefault(cq, {})[wl.key] = ranked_row(wl, usage)
        self._rows.pop(cq, None)
        self._count_priority(cq, wl.priority, usage, +1)
        self.preemptors.discard(wl.key)
        self.tree.add_usage(cq, usage)
        self._charge_tas(wl, +1)
        self.status.pop(wl.key, None)
        self._own_admission(cq, wl.priority)

    def forget(self, key: str) -> None:
        """An assumed admission could not be written: undo it and queue the workload again."""
        wl = self.workloads[key]
        self._release(key)
        wl.admission = None
        wl.admission_time = None
        wl.admitted = False
        self._route(wl, fresh=False)  # Kueue requeues a failed admission at once

    def finish(self, key: str) -> None:
        """The workload finished or was deleted: release its quota exactly once."""
        wl = self.workloads.get(key)
        if key in self.admitted:
            self._release(key)
        else:
            self.remove_pending(key)
        self.workloads.pop(key, None)
        self.status.pop(key, None)
        self.preemptors.discard(key)
        self.progress.forget(key)
        if wl is not None:
            wl.admission = None

    def evicted(self, key: str, now: float | None = None) -> None:
        """An eviction completed: release quota and requeue with the original timestamp.
        Its AdmissionChecks are Pending again (Kueue resets them on every eviction)."""
        wl = self.workloads.get(key)
        if wl is None or key not in self.admitted:
            return
        self._release(key)
        wl.admission = None
        wl.admission_time = None
        wl.admitted = False
        if wl.admission_checks:
            wl.admission_checks = reset_on_eviction(wl.admission_checks, now)
        if wl.active:
            self._route(wl)

    def _release(self, key: str) -> None:
        cq = self.admitted[key]
        freed = self.usage_of[key]
        self._uncharge(key, self.workloads.get(key))
        self.evicting.pop(key, None)
        self.progress.released(key)
        if cq in self.tree.queues:
            self.capacity_event(cq, freed)

    def _uncharge(self, key: str, wl: Workload | None) -> None:
        """Take an admission's usage off the books (``wl``: the object it was charged for)."""
        cq = self.admitted.pop(key)
        usage = self.usage_of.pop(key)
        self.by_cq.get(cq, {}).pop(key, None)
        self._rows.pop(cq, None)
        if wl is not None:
            self._count_priority(cq, wl.priority, usage, -1)
        if cq in self.tree.queues:
            self.tree.remove_usage(cq, usage)
        if key in self.tas_charged:
            for ch in self.tas_charged.pop(key):
                self.topology.charge(ch.flavor, ch.assignment, ch.per_pod, -1)

    def admitted_rows(self, cq: str) -> KeptRows | None:
        """``cq``'s admitted workloads, in admission order, as the victim searches read
        them: the rows (key, workload, priority, usage held), the lowest of their
        priorities, and each row with its place in Kueue's candidate order
        (:func:`ranked_row`). Built when first asked after an admission there changed
        (one cycle's searches, and the next cycles', read the same lists while nothing
        is admitted to or released from ``cq``); None when it has none."""
        try:
            return self._rows[cq]
        except KeyError:
            pass
        ranked = self.by_cq.get(cq)
        got = None
        if ranked:
            in_order = list(ranked.values())
            rows = [r for _, r in in_order]
            got = (rows, min(r[2] for r in rows), in_order)
        self._rows[cq] = got
        return got

    def _count_priority(
        self, cq: str, priority: int, usage: dict[FlavorResource, int], sign: int
    ) -> None:
        add_usage(self.prio_usage.setdefault(cq, {}).setdefault(priority, {}), usage, sign)

    def same_tree(self, cq: str) -> list[str]:
        """The ClusterQueues sharing ``cq``'s cohort tree (``cq`` itself included)."""
        return self._same_tree.get(cq, [cq])
