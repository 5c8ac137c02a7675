"""The pending side of the engine's state: one queue per ClusterQueue, routing, parking,
waking and requeueing, which ClusterQueues may have a head, and why each pending
workload waits.

Kueue keeps this apart from the scheduler cache as its queue manager. Here it is the
base of :class:`admission.engine.cache.Cache`, which adds the objects, the quota tree and
what the admitted workloads hold, and calls into it when a workload arrives, when quota
is released (:meth:`QueueManager.capacity_event`) and when an admission lands
(``_own_admission``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from admission.engine import messages
from admission.engine.vocabulary import PendingReason
from admission.engine.wake_index import Demand, Evidence, WakeIndex, own_key
from queues.model import (
    STOP_NONE,
    STRICT_FIFO,
    ClusterQueue,
    FlavorResource,
    LocalQueue,
    Workload,
    covered_resources,
    pod_set_requests,
)
from queues.pending import PendingQueue, order_key, scheduling_hash
from queues.tree import CohortTree


@dataclass(slots=True, frozen=True)
class PendingStatus:
    """Why a workload is not admitted: a QuotaReserved=False reason and a message.
    Immutable: one object may stand for many workloads (:func:`same_status`)."""

    reason: PendingReason
    message: str


_SHARED_LIMIT = 4096  # distinct statuses kept for sharing, at most
_shared: dict[PendingReason, dict[str, PendingStatus]] = {}


def same_status(
    statuses: Mapping[str, PendingStatus], key: str, reason: PendingReason, message: str
) -> PendingStatus:
    """The pending status (``reason``, ``message``) for workload ``key``: the one it has
    in ``statuses`` when that says the same (a head told the same every cycle gets no
    new object), else one shared by every head told the same: thousands of heads of a
    cycle are told one of a few messages, and an object each made thousands of objects
    a cycle for the collector to walk, and one more per pending workload on the heap."""
    prev = statuses.get(key)
    if prev is not None and prev.message == message and prev.reason == reason:
        return prev
    by_message = _shared.get(reason)
    if by_message is None:
        by_message = _shared[reason] = {}
    st = by_message.get(message)
    if st is None:
        if len(by_message) >= _SHARED_LIMIT:
            by_message.clear()
        st = by_message[message] = PendingStatus(reason, message)
    return st


class QueueManager:
    """Pending queues, routing, parking, waking and requeueing, and pending statuses.

    It reads the objects and the quota tree its subclass
    (:class:`admission.engine.cache.Cache`) keeps: the ClusterQueues and LocalQueues a
    workload is routed by, the tree whose releases wake parked heads, and each
    ClusterQueue's tree root (``_tree_of``, refreshed with the tree)."""

    # kept by the Cache
    cluster_queues: dict[str, ClusterQueue]
    local_queues: dict[str, LocalQueue]
    tree: CohortTree
    _tree_of: dict[str, str]  # ClusterQueue -> the root of its cohort tree

    def _init_queues(self) -> None:
        """Empty queues for the ClusterQueues already set, nothing parked or waiting."""
        # ClusterQueues with parked work, by cohort tree (see capacity_event)
        self._parked_in: dict[str, set[str]] = {}
        # Deficit-bounded parking (parkUntilFeasible; see enable_bounded_parking):
        # None is Kueue's behaviour, every parked head woken by any release in its tree.
        self.wake_index: WakeIndex | None = None
        self._bound: Callable[[Any, str, Workload], Evidence | None] | None = None
        self._last_ticket: tuple[str, str, int, int] | None = None
        self._tree_of = {}
        # ClusterQueues that may have a head (a superset: a queue joins when it gets a
        # head after having none and leaves when a cycle finds it without one)
        self.with_heads: set[str] = set()
        self.queues: dict[str, PendingQueue] = {
            name: self._new_queue(name) for name in self.cluster_queues
        }
        self.preemptors: set[str] = set()  # pending workloads waiting for their victims
        self.unroutable: dict[str, Workload] = {}  # LocalQueue or ClusterQueue missing
        self.status: dict[str, PendingStatus] = {}
        # Why a group of interchangeable workloads was parked: (ClusterQueue, scheduling
        # hash) -> status; a workload without a status of its own takes its group's.
        self.group_status: dict[tuple[str, int], PendingStatus] = {}

    def _refile_parked(self) -> None:
        """The trees may have been regrouped: file what is parked under its tree now."""
        parked = [n for names in self._parked_in.values() for n in names]
        self._parked_in = {}
        for n in parked:
            self._parked_in.setdefault(self._tree_of.get(n, n), set()).add(n)

    def cq_of(self, wl: Workload) -> str | None:
        lq = self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        if lq is None or lq.cluster_queue not in self.cluster_queues:
            return None
        return lq.cluster_queue

    def local_queue_of(self, wl: Workload) -> LocalQueue | None:
        return self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")

    def enable_bounded_parking(
        self, bound: Callable[[Self, str, Workload], Evidence | None]
    ) -> None:
        """``parkUntilFeasible`` (our extension, admission.engine.preemption.feasibility): a head
        parked because it can neither fit nor preempt is woken only once enough quota
        was released where it could help it (or on a spec change), not by any release in
        its tree; a head that no longer fits after earlier heads of its cycle is parked
        the same way when the bound shows it cannot be admitted before a release.

        ``bound`` is ``admission.engine.preemption.feasibility.blocking`` (``build_scheduler`` passes
        it: the bound reads flavor matching, which sits above the cache)."""
        self._bound = bound
        if self.wake_index is None:
            self.wake_index = WakeIndex(
                lambda t, cq: cq in self.queues and self.queues[cq].holds(t)
            )

    def _ticket(self, cq: str, wl: Workload) -> int | None:
        """The wake ticket of ``wl`` parked in ``cq`` now (None: park it as Kueue does).
        The same for a workload and its equivalents parked in one commit."""
        index = self.wake_index
        if index is None:
            return None
        memo = self._last_ticket
        if memo is not None and memo[:3] == (cq, wl.key, self.tree.changes):
            return memo[3]
        assert self._bound is not None
        evidence = self._bound(self, cq, wl)
        if evidence is None:
            return None
        spec = self.cluster_queues[cq]
        within = spec.preemption.within_cluster_queue
        ticket = index.park(cq, evidence, own_key(within, wl.priority), _demand(spec, wl))
        self._last_ticket = (cq, wl.key, self.tree.changes, ticket)
        return ticket

    def settle_wakes(self) -> list[tuple[Workload, str, int, Demand, int]]:
        """Before a cycle takes its heads: decide about the eligible heads (parked with
        a demand, a threshold of theirs reached by a release). Returns the *phantom*
        heads: (workload, ClusterQueue, ticket, demand, borrowing level) of each head
        the cycle must process in its place in the order, still parked.

        Woken, the head would be its ClusterQueue's head and fit now, so the cycle would
        nominate it as fitting, with this demand and borrowing level, and admit it iff
        it still fits at its turn (``Scheduler._round`` checks exactly that and wakes
        it only then, with ``wake_phantom``). When its queue has no other workload to
        nominate, nothing else about the cycle depends on whether it was woken; so it
        stays parked unless admitted, and a release in a full tree, which makes many
        small heads eligible at once, costs one check per head instead of one
        nomination. Otherwise: a head its queue would not nominate now (an earlier
        workload is queued there, or an earlier eligible head) stays eligible; a head
        no threshold of which is reached any more is parked again (its entries filed
        anew); every other head is woken, as before (it needs preemption now, it would
        not be nominated as the cycle nominates, or its queue has later workloads)."""
        index = self.wake_index
        if index is None or not index.has_eligible():
            return []
        tree = self.tree
        ranked: dict[str, tuple[Workload, int, Demand, int]] = {}
        for ticket, cq in index.take_eligible().items():
            q = self.queues.get(cq)
            if q is None or not q.holds(ticket):
                index.forget(ticket)
                continue
            if not index.reached(ticket):
                index.refile(ticket)
                continue
            demand = index.demand(ticket)
            wl = q.ticket_head(ticket)
            node = tree.queues.get(cq)
            borrow = 0 if demand is not None and wl is not None and node is not None else -1
            if borrow == 0 and (
                wl.key in self.preemptors  # type: ignore[union-attr]
                or cq in self.inactive  # type: ignore[attr-defined]
                or self.refusal(self.cluster_queues[cq], wl) is not None  # type: ignore[arg-type]
            ):
                borrow = -1
            if borrow == 0:  # (-1: it needs preemption, or cannot fit: the engine decides)
                borrow = node.fits_now(demand.items())[0]  # type: ignore[union-attr]
            if borrow < 0:
                index.forget(ticket)
                q.wake(ticket)
                continue
            assert wl is not None and demand is not None
            head = q.head()
            if head is not None and order_key(head) < order_key(wl):
                index.defer(ticket, cq)  # not the next head of its queue: not nominated
                continue
            other = ranked.get(cq)
            if other is not None:
                if order_key(other[0]) < order_key(wl):
                    index.defer(ticket, cq)
                    continue
                index.defer(other[1], cq)
            ranked[cq] = (wl, ticket, demand, borrow)
        phantoms = []
        for cq, (wl, ticket, demand, borrow) in ranked.items():
            if self.queues[cq].head() is None:
                index.defer(ticket, cq)  # until the cycle admits it
                phantoms.append((wl, cq, ticket, demand, borrow))
            else:
                index.forget(ticket)
                self.queues[cq].wake(ticket)
        return phantoms

    def wake_phantom(self, cq: str, ticket: int) -> None:
        """A phantom head of ``settle_wakes`` is admitted: wake it (and its ticket's
        equivalents, as waking it before the cycle would have)."""
        index = self.wake_index
        assert index is not None
        index.undefer(ticket)
        index.forget(ticket)
        self.queues[cq].wake(ticket)

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """The labels of Namespace ``name`` (None: it does not exist); the Cache's."""
        raise NotImplementedError

    def refusal(self, cq: ClusterQueue, wl: Workload) -> tuple[PendingStatus, bool] | None:
        """Kueue's checks before flavor assignment, for ``wl`` as a head of ``cq``: None
        when they pass, else why it waits and whether it is parked even under StrictFIFO
        (it can never be admitted there as it is). Refused: its LocalQueue is stopped,
        its Namespace is missing or not selected, or its resources are invalid."""
        lq = self.local_queue_of(wl)
        misconfigured = PendingReason.MISCONFIGURED
        if lq is not None and lq.stop_policy != STOP_NONE:
            return PendingStatus(
                PendingReason.SUSPENDED, messages.local_queue_stopped(lq.key)
            ), False
        labels = self.namespace_labels(wl.namespace)
        if labels is None:
            return PendingStatus(misconfigured, messages.namespace_missing(wl.namespace)), True
        if cq.namespace_selector is None:
            why = messages.namespace_not_selected(wl.namespace, cq.name)
            return PendingStatus(misconfigured, why), True
        if not cq.namespace_selector.matches(labels):
            return PendingStatus(
                misconfigured, messages.namespace_mismatch(wl.namespace, cq.name)
            ), True
        for ps in wl.pod_sets:  # (formatting the errors only when there are some)
            if ps.limit_violations:
                return PendingStatus(misconfigured, messages.resource_validation_errors(wl)), False
            if ps.dra_error:  # DRA devices that cannot be counted (queues.dra)
                return PendingStatus(misconfigured, ps.dra_error), False
        return None

    def _new_queue(self, name: str) -> PendingQueue:
        q = PendingQueue()

        def parked(wl: Workload) -> int | None:
            ticket = self._ticket(name, wl)
            if ticket is None:
                self._parked_in.setdefault(self._tree_of.get(name, name), set()).add(name)
            return ticket

        def bulk() -> None:
            self._parked_in.setdefault(self._tree_of.get(name, name), set()).add(name)

        q.on_park = parked
        q.on_bulk = bulk
        q.on_head = lambda: self.with_heads.add(name)
        return q

    def _route(self, wl: Workload, *, fresh: bool = True) -> None:
        """Queue a pending workload where its LocalQueue points. ``fresh``: a new or
        changed workload (Kueue's ``AddOrUpdateWorkload``: parked at once when its
        equivalents are, see ``PendingQueue.arrive``); else one put back at once
        (Kueue's immediate requeue)."""
        lq = self.local_queue_of(wl)
        if lq is None and not wl.queue_name:
            self.unroutable[wl.key] = wl
            self.status[wl.key] = PendingStatus(PendingReason.MISCONFIGURED, messages.NO_QUEUE_NAME)
            return
        if lq is None:
            self.unroutable[wl.key] = wl
            self.status[wl.key] = PendingStatus(
                PendingReason.MISCONFIGURED,
                messages.local_queue_missing(wl.queue_name, wl.namespace),
            )
            return
        if lq.cluster_queue not in self.cluster_queues:
            self.unroutable[wl.key] = wl
            self.status[wl.key] = PendingStatus(
                PendingReason.MISCONFIGURED, messages.cluster_queue_missing(lq.cluster_queue)
            )
            return
        st = self.status.get(wl.key)
        if st is not None and st.reason == PendingReason.MISCONFIGURED:  # why it was not routable
            del self.status[wl.key]
        q = self.queues[lq.cluster_queue]
        if fresh:
            q.arrive(wl)
        else:
            q.push(wl)

    def remove_pending(self, key: str) -> Workload | None:
        wl = self.unroutable.pop(key, None)
        if wl is not None:
            return wl
        for q in self.queues.values():
            if key in q:
                return q.remove(key)
        return None

    def _own_admission(self, cq: str, priority: int) -> None:
        """A workload of ``priority`` now holds quota in ``cq`` (admitted, or its
        priority changed): bounded heads there that could preempt it may fit now."""
        index = self.wake_index
        if index is not None:
            for ticket, name in index.admitted(cq, priority):
                q = self.queues.get(name)
                if q is not None:
                    q.wake(ticket)

    def capacity_event(self, cq: str, freed: Mapping[FlavorResource, int] | None = None) -> None:
        """Quota was freed in cq's tree (``freed``: how much; None: unknown): parked
        workloads there may fit now.

        Only the queues of that tree that parked something since its last capacity
        event are visited: in a tree of thousands of ClusterQueues a burst of finishes
        wakes each of them once, not once per finish. With bounded parking those are
        the queues that parked something as Kueue does; a head parked with a ticket is
        woken only when the released quota covers its deficit (O(log n) per head woken,
        nothing for the others)."""
        tree = self._tree_of.get(cq, cq)
        index = self.wake_index
        if index is not None and cq in self.tree.queues:
            path = list(self.tree.queues[cq].path_to_root())
            frs = None if freed is None else [fr for fr, v in freed.items() if v > 0]
            fired = index.released(path, frs)
            for ticket, name in fired:
                q = self.queues.get(name)
                if q is not None:
                    q.wake(ticket)
            for name in self._parked_in.pop(tree, ()):
                q = self.queues.get(name)
                if q is not None:
                    q.wake_unbounded()
            return
        for name in self._parked_in.pop(tree, ()):
            q = self.queues.get(name)
            if q is not None:
                q.requeue_inadmissible()

    def status_of(self, wl: Workload, cq: str | None) -> PendingStatus | None:
        """The workload's last pending status, or its equivalence group's."""
        st = self.status.get(wl.key)
        if st is None and cq is not None:
            st = self.group_status.get((cq, scheduling_hash(wl)))
        return st

    def requeue_all(self) -> None:
        self._parked_in = {}
        if self.wake_index is not None:
            self.wake_index.clear()
        self._last_ticket = None
        for q in self.queues.values():
            q.requeue_inadmissible()

    def requeue(
        self,
        wl: Workload,
        cq: str,
        *,
        park: bool,
        even_if_strict: bool = False,
        equivalents: bool = False,
    ) -> None:
        """Put a nominated head back: parked (BestEffortFIFO) or in the heap.

        ``equivalents`` (it neither fits nor can preempt): a BestEffortFIFO head parked
        takes every workload interchangeable with it along (Kueue's scheduling
        equivalence: none of them can be admitted either), and those that arrive
        before the next capacity event are parked too; the group keeps the head's
        pending status.

        StrictFIFO keeps a failed head in the heap so it blocks newer workloads, except
        when it can never be admitted there (``even_if_strict``: namespace mismatch).
        With bounded parking a BestEffortFIFO head sent back to the heap (it no longer
        fits after earlier heads of its cycle) is parked with its equivalents instead
        when the bound shows it inadmissible until enough quota is released: it would
        only fail again. A waiting preemptor keeps its place.
        """
        q = self.queues[cq]
        if not park and self.wake_index is None:  # Kueue's immediate requeue
            q.keep(wl)  # a head taken this cycle is still in place; else pushed
            return
        strict = self.cluster_queues[cq].queueing_strategy == STRICT_FIFO
        if park and equivalents and not strict:
            q.park_with_equivalents(wl)
            st = self.status.get(wl.key)
            if st is not None:  # (also what an equivalent that arrives is told)
                self.group_status[(cq, q.hash_of(wl))] = st
        elif park and (even_if_strict or not strict):
            q.park(wl)
        elif (
            not park
            and not strict
            and self.wake_index is not None
            and wl.key not in self.preemptors
            and self._ticket(cq, wl) is not None
        ):
            # the ticket just made (memo); not remembered for arrivals: Kueue requeues
            # this head at once, and an arrival gets a ticket of its own or none
            if q.park_with_equivalents(wl, remember=False):
                st = self.status.get(wl.key)
                if st is not None:
                    self.group_status[(cq, scheduling_hash(wl))] = st
        else:
            q.keep(wl)  # a head taken this cycle is still in place; else pushed

    def pending_workloads(self) -> Iterable[tuple[Workload, str | None]]:
        for name in sorted(self.queues):
            for wl in self.queues[name].workloads():
                yield wl, name
        for wl in self.unroutable.values():
            yield wl, None


def _demand(spec: ClusterQueue, wl: Workload) -> Demand | None:
    """The usage ``wl`` takes if admitted in ``spec``'s queue, when the flavor
    assignment has a single answer: one podSet without partial admission or topology,
    all of whose resources one resource group with a single flavor covers (as the
    assigner's sole-flavor path counts them). None otherwise, and for StrictFIFO."""
    if spec.queueing_strategy == STRICT_FIFO or len(wl.pod_sets) != 1:
        return None
    ps = wl.pod_sets[0]
    if ps.min_count is not None or ps.topology is not None:
        return None
    covered = covered_resources(spec)
    count = ps.count
    if wl.reclaimable_pods:
        count = max(0, count - wl.reclaimable_pods.get(ps.name, 0))
    requests = pod_set_requests(ps, count, covered)
    groups = {covered.get(r) for r in requests}
    if len(groups) != 1 or None in groups:
        return None
    group = spec.resource_groups[groups.pop()]  # type: ignore[index]
    if len(group.flavors) != 1:
        return None
    flavor = group.flavors[0].name
    return {(flavor, r): v for r, v in requests.items()}
