"""One ClusterQueue or Cohort of the quota tree, and its hierarchical quota accounting.

This is Kueue's ``resource_node`` model (docs/semantics.md §4.5): every ClusterQueue and
Cohort is a node with, per (flavor, resource), a *subtree quota* (its own nominal quota
plus what its children lend up), a *usage* (for a Cohort: what its children use beyond
the capacity they keep locally), and optional borrowing and lending limits. Usage
"bubbles" to the parent only beyond what a node keeps locally; ``available`` and
``potential_available`` say how much a ClusterQueue can take now and at most. The tree
that links the nodes, copies them and undoes searches is :mod:`queues.tree`.

All arithmetic is on integers in engine units; nothing here allocates on the hot path
except the usage dictionaries themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

from queues.model import FlavorResource, ResourceQuota

Journal = list[tuple[dict[FlavorResource, int], FlavorResource, int]]
"""Usage values as they were before each change: (a node's usage dict, fr, old value)."""


class UsageChanges(Protocol):
    """What a node reads of its tree: ``changes``, bumped by every change of usage
    (restores included), which dates the node's ``available_memo``."""

    changes: int


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
        self.tree: UsageChanges | None = None
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
        if not self.is_cohort:  # a ClusterQueue: its parent's answer is mostly kept
            if parent.parent is None:
                return self._available_with(
                    parent.subtree_quota.get(fr, 0) - parent.usage.get(fr, 0), fr
                )
            tree = parent.tree
            if tree is not None and parent.is_cohort:
                got = parent.available_memo.get(fr)
                if got is not None and got[0] == tree.changes:
                    return self._available_with(got[1], fr)
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
        got = self.memo.get(memo_key)
        if got is not None:
            return got  # type: ignore[return-value]
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

    def fits_now(
        self, requests: Iterable[tuple[FlavorResource, int]]
    ) -> tuple[int, tuple[FlavorResource, int] | None]:
        """Whether ``requests`` fit in this ClusterQueue now, each within
        :meth:`potential_available` and :meth:`available`: (the highest of their
        borrowing levels, None), else (-1, the first request that does not fit). A zero
        request fits anywhere. The one answer of the engine's paths that assign a single
        flavor without building candidates (a head, a kept answer, a woken head)."""
        borrow = 0
        for fr, val in requests:
            if not val:
                continue
            if val > self.potential_available(fr) or val > self.available(fr):
                return -1, (fr, val)
            height = self.height_of_lowest_subtree_that_fits(fr, val).height
            if height > borrow:
                borrow = height
        return borrow, None

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


def cohorts_below(top: QuotaNode, skip: str | None = None) -> list[QuotaNode]:
    """``top`` and the Cohorts below it (without those with ``skip`` in their memo),
    parents before children: a walk with a stack of its own, whatever the depth."""
    order: list[QuotaNode] = []
    stack = [top]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(c for c in node.child_cohorts if skip is None or skip not in c.memo)
    return order
