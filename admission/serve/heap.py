"""``serve``'s long-lived heap kept out of full collections (admission.engine.gc_pause).

Nearly all of ``serve``'s heap is the informers' stores and the engine's cache: built by
the startup sync, kept until their objects are deleted, and never cyclic garbage. A full
collection walks all of it and finds nothing, but stalls the event loop that serves the
webhooks, the watches and the Lease, in proportion to the backlog. So once the initial
lists are in the cache, what survives a full collection is frozen, again after the
leader's first cycle, and the survivors of every later full collection as it ends: each
walks only what was made since the previous one.

What dies frozen as a reference cycle stays until a compaction, which runs once the
frozen count has doubled since the last one (one full pass then). The Workloads' own
objects die acyclic, and so do the quota tree a ClusterQueue or Cohort change replaces
(``CohortTree.retire`` unlinks it) and a TAS flavor's domain tree, rebuilt after a Node
or pod change (``FlavorSnapshot.retire`` unlinks the one replaced). The check runs
between cycles, every tick, on every replica: followers hold the same state and run no
cycles.

The policy is process-wide, so only a service that owns its process turns it on
(``ServiceOptions.freeze_heap``: ``quartermaster serve``); a ``Service`` inside another
program (tests, benchmarks running several) leaves the collector alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from admission.engine import gc_pause


class HeapFreezing:
    """``after_sync`` once the initial lists are in the cache; ``run`` until the service
    stops; ``release`` at its end. ``idle`` returns once no cycle is running,
    ``cycles`` counts the cycles run so far."""

    def __init__(
        self, *, idle: Callable[[], Awaitable[None]], cycles: Callable[[], int], period: float
    ) -> None:
        self.idle = idle
        self.cycles = cycles
        self.period = period
        self.frozen = False
        self.first_cycle_frozen = False

    def after_sync(self) -> None:
        gc_pause.freeze_survivors()  # the startup's one full-heap pass, before any cycle
        self.frozen = True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            await self.idle()
            if not self.first_cycle_frozen and self.cycles() > 0:
                self.first_cycle_frozen = True
                gc_pause.freeze_survivors()  # walks only what is new: what the cycle kept
            else:
                gc_pause.between_cycles()

    def release(self) -> None:
        if self.frozen:
            self.frozen = False
            gc_pause.release()
