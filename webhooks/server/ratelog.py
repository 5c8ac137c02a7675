"""One rate-limited log line per kind of event a client can trigger at will (a bad
request, a refused connection, a handler error): a hostile client cannot fill the log."""

from __future__ import annotations

import logging
from time import monotonic
from typing import Any

log = logging.getLogger("quartermaster.webhooks")


class RateLimitedLog:
    """At most ``burst`` lines per ``interval`` seconds; the next line after a quiet
    spell says how many were suppressed. A hostile client cannot fill the log."""

    def __init__(self, burst: int = 10, interval: float = 60.0) -> None:
        self.burst, self.interval = burst, interval
        self._window_start = -float("inf")
        self._count = 0
        self.suppressed = 0

    def __call__(self, level: int, msg: str, *args: Any) -> bool:
        now = monotonic()
        if now - self._window_start >= self.interval:
            self._window_start, self._count = now, 0
        if self._count >= self.burst:
            self.suppressed += 1
            return False
        self._count += 1
        if self.suppressed:
            msg += " (%d similar line(s) suppressed)"
            args = (*args, self.suppressed)
            self.suppressed = 0
        log.log(level, msg, *args)
        return True
