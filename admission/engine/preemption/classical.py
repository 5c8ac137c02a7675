"""Classical preemption: which admitted workloads to evict so a pending one fits.

Kueue's classical preemption (docs/semantics.md §4.7): the candidates and their order
come from :class:`~admission.engine.preemption.candidates.CandidateSearch`; the
**minimal victim set** (``minimal_targets``) removes candidates greedily until the
whole gang fits, then fills back every victim whose removal is not needed. If the
gang does not fit after every eligible removal, nobody is preempted.

The search works on the cycle's snapshot of the cohort tree (``admission.engine.snapshot``),
never on the live one, inside ``CohortTree.scratch()`` blocks, which restore every
usage value it changed when they exit, normally or by an exception, so it allocates
little more than the candidate lists. Fair-sharing preemption
plugs in as another strategy with the same candidate search and fill-back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from admission.engine import messages
from admission.engine.assignment import OracleAnswer
from admission.engine.cache import Cache
from admission.engine.ordering import Target
from admission.engine.preemption.candidates import (
    Candidate,
    CandidateSearch,
    Variant,
    fits_in_quota,
    within_nominal,
)
from admission.engine.preemption.feasibility import kept_locally
from admission.engine.preemption.ordered import (
    OrderedCandidates,
    SortedAdmitted,
    ordered_candidates,
)
from admission.engine.snapshot import Snapshot
from admission.engine.vocabulary import AssignmentMode, PreemptionReason
from queues.model import LOWER_OR_NEWER_EQUAL_PRIORITY, NEVER, FlavorResource, Workload
from queues.quota_node import QuotaNode

if TYPE_CHECKING:
    from admission.engine.preemption.checkpoint import ProgressAware
    from admission.engine.usage import UsageTracker


def _search_key(
    snap: Snapshot,
    wl: Workload,
    cq_name: str,
    frs: set[FlavorResource],
    requests: Mapping[FlavorResource, int],
) -> tuple[object, ...]:
    return (snap.tree.changes, wl.key, cq_name, frozenset(frs), tuple(sorted(requests.items())))


class Preemptor(CandidateSearch):
    """Classical preemption over a ``Cache`` (the strategy the scheduler is built with).

    It holds no per-cycle state: every search is given the cycle's :class:`Snapshot`
    (the tree it may change, and the victims already taken this cycle). Admitted
    workloads, their usage and their priorities are read from the cache."""

    fair_sharing = False

    def __init__(
        self,
        cache: Cache,
        *,
        tracker: UsageTracker | None = None,
        progress: ProgressAware | None = None,
    ) -> None:
        super().__init__(cache, tracker=tracker, progress=progress)
        # During one ``targets`` search: the TAS placement the victims must make possible.
        self.placement: Callable[[Sequence[str]], bool] | None = None
        # Each ClusterQueue's admitted workloads in Kueue's candidate order, kept across
        # cycles while its admissions stay the same (admission.engine.preemption.ordered).
        self.sorted_admitted = SortedAdmitted()

    def _placement_fits(self, victims: Iterable[str]) -> bool:
        """Kueue's workloadFits, TAS part: the preemptor's topology placement succeeds
        once these victims are gone (always, for workloads without TAS podSets)."""
        return self.placement is None or self.placement(list(victims))

    # -- minimal victim set -------------------------------------------------------

    @staticmethod
    def _valid(
        snap: Snapshot, c: Candidate, cq: QuotaNode, frs: set[FlavorResource], borrow: bool
    ) -> bool:
        if c.cq == cq.name:
            return True
        if borrow and c.variant == Variant.RECLAIM_WITHOUT_BORROWING:
            return False
        node: QuotaNode | None = snap.tree.queues[c.cq]
        while node is not None and node is not c.lca:
            if within_nominal(node, frs):
                return False
            node = node.parent
        return True

    @staticmethod
    def _fits(cq: QuotaNode, requests: Mapping[FlavorResource, int], allow_borrowing: bool) -> bool:
        for fr, v in requests.items():
            if not allow_borrowing and cq.borrowing_with(fr, v):
                return False
            if v > cq.available(fr):
                return False
        return True

    def _could_free_enough(
        self,
        snap: Snapshot,
        wl: Workload,
        cq: QuotaNode,
        frs: set[FlavorResource],
        requests: Mapping[FlavorResource, int],
    ) -> bool:
        """A cheap necessary condition: could even the most generous set of victims the
        policies allow free what is missing? (Most failed searches stop here.)

        Other ClusterQueues' usage is the root's usage less this queue's where no node
        of the tree keeps usage locally (lending limits), so a tree of 5,000 queues costs
        a walk to the root, not a sum over 5,000 (the same answer)."""
        cache = self.cache
        p = cache.cluster_queues[cq.name].preemption
        within = p.within_cluster_queue
        own: list[dict[FlavorResource, int]] = []
        if within != NEVER:
            prio = wl.priority
            equal_ok = within == LOWER_OR_NEWER_EQUAL_PRIORITY
            own = [
                usage
                for q_prio, usage in cache.prio_usage.get(cq.name, {}).items()
                if q_prio < prio or (equal_ok and q_prio == prio)
            ]
        others: bool | None = cq.parent is not None and p.reclaim_within_cohort != NEVER
        if others:
            others = None  # worked out when first needed (it only reads the tree)
        for fr in frs:
            available = cq.available(fr)
            need = requests.get(fr, 0) - (available if available > 0 else 0)
            if need <= 0:
                continue
            free = 0
            for usage in own:
                free += usage.get(fr, 0)
            if free >= need:
                continue
            if others is None:
                others = self._may_take_from_others(wl, cq, frs, requests)
            if others:
                root = cq.root()
                if fr not in kept_locally(root):
                    # usage bubbles up whole: the root holds the tree's sum (O(depth))
                    free += root.usage.get(fr, 0) - cq.usage.get(fr, 0)
                else:  # a lending limit keeps some usage below the root: add it up
                    for name in cache.same_tree(cq.name):
                        if name != cq.name:
                            free += snap.tree.queues[name].usage.get(fr, 0)
                            if free >= need:
                                break
            if free < need:
                return False
        return True

    def _may_take_from_others(
        self,
        wl: Workload,
        cq: QuotaNode,
        frs: set[FlavorResource],
        requests: Mapping[FlavorResource, int],
    ) -> bool:
        """For :meth:`_could_free_enough`, of a queue in a cohort that may reclaim: can
        other queues' workloads be victims at all? Not when the search that keeps the
        preemptor within nominal is hopeless and no subtree below the root has the
        hierarchical advantage (only such candidates are usable then, see candidates)."""
        if not self._within_nominal_search_hopeless(wl, cq, frs, requests):
            return True
        advantage, remaining = fits_in_quota(cq, requests)
        node = cq.parent
        while not advantage and node is not None and node.parent is not None:
            advantage, remaining = fits_in_quota(node, remaining)
            node = node.parent
        return advantage

    def minimal_targets(
        self,
        snap: Snapshot,
        wl: Workload,
        cq: QuotaNode,
        frs: set[FlavorResource],
        requests: Mapping[FlavorResource, int],
    ) -> list[Target]:
        """The fewest victims whose removal lets ``requests`` fit at ``cq`` (a node of
        ``snap.tree``); [] when no allowed set of victims would do."""
        if not self._could_free_enough(snap, wl, cq, frs, requests):
            return []
        cands: Iterable[Candidate]
        lazy = self._ordered_candidates(snap, wl, cq, frs, requests)
        if lazy is not None:  # the same sequence, produced as the removals take it
            if not lazy:
                return []
            cands = lazy
            none_from_others, none_hierarchical = lazy.none_from_others, lazy.none_hierarchical
        else:
            cands, none_from_others, none_hierarchical = self.candidates(
                snap, wl, cq, frs, requests
            )
            if not cands:
                return []
        spec = self.cache.cluster_queues[cq.name]
        forbidden = spec.preemption.borrow_within_cohort == NEVER
        if none_from_others or self._within_nominal_search_hopeless(wl, cq, frs, requests):
            attempts = [True]
        elif forbidden and none_hierarchical:
            attempts = [False, True]
        else:
            attempts = [True, False]
        tree = snap.tree
        for allow_borrowing in attempts:
            # Removals are tried on the snapshot and undone when the block exits.
            with tree.scratch():
                removed: list[Candidate] = []
                for c in cands:
                    if not self._valid(snap, c, cq, frs, allow_borrowing):
                        continue
                    tree.remove_usage(c.cq, self.cache.usage_of[c.key])
                    removed.append(c)
                    if self._fits(cq, requests, allow_borrowing) and (
                        self.placement is None or self._placement_fits(r.key for r in removed)
                    ):
                        kept = self._fill_back(snap, cq, requests, removed, allow_borrowing)
                        return [Target(t.key, t.cq, t.variant.reason) for t in kept]
        return []

    def _ordered_candidates(
        self,
        snap: Snapshot,
        wl: Workload,
        cq: QuotaNode,
        frs: set[FlavorResource],
        requests: Mapping[FlavorResource, int],
    ) -> OrderedCandidates | None:
        """:meth:`candidates` produced lazily, or None where only the eager lists give
        Kueue's order (the seam the tests replace to compare the two)."""
        return ordered_candidates(self, self.sorted_admitted, snap, wl, cq, frs, requests)

    def _fill_back(
        self,
        snap: Snapshot,
        cq: QuotaNode,
        requests: Mapping[FlavorResource, int],
        removed: list[Candidate],
        allow: bool,
    ) -> list[Candidate]:
        """Re-add, newest removal first (except the last), every victim not needed.

        Runs inside the caller's ``tree.scratch()`` block, which undoes it."""
        tree = snap.tree
        usage_of = self.cache.usage_of
        fits = self._fits
        untopological = self.placement is None
        targets = list(removed)
        for i in range(len(targets) - 2, -1, -1):
            c = targets[i]
            usage = usage_of[c.key]
            tree.add_usage(c.cq, usage)
            if fits(cq, requests, allow) and (
                untopological
                or self._placement_fits(t.key for j, t in enumerate(targets) if j != i)
            ):
                targets.pop(i)
            else:
                tree.remove_usage(c.cq, usage)
        return targets

    # -- scheduler seams ---------------------------------------------------------

    def oracle(
        self, snap: Snapshot, wl: Workload, node: QuotaNode, fr: FlavorResource, val: int
    ) -> OracleAnswer:
        """Would preemption free ``val`` of ``fr`` for ``wl``? (Kueue's PreemptionOracle.)"""
        targets = self.minimal_targets(snap, wl, node, {fr}, {fr: val})
        if not targets:
            answer = OracleAnswer(
                AssignmentMode.NO_CANDIDATES,
                node.height_of_lowest_subtree_that_fits(fr, val).height,
            )
        else:
            tree = snap.tree
            with tree.scratch():
                for t in targets:
                    tree.remove_usage(t.cluster_queue, self.cache.usage_of[t.key])
                borrow = node.height_of_lowest_subtree_that_fits(fr, val).height
            own = any(t.cluster_queue == node.name for t in targets)
            answer = OracleAnswer(AssignmentMode.PREEMPT if own else AssignmentMode.RECLAIM, borrow)
        # Kept for :meth:`targets` only when it found victims: a search that found
        # nobody makes the request NO_CANDIDATES, whose victims nobody asks for (and
        # its key is not worth building for each of the thousands of failed heads).
        snap.searches = (
            (_search_key(snap, wl, node.name, {fr}, {fr: val}), targets) if targets else None
        )
        return answer

    def hopeless_bound(
        self, snap: Snapshot, wl: Workload, node: QuotaNode, fr: FlavorResource, val: int
    ) -> tuple[int, bool] | None:
        """When :meth:`oracle` answers ``val`` of ``fr`` with NO_CANDIDATES without a
        victim search (not even the most generous set of victims could free it), how
        long that lasts: ``(bound, with_others)`` such that, while the ClusterQueue's
        usage of ``fr``, its admitted usage of ``fr`` by priority and the usage of ``fr``
        at the Cohorts strictly between it and its root stay the same (specs and quotas
        too), it still does exactly when ``max(available, 0)``, plus the root's usage of
        ``fr`` if ``with_others``, is below ``bound``. None when the oracle would search,
        or when a lending limit keeps ``fr`` below the root.

        :meth:`_could_free_enough` for one request, its terms regrouped: it frees the
        own workloads' usage ``own`` and, when other ClusterQueues' workloads may be
        victims at all (which reads only the ClusterQueue and the Cohorts between it
        and the root), the root's usage less the ClusterQueue's ``u``; it fails when that
        is below ``val - max(available, 0)``, i.e. when ``max(available, 0) + root usage
        < val - own + u`` (without others: ``max(available, 0) < val - own``)."""
        cache = self.cache
        root = node.root()
        if fr in kept_locally(root):
            return None
        p = cache.cluster_queues[node.name].preemption
        within = p.within_cluster_queue
        own = 0
        if within != NEVER:
            prio = wl.priority
            equal_ok = within == LOWER_OR_NEWER_EQUAL_PRIORITY
            for q_prio, usage in cache.prio_usage.get(node.name, {}).items():
                if q_prio < prio or (equal_ok and q_prio == prio):
                    own += usage.get(fr, 0)
        available = node.available(fr)
        room = available if available > 0 else 0
        if own + room >= val:
            return None  # nothing missing, or the own workloads could free it
        others = (
            node.parent is not None
            and p.reclaim_within_cohort != NEVER
            and self._may_take_from_others(wl, node, {fr}, {fr: val})
        )
        bound = val - own + (node.usage.get(fr, 0) if others else 0)
        if room + (root.usage.get(fr, 0) if others else 0) >= bound:
            return None
        return bound, others

    def targets(
        self,
        snap: Snapshot,
        wl: Workload,
        cq_name: str,
        usage: Mapping[FlavorResource, int],
        frs: set[FlavorResource],
        *,
        placement: Callable[[Sequence[str]], bool] | None = None,
    ) -> list[Target]:
        """The victims that let ``wl`` (``usage`` in ``cq_name``) fit in ``snap``; with
        ``placement`` (TAS podSets) only victims after whose removal the topology
        placement succeeds (freeing capacity scattered over domains does not count)."""
        if placement is None and self.progress is None and snap.searches is not None:
            key, found = snap.searches
            if key == _search_key(snap, wl, cq_name, frs, usage):
                return list(found)  # the oracle's search, on the same tree
        self.placement = placement
        node = snap.tree.queues[cq_name]
        try:
            if self.progress is not None:
                return self.progress.choose(
                    wl, lambda: self.minimal_targets(snap, wl, node, frs, usage)
                )
            return self.minimal_targets(snap, wl, node, frs, usage)
        finally:
            self.placement = None

    def message(
        self, *, preemptor: Workload, preemptor_cq: str, victim_cq: str, reason: PreemptionReason
    ) -> str:
        """The victim's ``Preempted`` condition message."""
        tree = self.cache.tree
        return messages.preempted(
            preemptor=preemptor,
            reason=reason,
            preemptor_node=tree.queues[preemptor_cq],
            victim_node=tree.queues[victim_cq],
        )
