"""Pending workloads of one ClusterQueue, in the order the scheduler takes them.

Kueue keeps a heap per ClusterQueue (kueue-semantics §4.3): higher priority first,
then the earlier queue-order timestamp, then the UID. We keep one sorted list per
LocalQueue and pick the ClusterQueue's head among the LocalQueue heads, which gives the
same order and lets Admission Fair Sharing put the LocalQueue with the lowest usage
first without re-sorting anything when usage changes.

BestEffortFIFO parks a head that cannot be admitted in an *inadmissible* set until a
capacity event (a workload finishes or is evicted, a quota or cohort changes) moves it
back; StrictFIFO puts it straight back so it keeps blocking the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sortedcontainers import SortedList

from queues.model import Workload

OrderKey = tuple[int, float, str]


def order_key(wl: Workload) -> OrderKey:
    """Higher priority, then earlier queue-order timestamp, then UID (or name)."""
    return (-wl.priority, wl.queue_order_time, wl.tiebreak)


class PendingQueue:
    """The pending workloads of one ClusterQueue."""

    __slots__ = ("_by_lq", "_keys", "inadmissible", "sticky")

    def __init__(self) -> None:
        self._by_lq: dict[str, SortedList] = {}
        self._keys: dict[str, tuple[str, OrderKey, Workload]] = {}
        # Parked workloads (BestEffortFIFO): key -> workload.
        self.inadmissible: dict[str, Workload] = {}
        # A preemptor waiting for its victims stays the head (Kueue's "sticky" head).
        self.sticky: str | None = None

    def __len__(self) -> int:
        return len(self._keys) + len(self.inadmissible)

    def active_count(self) -> int:
        return len(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._keys or key in self.inadmissible

    def push(self, wl: Workload) -> None:
        """Add (or re-add) a workload to the active heap."""
        self.remove(wl.key)
        lq = f"{wl.namespace}/{wl.queue_name}"  # the LocalQueue's key
        key = order_key(wl)
        lst = self._by_lq.get(lq)
        if lst is None:
            lst = self._by_lq[lq] = SortedList()
        lst.add((key, wl.key))
        self._keys[wl.key] = (lq, key, wl)

    def park(self, wl: Workload) -> None:
        """Move a workload to the inadmissible set (BestEffortFIFO)."""
        self.remove(wl.key)
        self.inadmissible[wl.key] = wl

    def remove(self, key: str) -> Workload | None:
        entry = self._keys.pop(key, None)
        if entry is not None:
            lq, okey, wl = entry
            lst = self._by_lq[lq]
            lst.remove((okey, key))
            if not lst:
                del self._by_lq[lq]
            if self.sticky == key:
                self.sticky = None
            return wl
        wl = self.inadmissible.pop(key, None)
        if self.sticky == key:
            self.sticky = None
        return wl

    def requeue_inadmissible(self) -> int:
        """A capacity event: every parked workload becomes active again."""
        n = len(self.inadmissible)
        if n:
            parked = list(self.inadmissible.values())
            self.inadmissible.clear()
            for wl in parked:
                self.push(wl)
        return n

    def head(self, lq_usage: Callable[[str], float] | None = None) -> Workload | None:
        """The next workload to nominate, without removing it.

        ``lq_usage`` (admission fair sharing) maps a LocalQueue key ("ns/name") to its
        usage; the LocalQueue with the lowest usage provides the head.
        """
        if self.sticky is not None and self.sticky in self._keys:
            return self._keys[self.sticky][2]
        if not self._by_lq:
            return None
        best: tuple | None = None
        best_key = ""
        for lq, lst in self._by_lq.items():
            okey, wkey = lst[0]
            cand = (lq_usage(lq), okey) if lq_usage is not None else (0.0, okey)
            if best is None or cand < best:
                best, best_key = cand, wkey
        return self._keys[best_key][2]

    def pop_head(self, lq_usage: Callable[[str], float] | None = None) -> Workload | None:
        wl = self.head(lq_usage)
        if wl is not None:
            sticky = self.sticky
            self.remove(wl.key)
            self.sticky = sticky if sticky == wl.key else None
        return wl

    def workloads(self) -> Iterator[Workload]:
        """Active workloads in queue order (LocalQueues merged), then parked ones."""
        merged = sorted((okey, wkey) for lst in self._by_lq.values() for okey, wkey in lst)
        for _, wkey in merged:
            yield self._keys[wkey][2]
        yield from self.inadmissible.values()
