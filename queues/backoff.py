"""Exponential backoff: the delays between retries and between requeues.

One policy for every place that waits longer after each failure: the requeue of a
preempted or timed-out workload (Kueue's ``requeuingStrategy``), a refused admission
write, the work queue's per-key retries and the informers' reconnects.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Delays ``base·factorⁿ``, at most ``cap``."""

    base: float
    cap: float
    factor: float = 2.0

    def delay(self, n: int) -> float:
        """The ``n``-th delay, counted from 0: ``base·factorⁿ``, at most ``cap``."""
        return min(self.cap, self.base * self.factor**n)

    def requeue_delay(self, count: int) -> float:
        """Delay before the ``count``-th requeue (counted from 1): ``base·factor^(count−1)``,
        at most ``cap``."""
        return self.delay(max(0, count - 1))
