"""The cohort tree: every ClusterQueue and Cohort, linked, with the copies a cycle works on.

Built from the spec objects and rebuilt after any quota or structure change (Cohort
cycles and chains too deep are disabled, :mod:`queues.cohort_chains`); each node does
its own quota accounting (:mod:`queues.quota_node`). A scheduling cycle works on a
copy (``clone``, ``working_copy``), and searches try removals inside ``scratch()``
blocks that undo them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from queues.cohort_chains import disable_cycles, disable_too_deep, inherit_disabled
from queues.model import ClusterQueue, Cohort, FlavorResource, ResourceGroup, ResourceQuota
from queues.quota_node import Journal, QuotaNode, cohorts_below


def _quotas_of(groups: Iterable[ResourceGroup]) -> dict[FlavorResource, ResourceQuota]:
    out: dict[FlavorResource, ResourceQuota] = {}
    for g in groups:
        for fq in g.flavors:
            for res, q in fq.resources.items():
                out[(fq.name, res)] = q
    return out


class CohortTree:
    """All ClusterQueues and Cohorts, linked, with quota accounting.

    Built from the spec objects; rebuilt (``rebuild``) after any quota or structure
    change, keeping the ClusterQueues' usage. Cohorts that are named but not defined
    exist implicitly with no quota. A cycle in Cohort parents disables every Cohort on
    the cycle and everything below them.
    """

    def __init__(
        self,
        cluster_queues: Mapping[str, ClusterQueue],
        cohorts: Mapping[str, Cohort],
    ) -> None:
        self.queues: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        self._journal: Journal | None = None
        # bumped by every usage change (restores included): equal counts, equal usage
        self.changes = 0
        self._init_copies()
        self.rebuild(cluster_queues, cohorts)

    def _init_copies(self) -> None:
        # The working copy kept between cycles (see working_copy), whether it is in use,
        # and the ClusterQueues whose path to the root changed usage since it was synced.
        self._kept: CohortTree | None = None
        self._lent = False
        self._dirty: set[str] = set()
        self._retired = False  # replaced by a new tree: see retire

    def rebuild(
        self,
        cluster_queues: Mapping[str, ClusterQueue],
        cohorts: Mapping[str, Cohort],
    ) -> None:
        old_usage = {name: dict(node.usage) for name, node in self.queues.items()}
        self._kept = None  # new nodes: the kept copy no longer matches
        self.queues = {}
        self.cohorts = {}

        def cohort_node(name: str) -> QuotaNode:
            node = self.cohorts.get(name)
            if node is None:
                spec = cohorts.get(name)
                node = QuotaNode(
                    name, is_cohort=True, fair_weight=spec.fair_weight if spec else 1.0
                )
                node.tree = self
                if spec is not None:
                    node.quotas = _quotas_of(spec.resource_groups)
                self.cohorts[name] = node
            return node

        for name in sorted(cohorts):
            cohort_node(name)
        for name in sorted(cohorts):
            parent = cohorts[name].parent
            if parent:
                child = self.cohorts[name]
                child.parent = cohort_node(parent)
        disable_cycles(self.cohorts)
        for node in self.cohorts.values():
            if node.parent is not None:
                node.parent.child_cohorts.append(node)
        disable_too_deep(self.cohorts)

        for name in sorted(cluster_queues):
            spec = cluster_queues[name]
            node = QuotaNode(name, is_cohort=False, fair_weight=spec.fair_weight)
            node.tree = self
            node.quotas = _quotas_of(spec.resource_groups)
            if spec.cohort:
                cohort = cohort_node(spec.cohort)
                node.parent = cohort
                cohort.child_queues.append(node)
            node.usage = old_usage.get(name, {})
            self.queues[name] = node

        inherit_disabled(self.roots())  # everything below a disabled Cohort is disabled too
        for root in self.roots():
            _recompute(root)

    def clone(self) -> CohortTree:
        """A copy to work on: the same structure, quotas and limits (shared, read-only),
        with usage of its own (Kueue's ``Snapshot()``/``Clone()``: usage copied only).

        Whatever is done to the copy's usage leaves this tree as it is, so a scheduling
        cycle or a what-if can hold capacity, release victims and try removals on it
        and then simply drop it: nothing to undo."""
        copy = CohortTree.__new__(CohortTree)
        copy._journal = None
        copy.changes = 0
        copy._init_copies()
        mapping: dict[int, QuotaNode] = {}

        def node_copy(n: QuotaNode) -> QuotaNode:
            c = QuotaNode.__new__(QuotaNode)
            c.name = n.name
            c.is_cohort = n.is_cohort
            c.parent = None
            c.child_cohorts = []
            c.child_queues = []
            c.quotas = n.quotas
            c.subtree_quota = n.subtree_quota
            c.usage = dict(n.usage)
            c.local_quota = n.local_quota
            c.fair_weight = n.fair_weight
            c.disabled_reason = n.disabled_reason
            c.memo = {}
            c.tree = copy
            c.available_memo = {}
            mapping[id(n)] = c
            return c

        copy.cohorts = {name: node_copy(n) for name, n in self.cohorts.items()}
        copy.queues = {name: node_copy(n) for name, n in self.queues.items()}
        for n in (*self.cohorts.values(), *self.queues.values()):
            c = mapping[id(n)]
            if n.parent is not None:
                c.parent = mapping[id(n.parent)]
            c.child_cohorts = [mapping[id(x)] for x in n.child_cohorts]
            c.child_queues = [mapping[id(x)] for x in n.child_queues]
        return copy

    def working_copy(self) -> CohortTree:
        """A copy to work on, exactly as :meth:`clone` makes it, but kept between uses:
        handing it out again only re-copies the usage of the nodes that changed since
        (here, or on the copy), so a cycle over thousands of ClusterQueues costs what
        changed, not the size of the tree. Give it back with :meth:`give_back`; while it
        is out, another caller gets a fresh clone."""
        kept = self._kept
        if kept is None or self._lent:
            copy = self.clone()
            if kept is None:
                self._kept, self._dirty = copy, set()
                self._lent = True
            return copy
        # Each changed node once (a Cohort is on the path of each of its changed
        # queues), refilled in place: the copy's usage dicts are made once, not once
        # per cycle for every collector pass to walk. Nothing holds a copy's usage
        # dict between uses (undo journals live only inside a block).
        refreshed: set[str] = set()
        for name in self._dirty | kept._dirty:
            live, mine = self.queues.get(name), kept.queues.get(name)
            if live is None or mine is None:
                continue
            for a, b in zip(live.path_to_root(), mine.path_to_root(), strict=True):
                if b.is_cohort:
                    if b.name in refreshed:
                        break  # (and so is the rest of the path)
                    refreshed.add(b.name)
                b.usage.clear()
                b.usage.update(a.usage)
        self._dirty.clear()
        kept._dirty.clear()
        kept.changes += 1
        self._lent = True
        return kept

    def give_back(self, copy: CohortTree) -> None:
        """The copy from :meth:`working_copy` is no longer used (its usage may be anything)."""
        if copy is self._kept:
            self._lent = False
            if self._retired:
                self._kept = None
                _unlink(copy)

    def retire(self) -> None:
        """This tree has been replaced (a new one was built from changed specs): its
        nodes, and those of its kept working copy, are unlinked (parents, children, the
        ``tree`` of each, the memos) and its maps emptied, so that each is freed by
        reference counting once its last holder lets go of it.

        Linked, a tree is a reference cycle, which only the cyclic collector frees, and
        one frozen by ``admission.engine.gc_pause`` only at a compaction. What may still
        hold a node of a replaced tree (a kept flavor assigner, a kept answer, the wake
        index before the cache clears it) compares it by identity with the node of the
        current tree and reads it no more. A working copy still lent (a cycle deciding on
        it) is unlinked when it is given back."""
        self._retired = True
        _unlink(self)
        self.queues, self.cohorts = {}, {}
        kept = self._kept
        if kept is not None and not self._lent:
            self._kept = None
            _unlink(kept)

    def roots(self) -> list[QuotaNode]:
        out = [n for n in self.cohorts.values() if n.parent is None]
        out += [n for n in self.queues.values() if n.parent is None]
        return out

    def add_usage(self, cq: str, usage: Mapping[FlavorResource, int]) -> None:
        node = self.queues[cq]
        journal = self._journal
        self.changes += 1
        self._dirty.add(cq)
        for fr, v in usage.items():
            node.add_usage(fr, v, journal)

    def remove_usage(self, cq: str, usage: Mapping[FlavorResource, int]) -> None:
        node = self.queues[cq]
        journal = self._journal
        self.changes += 1
        self._dirty.add(cq)
        for fr, v in usage.items():
            node.remove_usage(fr, v, journal)

    @contextmanager
    def keep_larger(self) -> Iterator[None]:
        """Usage changes made inside the block are kept only where they raise usage: on
        exit every changed value is the larger of before and after, however the block
        exits.

        The resulting usage is at least both states at every node, so any request that
        fits it fits either: ``with tree.keep_larger(): remove(victims); add(preemptor)``
        lets nobody else take the victims' capacity nor what the preemptor needs of the
        rest (``reserveEvictingCapacity``)."""
        yield from _keep_larger(self, self._journal)

    @contextmanager
    def scratch(self) -> Iterator[None]:
        """Usage changes made inside the block are undone when it exits, however it
        exits (return, exception): searches try removals and additions freely.

        Undo restores the recorded values (newest first), so it does not rely on
        ``add_usage`` and ``remove_usage`` being exact inverses. Blocks nest: an inner
        block restores its own changes (the state the outer block then sees again).
        """
        outer = self._journal
        journal: Journal = []
        self._journal = journal
        try:
            yield
        finally:
            self._journal = outer
            self.changes += 1
            for usage, fr, old in reversed(journal):
                if old:
                    usage[fr] = old
                else:
                    usage.pop(fr, None)


def _keep_larger(tree: CohortTree, outer: Journal | None) -> Iterator[None]:
    journal: Journal = []
    tree._journal = journal
    try:
        yield
    finally:
        tree._journal = outer
        original: dict[tuple[int, FlavorResource], tuple[dict[FlavorResource, int], int]] = {}
        for usage, fr, old in journal:
            original.setdefault((id(usage), fr), (usage, old))
        if outer is not None:
            outer.extend(journal)  # an enclosing scratch() still restores the start
        tree.changes += 1
        for (_, fr), (usage, old) in original.items():
            value = max(old, usage.get(fr, 0))
            if value:
                usage[fr] = value
            else:
                usage.pop(fr, None)


def _unlink(tree: CohortTree) -> None:
    """Nothing of ``tree``'s nodes refers to another node or to the tree any more."""
    for nodes in (tree.cohorts, tree.queues):
        for node in nodes.values():
            node.parent = None
            node.child_cohorts = []
            node.child_queues = []
            node.tree = None
            node.memo = {}
            node.available_memo = {}


def _recompute(root: QuotaNode) -> None:
    """Kueue's updateCohortResourceNode: subtree quota and usage from the leaves up
    (children before parents, in a loop: no recursion, whatever the depth)."""
    for node in reversed(cohorts_below(root)):
        sq = {fr: q.nominal for fr, q in node.quotas.items()}
        usage: dict[FlavorResource, int] = {}
        for child in node.child_queues:
            child.subtree_quota = {fr: q.nominal for fr, q in child.quotas.items()}
            child.local_quota = _local_quotas(child)
        for child in node.children:
            for fr, v in child.subtree_quota.items():
                sq[fr] = sq.get(fr, 0) + v - child.local_quota.get(fr, 0)
            for fr, v in child.usage.items():
                above = v - child.local_quota.get(fr, 0)
                if above > 0:
                    usage[fr] = usage.get(fr, 0) + above
        node.subtree_quota = sq
        node.local_quota = _local_quotas(node)
        if node.is_cohort:
            node.usage = usage


def _local_quotas(node: QuotaNode) -> dict[FlavorResource, int]:
    out = {}
    for fr, q in node.quotas.items():
        if q.lending_limit is not None:
            out[fr] = max(0, node.subtree_quota.get(fr, 0) - q.lending_limit)
    return out
