"""Who classical preemption may take, and in what order.

Kueue's candidate search and CandidatesOrdering (docs/semantics.md §4.7):

* **Candidates** (:meth:`CandidateSearch.candidates`): admitted workloads that use a
  (flavor, resource) the preemptor needs. Same-ClusterQueue candidates follow
  ``withinClusterQueue``; cohort candidates come only from queues (and subtrees)
  that are borrowing, following ``reclaimWithinCohort`` — with a hierarchical
  advantage (the preemptor's subtree owns the quota) any priority the policy allows
  is fair game, otherwise ``borrowWithinCohort`` and its threshold decide.
* **Order** (:meth:`CandidateSearch.candidate_order`): already-evicted first, other
  ClusterQueues before the own one, lower priority first, most recently admitted
  first, then UID.

The quota predicates the search and the victim choice share (:func:`within_nominal`,
:func:`fits_in_quota`, …) live here too.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, NamedTuple

from admission.engine.cache import Cache
from admission.engine.snapshot import AdmittedRows, Snapshot
from admission.engine.vocabulary import PreemptionReason
from queues.model import (
    ANY,
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    LOWER_PRIORITY,
    NEVER,
    FlavorResource,
    Workload,
)
from queues.quota_node import QuotaNode

if TYPE_CHECKING:
    from admission.engine.preemption.checkpoint import ProgressAware
    from admission.engine.usage import UsageTracker

__all__ = [
    "Candidate",
    "CandidateSearch",
    "Candidates",
    "QuotaFit",
    "Source",
    "Variant",
    "borrowing_queues",
    "cohort_levels",
    "fits_in_quota",
    "under_nominal",
    "uses_resources",
    "within_nominal",
]


class Variant(IntEnum):
    """How a candidate may be preempted (Kueue's classical/hierarchical_preemption.go)."""

    NEVER = 0
    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4

    @property
    def reason(self) -> PreemptionReason:
        return _VARIANT_REASON[self]


_VARIANT_REASON = {
    Variant.WITHIN_CQ: PreemptionReason.IN_CLUSTER_QUEUE,
    Variant.HIERARCHICAL_RECLAIM: PreemptionReason.IN_COHORT_RECLAMATION,
    Variant.RECLAIM_WITHOUT_BORROWING: PreemptionReason.IN_COHORT_RECLAMATION,
    Variant.RECLAIM_WHILE_BORROWING: PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING,
}


@dataclass(slots=True)
class Candidate:
    """An admitted workload a search may preempt: its key and object, the ClusterQueue
    it is charged to, the lowest common ancestor with the preemptor (for hierarchical
    reclaim), and how the classical policies allow it."""

    key: str
    wl: Workload
    cq: str
    lca: QuotaNode | None
    variant: Variant


def uses_resources(usage: Mapping[FlavorResource, int], frs: Iterable[FlavorResource]) -> bool:
    return any(fr in usage for fr in frs)


def within_nominal(node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    """Kueue's IsWithinNominalInResources: usage ≤ subtree quota on every fr.

    A plain loop, not ``all()`` over a generator: the victim search asks it for every
    node between a candidate and the preemptor, hundreds of thousands of times a cycle
    at 5,000 ClusterQueues, and the generator was most of its cost."""
    usage, quota = node.usage, node.subtree_quota
    for fr in frs:
        if usage.get(fr, 0) > quota.get(fr, 0):
            return False
    return True


class QuotaFit(NamedTuple):
    """Kueue's QuantitiesFitInQuota: do the requests fit in a node's subtree quota, and
    what of them its parent must provide."""

    fits: bool
    remaining: dict[FlavorResource, int]


def fits_in_quota(node: QuotaNode, requests: Mapping[FlavorResource, int]) -> QuotaFit:
    fits = True
    remaining = {}
    for fr, v in requests.items():
        if node.usage.get(fr, 0) + v > node.subtree_quota.get(fr, 0):
            fits = False
        remaining[fr] = max(0, v - node.local_available(fr))
    return QuotaFit(fits, remaining)


class Candidates(NamedTuple):
    """The ordered candidates of a search, and which kinds were found."""

    ordered: list[Candidate]
    none_from_others: bool  # every candidate is in the preemptor's own ClusterQueue
    none_hierarchical: bool  # no candidate with a hierarchical advantage


def cohort_levels(
    cq: QuotaNode, requests: Mapping[FlavorResource, int], useless_prio: bool
) -> Iterator[tuple[QuotaNode, QuotaNode | None, bool]]:
    """The cohorts above ``cq`` whose borrowing subtrees a reclaim may take from, walking
    up: (cohort, the child the walk came from, whether the preemptor's side owns the
    quota there: the hierarchical advantage). Levels without the advantage are left out
    when ``useless_prio`` (no search could take from them)."""
    advantage, remaining = fits_in_quota(cq, requests)
    prev: QuotaNode | None = None
    node = cq.parent
    while node is not None:
        if advantage or not useless_prio:
            yield node, prev, bool(advantage)
        fits, remaining = fits_in_quota(node, remaining)
        advantage = advantage or fits
        prev, node = node, node.parent


def under_nominal(cq: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    """Kueue's queueUnderNominalInResourcesNeedingPreemption (a plain loop, as
    :func:`within_nominal`)."""
    usage = cq.usage
    for fr in frs:
        if usage.get(fr, 0) >= cq.nominal(fr):
            return False
    return True


def _order(_evicting: object) -> Callable[[Candidate], tuple]:
    """Kueue's CandidatesOrdering within one list of candidates, nobody being evicted:
    lower priority first, most recently admitted first, then UID."""

    def key(c: Candidate) -> tuple:
        wl = c.wl
        return (wl.priority, -(wl.admission_time or 0.0), wl.uid or c.key)

    return key


def _order_evicting_first(evicting: Container[str]) -> Callable[[Candidate], tuple]:
    """As :func:`_order`, already-evicted candidates first."""

    def key(c: Candidate) -> tuple:
        wl = c.wl
        return (c.key not in evicting, wl.priority, -(wl.admission_time or 0.0), wl.uid or c.key)

    return key


class Source(NamedTuple):
    """One ClusterQueue's admitted workloads and what decides which are candidates
    (:meth:`CandidateSearch._source`)."""

    admitted: AdmittedRows
    any_priority: bool  # the policy is Any: every priority may be taken
    newer_equal_ok: bool  # LowerOrNewerEqualPriority
    fixed: Variant | None  # the variant of all of them; None: by each one's priority
    threshold: int | None  # borrowWithinCohort's maxPriorityThreshold


def borrowing_queues(
    cq: QuotaNode, current: QuotaNode, skip: QuotaNode | None, frs: set[FlavorResource]
) -> Iterator[QuotaNode]:
    """The ClusterQueues below ``current`` (not below ``skip``, not ``cq``) that use more
    than their nominal quota, through Cohorts that do too (depth first: a child Cohort's
    before the node's own ClusterQueues), walked with a stack of its own, never by
    recursion (a chain of any depth)."""
    single = next(iter(frs)) if len(frs) == 1 else None
    stack = [(current, iter(current.child_cohorts))]
    while stack:
        node, cohorts = stack[-1]
        child = next((c for c in cohorts if c is not skip and not within_nominal(c, frs)), None)
        if child is not None:
            stack.append((child, iter(child.child_cohorts)))
            continue
        stack.pop()
        if single is not None:  # within_nominal of one pair, written out: asked per queue
            for q in node.child_queues:
                if q is not cq and q.usage.get(single, 0) > q.subtree_quota.get(single, 0):
                    yield q
            continue
        for q in node.child_queues:
            if q is cq or within_nominal(q, frs):
                continue
            yield q


class CandidateSearch:
    """The candidate search over a ``Cache``: what the classical and fair-sharing
    preemptors share. Admitted workloads, their usage and their priorities are read
    from the cache; everything of one cycle from its :class:`Snapshot`."""

    def __init__(
        self,
        cache: Cache,
        *,
        tracker: UsageTracker | None = None,
        progress: ProgressAware | None = None,
    ) -> None:
        self.cache = cache
        self.tracker = tracker  # admission fair sharing: victims from heavy LocalQueues first
        # Progress-aware preemption (admission.engine.preemption.checkpoint): minimum runtime and
        # lost-work victim choice; None is Kueue's behaviour.
        self.progress = progress

    def _priority_too_high(self, wl: Workload, cand: Workload, same_cq: bool, cq_name: str) -> bool:
        p = self.cache.cluster_queues[cq_name].preemption
        policy = p.within_cluster_queue if same_cq else p.reclaim_within_cohort
        lower = cand.priority < wl.priority
        if policy == LOWER_PRIORITY:
            return not lower
        if policy == LOWER_OR_NEWER_EQUAL_PRIORITY:
            newer_equal = (
                cand.priority == wl.priority and wl.queue_order_time < cand.queue_order_time
            )
            return not (lower or newer_equal)
        return policy != ANY

    def _classify(
        self,
        wl: Workload,
        cq_name: str,
        key: str,
        cand_cq: str,
        frs: set[FlavorResource],
        advantage: bool,
    ) -> Variant:
        if not uses_resources(self.cache.usage_of[key], frs):
            return Variant.NEVER
        cand = self.cache.workloads[key]
        same = cand_cq == cq_name
        if self._priority_too_high(wl, cand, same, cq_name):
            return Variant.NEVER
        if same:
            return Variant.WITHIN_CQ
        if advantage:
            return Variant.HIERARCHICAL_RECLAIM
        p = self.cache.cluster_queues[cq_name].preemption
        if p.borrow_within_cohort == NEVER:
            return Variant.RECLAIM_WITHOUT_BORROWING
        if cand.priority >= wl.priority or (
            p.max_priority_threshold is not None and cand.priority > p.max_priority_threshold
        ):
            return Variant.RECLAIM_WITHOUT_BORROWING
        return Variant.RECLAIM_WHILE_BORROWING

    def _source(
        self, snap: Snapshot, wl: Workload, cq_name: str, cand_cq: str, advantage: bool
    ) -> Source | None:
        """What :meth:`_from_cq` works out once for one ClusterQueue (policy, priorities,
        kind of reclaim); None when none of its workloads can be a candidate."""
        admitted = self.admitted_rows(snap, cand_cq)
        if admitted is None:
            return None
        same = cand_cq == cq_name
        p = self.cache.cluster_queues[cq_name].preemption
        policy = p.within_cluster_queue if same else p.reclaim_within_cohort
        if policy not in (LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY, ANY):
            return None  # Never: no workload of this queue may be preempted
        prio = wl.priority
        newer_equal_ok = policy == LOWER_OR_NEWER_EQUAL_PRIORITY
        lowest = admitted.lowest_priority
        if policy != ANY and (lowest > prio or (lowest == prio and not newer_equal_ok)):
            return None  # nobody of a lower (or equal, newer) priority to take
        if same:
            fixed: Variant | None = Variant.WITHIN_CQ
        elif advantage:
            fixed = Variant.HIERARCHICAL_RECLAIM
        elif p.borrow_within_cohort == NEVER:
            fixed = Variant.RECLAIM_WITHOUT_BORROWING
        else:
            fixed = None  # by the candidate's priority (borrowWithinCohort's threshold)
        return Source(admitted, policy == ANY, newer_equal_ok, fixed, p.max_priority_threshold)

    def _from_cq(
        self,
        snap: Snapshot,
        wl: Workload,
        cq_name: str,
        cand_cq: str,
        lca: QuotaNode | None,
        frs: set[FlavorResource],
        advantage: bool,
    ) -> list[Candidate]:
        """The candidates of one ClusterQueue: :meth:`_classify` for each of its admitted
        workloads, with what is the same for all of them (policy, priorities, kind of
        reclaim) worked out once; ``test_preemption_properties`` checks the two agree.
        (:mod:`admission.engine.preemption.ordered` filters the rows the same way.)"""
        src = self._source(snap, wl, cq_name, cand_cq, advantage)
        if src is None:
            return []
        any_priority, newer_equal_ok, fixed, threshold = (
            src.any_priority,
            src.newer_equal_ok,
            src.fixed,
            src.threshold,
        )
        prio = wl.priority
        order_time = wl.queue_order_time
        excluded = snap.victims
        progress = self.progress
        single = next(iter(frs)) if len(frs) == 1 else None
        out = []
        for key, cand, cp, usage in src.admitted.rows:
            if key in excluded:
                continue
            if single is not None:
                if single not in usage:
                    continue
            elif not any(fr in usage for fr in frs):
                continue
            if not any_priority and not (
                cp < prio or (newer_equal_ok and cp == prio and order_time < cand.queue_order_time)
            ):
                continue
            v = fixed
            if v is None:
                if cp >= prio or (threshold is not None and cp > threshold):
                    v = Variant.RECLAIM_WITHOUT_BORROWING
                else:
                    v = Variant.RECLAIM_WHILE_BORROWING
            if progress is not None and progress.protected(cand, cand_cq, cq_name):
                continue  # minimumRuntime
            out.append(Candidate(key, cand, cand_cq, lca, v))
        return out

    def admitted_rows(self, snap: Snapshot, cq_name: str) -> AdmittedRows | None:
        """``cq_name``'s admitted workloads as the candidate search reads them, read
        once per cycle (kept on the snapshot; the cache's admissions change only when
        the cycle commits) from the cache, which keeps them until an admission there
        changes (``Cache.admitted_rows``): each of the cycle's searches in a cohort
        reads every borrowing queue's list, and looking up each workload's object and
        usage again per search, then per cycle, was most of the search's cost. None
        when it has none."""
        got = snap.admitted_rows.get(cq_name)
        if got is not None:
            return got
        kept = self.cache.admitted_rows(cq_name)
        if kept is None:
            return None
        got = snap.admitted_rows[cq_name] = AdmittedRows(*kept)
        return got

    def _collect_in_subtree(
        self,
        snap: Snapshot,
        wl: Workload,
        cq: QuotaNode,
        current: QuotaNode,
        subtree_root: QuotaNode,
        skip: QuotaNode | None,
        frs: set[FlavorResource],
        advantage: bool,
        out: list[Candidate],
    ) -> None:
        """The candidates of the ClusterQueues :func:`borrowing_queues` lists."""
        for q in borrowing_queues(cq, current, skip, frs):
            out.extend(self._from_cq(snap, wl, cq.name, q.name, subtree_root, frs, advantage))

    def candidates(
        self,
        snap: Snapshot,
        wl: Workload,
        cq: QuotaNode,
        frs: set[FlavorResource],
        requests: Mapping[FlavorResource, int],
    ) -> Candidates:
        spec = self.cache.cluster_queues[cq.name]
        same: list[Candidate] = []
        if spec.preemption.within_cluster_queue != NEVER:
            same = self._from_cq(snap, wl, cq.name, cq.name, None, frs, False)
        hierarchy: list[Candidate] = []
        prio: list[Candidate] = []
        if cq.parent is not None and spec.preemption.reclaim_within_cohort != NEVER:
            # candidates without a hierarchical advantage that no search may take
            useless_prio = self._within_nominal_search_hopeless(wl, cq, frs, requests)
            for node, prev, advantage in cohort_levels(cq, requests, useless_prio):
                lst = hierarchy if advantage else prio
                self._collect_in_subtree(snap, wl, cq, node, node, prev, frs, advantage, lst)
        evicting = self.cache.evicting
        if self.tracker is None and (self.progress is None or self.progress.order == "Kueue"):
            # Kueue's order within each list, where whether a candidate is in the
            # preemptor's queue is the same for all (``same`` only, the others never)
            # and there is no LocalQueue usage to compare: the same order as
            # :meth:`candidate_order` with the key's constant parts left out.
            fast = _order_evicting_first if evicting else _order
            for lst in (same, hierarchy, prio):
                if len(lst) > 1:
                    lst.sort(key=fast(evicting))
        else:
            order = self.candidate_order(cq.name)
            for lst in (same, hierarchy, prio):
                lst.sort(key=order)
        if evicting:
            ordered = [c for lst in (hierarchy, prio, same) for c in lst if c.key in evicting]
            ordered += [c for lst in (hierarchy, prio, same) for c in lst if c.key not in evicting]
        else:  # (nobody is being evicted: nobody to put first)
            ordered = hierarchy + prio + same
        return Candidates(ordered, not hierarchy and not prio, not hierarchy)

    def candidate_order(self, cq_name: str):  # noqa: ANN201 - a sort key function
        """Kueue's CandidatesOrdering as a sort key."""
        evicting = self.cache.evicting
        tracker = self.tracker

        def key(c: Candidate) -> tuple:
            t = c.wl.admission_time or 0.0
            # Admission fair sharing: within the preemptor's own ClusterQueue, victims
            # from the LocalQueue with the most usage first (Kueue compares LocalQueue
            # usage only between workloads of one ClusterQueue).
            heavy = (
                -tracker.afs_usage_of(c.wl, c.cq)
                if tracker is not None and c.cq == cq_name
                else 0.0
            )
            return (
                c.key not in evicting,
                c.cq == cq_name,
                heavy,
                c.wl.priority,
                -t,
                c.wl.uid or c.key,
            )

        progress = self.progress
        if progress is not None and progress.order != "Kueue":
            # A lost-work order (admission.engine.preemption.checkpoint): after priority, least
            # lost work first, then Kueue's most recently admitted first.
            lost = progress.order_key

            def lost_key(c: Candidate) -> tuple:
                k = key(c)
                return (*k[:4], lost(c.key), *k[4:])

            return lost_key
        return key

    def _within_nominal_search_hopeless(
        self,
        wl: Workload,
        cq: QuotaNode,
        frs: set[FlavorResource],
        requests: Mapping[FlavorResource, int],
    ) -> bool:
        """Without ``borrowWithinCohort``, can the search that keeps ``wl`` within its
        queue's nominal quota not succeed? Then only the search with borrowing allowed
        runs, where other queues' victims without a hierarchical advantage are invalid,
        so they are neither collected nor counted. It cannot when the queue is already
        at or over nominal, or would borrow whatever own workloads it removed."""
        if self.cache.cluster_queues[cq.name].preemption.borrow_within_cohort != NEVER:
            return False
        return not under_nominal(cq, frs) or self._borrows_after_own_removals(wl, cq, requests)

    def _borrows_after_own_removals(
        self, wl: Workload, cq: QuotaNode, requests: Mapping[FlavorResource, int]
    ) -> bool:
        """Would ``requests`` make ``cq`` borrow even with every own workload ``wl`` may
        preempt gone? Then, without ``borrowWithinCohort``, reclaiming from other queues
        cannot help: such a victim is valid only in the search that keeps the preemptor
        within nominal, and only the preemptor's own removals lower its usage — so that
        search fails whatever it removes elsewhere, and the other one never takes them.

        The own removals are over-counted — every own workload of a priority the policy
        allows, as the cache books them, victims and protected ones included — so the
        answer is True only when the search could not succeed."""
        within = self.cache.cluster_queues[cq.name].preemption.within_cluster_queue
        own = self.cache.prio_usage.get(cq.name, {}) if within != NEVER else {}
        prio = wl.priority
        usage, quota = cq.usage, cq.subtree_quota
        for fr, v in requests.items():
            free = 0
            for p, u in own.items():
                if within == LOWER_PRIORITY and p >= prio:
                    continue
                if within == LOWER_OR_NEWER_EQUAL_PRIORITY and p > prio:
                    continue
                free += u.get(fr, 0)
            if usage.get(fr, 0) - free + v > quota.get(fr, 0):
                return True
        return False
