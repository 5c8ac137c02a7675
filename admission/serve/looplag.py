"""Event-loop lag: how late the loop runs a timer, measured all the time.

Every part of ``serve`` (webhook reviews, ``/healthz``, the Lease renewal, the informers,
the scheduler) shares one asyncio loop, so a callback that holds it (a burst of TLS
handshakes, a large synchronous computation) delays all of them at once. The monitor
sleeps ``interval`` seconds in a loop and records how much later than asked it woke up:
``quartermaster_event_loop_lag_seconds`` (histogram) and ``…_max_seconds``; a lag over
``warn_after`` is logged as one rate-limited line. The stress benchmark reads both.
"""

from __future__ import annotations

import asyncio
import logging
import time

from prometheus_client import Gauge, Histogram

log = logging.getLogger("quartermaster.serve")


class LoopLagMonitor:
    def __init__(
        self,
        histogram: Histogram,
        max_gauge: Gauge,
        *,
        interval: float = 0.1,
        warn_after: float = 1.0,
        warn_every: float = 60.0,
    ) -> None:
        self.histogram = histogram
        self.max_gauge = max_gauge
        self.interval = interval
        self.warn_after = warn_after
        self.warn_every = warn_every
        self.max_lag = 0.0
        self._last_warning = -float("inf")

    def record(self, lag: float) -> None:
        lag = max(0.0, lag)
        self.histogram.observe(lag)
        if lag > self.max_lag:
            self.max_lag = lag
            self.max_gauge.set(lag)
        now = time.monotonic()
        if lag >= self.warn_after and now - self._last_warning >= self.warn_every:
            self._last_warning = now
            log.warning(
                "event loop lag %.2f s (the largest since start: %.2f s)", lag, self.max_lag
            )

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.interval)
            self.record(loop.time() - start - self.interval)
