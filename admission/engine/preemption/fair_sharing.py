"""Fair sharing: tournament admission order and fair-sharing preemption.

Enabled by ``fairSharing`` in the configuration (docs/semantics.md §4.8):

* **Admission order** (:class:`Tournament`, an :data:`~admission.engine.ordering.EntryOrder`):
  instead of one global sort, each root cohort runs a tournament after every processed
  entry: at every cohort, among its children's candidates, the child that is not
  borrowing from its parent on the workload's resources goes first, then the lowest
  dominant resource share *after* admitting the candidate, then (our extension, when
  ``cohortCredits`` is configured) the higher credit between borrowers, then priority,
  then age.
* **Preemption** (``FairPreemptor``): victims come from the ClusterQueues with the
  highest share first; a cross-queue victim is taken only if the strategy allows it
  (``LessThanOrEqualToFinalShare``: the preemptor's share after admission ≤ the
  target's share after the removal; ``LessThanInitialShare``: < the target's share
  before). This is what makes preemption loops impossible: a preempts b only if a's
  share after admission is lower than b's.

The strategies are parsed once (:func:`parse_strategies`, Kueue's ``parseStrategies``)
into rule functions; ``admission.engine.build.build_scheduler`` wires all of this in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from admission.engine.cache import Cache
from admission.engine.ordering import Entry, Target, classical_order_key
from admission.engine.preemption.candidates import (
    Candidate,
    Variant,
    uses_resources,
    within_nominal,
)
from admission.engine.preemption.classical import Preemptor
from admission.engine.snapshot import Snapshot
from admission.engine.vocabulary import FairSharingStrategy, PreemptionReason
from queues.fairshare import Share, borrowing_on, dominant_resource_share
from queues.model import (
    ANY,
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    NEVER,
    FlavorResource,
    Workload,
)
from queues.quota_node import QuotaNode
from queues.tree import CohortTree

if TYPE_CHECKING:
    from admission.engine.preemption.checkpoint import ProgressAware
    from admission.engine.usage import UsageTracker

ShareRule = Callable[[Share, Share, Share | None], bool]
"""A fair-sharing strategy (Kueue's ``fsStrategy``): may a preemptor whose share after
admission is the first argument take a victim from a target whose share is the second
before and the third after the removal?"""


def less_than_or_equal_to_final_share(
    preemptor_new: Share, target_old: Share, target_new: Share | None
) -> bool:
    assert target_new is not None
    return preemptor_new.sort_key() <= target_new.sort_key()


def less_than_initial_share(
    preemptor_new: Share, target_old: Share, target_new: Share | None
) -> bool:
    return preemptor_new.sort_key() < target_old.sort_key()


_RULES: dict[FairSharingStrategy, ShareRule] = {
    FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: less_than_or_equal_to_final_share,
    FairSharingStrategy.LESS_THAN_INITIAL_SHARE: less_than_initial_share,
}


def parse_strategies(names: Sequence[str]) -> tuple[ShareRule, ...]:
    """``fairSharing.preemptionStrategies`` as rule functions, in order (the
    configuration has already checked the names and the order)."""
    return tuple(_RULES[FairSharingStrategy(n)] for n in names)


class _Victim(NamedTuple):
    """A victim taken during the search, why, and the rule that allowed it (if any)."""

    candidate: Candidate
    reason: PreemptionReason
    rule: ShareRule | None


# -- tournament --------------------------------------------------------------------


class Tournament:
    """Fair-sharing admission order: yield entries, re-running the tournament after
    each one on the cycle's tree (the previous entry's admission changes everybody's
    shares)."""

    def __init__(self, *, tracker: UsageTracker | None) -> None:
        self._tracker = tracker

    def __call__(self, entries: list[Entry], tree: CohortTree) -> Iterator[Entry]:
        by_root: dict[str, list[Entry]] = {}
        solo: list[Entry] = []
        for e in entries:
            node = tree.queues[e.cluster_queue]
            if node.parent is None:
                solo.append(e)
            else:
                by_root.setdefault(node.root().name, []).append(e)
        yield from sorted(solo, key=classical_order_key)
        for root_name in sorted(by_root):
            remaining = {e.cluster_queue: e for e in by_root[root_name]}
            root = tree.cohorts[root_name]
            while remaining:
                keys = _tournament_keys(tree, remaining, self._tracker)
                winner = _run(root, remaining, keys)
                if winner is None:  # entries whose queues left the tree: classical order
                    yield from sorted(remaining.values(), key=classical_order_key)
                    break
                del remaining[winner.cluster_queue]
                yield winner


def _tournament_keys(
    tree: CohortTree, remaining: Mapping[str, Entry], tracker: UsageTracker | None
) -> dict[tuple[str, str], tuple]:
    """For each entry and each ancestor cohort: the comparison key of the entry's child
    node of that cohort, with the entry's usage added (Kueue's computeDRS)."""
    keys: dict[tuple[str, str], tuple] = {}
    for cq_name, e in remaining.items():
        node = tree.queues[cq_name]
        usage: dict[FlavorResource, int] = e.assignment.usage if e.assignment is not None else {}
        with tree.scratch():
            tree.add_usage(cq_name, usage)
            child: QuotaNode = node
            while child.parent is not None:
                share = dominant_resource_share(child)
                borrowing = borrowing_on(child, usage, {})
                credit = (
                    -tracker.credit_of_node(child.name, cohort=child.is_cohort)
                    if tracker and borrowing
                    else 0.0
                )
                wl = e.workload
                keys[(child.parent.name, cq_name)] = (
                    not e.preemptor,  # a workload that already issued preemptions first
                    borrowing,
                    share.sort_key(),
                    credit,
                    -wl.priority,
                    wl.queue_order_time,
                    wl.tiebreak,
                )
                child = child.parent
    return keys


def _run(
    cohort: QuotaNode, remaining: Mapping[str, Entry], keys: Mapping[tuple[str, str], tuple]
) -> Entry | None:
    """The tournament below ``cohort``: each Cohort's winner is the least, by its keys,
    of its child Cohorts' winners and its ClusterQueues' entries; children are decided
    before their parents in a loop (no recursion, whatever the depth)."""
    order: list[QuotaNode] = []
    stack = [cohort]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.child_cohorts)
    won: dict[int, Entry | None] = {}
    for node in reversed(order):
        candidates = [w for c in node.child_cohorts if (w := won[id(c)]) is not None]
        candidates += [e for c in node.child_queues if (e := remaining.get(c.name)) is not None]
        won[id(node)] = (
            min(candidates, key=lambda e, n=node.name: keys[(n, e.cluster_queue)])  # type: ignore[misc]
            if candidates
            else None
        )
    return won[id(cohort)]


# -- fair-sharing preemption --------------------------------------------------------


def _almost_lcas(a: QuotaNode, b: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
    """The children of the lowest common ancestor on the paths to a and b."""
    path_a = list(a.path_to_root())
    ancestors_b = {id(n): n for n in b.path_to_root()}
    lca = next(n for n in path_a if id(n) in ancestors_b)
    almost_a = path_a[path_a.index(lca) - 1]
    path_b = list(b.path_to_root())
    almost_b = path_b[path_b.index(lca) - 1]
    return almost_a, almost_b


_FAIR = Variant.NEVER  # candidates of the fair search carry no classical variant


class FairPreemptor(Preemptor):
    """Preemption under fair sharing (Kueue's fairPreemptions)."""

    fair_sharing = True

    def __init__(
        self,
        cache: Cache,
        *,
        strategies: Sequence[ShareRule],
        tracker: UsageTracker | None = None,
        progress: ProgressAware | None = None,
    ) -> None:
        """``strategies``: the rules of ``fairSharing.preemptionStrategies``, in order
        (:func:`parse_strategies`); the second, if any, is Kueue's retry pass."""
        super().__init__(cache, tracker=tracker, progress=progress)
        if not strategies:
            raise ValueError("fair-sharing preemption needs at least one strategy")
        self._strategies = tuple(strategies)

    def _fair_candidates(
        self, snap: Snapshot, wl: Workload, cq: QuotaNode, frs: set[FlavorResource]
    ) -> list[Candidate]:
        cache = self.cache
        spec = cache.cluster_queues[cq.name]
        out: list[Candidate] = []
        if spec.preemption.within_cluster_queue != NEVER:
            same_prio_ok = spec.preemption.within_cluster_queue == LOWER_OR_NEWER_EQUAL_PRIORITY
            for key in cache.by_cq.get(cq.name, {}):
                if key in snap.victims:
                    continue
                cand = cache.workloads[key]
                if cand.priority > wl.priority:
                    continue
                if cand.priority == wl.priority and not (
                    same_prio_ok and wl.queue_order_time < cand.queue_order_time
                ):
                    continue
                if uses_resources(cache.usage_of[key], frs):
                    out.append(Candidate(key, cand, cq.name, None, _FAIR))
        if cq.parent is not None and spec.preemption.reclaim_within_cohort != NEVER:
            only_lower = spec.preemption.reclaim_within_cohort != ANY
            stack = [cq.root()]
            while stack:
                node = stack.pop()
                stack.extend(node.child_cohorts)
                for other in node.child_queues:
                    if other is cq or not any(other.is_borrowing(fr) for fr in frs):
                        continue
                    for key in cache.by_cq.get(other.name, {}):
                        if key in snap.victims:
                            continue
                        cand = cache.workloads[key]
                        if only_lower and cand.priority >= wl.priority:
                            continue
                        if uses_resources(cache.usage_of[key], frs):
                            out.append(Candidate(key, cand, other.name, None, _FAIR))
        progress = self.progress
        if progress is not None:  # minimumRuntime (admission.engine.preemption.checkpoint)
            out = [c for c in out if not progress.protected(c.wl, c.cq, cq.name)]
        out.sort(key=self.candidate_order(cq.name))
        return out

    def minimal_targets(
        self,
        snap: Snapshot,
        wl: Workload,
        cq: QuotaNode,
        frs: set[FlavorResource],
        requests: Mapping[FlavorResource, int],
    ) -> list[Target]:
        cands = self._fair_candidates(snap, wl, cq, frs)
        if not cands:
            return []
        tree = snap.tree
        # Every change below (the incoming workload, victims taken and put back) is
        # undone when the block exits, however it exits.
        with tree.scratch():
            removed: list[_Victim] = []
            tree.add_usage(cq.name, requests)  # shares must include the incoming workload
            fits, retry = self._first_strategy(snap, cq, frs, requests, cands, removed)
            if not fits and len(self._strategies) > 1:
                fits = self._second_strategy(snap, cq, requests, retry, removed)
            tree.remove_usage(cq.name, requests)  # the victims stay removed for fill-back
            if not fits:
                return []
            kept = self._fill_back_fair(snap, cq, requests, removed)
            return [Target(v.candidate.key, v.candidate.cq, v.reason) for v in kept]

    def _fits_fs(
        self,
        snap: Snapshot,
        cq: QuotaNode,
        requests: Mapping[FlavorResource, int],
        removed: list[_Victim],
    ) -> bool:
        tree = snap.tree
        with tree.scratch():
            tree.remove_usage(cq.name, requests)
            if not self._fits(cq, requests, True):
                return False
        return self._placement_fits(v.candidate.key for v in removed)

    def _take(
        self,
        snap: Snapshot,
        c: Candidate,
        reason: PreemptionReason,
        removed: list[_Victim],
        rule: ShareRule | None = None,
    ) -> None:
        snap.tree.remove_usage(c.cq, self.cache.usage_of[c.key])
        removed.append(_Victim(c, reason, rule))

    def _first_strategy(
        self,
        snap: Snapshot,
        cq: QuotaNode,
        frs: set[FlavorResource],
        requests: Mapping[FlavorResource, int],
        cands: list[Candidate],
        removed: list[_Victim],
    ) -> tuple[bool, list[Candidate]]:
        rule = self._strategies[0]
        per_cq: dict[str, list[Candidate]] = {}
        for c in cands:
            per_cq.setdefault(c.cq, []).append(c)
        retry: list[Candidate] = []
        for target in _target_queues(self.cache, cq, per_cq):
            lst = per_cq[target.name]
            if target is cq:
                self._take(snap, lst.pop(0), PreemptionReason.IN_CLUSTER_QUEUE, removed)
                if self._fits_fs(snap, cq, requests, removed):
                    return True, retry
                continue
            if within_nominal(cq, frs):
                # The preemptor stays within its nominal quota: plain reclamation.
                self._take(snap, lst.pop(0), PreemptionReason.IN_COHORT_RECLAMATION, removed)
                if self._fits_fs(snap, cq, requests, removed):
                    return True, retry
                continue
            mine, theirs = _almost_lcas(cq, target)
            preemptor_new = dominant_resource_share(mine)
            target_old = dominant_resource_share(theirs)
            while lst:
                c = lst.pop(0)
                target_new = self._share_after_removal(snap, target, theirs, c)
                if rule(preemptor_new, target_old, target_new):
                    self._take(snap, c, PreemptionReason.IN_COHORT_FAIR_SHARING, removed, rule)
                    if self._fits_fs(snap, cq, requests, removed):
                        return True, retry
                    break  # shares changed: pick the target queue again
                retry.append(c)
        return False, retry

    def _share_after_removal(
        self, snap: Snapshot, target: QuotaNode, almost: QuotaNode, c: Candidate
    ) -> Share:
        tree = snap.tree
        with tree.scratch():
            tree.remove_usage(target.name, self.cache.usage_of[c.key])
            return dominant_resource_share(almost)

    def _second_strategy(
        self,
        snap: Snapshot,
        cq: QuotaNode,
        requests: Mapping[FlavorResource, int],
        retry: list[Candidate],
        removed: list[_Victim],
    ) -> bool:
        per_cq: dict[str, list[Candidate]] = {}
        for c in retry:
            per_cq.setdefault(c.cq, []).append(c)
        dropped: set[str] = set()
        for target in _target_queues(self.cache, cq, per_cq, dropped=dropped):
            mine, theirs = _almost_lcas(cq, target)
            if less_than_initial_share(
                dominant_resource_share(mine), dominant_resource_share(theirs), None
            ):
                self._take(
                    snap,
                    per_cq[target.name].pop(0),
                    PreemptionReason.IN_COHORT_FAIR_SHARING,
                    removed,
                    less_than_initial_share,
                )
                if self._fits_fs(snap, cq, requests, removed):
                    return True
            dropped.add(target.name)
        return False

    def _fill_back_fair(
        self,
        snap: Snapshot,
        cq: QuotaNode,
        requests: Mapping[FlavorResource, int],
        removed: list[_Victim],
    ) -> list[_Victim]:
        """Re-add victims not needed for the fit, but only while every remaining
        fair-sharing victim still passes its strategy in the final state: a victim that
        only qualified because others were removed would otherwise take its preemptor
        back later (a preemption loop)."""
        tree = snap.tree
        targets = list(removed)
        for i in range(len(targets) - 2, -1, -1):
            c = targets[i].candidate
            tree.add_usage(c.cq, self.cache.usage_of[c.key])
            rest = targets[:i] + targets[i + 1 :]
            if (
                self._fits(cq, requests, True)
                and self._strategies_hold(snap, cq, requests, rest)
                and self._placement_fits(v.candidate.key for v in rest)
            ):
                targets.pop(i)
            else:
                tree.remove_usage(c.cq, self.cache.usage_of[c.key])
        return targets

    def _strategies_hold(
        self,
        snap: Snapshot,
        cq: QuotaNode,
        requests: Mapping[FlavorResource, int],
        victims: list[_Victim],
    ) -> bool:
        tree = snap.tree
        with tree.scratch():
            tree.add_usage(cq.name, requests)
            for c, reason, rule in victims:
                if reason != PreemptionReason.IN_COHORT_FAIR_SHARING:
                    continue
                target = tree.queues[c.cq]
                mine, theirs = _almost_lcas(cq, target)
                preemptor_new = dominant_resource_share(mine)
                if rule is less_than_initial_share:
                    with tree.scratch():
                        tree.add_usage(c.cq, self.cache.usage_of[c.key])
                        target_old = dominant_resource_share(theirs)
                    if not less_than_initial_share(preemptor_new, target_old, None):
                        return False
                elif not less_than_or_equal_to_final_share(
                    preemptor_new, preemptor_new, dominant_resource_share(theirs)
                ):
                    return False
            return True


def _target_queues(
    cache: Cache,
    preemptor: QuotaNode,
    per_cq: dict[str, list[Candidate]],
    *,
    dropped: set[str] | None = None,
) -> Iterator[QuotaNode]:
    """Kueue's TargetClusterQueueOrdering: descend from the root to the child with the
    highest share (a cohort wins ties), pruning nodes that are not borrowing or have
    no candidates left; the same queue may be yielded again while it stays highest."""
    dropped = dropped if dropped is not None else set()
    if preemptor.parent is None:
        while per_cq.get(preemptor.name):
            yield preemptor
        return
    ancestors = {id(n) for n in preemptor.path_to_root()}
    pruned_q: set[str] = set(dropped)
    pruned_c: set[str] = set()
    root = preemptor.root()
    while root.name not in pruned_c:
        node = root
        chosen: QuotaNode | None = None
        while chosen is None:
            best_q, best_q_key = None, None
            for q in node.child_queues:
                if q.name in pruned_q or q.name in dropped:
                    continue
                share = dominant_resource_share(q)
                if (not share.borrowing and q is not preemptor) or not per_cq.get(q.name):
                    pruned_q.add(q.name)
                elif best_q_key is None or share.sort_key() >= best_q_key:
                    best_q, best_q_key = q, share.sort_key()
            best_c, best_c_key = None, None
            for c in node.child_cohorts:
                if c.name in pruned_c:
                    continue
                share = dominant_resource_share(c)
                if not share.borrowing and id(c) not in ancestors:
                    pruned_c.add(c.name)
                elif best_c_key is None or share.sort_key() >= best_c_key:
                    best_c, best_c_key = c, share.sort_key()
            if best_q is None and best_c is None:
                pruned_c.add(node.name)
                break
            if best_c is not None and (best_q_key is None or best_c_key >= best_q_key):  # type: ignore[operator]
                node = best_c
                continue
            chosen = best_q
        if chosen is not None:
            yield chosen
            if dropped and chosen.name in dropped:
                pruned_q.add(chosen.name)
