"""The cyclic garbage collector, held off while a scheduling cycle runs."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_collector_lock = threading.Lock()
_collector_pauses = [0, False]  # cycles running now; whether the collector was enabled


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector stays off while a cycle runs, and runs after it.

    A cycle allocates tens of short-lived containers per head (entries, assignments,
    statuses) and keeps them until it ends. Left on, the collector would run many times
    inside a cycle of thousands of heads, each time walking what the cycle still holds
    and promoting it into older generations, which then cost full collections. What the
    cycle frees, reference counting frees; the collector runs once it is over and finds
    the survivors only. Cycles in several threads nest; a collector that was already
    off (``plan``) stays off."""
    with _collector_lock:
        if _collector_pauses[0] == 0:
            _collector_pauses[1] = gc.isenabled()
            gc.disable()
        _collector_pauses[0] += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses[0] -= 1
            if _collector_pauses[0] == 0 and _collector_pauses[1]:
                gc.enable()
