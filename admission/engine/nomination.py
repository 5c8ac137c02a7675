"""Nomination: a cycle's heads checked and given flavors, on the cycle's snapshot.

For each head, Kueue's nominate: the LocalQueue must not be stopped, the namespace must
exist and be selected by the ClusterQueue, and the resources must be valid; then the
flavor assignment, the victim search when the assignment needs preemption, and partial
admission (the largest count that fits or that preemption can make fit) when neither
works at full size. Nothing changes but the head's :class:`Entry`.
"""

from __future__ import annotations

from admission.engine.assignment import Assignment, OracleAnswer, no_preemption
from admission.engine.cache import Cache
from admission.engine.flavors import FlavorAssigner
from admission.engine.ordering import Entry, Target
from admission.engine.preemption.classical import Preemptor
from admission.engine.snapshot import Snapshot
from admission.engine.verdicts import KeptNominations, _Kept
from admission.engine.vocabulary import AssignmentMode
from queues.model import NEVER, ClusterQueue, FlavorResource, Workload
from queues.quota_node import QuotaNode


def _built_from(kept: tuple[object, ...], cq: object, node: object, cache: Cache) -> bool:
    """A kept assigner was built from these very objects: the ClusterQueue's spec, its
    node of the kept working tree, the flavors, the topology state and the TAS charges
    (identity, not equality: a spec replaced by an equal one still gets a new
    assigner). Asked once per head, so compared one by one, not by building a tuple."""
    return (
        kept[0] is cq
        and kept[1] is node
        and kept[2] is cache.flavors
        and kept[3] is cache.topology
        and kept[4] is cache.tas_charged
    )


def phantom_entries(cache: Cache, *, wake_all: bool) -> dict[str, tuple[Entry, int]]:
    """The phantom heads of bounded parking (``QueueManager.settle_wakes``) by key:
    each an entry ranked by the nomination it would get (fitting, with its demand and
    borrowing level), and its ticket; with ``wake_all`` they are woken instead (with
    notice windows a head that no longer fits holds quota, so it must be processed)."""
    out: dict[str, tuple[Entry, int]] = {}
    for wl, cq, ticket, demand, borrow in cache.settle_wakes():
        if wake_all:
            cache.wake_phantom(cq, ticket)
        else:
            out[wl.key] = (
                Entry(wl, cq, Assignment(pod_sets=[], borrow=borrow, usage=demand)),
                ticket,
            )
    return out


def reserve_placement(e: Entry) -> None:
    """A TAS entry that needs preemption gets the placement it holds if it preempts
    (its victims gone) or reserves (no victims: on empty nodes), as Kueue's
    updateAssignmentForTAS; the scheduler holds it in the cycle's TAS usage."""
    a = e.assignment
    if a is None or a.placement is None or not a.mode.needs_preemption:
        return
    placed = a.placement.reservation([t.key for t in e.targets])
    for p in a.pod_sets:
        p.topology = placed.get(p.name)


class Nominator:
    """Nominates heads for one scheduler, keeping one flavor assigner per ClusterQueue
    while what it is built from (the spec, its node of the kept working tree, the
    flavors, the topology state and the TAS charges) stays the same object.

    ``kept``: a head's flavor assignment is reused while everything it was computed
    from is the same (:mod:`admission.engine.verdicts`); with classical preemption only
    (without progress-aware preemption), and the same decisions either way."""

    __slots__ = ("_cache", "_preemptor", "_explain", "_assigners", "_kept", "snap")

    def __init__(
        self, cache: Cache, preemptor: Preemptor, *, explain: bool, kept: bool = True
    ) -> None:
        self._cache = cache
        self._preemptor = preemptor
        self._explain = explain
        self._assigners: dict[str, tuple[tuple[object, ...], FlavorAssigner]] = {}
        self._kept: KeptNominations | None = None
        if kept and type(preemptor) is Preemptor and preemptor.progress is None:
            self._kept = KeptNominations(preemptor)
        # the snapshot of the cycle running now, for the assigners' preemption oracle
        self.snap: Snapshot | None = None

    def nominate(
        self, e: Entry, snap: Snapshot, *, only_flavors: frozenset[str] | None = None
    ) -> None:
        """Kueue's nominate for one head: ``e.status`` when it cannot be considered
        (LocalQueue stopped, namespace not selected, invalid resources), else
        ``e.assignment`` and, when that needs preemption, its victims ``e.targets``.

        TAS placement counts this cycle's placements so far (``snap.tas``) as taken;
        ``only_flavors`` (a recomputed placement) keeps the flavors of the nomination."""
        cache = self._cache
        wl = e.workload
        cq = cache.cluster_queues[e.cluster_queue]
        kept = self._kept
        k = kept.head(e.cluster_queue, wl) if kept is not None else None
        objects = (cache.local_queues, cache.namespaces, cq)
        if kept is not None and kept.admissible(k, wl, objects):
            pass  # the checks below passed for it, on these very objects
        elif self._refused(e, cq):
            return
        elif kept is not None:
            kept.note_admissible(k, wl, objects)
        assigner = self._assigner(e.cluster_queue, cq, snap)
        assigner.tas_assumed = snap.tas
        if only_flavors is None:  # (and None again after any assignment)
            self._assign(assigner, e, snap, k)
            return
        assigner.only_flavors = only_flavors
        try:
            self._assign(assigner, e, snap, k)
        finally:
            assigner.only_flavors = None

    def _refused(self, e: Entry, cq: ClusterQueue) -> bool:
        """The checks before flavor assignment (``Cache.refusal``): ``e.status`` set and
        True when they refuse the head."""
        refused = self._cache.refusal(cq, e.workload)
        if refused is None:
            return False
        e.status, even_if_strict = refused
        if even_if_strict:
            e.park_even_if_strict = True
        return True

    def phantom_turn(self, e: Entry, snap: Snapshot, ticket: int) -> bool:
        """A phantom head's turn in the cycle's order: False when its demand no longer
        fits (it stays parked); else it is woken and nominated (it fits: with the
        assignment it was ranked by), to be processed as any head."""
        a = e.assignment
        assert a is not None
        node = snap.tree.queues[e.cluster_queue]
        if any(v > node.available(fr) for fr, v in a.usage.items()):
            return False
        self._cache.wake_phantom(e.cluster_queue, ticket)
        e.assignment = None
        self.nominate(e, snap)
        return True

    @property
    def kept(self) -> KeptNominations | None:
        """The kept nominations (None when off)."""
        return self._kept

    def _assign(self, assigner: FlavorAssigner, e: Entry, snap: Snapshot, k: _Kept | None) -> None:
        wl = e.workload
        if e.targets:  # (an entry's list is its own: an empty one is left as it is)
            e.targets = []
        kept = self._kept
        a = kept.reuse(k, assigner, wl, snap) if kept is not None else None
        if a is None:
            if kept is not None:
                kept.hopeless = None  # (the oracle notes it again if it answers so)
            a = assigner.assign(wl)
            if kept is not None:
                kept.keep(e.cluster_queue, assigner, wl, a)
        elif a.mode != AssignmentMode.FIT:
            snap.searches = None  # as the oracle left it, answering without a search
        if a.mode == AssignmentMode.FIT:  # no victims, no partial admission, no placement
            e.assignment = a  # to reserve (reserve_placement: only when preempting)
            return
        if a.mode.needs_preemption:
            e.targets = self._preemptor.targets(
                snap, wl, e.cluster_queue, a.usage, a.frs_need_preemption, placement=a.placement
            )
        if (
            a.mode != AssignmentMode.FIT
            and not e.targets
            and any(ps.min_count is not None for ps in wl.pod_sets)
        ):
            # Partial admission: neither fits nor can preempt at full size.
            reduced = self._partial(assigner, snap, wl, e.cluster_queue)
            if reduced is not None:
                a, e.targets = reduced
        e.assignment = a
        reserve_placement(e)

    def _assigner(self, cq_name: str, cq: ClusterQueue, snap: Snapshot) -> FlavorAssigner:
        """``cq``: the spec of ``cq_name`` (the cache's, now)."""
        cache = self._cache
        node = snap.tree.queues[cq_name]
        p = cq.preemption
        preemptor = self._preemptor
        may_borrow = p.borrow_within_cohort != NEVER or (
            preemptor.fair_sharing and p.reclaim_within_cohort != NEVER
        )
        kept = self._assigners.get(cq_name)
        if kept is not None and _built_from(kept[0], cq, node, cache):
            assigner = kept[1]
            # read from the spec on every use, as a newly built assigner would
            assigner.can_preempt_while_borrowing = may_borrow
            assigner.can_preempt_within_cq = p.within_cluster_queue != NEVER
            return assigner

        answers = self._kept

        def oracle(wl: Workload, node: QuotaNode, fr: FlavorResource, val: int) -> OracleAnswer:
            # the snapshot of the cycle running now (an assigner outlives its cycle)
            current = self.snap
            assert current is not None
            if answers is not None:
                bound = preemptor.hopeless_bound(current, wl, node, fr, val)
                if bound is not None:
                    # the oracle's own answer without a search, noted for the kept answers
                    answers.hopeless = (wl.key, fr, val, *bound)
                    current.searches = None
                    return no_preemption(wl, node, fr, val)
            return preemptor.oracle(current, wl, node, fr, val)

        assigner = FlavorAssigner(
            cq=cq,
            node=node,
            flavors=cache.flavors,
            oracle=oracle,
            can_preempt_while_borrowing=may_borrow,
            can_preempt_within_cq=p.within_cluster_queue != NEVER,
            explain=self._explain,
            topology=cache.topology,
            tas_charges=cache.tas_charged,
        )
        built_from = (cq, node, cache.flavors, cache.topology, cache.tas_charged)
        self._assigners[cq_name] = (built_from, assigner)
        return assigner

    def _partial(
        self, assigner: FlavorAssigner, snap: Snapshot, wl: Workload, cq: str
    ) -> tuple[Assignment, list[Target]] | None:
        """Partial admission (Kueue's PodSetReducer): the largest count of the minCount
        podSet that fits, or that preemption can make fit (then with its victims)."""
        ps = next(p for p in wl.pod_sets if p.min_count is not None)
        lo, hi = ps.min_count or 1, ps.count - 1
        counts = {p.name: p.count for p in wl.pod_sets}
        best: tuple[Assignment, list[Target]] | None = None
        while lo <= hi:
            mid = (lo + hi + 1) // 2
            counts[ps.name] = mid
            a = assigner.assign(wl, counts)
            targets: list[Target] = []
            if a.mode.needs_preemption:
                targets = self._preemptor.targets(
                    snap, wl, cq, a.usage, a.frs_need_preemption, placement=a.placement
                )
            if a.mode == AssignmentMode.FIT or targets:
                best = (a, targets)
                lo = mid + 1
            else:
                hi = mid - 1
        return best
