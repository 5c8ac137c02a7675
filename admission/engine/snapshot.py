"""One cycle's working copy of the quota tree (Kueue's per-cycle ``cache.Snapshot()``).

A scheduling cycle decides against a :class:`Snapshot`, never against the live tree of
the :class:`~admission.engine.cache.Cache`: it charges the cycle's admissions to it as
it goes, holds capacity for preemptors (and by the reservation rule), counts this
cycle's victims as released (or, with ``reserveEvictingCapacity``, keeps them for
their preemptors), and the preemption searches try their removals on it. At the end
of the cycle the snapshot is dropped and the cycle's decisions are committed to the
cache; an exception anywhere in between leaves the cache exactly as it was. Undo is
structural (a copy that is thrown away, and ``CohortTree.scratch()`` blocks inside
searches), never a hand-written inverse.
"""

from __future__ import annotations

from typing import NamedTuple

from queues.model import FlavorResource, Workload
from queues.tree import CohortTree

_Row = tuple[str, Workload, int, dict[FlavorResource, int]]


class AdmittedRows(NamedTuple):
    """A ClusterQueue's admitted workloads, in admission order: (key, workload, its
    priority, the usage it holds) each, the lowest of their priorities (a search that
    may take only lower priorities skips the queue when none is lower), and each row
    with its place in Kueue's candidate order (``admission.engine.cache.ranked_row``)."""

    rows: list[_Row]
    lowest_priority: int
    ranked: list[tuple[tuple[int, float, str], _Row]]


class Snapshot:
    """The tree the cycle works on, and the victims of preemptions issued in it."""

    __slots__ = ("tree", "victims", "tas", "searches", "admitted_rows", "_source")

    def __init__(self, tree: CohortTree) -> None:
        """A snapshot of ``tree`` (a copy of its usage: ``tree`` itself is not touched)."""
        self.tree: CohortTree = tree.working_copy()
        self._source = tree
        # Workloads preempted earlier in this cycle: no longer candidates for another
        # preemptor of the same cycle.
        self.victims: set[str] = set()
        # TAS usage (flavor -> leaf -> resources) of this cycle's admissions, not yet
        # committed to the cache's topology state: later entries must fit around it.
        self.tas: dict[str, dict[tuple[str, ...], dict[str, int]]] = {}
        # The last victim search of this cycle and its answer, valid while the tree is
        # unchanged since (``tree.changes``): flavor assignment asks the oracle, then the
        # scheduler asks for the victims of the same request — one search, not two.
        self.searches: tuple[tuple[object, ...], list] | None = None
        # Per ClusterQueue, its admitted workloads as the victim searches read them
        # (``Preemptor.admitted_rows``): the cache's admissions do not change until the
        # cycle commits, and every search of the cycle in the same cohort reads them.
        self.admitted_rows: dict[str, AdmittedRows] = {}

    def release(self) -> None:
        """The cycle is over: the tree's kept working copy may be handed out again."""
        self._source.give_back(self.tree)
