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
    level) and still answers NO_CANDIDATES without a victim search, as it did when the
    answer was kept (``Preemptor.hopeless_bound``: while the ClusterQueue's own usage
    and that of the Cohorts between it and the root are the same, a comparison of
    ``available`` and the root's usage with a bound; else worked out again); and, with
    explanations, the message's numbers are the same.

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
        "bound",
        "own",
        "checked",
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
        # while ``own`` (_own_reads) is the same, the short answer's oracle still answers
        # without a search exactly when max(available, 0) + (root usage if with_others)
        # < bound (Preemptor.hopeless_bound): (bound, with_others)
        self.bound: tuple[int, bool] = (0, False)
        self.own: tuple[object, ...] = ()
        # the LocalQueues, Namespaces and ClusterQueue spec nomination's first checks
        # passed on (Nominator._refused), for this workload and podSets list
        self.checked: tuple[object, ...] | None = None

    def same_inputs(self, assigner: FlavorAssigner, wl: Workload) -> bool:
        """Computed for this very workload and ClusterQueue (spec, node, flavors)."""
        return (
            self.wl is wl
            and self.assigner is assigner
            and self.pod_sets is wl.pod_sets
            and self.priority == wl.priority
            and self.reclaimable == (wl.reclaimable_pods or {})
        )


def _own_reads(
    preemptor: Preemptor, assigner: FlavorAssigner, wl: Workload, fr: FlavorResource
) -> tuple[object, ...]:
    """What :meth:`Preemptor.hopeless_bound` reads besides the root's usage and
    ``available``: the ClusterQueue's usage of ``fr``, its admitted usage of ``fr`` by
    priority, and the usage of ``fr`` at the Cohorts strictly between it and the root."""
    node = assigner.node
    by_priority = preemptor.cache.prio_usage.get(node.name)
    between = []
    parent = node.parent
    while parent is not None and parent.parent is not None:
        between.append(parent.usage.get(fr, 0))
        parent = parent.parent
    return (
        node.usage.get(fr, 0),
        tuple((p, u.get(fr, 0)) for p, u in by_priority.items()) if by_priority else (),
        tuple(between),
    )


class KeptNominations:
    """Per ClusterQueue and head, the head's last answers (:class:`_Kept`): reused by
    :meth:`reuse` while what they were computed from is the same, kept by :meth:`keep`."""

    __slots__ = ("_kept", "_preemptor", "hopeless", "hits")

    def __init__(self, preemptor: Preemptor) -> None:
        # per ClusterQueue, by workload key: the answers of its last few heads (a
        # queue's heads take turns: one per shape of workload parked since a release)
        self._kept: dict[str, dict[str, _Kept]] = {}
        self._preemptor = preemptor  # classical, asked again whether nobody can be taken
        # set by the nominator's oracle for the assignment running now: (workload key,
        # (flavor, resource), value, bound, with_others) of a request it answered without
        # a search, and how long that lasts (Preemptor.hopeless_bound)
        self.hopeless: tuple[str, FlavorResource, int, int, bool] | None = None
        self.hits = 0  # answers reused (what the tests and benchmarks read)

    def head(self, cq: str, wl: Workload) -> _Kept | None:
        """What is kept for ``wl`` as ``cq``'s head (looked up once per nomination; the
        methods below take it)."""
        by_key = self._kept.get(cq)
        return by_key.get(wl.key) if by_key is not None else None

    @staticmethod
    def admissible(k: _Kept | None, wl: Workload, objects: tuple[object, ...]) -> bool:
        """Nomination's first checks (LocalQueue stopped, namespace selected, valid
        resources) passed for ``wl`` on these very objects (the cache's LocalQueues and
        Namespaces mappings, which it replaces on any change, and the ClusterQueue's
        spec): they read nothing else, so they pass again. ``k``: :meth:`head`."""
        if k is None:
            return False
        checked = k.checked
        return (
            checked is not None
            and k.wl is wl
            and k.pod_sets is wl.pod_sets
            and checked[0] is objects[0]
            and checked[1] is objects[1]
            and checked[2] is objects[2]
        )

    @staticmethod
    def note_admissible(k: _Kept | None, wl: Workload, objects: tuple[object, ...]) -> None:
        """Nomination's first checks passed for ``wl`` on ``objects`` (see
        :meth:`admissible`); noted where its answers are kept (``k``), if they are."""
        if k is not None and k.wl is wl and k.pod_sets is wl.pod_sets:
            k.checked = objects

    def reuse(
        self, k: _Kept | None, assigner: FlavorAssigner, wl: Workload, snap: Snapshot
    ) -> Assignment | None:
        """The answer the sole-flavor path would give ``wl`` as its ClusterQueue's head
        now, when it is one kept (``k``: :meth:`head`) and what it reads is the same;
        else None (assign it, then :meth:`keep` the answer)."""
        if k is None or assigner.only_flavors is not None or not k.same_inputs(assigner, wl):
            return None
        answer = self._answer(k, assigner, wl, snap)
        if answer is not None:
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
        borrow, short = node.fits_now(k.requests)
        if short is not None:
            fr, val = short
            if val > node.potential_available(fr):
                return None  # (no fit at all: not an answer kept)
            return self._short(k, assigner, wl, snap, fr, val)
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
        ):
            return None
        own = _own_reads(self._preemptor, k.assigner, wl, fr)
        if own != k.own:  # worked out again, for as long as these stay the same
            bound = self._preemptor.hopeless_bound(snap, wl, node, fr, val)
            if bound is None:
                return None
            k.bound, k.own = bound, own
        available = node.available(fr)
        with_others = k.bound[1]
        room = (available if available > 0 else 0) + (
            node.root().usage.get(fr, 0) if with_others else 0
        )
        if room >= k.bound[0]:
            return None
        return short

    def _forget_gone(self, by_key: dict[str, _Kept]) -> None:
        """Drop what was kept for workloads that are no heads any more: admitted (their
        answer is asked again only after an eviction) or gone from the cache."""
        workloads = self._preemptor.cache.workloads
        gone = [
            key
            for key, k in by_key.items()
            if k.wl.admission is not None or workloads.get(key) is not k.wl
        ]
        for key in gone:
            del by_key[key]

    def _forget_deleted_queues(self) -> None:
        """Drop what was kept for ClusterQueues that are gone (checked when a queue keeps
        its first answer, so that a queue deleted and created again under churn leaves
        nothing behind)."""
        live = self._preemptor.cache.cluster_queues
        for name in [name for name in self._kept if name not in live]:
            del self._kept[name]

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
        if a.mode == _NO_CANDIDATES and (
            len(requests) != 1 or hopeless is None or hopeless[:3] != (wl.key, *requests[0])
        ):
            return  # (several requests, or a victim search ran: not kept)
        by_key = self._kept.get(cq)
        if by_key is None:
            self._forget_deleted_queues()
            by_key = self._kept[cq] = {}
        k = by_key.get(wl.key)
        if k is None or not k.same_inputs(assigner, wl) or k.requests != requests:
            if k is None:
                self._forget_gone(by_key)
                if len(by_key) >= _PER_QUEUE:
                    del by_key[next(iter(by_key))]  # the longest kept
            k = by_key[wl.key] = _Kept(wl=wl, assigner=assigner, requests=requests)
        if a.mode == _FIT:
            k.fit = a
        else:
            fr, val = requests[0]
            assert hopeless is not None
            k.short = a
            k.short_message = messages.insufficient_unused_quota(
                assigner.node, fr, val, 0, explain=assigner.explain
            )
            k.bound = (hopeless[3], hopeless[4])
            k.own = _own_reads(self._preemptor, assigner, wl, fr)
