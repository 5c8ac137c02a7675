"""How the flavors tried for one resource group compare (Kueue's flavor fungibility).

A :class:`FlavorCandidate` is one flavor tried for a resource group's requests;
:func:`is_preferred` and :func:`should_try_next` are Kueue's isPreferred and
shouldTryNextFlavor, which pick the best candidate and say when to stop trying; and
when no flavor fits, :func:`no_fit_reason` and :func:`worse_reason` say which pending
reason the podSet reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from admission.engine.vocabulary import AssignmentMode, PendingReason
from queues.model import PREEMPTION_OVER_BORROWING, TRY_NEXT_FLAVOR, ClusterQueue, FlavorResource

NO_FIT = AssignmentMode.NO_FIT
NO_CANDIDATES = AssignmentMode.NO_CANDIDATES
PREEMPT = AssignmentMode.PREEMPT
RECLAIM = AssignmentMode.RECLAIM

WAITING_FOR_QUOTA = PendingReason.WAITING_FOR_QUOTA
EXCEEDS_MAX_QUOTA = PendingReason.EXCEEDS_MAX_QUOTA
NO_MATCHING_FLAVOR = PendingReason.NO_MATCHING_FLAVOR


@dataclass(slots=True)
class FlavorCandidate:
    """One flavor tried for the resources of one resource group: its mode, borrowing
    level, reason and messages, and the resources on which it needs preemption."""

    flavor: str
    mode: AssignmentMode
    borrow: int
    reason: PendingReason | None
    messages: list[str]
    need_preemption: list[FlavorResource]


def is_preferred(a: FlavorCandidate, b: FlavorCandidate, preference: str | None) -> bool:
    """Kueue's isPreferred: is candidate a better than the best so far, b?"""
    if a.mode == NO_FIT:
        return False
    if b.mode == NO_FIT:
        return True
    if a.mode == NO_CANDIDATES:
        return False
    if b.mode == NO_CANDIDATES:
        return True
    if preference == PREEMPTION_OVER_BORROWING:
        if a.borrow != b.borrow:
            return a.borrow < b.borrow
        return a.mode > b.mode
    if a.mode != b.mode:
        return a.mode > b.mode
    return a.borrow < b.borrow


def should_try_next(c: FlavorCandidate, cq: ClusterQueue) -> bool:
    if c.mode in (NO_FIT, NO_CANDIDATES):
        return True
    ff = cq.flavor_fungibility
    if c.mode in (PREEMPT, RECLAIM) and ff.when_can_preempt == TRY_NEXT_FLAVOR:
        return True
    if c.borrow > 0 and ff.when_can_borrow == TRY_NEXT_FLAVOR:
        return True
    return False


def no_fit_reason(reasons: set[PendingReason | None]) -> PendingReason:
    """The reason of a resource group no flavor fits, from its flavors' reasons."""
    if WAITING_FOR_QUOTA in reasons:
        return WAITING_FOR_QUOTA
    if EXCEEDS_MAX_QUOTA in reasons:
        return EXCEEDS_MAX_QUOTA
    return NO_MATCHING_FLAVOR


_REASON_RANK = {None: 0, WAITING_FOR_QUOTA: 1, NO_MATCHING_FLAVOR: 2, EXCEEDS_MAX_QUOTA: 3}


def worse_reason(a: PendingReason | None, b: PendingReason | None) -> PendingReason | None:
    return a if _REASON_RANK.get(a, 0) >= _REASON_RANK.get(b, 0) else b
