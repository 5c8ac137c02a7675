"""The client-side rate limit of every request the service sends (client-go's QPS/burst).

A production controller must not turn a burst of events into a burst of API requests:
Kueue's manager talks to the API server through a token bucket (``clientConnection.qps``
/ ``burst``, defaults 50 / 100 in Kueue's Configuration). This is that bucket, with one
addition: waiting requests are served by **priority**, so when the budget is spent,
admissions and evictions go before pending-reason, queue-status and Event writes
(:func:`low_priority` marks the latter; the mark follows the task through its awaits).

A write that waited for its token may no longer be needed (the victim finished, the
pending workload was admitted, a newer queue status replaced the one computed before
the wait). So writers take their turn *first* and decide what to send once they hold
it (``KubeClient.turn``); a turn that ends up sending nothing gives its token back
(:meth:`TokenBucket.refund`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import time
from collections.abc import Callable, Iterator

HIGH, LOW = 0, 1
_priority: contextvars.ContextVar[int] = contextvars.ContextVar("request_priority", default=HIGH)


@contextlib.contextmanager
def low_priority() -> Iterator[None]:
    """Requests made inside this block wait behind every high-priority one."""
    token = _priority.set(LOW)
    try:
        yield
    finally:
        _priority.reset(token)


class TokenBucket:
    """``qps`` tokens a second up to ``burst``; :meth:`acquire` waits for one."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[float, int], None] | None = None,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1 (got {qps}, {burst})")
        self.qps = float(qps)
        self.burst = int(burst)
        self.clock = clock
        self.on_wait = on_wait  # (seconds waited, priority) for metrics
        self._tokens = float(burst)
        self._stamp = clock()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    async def acquire(self) -> None:
        priority = _priority.get()
        self._refill()
        if not self._waiters and self._tokens >= 1:
            self._tokens -= 1
            return
        started = self.clock()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        self._schedule()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._tokens += 1  # granted but not used: give it back
            self._waiters = [w for w in self._waiters if w[2] is not fut]
            heapq.heapify(self._waiters)
            raise
        if self.on_wait is not None:
            self.on_wait(self.clock() - started, priority)

    def _schedule(self) -> None:
        if self._timer is not None or not self._waiters:
            return
        self._refill()
        delay = 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps
        self._timer = asyncio.get_running_loop().call_later(delay, self._release)

    def _release(self) -> None:
        self._timer = None
        self._refill()
        while self._waiters and self._tokens >= 1:
            _, _, fut = heapq.heappop(self._waiters)
            if fut.done():
                continue
            self._tokens -= 1
            fut.set_result(None)
        self._schedule()

    def refund(self) -> None:
        """Give back a token that was acquired but not spent (the request proved unneeded)."""
        self._refill()
        self._tokens = min(float(self.burst), self._tokens + 1)
        if self._waiters:
            self._schedule()

    @property
    def decisions_waiting(self) -> bool:
        """Whether a high-priority request (an admission, an eviction) waits for a token."""
        return any(p == HIGH and not f.done() for p, _, f in self._waiters)

    @property
    def waiting(self) -> int:
        return len(self._waiters)
