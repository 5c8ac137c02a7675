"""The cyclic garbage collector around scheduling cycles, and what its full passes walk.

Two costs, two rules.

**Inside a cycle: no collection at all, then the youngest generation only.** A cycle
allocates tens of short-lived containers per head and keeps them until it ends; left on,
the collector would run many times inside a cycle of thousands of heads, walking what the
cycle still holds and promoting it into older generations. So the collector is off while
a cycle runs (``collector_paused``). Its allocation counts keep growing meanwhile, and the
first allocation after ``gc.enable()`` would run whatever collection they have made due —
a full one (generation 2: the whole heap, a stall in proportion to every workload held)
as readily as a young one, still inside the cycle. So the cycle ends with an explicit
collection of generation 0 — it walks only what the cycle left alive — which resets the
allocation count: no collection is due before another threshold's worth of allocations
(700 by default), made after the cycle returns; a full one made due runs then, between
cycles. Not generation 1 too: that costs more and promotes every cycle's survivors into
generation 2 at once, making full collections due more often.

**Between cycles: full collections walk only what is new** (``freeze_survivors``). In a
controller nearly everything on the heap is long-lived — the cache's queues, workloads
and their specs, built by the startup sync and kept until the object is deleted — and
none of it is cyclic garbage; a full collection that walks it finds nothing, but still
stalls the event loop (webhooks, watches, the scheduler) for a second whenever it lands.
``freeze_survivors`` runs one full collection (the startup's one stall, before serving)
and moves what survived into the permanent generation (``gc.freeze``), which collections
do not walk; from then on, the survivors of every full collection are frozen the moment
it ends, so each one walks only the objects created since the previous one — a cost in
proportion to the churn, not to the heap. Right after a full collection everything that
remains was found reachable, so nothing already garbage is frozen. When a full
collection runs is still the interpreter's rule: once the objects promoted since the last
one reach a quarter of what it left. Not one after every cycle: that would walk each
cycle's retained structures again every cycle, more in all than the few the rule runs.

**What freezing costs, and its bound.** Reference counting still frees frozen objects (a
finished workload's acyclic objects leave the frozen population as they die); what is
never reclaimed while frozen is a *cycle* of objects that dies after being frozen. So the
frozen population grows by what the process keeps (its state growing) and by such dead
cycles, never shrinks below what is alive. When it has doubled since the last
compaction, the next ``between_cycles`` call compacts: ``gc.unfreeze()``, a full
collection of the whole heap (reclaiming those cycles), ``gc.freeze()`` again. That
bounds what freezing can hold on to at the size of the heap at the last compaction, at
the price of one full-heap pass (the stall freezing avoids) per doubling; a process whose
state does not grow and whose dead objects are acyclic never compacts. cycle-5k and
serve-churn measure it: ``reclaimedAfterUnfreeze`` is what a full collection finds once
everything is unfrozen at the end of a run. ``release`` gives everything back (a run's
end; tests). ``Freezer`` holds this state over a collector: the ``gc`` module here, a
fake one in the tests of the bound.

The policy is process-wide, like the collector: ``freeze_survivors`` is for a process that
owns its heap (a controller after its startup sync, a benchmark), not for a library call.
``quartermaster serve`` gets both rules (admission.serve.heap). Its Workloads' objects die
acyclic; the quota tree a ClusterQueue or Cohort change replaces (``CohortTree`` and its
working copy: nodes linked both ways) is unlinked by ``CohortTree.retire``, and a TAS
flavor's domain tree that a Node, pod, Topology or flavor change makes the scheduler
build again (domains linked both ways) by ``FlavorSnapshot.retire``, so reference
counting frees each, frozen or not; left linked, each replaced tree would stay frozen
until a compaction (bench/serve_churn.py measures what freezing holds).
Cycles in several threads nest in ``collector_paused``; a collector that was already off
(``plan``) stays off and no collection runs."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast

_collector_lock = threading.Lock()
_collector_pauses = [0, False]  # cycles running now; whether the collector was enabled

COMPACT_GROWTH = 2.0  # compact when the frozen population has grown by this factor


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector stays off while a cycle runs; the cycle ends with a
    collection of the youngest generation only, which resets the allocation count, so no
    collection the cycle's allocations made due (a full one included) runs inside it."""
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
                gc.collect(0)  # what the cycle left alive; resets the allocation count
                gc.enable()


class Collector(Protocol):
    """What freezing uses of the ``gc`` module (a fake in tests)."""

    @property
    def callbacks(self) -> list[Callable[[str, dict[str, Any]], None]]: ...
    def collect(self) -> int: ...
    def freeze(self) -> None: ...
    def unfreeze(self) -> None: ...
    def get_freeze_count(self) -> int: ...


class Freezer:
    """``freeze_survivors``, ``between_cycles`` and ``release`` over one collector:
    whether its hook is installed, the frozen count after the last compaction
    (``baseline``), whether a compaction is due."""

    def __init__(self, collector: Collector | None = None) -> None:
        self.gc = collector if collector is not None else cast(Collector, gc)
        self.installed = False
        self.baseline = 0
        self.due = False
        self.compactions = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        # a gc.callbacks hook: the survivors of a full collection are frozen as it ends
        if phase != "stop" or info.get("generation") != 2:
            return
        self.gc.freeze()
        if self.gc.get_freeze_count() > COMPACT_GROWTH * max(self.baseline, 1):
            self.due = True

    def freeze_survivors(self) -> int:
        if not self.installed:
            self.gc.callbacks.append(self)
            self.installed = True
        self.gc.collect()  # the hook freezes the survivors
        self.gc.freeze()  # (a collector whose callbacks did not run: frozen anyway)
        self.baseline = self.gc.get_freeze_count()
        self.due = False
        return self.baseline

    def between_cycles(self) -> bool:
        if not (self.installed and self.due):
            return False
        self.gc.unfreeze()
        self.freeze_survivors()
        self.compactions += 1
        return True

    def state(self) -> dict[str, Any]:
        return {"installed": self.installed, "frozen": self.gc.get_freeze_count(),
                "baseline": self.baseline, "compactions": self.compactions}  # fmt: skip

    def release(self) -> int:
        if self.installed:
            self.gc.callbacks.remove(self)
            self.installed = False
        self.baseline, self.due = 0, False
        self.gc.unfreeze()
        return self.gc.collect()


_freezer = Freezer()


def freeze_survivors() -> int:
    """One full collection, then freeze what survived, and freeze the survivors of every
    full collection from now on. Call it once the long-lived state is built (a service's
    startup sync). Returns the frozen count."""
    return _freezer.freeze_survivors()


def between_cycles() -> bool:
    """After a cycle, outside it: compacts if due (the frozen population has doubled since
    the last compaction). Returns whether it compacted."""
    return _freezer.between_cycles()


def frozen_state() -> dict[str, Any]:
    """For measurement: whether freezing is on, the frozen count, compactions so far."""
    return _freezer.state()


def release() -> int:
    """Stop freezing and give the frozen objects back to the collector (a run's end). Returns
    what a full collection then finds: the garbage freezing held on to (plus any cyclic
    garbage made since the last collection: collect first to tell them apart)."""
    return _freezer.release()
