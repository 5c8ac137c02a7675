"""Fair-share arithmetic: dominant resource share, usage decay and credits.

* **Dominant resource share** (Kueue's fair_sharing.go, docs/semantics.md §4.8): for a
  node with a parent, what it borrows above its subtree quota, per resource, over
  what its parent could lend, ×1000, divided by the fair-sharing weight. A zero weight
  makes any borrowing infinitely unfair.
* **Decay** (Admission Fair Sharing, §4.9): usage is an exponential moving average
  with a half-life, sampled at intervals; ``alpha(dt) = 1 − 0.5^(dt/halfLife)``.
* **Credits** (our extension; the closest peer is the KAI scheduler's
  usage-adjusted fair share): a node's credit is its weighted share
  of the parent's capacity over the decay window, minus its decayed usage over the
  same window. ``τ = halfLife / ln 2`` is the window's length; with ``U = ū·τ`` (ū the
  decayed usage rate), ``credit = τ·(w/Σw·C − ū)``: siblings' credits add up to the
  pool's unused capacity over the window.

Pure functions over ``queues.tree`` nodes; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from queues.model import FlavorResource
from queues.quota_node import QuotaNode


@dataclass(slots=True, frozen=True)
class Share:
    """A node's dominant resource share, comparable as Kueue's CompareDRS."""

    ratio: float  # unweighted, ×1000
    weight: float
    borrowing: bool
    dominant: str = ""

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and self.borrowing

    @property
    def weighted(self) -> float:
        """Kueue's PreciseWeightedShare (+inf for a zero-weight borrower)."""
        if self.zero_weight_borrows:
            return math.inf
        if self.ratio == 0:
            return 0.0
        return self.ratio / self.weight

    def sort_key(self) -> tuple[int, float]:
        """Lower is fairer to schedule: zero-weight borrowers after everyone else."""
        if self.zero_weight_borrows:
            return (1, self.ratio)
        return (0, self.weighted)

    def rounded(self) -> int:
        """status.fairSharing.weightedShare: ceil, MaxInt64 for a zero-weight borrower."""
        if self.zero_weight_borrows:
            return 9223372036854775807
        return math.ceil(self.weighted)


def lendable(parent: QuotaNode) -> dict[str, int]:
    """Kueue's calculateLendable: per resource, what the parent could lend in total."""
    root = parent.root()
    out: dict[str, int] = {}
    for fr in root.subtree_quota:
        out[fr[1]] = out.get(fr[1], 0) + parent.potential_available(fr)
    return out


def dominant_resource_share(
    node: QuotaNode, extra: Mapping[FlavorResource, int] | None = None
) -> Share:
    """The node's share with ``extra`` usage added (the workload being considered)."""
    if node.parent is None:
        return Share(0.0, node.fair_weight, False)
    borrowed: dict[str, int] = {}
    for fr, quota in node.subtree_quota.items():
        b = node.usage.get(fr, 0) + (extra.get(fr, 0) if extra else 0) - quota
        if b > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + b
    if not borrowed:
        return Share(0.0, node.fair_weight, False)
    lend = node.memo.get("lendable")
    if not isinstance(lend, dict):
        lend = lendable(node.parent)
        node.memo["lendable"] = lend
    ratio, dominant = 0.0, ""
    for r in sorted(borrowed):
        lr = lend.get(r, 0)
        if lr > 0:
            x = borrowed[r] * 1000.0 / lr
            if x > ratio:
                ratio, dominant = x, r
    return Share(ratio, node.fair_weight, True, dominant)


def borrowing_on(
    node: QuotaNode, frs: Mapping[FlavorResource, int], extra: Mapping[FlavorResource, int]
) -> bool:
    """Is the node (with ``extra`` added) borrowing from its parent on any requested fr?"""
    if node.parent is None:
        return False
    for fr, v in frs.items():
        if v > 0 and node.usage.get(fr, 0) + extra.get(fr, 0) > node.subtree_quota.get(fr, 0):
            return True
    return False


def alpha(elapsed: float, half_life: float) -> float:
    """Weight of the newest sample after ``elapsed`` seconds: 1 − 0.5^(Δt/halfLife).

    A zero half-life is documented by Kueue as "usage reset immediately": the newest
    sample replaces the history (alpha = 1). Kueue's code returns 0 there, which would
    freeze usage forever; we follow the documented meaning.
    """
    if elapsed <= 0:
        return 0.0
    if half_life <= 0:
        return 1.0
    return 1.0 - 0.5 ** (elapsed / half_life)


def decay(consumed: float, current: float, elapsed: float, half_life: float) -> float:
    """One sampling step of the exponential moving average."""
    a = alpha(elapsed, half_life)
    return consumed * (1.0 - a) + current * a


def window(half_life: float) -> float:
    """τ: the effective length of the decay window (∫ e^{-t/τ} dt = τ)."""
    return half_life / math.log(2) if half_life > 0 else 0.0


def weighted(amounts: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Σ_r weight_r · amount_r (weight defaults to 1 for resources not listed)."""
    return sum(weights.get(r, 1.0) * v for r, v in amounts.items())


def credit(*, share: float, capacity: float, rate: float, tau: float) -> float:
    """credit = τ·(share·C − ū): capacity owed (positive) or overdrawn (negative)."""
    return tau * (share * capacity - rate)
