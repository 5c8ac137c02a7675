"""Kept nominations: a head whose answer cannot have changed is not assigned again.

Most heads of a large cluster are a one-podSet workload in a ClusterQueue of one flavor
(the assigner's sole-flavor path, ``FlavorAssigner._assign_fitting``), and their answer
is one of two, cycle after cycle: it fits (and then often waits behind earlier entries
of its cycle, back in its queue), or it is short and no preemption could help (parked,
woken by the next release in its cohort). Building that answer — the requests, the
flavor match, the candidate, the messages, the oracle's question — is most of what a
head costs. :class:`KeptNominations` keeps, per ClusterQueue and head, the last answer
of each kind and hands it out again when the answer computed now would be equal to it.
Decisions are exactly those of the engine without it
(``tests/unit/engine/test_kept_nominations.py`` runs both over random worlds and event
streams, and computes every reused answer anew to compare).

An answer is a function of:

* the workload: checked to be the same object, with the same podSets list (podSets
  are replaced, never changed in place), priority and reclaimable pods;
* the ClusterQueue's spec, its node of the kept working tree, the flavors and the
  topology state: checked to be the same flavor assigner (the nominator keeps one per
  ClusterQueue only while it is built from these very objects), with no flavor under
  a topology (flavor matching then reads only the flavor and the podSet);
* the quota tree, read again each time, as the sole-flavor path reads it:

  - *fits*: every non-zero request is within ``potential_available`` and
    ``available`` of the ClusterQueue; the answer then depends only on the highest
    borrowing level of the requests (``height_of_lowest_subtree_that_fits``), worked
    out again and compared;
  - *short, nobody to preempt* (one non-zero request): the request is within
    ``potential_available`` and not within ``available``; the borrowing level is the
    same; the oracle is still asked (``_fits_resource_quota``'s condition, on that
    level); its cheap necessary condition still fails (``Preemptor.cannot_free``: it
    answers NO_CANDIDATES at that level without a victim search, and it did when the
    answer was kept); and, with explanations, the message's numbers are the same.

Anything else — several podSets or flavors, topology, partial admission, fair sharing,
progress-aware preemption, an answer after a victim search — is assigned as before.
What is skipped is the building, not the reading: the same tree values are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from admission.engine import messages
from admission.engine.assignment import Assignment
from admission.engine.flavors import FlavorAssigner
from admission.engine.snapshot import Snapshot
from admission.engine.vocabulary import AssignmentMode
from queues.model import FlavorResource, Workload

if TYPE_CHECKING:
    from admission.engine.preemption.classical import Preemptor

_FIT = AssignmentMode.FIT
_NO_CANDIDATES = AssignmentMode.NO_CANDIDATES
_PER_QUEUE = 16  # answers kept per ClusterQueue


class _Kept:
    """What a ClusterQueue's head was last answered, and what from: its fitting answer
    and its short one, each when it had it (a head's answer may go back and forth as
    quota is released and taken again around it)."""

    __slots__ = (
        "wl",
        "pod_sets",
        "priority",
        "reclaimable",
        "assigner",
        "requests",
        "fit",
        "short",
        "short_message",
    )

    def __init__(
        self, *, wl: Workload, assigner: FlavorAssigner, requests: list[tuple[FlavorResource, int]]
    ) -> None:
        self.wl = wl
        self.pod_sets = wl.pod_sets
        self.priority = wl.priority
        self.reclaimable = dict(wl.reclaimable_pods) if wl.reclaimable_pods else {}
        self.assigner = assigner
        self.requests = requests  # the non-zero requests, in order: (flavor, resource), value
        self.fit: Assignment | None = None
        self.short: Assignment | None = None  # (one request; nobody could be preempted)
        self.short_message = ""  # what is short, as its message says it

    def same_inputs(self, assigner: FlavorAssigner, wl: Workload) -> bool:
        """Computed for this very workload and ClusterQueue (spec, node, flavors)."""
        return (
            self.wl is wl
            and self.assigner is assigner
            and self.pod_sets is wl.pod_sets
            and self.priority == wl.priority
            and self.reclaimable == (wl.reclaimable_pods or {})
        )


class KeptNominations:
    """Per ClusterQueue and head, the head's last answers (:class:`_Kept`): reused by
    :meth:`reuse` while what they were computed from is the same, kept by :meth:`keep`."""

    __slots__ = ("_kept", "_preemptor", "hopeless", "hits", "misses")

    def __init__(self, preemptor: Preemptor) -> None:
        # per ClusterQueue, by workload key: the answers of its last few heads (a
        # queue's heads take turns: one per shape of workload parked since a release)
        self._kept: dict[str, dict[str, _Kept]] = {}
        self._preemptor = preemptor  # classical, asked again whether nobody can be taken
        # set by the nominator's oracle for the assignment running now: (workload key,
        # (flavor, resource), value) of a request the oracle answered without a search
        self.hopeless: tuple[str, FlavorResource, int] | None = None
        self.hits = 0
        self.misses = 0

    def reuse(
        self, cq: str, assigner: FlavorAssigner, wl: Workload, snap: Snapshot
    ) -> Assignment | None:
        """The answer the sole-flavor path would give ``wl`` as ``cq``'s head now, when
        it is one kept and what it reads is the same; else None (assign it, then
        :meth:`keep` the answer)."""
        by_key = self._kept.get(cq)
        k = by_key.get(wl.key) if by_key is not None else None
        if k is None or assigner.only_flavors is not None or not k.same_inputs(assigner, wl):
            self.misses += 1
            return None
        answer = self._answer(k, assigner, wl, snap)
        if answer is None:
            self.misses += 1
        else:
            self.hits += 1
        return answer

    def _answer(
        self, k: _Kept, assigner: FlavorAssigner, wl: Workload, snap: Snapshot
    ) -> Assignment | None:
        """:meth:`FlavorAssigner._assign_fitting`'s answer, read off the tree where it is
        one of ``k``'s: each request within ``potential_available`` and ``available``
        (at the highest of their borrowing levels), or the first short and nobody to
        preempt for it."""
        node = assigner.node
        borrow = 0
        for fr, val in k.requests:
            if val > node.potential_available(fr):
                return None  # (no fit at all: not an answer kept)
            if val > node.available(fr):
                return self._short(k, assigner, wl, snap, fr, val)
            height = node.height_of_lowest_subtree_that_fits(fr, val).height
            if height > borrow:
                borrow = height
        fit = k.fit
        return fit if fit is not None and fit.borrow == borrow else None

    def _short(
        self,
        k: _Kept,
        assigner: FlavorAssigner,
        wl: Workload,
        snap: Snapshot,
        fr: FlavorResource,
        val: int,
    ) -> Assignment | None:
        """The kept short answer when it is the one now: the same borrowing level, the
        oracle still asked (``_fits_resource_quota``'s condition) and still answering
        without a search, and the same message."""
        short = k.short
        if short is None:
            return None
        node = assigner.node
        level = node.height_of_lowest_subtree_that_fits(fr, val)
        if (
            level.height != short.borrow
            or not (
                val <= node.nominal(fr) or assigner.can_preempt_while_borrowing or level.may_reclaim
            )
            or (
                assigner.explain
                and messages.insufficient_unused_quota(node, fr, val, 0, explain=True)
                != k.short_message
            )
            or not self._preemptor.cannot_free(snap, wl, node, fr, val)
        ):
            return None
        return short

    def keep(self, cq: str, assigner: FlavorAssigner, wl: Workload, a: Assignment) -> None:
        """Keep ``a``, just computed for ``wl`` as ``cq``'s head, when it is an answer
        :meth:`reuse` can check."""
        hopeless, self.hopeless = self.hopeless, None
        if (
            assigner.sole_flavor is None
            or assigner.cq_has_tas
            or assigner.only_flavors is not None
            or len(wl.pod_sets) != 1
            or wl.pod_sets[0].min_count is not None
            or wl.pod_sets[0].topology is not None
            or a.placement is not None
            or a.mode not in (_FIT, _NO_CANDIDATES)
        ):
            return
        requests = [(fr, v) for fr, v in a.usage.items() if v]
        if not requests:
            return
        if a.mode == _NO_CANDIDATES and (len(requests) != 1 or hopeless != (wl.key, *requests[0])):
            return  # (several requests, or a victim search ran: not kept)
        by_key = self._kept.get(cq)
        if by_key is None:
            by_key = self._kept[cq] = {}
        k = by_key.get(wl.key)
        if k is None or not k.same_inputs(assigner, wl) or k.requests != requests:
            if k is None and len(by_key) >= _PER_QUEUE:
                del by_key[next(iter(by_key))]  # the longest kept
            k = by_key[wl.key] = _Kept(wl=wl, assigner=assigner, requests=requests)
        if a.mode == _FIT:
            k.fit = a
        else:
            fr, val = requests[0]
            k.short = a
            k.short_message = messages.insufficient_unused_quota(
                assigner.node, fr, val, 0, explain=assigner.explain
            )
