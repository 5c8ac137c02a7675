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
import collections
import contextlib
import contextvars
import heapq
import itertools
import time
from collections.abc import Callable, Iterator

HIGH, LOW = 0, 1
#: verbs that only read: they wait for a token but are no decision to write
READ_VERBS = frozenset({"get", "list", "watch"})
LOW_MAX_WAIT = 5.0  # seconds a low-priority request waits behind high-priority ones at most
_priority: contextvars.ContextVar[int] = contextvars.ContextVar("request_priority", default=HIGH)


@contextlib.contextmanager
def low_priority() -> Iterator[None]:
    """Requests made inside this block wait behind every high-priority one."""
    token = _priority.set(LOW)
    try:
        yield
    finally:
        _priority.reset(token)


class ShareCredit:
    """What low-priority writes may spend while decisions are being written: ``share``
    of a request for every high-priority request sent (at most ``cap`` saved up).

    Queue statuses and pending reasons are worth writing, but not at the cost of the
    admissions that wait for the same budget (and CPU): while decisions are written
    they take at most this share, so their cost follows the work done — 60 queues
    and 15,000 admissions cost the same number of status writes whether the run
    takes 6 minutes or 16."""

    def __init__(self, share: float = 0.04, cap: float = 10.0) -> None:
        self.share = share
        self.cap = cap
        self.credit = 0.0

    def earn(self) -> None:
        self.credit = min(self.cap, self.credit + self.share)

    def take(self) -> bool:
        """Spend one request's worth, if saved up."""
        if self.credit < 1.0:
            return False
        self.credit -= 1.0
        return True


def current_priority() -> int:
    return _priority.get()


class TokenBucket:
    """``qps`` tokens a second up to ``burst``; :meth:`acquire` waits for one."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[float, int], None] | None = None,
        low_max_wait: float = LOW_MAX_WAIT,
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
        self._room: list[tuple[int, asyncio.Future[None]]] = []  # (limit, waiter)
        # Waiting reads (get, list, watch): high priority, but no decision to write
        self._reads: set[asyncio.Future[None]] = set()
        # Low-priority waiters in arrival order (they are in the heap too): one that has
        # waited low_max_wait goes next, so a budget that stays spent on decisions still
        # lets a queue status or a pending reason through now and then (never starved).
        self.low_max_wait = low_max_wait
        self._low: collections.deque[tuple[float, asyncio.Future[None]]] = collections.deque()

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    async def acquire(self, *, read: bool = False) -> None:
        """Wait for a token; ``read`` marks a get, list or watch, which takes its
        token in priority order but is no decision waiting to be written."""
        priority = _priority.get()
        self._refill()
        if not self._waiters and self._tokens >= 1:
            self._tokens -= 1
            return
        started = self.clock()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        if priority != HIGH:
            self._low.append((started, fut))
        if read:
            self._reads.add(fut)
        self._schedule()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._tokens += 1  # granted but not used: give it back
            self._waiters = [w for w in self._waiters if w[2] is not fut]
            heapq.heapify(self._waiters)
            self._wake_room()
            raise
        finally:
            self._reads.discard(fut)
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
        while self._tokens >= 1:
            fut = self._next_waiter()
            if fut is None:
                break
            self._tokens -= 1
            fut.set_result(None)
        self._wake_room()
        self._schedule()

    def _next_waiter(self) -> asyncio.Future[None] | None:
        """The waiter the next token goes to: by priority, then arrival, except that a
        low-priority one which has waited ``low_max_wait`` goes first."""
        low = self._low
        while low and low[0][1].done():
            low.popleft()
        if low and self.clock() - low[0][0] >= self.low_max_wait:
            return low.popleft()[1]
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                return fut
        return None

    def refund(self) -> None:
        """Give back a token that was acquired but not spent (the request proved unneeded)."""
        self._refill()
        self._tokens = min(float(self.burst), self._tokens + 1)
        if self._waiters:
            self._schedule()

    def decisions_queued(self) -> int:
        """How many high-priority requests (admissions, evictions) wait for a token."""
        return sum(1 for p, _, f in self._waiters if p == HIGH and not self._done_or_read(f))

    async def room_for_decisions(self, limit: int) -> None:
        """Wait until fewer than ``limit`` high-priority requests wait for a token.

        The scheduler's back-pressure: a cycle's admissions hold quota from the moment
        they are decided, so deciding far ahead of what the budget can write makes
        later heads look inadmissible (a pending-reason write each) and preemptors find
        quota held by workloads that are not even running yet (an eviction and a
        re-admission each). Deciding only what the budget can send within a moment
        keeps every token busy and the quota honest."""
        if self.decisions_queued() < limit:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._room.append((limit, fut))
        try:
            await fut
        finally:
            self._room = [r for r in self._room if r[1] is not fut]

    def _wake_room(self) -> None:
        if not self._room:
            return
        queued = self.decisions_queued()
        for limit, fut in self._room:
            if queued < limit and not fut.done():
                fut.set_result(None)

    @property
    def decisions_waiting(self) -> bool:
        """Whether a high-priority request (an admission, an eviction) waits for a token."""
        return any(p == HIGH and not self._done_or_read(f) for p, _, f in self._waiters)

    @property
    def reads_waiting(self) -> int:
        """How many reads (get, list, watch) wait for a token."""
        return sum(1 for f in self._reads if not f.done())

    def _done_or_read(self, fut: asyncio.Future[None]) -> bool:
        return fut.done() or fut in self._reads

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, f in self._waiters if not f.done())
