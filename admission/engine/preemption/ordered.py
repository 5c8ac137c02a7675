"""Classical preemption's candidates in Kueue's order, produced as the search takes them.

:meth:`CandidateSearch.candidates` lists every candidate of a search and sorts each of
its three lists (hierarchical reclaim, other reclaim, the preemptor's own queue). The
minimal victim set (``Preemptor.minimal_targets``) then removes them in that order
until the preemptor fits, which is mostly after a few: in one cohort tree of 5,000
ClusterQueues, a search lists and sorts ~3,000 admitted workloads of ~300 borrowing
queues to take one or two of them.

:func:`ordered_candidates` gives the same sequence lazily: each ClusterQueue's admitted
workloads are kept sorted by Kueue's CandidatesOrdering (lower priority first, most
recently admitted first, then UID) until an admission there changes; a search works out
which queues it may take from (the same walk of the tree, the same per-queue rules as
:meth:`CandidateSearch._from_cq`) and merges their sorted rows with a heap, filtering
each row as it comes out. Ties of the whole sort key fall back to the order the eager
lists have before their stable sort (queue by queue in the walk's order, then admission
order), so the sequence is the eager one item for item
(``tests/unit/engine/test_cycle_fast_paths.py`` compares them, and the decisions of
random runs with the shortcut on and off).

Only for Kueue's plain order: with admission fair sharing (LocalQueue usage in the
key), a progress-aware order or policy (``minimumRuntime``), or workloads being
evicted (they go first), the search uses the eager lists.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from admission.engine.preemption.candidates import (
    Candidate,
    CandidateSearch,
    Source,
    Variant,
    borrowing_queues,
    cohort_levels,
)
from admission.engine.snapshot import AdmittedRows, Snapshot
from queues.model import NEVER, FlavorResource, Workload
from queues.quota_node import QuotaNode

Row = tuple[str, Workload, int, dict[FlavorResource, int]]
SortedRows = list[tuple[tuple[int, float, str], Row]]


class Stream:
    """One list of candidates, produced on demand and kept, so that it can be walked
    again from the start (the victim search's second attempt)."""

    __slots__ = ("seen", "_more")

    def __init__(self, more: Iterator[Candidate]) -> None:
        self.seen: list[Candidate] = []
        self._more: Iterator[Candidate] | None = more

    def _pull(self) -> bool:
        more = self._more
        if more is None:
            return False
        nxt = next(more, None)
        if nxt is None:
            self._more = None
            return False
        self.seen.append(nxt)
        return True

    def empty(self) -> bool:
        return not self.seen and not self._pull()

    def __iter__(self) -> Iterator[Candidate]:
        seen = self.seen
        i = 0
        while i < len(seen) or self._pull():
            yield seen[i]
            i += 1


class OrderedCandidates:
    """The candidates of one search in Kueue's order: hierarchical reclaim, other
    reclaim, own queue (as ``Candidates.ordered`` with nobody being evicted)."""

    __slots__ = ("streams",)

    def __init__(self, streams: list[Stream]) -> None:
        self.streams = streams

    def __bool__(self) -> bool:
        return not all(s.empty() for s in self.streams)

    def __iter__(self) -> Iterator[Candidate]:
        for s in self.streams:
            yield from s

    @property
    def none_from_others(self) -> bool:
        return self.streams[0].empty() and self.streams[1].empty()

    @property
    def none_hierarchical(self) -> bool:
        return self.streams[0].empty()


class SortedAdmitted:
    """Each ClusterQueue's admitted rows sorted by Kueue's CandidatesOrdering, kept
    while the cache keeps the same list of rows (it builds a new one when an admission
    there changes; each row's place in the order is worked out once, when it is
    charged: ``admission.engine.cache.ranked_row``)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[str, tuple[list[Row], SortedRows]] = {}

    def of(self, cq: str, admitted: AdmittedRows) -> SortedRows:
        kept = self._kept.get(cq)
        if kept is not None and kept[0] is admitted.rows:
            return kept[1]
        ranked = sorted(admitted.ranked, key=_first)  # stable: equal keys keep admission order
        self._kept[cq] = (admitted.rows, ranked)
        return ranked


def _first(item: tuple[tuple[int, float, str], Row]) -> tuple[int, float, str]:
    return item[0]


def ordered_candidates(
    search: CandidateSearch,
    kept: SortedAdmitted,
    snap: Snapshot,
    wl: Workload,
    cq: QuotaNode,
    frs: set[FlavorResource],
    requests: Mapping[FlavorResource, int],
) -> OrderedCandidates | None:
    """``search.candidates(...)`` produced lazily from the rows ``kept`` sorted; None
    where only the eager lists give Kueue's order (see the module's docstring)."""
    cache = search.cache
    if search.tracker is not None or search.progress is not None or cache.evicting:
        return None
    spec = cache.cluster_queues[cq.name]
    hierarchy: list[tuple[QuotaNode, QuotaNode | None, bool]] = []
    prio: list[tuple[QuotaNode, QuotaNode | None, bool]] = []
    same: list[tuple[QuotaNode, QuotaNode | None, bool]] = []
    if spec.preemption.within_cluster_queue != NEVER:
        same.append((cq, None, False))
    if cq.parent is not None and spec.preemption.reclaim_within_cohort != NEVER:
        useless_prio = search._within_nominal_search_hopeless(wl, cq, frs, requests)
        for node, prev, advantage in cohort_levels(cq, requests, useless_prio):
            lst = hierarchy if advantage else prio
            lst.extend((q, node, advantage) for q in borrowing_queues(cq, node, prev, frs))
    return OrderedCandidates(
        [
            Stream(_merged(search, kept, snap, wl, cq.name, lst, frs))
            for lst in (hierarchy, prio, same)
        ]
    )


def _merged(
    search: CandidateSearch,
    kept: SortedAdmitted,
    snap: Snapshot,
    wl: Workload,
    cq_name: str,
    queues: list[tuple[QuotaNode, QuotaNode | None, bool]],
    frs: set[FlavorResource],
) -> Iterator[Candidate]:
    """The candidates of ``queues`` (one of the search's lists) in Kueue's order: their
    sorted rows merged, each row filtered as :meth:`CandidateSearch._from_cq` filters it.

    A queue's rules (:meth:`CandidateSearch._source`) are worked out when its first row
    comes out of the heap, not for every queue of the list: a search takes a few rows
    of a few of its hundreds of queues. A queue none of whose rows may be taken then
    leaves the heap, which is where it would have added nothing."""
    sorted_rows = kept.of
    admitted_rows = search.admitted_rows
    queue_rows: list[tuple[str, QuotaNode | None, bool, SortedRows]] = []
    heap: list[tuple[tuple[int, float, str], int, int]] = []
    for q, lca, advantage in queues:
        admitted = admitted_rows(snap, q.name)
        if admitted is None:
            continue
        rows = sorted_rows(q.name, admitted)
        heap.append((rows[0][0], len(queue_rows), 0))
        queue_rows.append((q.name, lca, advantage, rows))
    if not heap:
        return
    heapq.heapify(heap)
    sources: dict[int, Source | None] = {}
    prio = wl.priority
    order_time = wl.queue_order_time
    excluded = snap.victims
    single = next(iter(frs)) if len(frs) == 1 else None
    while heap:
        _, i, pos = heap[0]
        cand_cq, lca, advantage, rows = queue_rows[i]
        if pos == 0:
            sources[i] = search._source(snap, wl, cq_name, cand_cq, advantage)
        src = sources[i]
        if src is None:
            heapq.heappop(heap)  # nobody of this queue may be taken
            continue
        key, cand, cp, usage = rows[pos][1]
        if pos + 1 < len(rows):
            heapq.heapreplace(heap, (rows[pos + 1][0], i, pos + 1))
        else:
            heapq.heappop(heap)
        if key in excluded:
            continue
        if single is not None:
            if single not in usage:
                continue
        elif not any(fr in usage for fr in frs):
            continue
        if not src.any_priority and not (
            cp < prio or (src.newer_equal_ok and cp == prio and order_time < cand.queue_order_time)
        ):
            continue
        v = src.fixed
        if v is None:
            threshold = src.threshold
            if cp >= prio or (threshold is not None and cp > threshold):
                v = Variant.RECLAIM_WITHOUT_BORROWING
            else:
                v = Variant.RECLAIM_WHILE_BORROWING
        yield Candidate(key, cand, cand_cq, lca, v)
