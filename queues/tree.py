"""The cohort tree and its hierarchical quota accounting.

This is Kueue's ``resource_node`` model (docs/semantics.md §4.5): every ClusterQueue and
Cohort is a node with, per (flavor, resource), a *subtree quota* (its own nominal quota
plus what its children lend up), a *usage* (for a Cohort: what its children use beyond
the capacity they keep locally), and optional borrowing and lending limits. Usage
"bubbles" to the parent only beyond what a node keeps locally; ``available`` and
``potential_available`` say how much a ClusterQueue can take now and at most.

All arithmetic is on integers in engine units; nothing here allocates on the hot path
except the usage dictionaries themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import NamedTuple

from queues.cohort_chains import cohorts_below, disable_cycles, disable_too_deep, inherit_disabled
from queues.model import ClusterQueue, Cohort, FlavorResource, ResourceGroup, ResourceQuota

Journal = list[tuple[dict[FlavorResource, int], FlavorResource, int]]
"""Usage values as they were before each change: (a node's usage dict, fr, old value)."""


class BindingLimit(NamedTuple):
    """Where a ClusterQueue's capacity for one (flavor, resource) runs out.

    ``node`` is the lowest node on the path to the root whose borrowingLimit binds, or
    the root when none does; ``amount`` is what that limit leaves: for
    :meth:`QuotaNode.available_limit`, what ``node`` may still take from its parent
    (borrowingLimit) or has unused (root); for :meth:`QuotaNode.potential_limit`, the
    most ``node`` may ever use."""

    node: QuotaNode
    amount: int

    @property
    def at_root(self) -> bool:
        return self.node.parent is None


class BorrowingLevel(NamedTuple):
    """Kueue's FindHeightOfLowestSubtreeThatFits: how high in the tree a request reaches."""

    height: int  # 0: within the node's own quota; else the height of the lowest subtree that fits
    may_reclaim: bool  # that subtree is smaller than the whole tree


class QuotaNode:
    """A ClusterQueue or Cohort in the tree."""

    __slots__ = (
        "name",
        "is_cohort",
        "parent",
        "child_cohorts",
        "child_queues",
        "quotas",
        "subtree_quota",
        "usage",
        "local_quota",
        "fair_weight",
        "disabled_reason",
        "memo",
        "tree",
        "available_memo",
    )

    def __init__(self, name: str, *, is_cohort: bool, fair_weight: float = 1.0) -> None:
        self.name = name
        self.is_cohort = is_cohort
        self.parent: QuotaNode | None = None
        self.child_cohorts: list[QuotaNode] = []
        self.child_queues: list[QuotaNode] = []
        self.quotas: dict[FlavorResource, ResourceQuota] = {}
        self.subtree_quota: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        # max(0, subtree_quota - lending_limit) where a lending limit is set: capacity
        # this node never lends to its parent. Recomputed with subtree_quota.
        self.local_quota: dict[FlavorResource, int] = {}
        self.fair_weight = fair_weight
        self.disabled_reason: str | None = None
        # Derived values that only change when the tree is rebuilt (heights, potential
        # availability, explanations): new nodes, new memo.
        self.memo: dict[object, object] = {}
        # The tree this node is in (its ``changes`` count dates ``available_memo``), and
        # what ``available`` last gave per fr, with that count: see ``available``.
        self.tree: CohortTree | None = None
        self.available_memo: dict[FlavorResource, tuple[int, int]] = {}

    def __repr__(self) -> str:
        kind = "Cohort" if self.is_cohort else "ClusterQueue"
        return f"<{kind} {self.name}>"

    # -- structure -------------------------------------------------------------

    @property
    def children(self) -> Iterator[QuotaNode]:
        yield from self.child_cohorts
        yield from self.child_queues

    def path_to_root(self) -> Iterator[QuotaNode]:
        """This node, then its ancestors up to the root."""
        node: QuotaNode | None = self
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def depth(self) -> int:
        return sum(1 for _ in self.path_to_root()) - 1

    def height(self) -> int:
        """Kueue's getNodeHeight: distance to the furthest leaf (a ClusterQueue is 0).

        Structure only, so worked out once per node (``memo``): asked for every
        borrowing request, it walked the whole subtree each time (a tree of 5,000
        ClusterQueues). In a loop, as every walk here: a chain may be of any depth."""
        if not self.is_cohort:
            return 0
        got = self.memo.get("height")
        if got is not None:
            return got  # type: ignore[return-value]
        for node in reversed(cohorts_below(self, skip="height")):  # children first
            h = 1 if (node.child_cohorts or node.child_queues) else 0
            for c in node.child_cohorts:
                h = max(h, c.memo["height"] + 1)  # type: ignore[operator]
            node.memo["height"] = h
        return self.memo["height"]  # type: ignore[return-value]

    # -- accounting (docs/semantics.md §4.5) -------------------------------

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.local_quota.get(fr, 0) - self.usage.get(fr, 0))

    def borrowing_headroom(self, fr: FlavorResource) -> int | None:
        """With a borrowingLimit on fr: how much this node may still take from its parent
        (what it lends up and does not use itself, plus the limit); None without one."""
        q = self.quotas.get(fr)
        if q is None or q.borrowing_limit is None:
            return None
        return self._headroom(fr, q.borrowing_limit)

    def _lent_unused(self, fr: FlavorResource) -> int:
        """What this node stores in its parent (its subtree quota beyond its own lending
        limit) and does not use itself; negative when it uses more."""
        local = self.local_quota.get(fr, 0)
        stored_in_parent = self.subtree_quota.get(fr, 0) - local
        used_in_parent = max(0, self.usage.get(fr, 0) - local)
        return stored_in_parent - used_in_parent

    def _headroom(self, fr: FlavorResource, borrowing_limit: int) -> int:
        return self._lent_unused(fr) + borrowing_limit

    def borrowable(self, fr: FlavorResource) -> int:
        """With a borrowingLimit on fr: how much more this node may borrow from its
        parent (beyond what it lends up and does not use); 0 without one."""
        headroom = self.borrowing_headroom(fr)
        if headroom is None:
            return 0
        return max(0, headroom - max(0, self._lent_unused(fr)))

    def borrowing_cap(self, fr: FlavorResource) -> int | None:
        """With a borrowingLimit on fr: the most this node may ever use (its subtree quota
        plus the limit); None without one."""
        q = self.quotas.get(fr)
        if q is None or q.borrowing_limit is None:
            return None
        return self.subtree_quota.get(fr, 0) + q.borrowing_limit

    def available(self, fr: FlavorResource) -> int:
        """How much more of fr this node can use now (may be negative after a quota cut).

        A Cohort below the root keeps its answer until its tree's usage changes
        (``CohortTree.changes``, bumped by every change of usage, restores included):
        every ClusterQueue below it asks for it, and in a deep tree each of a cycle's
        thousands of heads walked the whole path to the root, twice. Up to the root
        (or the lowest kept answer) and back down, in a loop."""
        parent = self.parent
        if parent is None:
            return self.subtree_quota.get(fr, 0) - self.usage.get(fr, 0)
        below: list[QuotaNode] = [self]  # nodes whose answer is worked out, lowest first
        node = parent
        while True:
            if node.parent is None:
                value = node.subtree_quota.get(fr, 0) - node.usage.get(fr, 0)
                break
            tree = node.tree
            if tree is not None and node.is_cohort:
                got = node.available_memo.get(fr)
                if got is not None and got[0] == tree.changes:
                    value = got[1]
                    break
            below.append(node)
            node = node.parent
        for node in reversed(below):
            value = node._available_with(value, fr)
            tree = node.tree
            if tree is not None and node.is_cohort:
                node.available_memo[fr] = (tree.changes, value)
        return value

    def _available_with(self, parent_available: int, fr: FlavorResource) -> int:
        """:meth:`available` of a node whose parent has ``parent_available``: what it has
        unused locally, plus what the parent can give it (within its borrowingLimit).

        :meth:`local_available` plus the least of the parent's :meth:`available` and
        :meth:`_headroom`, written out (every head of a cycle asks it, twice: the calls
        cost more than the arithmetic; ``tests/unit/engine/test_nominate_fast_paths.py`` checks it
        against those methods)."""
        used = self.usage.get(fr, 0)
        local = self.local_quota.get(fr, 0)
        q = self.quotas.get(fr)
        if q is not None:
            limit = q.borrowing_limit
            if limit is not None:
                used_in_parent = used - local
                if used_in_parent < 0:
                    used_in_parent = 0
                headroom = self.subtree_quota.get(fr, 0) - local - used_in_parent + limit
                if headroom < parent_available:
                    parent_available = headroom
        unused = local - used
        return unused + parent_available if unused > 0 else parent_available

    def available_limit(self, fr: FlavorResource) -> BindingLimit:
        """Which limit bounds :meth:`available`: the lowest node on the path to the root
        whose borrowingLimit leaves it less than its parent has, else the root."""
        n = self
        while n.parent is not None:
            headroom = n.borrowing_headroom(fr)
            if headroom is not None and headroom < n.parent.available(fr):
                return BindingLimit(n, headroom)
            n = n.parent
        return BindingLimit(n, n.available(fr))

    def potential_available(self, fr: FlavorResource) -> int:
        """The most of fr this node could ever hold (the largest admissible request).

        Quotas and limits only (never usage), so it is worked out once per node and
        resource and kept in ``memo``, which lives exactly as long as the quotas do."""
        memo_key = ("potential", fr)
        below: list[QuotaNode] = []
        node: QuotaNode | None = self
        avail = 0
        while node is not None:
            got = node.memo.get(memo_key)
            if got is not None:
                avail = got  # type: ignore[assignment]
                break
            below.append(node)
            node = node.parent
        for node in reversed(below):
            if node.parent is None:
                avail = node.subtree_quota.get(fr, 0)
            else:
                avail = node.local_quota.get(fr, 0) + avail
                cap = node.borrowing_cap(fr)
                if cap is not None and cap < avail:
                    avail = cap
            node.memo[memo_key] = avail
        return avail

    def potential_limit(self, fr: FlavorResource) -> BindingLimit:
        """Which limit bounds :meth:`potential_available`: the lowest node whose quota plus
        borrowingLimit is at most what its parent could give it, else the root."""
        n = self
        while n.parent is not None:
            cap = n.borrowing_cap(fr)
            if cap is not None and cap <= n.local_quota.get(fr, 0) + n.parent.potential_available(
                fr
            ):
                return BindingLimit(n, cap)
            n = n.parent
        return BindingLimit(n, n.subtree_quota.get(fr, 0))

    def add_usage(self, fr: FlavorResource, val: int, journal: Journal | None = None) -> None:
        node: QuotaNode | None = self
        while node is not None and val > 0:
            local_avail = node.local_available(fr)
            if journal is not None:
                journal.append((node.usage, fr, node.usage.get(fr, 0)))
            node.usage[fr] = node.usage.get(fr, 0) + val
            val -= local_avail
            node = node.parent

    def remove_usage(self, fr: FlavorResource, val: int, journal: Journal | None = None) -> None:
        node: QuotaNode | None = self
        while node is not None and val > 0:
            stored_in_parent = node.usage.get(fr, 0) - node.local_quota.get(fr, 0)
            if journal is not None:
                journal.append((node.usage, fr, node.usage.get(fr, 0)))
            left = node.usage.get(fr, 0) - val
            if left:
                node.usage[fr] = left
            else:
                node.usage.pop(fr, None)
            if stored_in_parent <= 0:
                return
            val = min(val, stored_in_parent)
            node = node.parent

    def borrowing_with(self, fr: FlavorResource, val: int) -> bool:
        return self.usage.get(fr, 0) + val > self.subtree_quota.get(fr, 0)

    def is_borrowing(self, fr: FlavorResource) -> bool:
        return self.borrowing_with(fr, 0)

    def nominal(self, fr: FlavorResource) -> int:
        q = self.quotas.get(fr)
        return q.nominal if q is not None else 0

    def height_of_lowest_subtree_that_fits(self, fr: FlavorResource, val: int) -> BorrowingLevel:
        """Kueue's FindHeightOfLowestSubtreeThatFits: the borrowing level of a request.

        0 when the request fits within this node's own quota; otherwise the height of the
        lowest ancestor subtree whose quota covers it, and whether that subtree is
        smaller than the whole tree (so reclaiming within it is possible).
        """
        # (borrowing_with and local_available written out: asked for every head)
        node: QuotaNode | None = self.parent
        if node is None:
            return _OWN_QUOTA_AT_ROOT
        used = self.usage.get(fr, 0)
        if used + val <= self.subtree_quota.get(fr, 0):
            return _OWN_QUOTA
        unused = self.local_quota.get(fr, 0) - used
        remaining = val - unused if unused > 0 else val
        while node is not None:
            used = node.usage.get(fr, 0)
            if used + remaining <= node.subtree_quota.get(fr, 0):
                return BorrowingLevel(node.height(), node.parent is not None)
            unused = node.local_quota.get(fr, 0) - used
            if unused > 0:
                remaining -= unused
            node = node.parent
        return BorrowingLevel(self.root().height(), False)


_OWN_QUOTA = BorrowingLevel(0, True)
_OWN_QUOTA_AT_ROOT = BorrowingLevel(0, False)


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
        for name in self._dirty | kept._dirty:
            live, mine = self.queues.get(name), kept.queues.get(name)
            if live is None or mine is None:
                continue
            for a, b in zip(live.path_to_root(), mine.path_to_root(), strict=True):
                b.usage = dict(a.usage)
        self._dirty.clear()
        kept._dirty.clear()
        kept.changes += 1
        self._lent = True
        return kept

    def give_back(self, copy: CohortTree) -> None:
        """The copy from :meth:`working_copy` is no longer used (its usage may be anything)."""
        if copy is self._kept:
            self._lent = False

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
