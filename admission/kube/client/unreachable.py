"""What an unreachable API server looks like in errors and in the log.

When the API server cannot be reached every informer, the leader elector and the
certificate syncer fail at once and back off on their own. Logged one by one, with
aiohttp's connector reprs, that is a screenful a second that says one thing. Here
the failure is said once per back-off, in aiohttp's own words ("Cannot connect to
host 127.0.0.1:6443 ..."), and once more when the server answers again; the
individual failures stay at DEBUG.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Outage", "outage_of", "transport_reason"]

log = logging.getLogger("quartermaster.kube")

_MAX_REASON = 300


def transport_reason(exc: BaseException) -> str:
    """A failed connection in one line: the exception's message (aiohttp's says host,
    port and the OS error), or its type when it has none (a bare timeout)."""
    text = " ".join(str(exc).split())
    if not text:
        return "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


class Outage:
    """The log of one client's connection failures: one WARNING per back-off period
    (the first failure after a quiet spell, then none until its delay has passed),
    one INFO line when a request gets through again."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._quiet_until = 0.0
        self.down = False
        self.failures = 0

    def failed(self, reason: str, delay: float, *, who: str = "") -> None:
        self.failures += 1
        now = self._clock()
        if now >= self._quiet_until:
            log.warning("API server unreachable (%s): retrying in %.1fs", reason, delay)
            self._quiet_until = now + delay
        else:
            log.debug("%s: API server unreachable (%s): retrying in %.1fs", who, reason, delay)
        self.down = True

    def recovered(self) -> None:
        if self.down:
            log.info("API server reachable again after %d failed requests", self.failures)
        self.down = False
        self.failures = 0
        self._quiet_until = 0.0


_OUTAGES: weakref.WeakKeyDictionary[Any, Outage] = weakref.WeakKeyDictionary()


def outage_of(client: Any) -> Outage:
    """The :class:`Outage` shared by everything that uses ``client``."""
    outage = _OUTAGES.get(client)
    if outage is None:
        outage = _OUTAGES[client] = Outage()
    return outage
