"""The wake index of deficit-bounded parking (``parkUntilFeasible``).

``admission.engine.preemption.feasibility`` works out why a parked head cannot be admitted before
enough quota is freed (its *evidence*: usage thresholds on nodes of the cohort tree);
this index keeps the parked heads by those thresholds, so that a release wakes exactly
the heads it may help, and by the own priorities they could preempt, so that an
admission into their ClusterQueue of a workload they could preempt wakes them too.
It sits below the cache, which feeds it releases and admissions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from queues.model import LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER, FlavorResource
from queues.quota_node import QuotaNode

Evidence = list[tuple[QuotaNode, FlavorResource, int]]
"""Per blocked flavor, for one pair of it: (node, pair, threshold) — the head may only
be admitted once that node's usage of the pair has fallen to the threshold (any one)."""

NEVER_ADMISSIBLE = float("inf")


def own_key(within: str, priority: int) -> float:
    """The highest priority of an own workload a head of ``priority`` may preempt."""
    if within == NEVER:
        return -NEVER_ADMISSIBLE
    if within == LOWER_PRIORITY:
        return priority - 1
    if within == LOWER_OR_NEWER_EQUAL_PRIORITY:
        return priority
    return NEVER_ADMISSIBLE  # any other policy: count everything


class WakeIndex:
    """Parked heads by the usage that would let them in, and by the own admissions
    that could.

    An evidence entry ``(node, fr, threshold)`` waits in a heap per ``(node, fr)``,
    highest threshold first; after a release in a ClusterQueue, the heaps of the nodes
    on its path give up exactly the entries whose threshold the node's usage has
    fallen to (O(log n) each, nothing for the others), and their tickets are handed
    back once each. A ticket whose bound counts on the ClusterQueue's own preemptable
    workloads is also filed under the highest own priority it could preempt: an
    admission (or priority change) of such a workload in that ClusterQueue wakes it.
    Tickets whose heads were woken otherwise (an arrival in their group, a later park
    of the same group) are dropped when their entries come up, or when the index is
    compacted (after as many new tickets as there were, plus 4,096: amortised O(1) per
    park, and memory bounded by the parked heads, not by the parks of a long run)."""

    __slots__ = ("_heaps", "_tickets", "_own", "_next", "_since", "_budget", "_entries", "_alive")

    def __init__(self, alive: Callable[[int, str], bool]) -> None:
        self._heaps: dict[tuple[QuotaNode, FlavorResource], list[tuple[int, int]]] = {}
        self._tickets: dict[int, str] = {}  # live ticket -> its ClusterQueue
        # ClusterQueue -> highest own priority a head could preempt -> tickets
        self._own: dict[str, dict[float, list[int]]] = {}
        self._next = 0
        self._since = 0  # tickets made since the last compaction
        self._budget = 4096  # how many more before the next: live ones then, plus 4,096
        self._entries = 0
        self._alive = alive  # (ticket, ClusterQueue) -> does the queue still hold it

    def __len__(self) -> int:
        return len(self._tickets)

    def park(self, cq: str, evidence: Evidence, own: float) -> int:
        """A new ticket for a head parked in ``cq`` with ``evidence``; ``own``: the
        highest own priority it could preempt (-inf: none)."""
        self._next += 1
        ticket = self._next
        self._tickets[ticket] = cq
        for node, fr, threshold in evidence:
            heapq.heappush(self._heaps.setdefault((node, fr), []), (-threshold, ticket))
            self._entries += 1
        if own != -NEVER_ADMISSIBLE:
            self._own.setdefault(cq, {}).setdefault(own, []).append(ticket)
        self._since += 1
        if self._since > self._budget:
            self._compact()  # amortised: after at least as many parks as live tickets
        return ticket

    def released(
        self, path: Iterable[QuotaNode], frs: Iterable[FlavorResource] | None
    ) -> list[tuple[int, str]]:
        """Usage of ``frs`` (None: of anything) fell on the nodes of ``path``: the
        tickets (and their ClusterQueues) whose threshold it reached."""
        out: list[tuple[int, str]] = []
        heaps = self._heaps
        tickets = self._tickets
        for node in path:
            keys = (
                [(node, fr) for fr in frs]
                if frs is not None
                else [k for k in heaps if k[0] is node]
            )
            for key in keys:
                heap = heaps.get(key)
                if not heap:
                    continue
                used = node.usage.get(key[1], 0)
                while heap and -heap[0][0] >= used:
                    _, ticket = heapq.heappop(heap)
                    self._entries -= 1
                    cq = tickets.pop(ticket, None)
                    if cq is not None:
                        out.append((ticket, cq))
        return out

    def admitted(self, cq: str, priority: int) -> list[tuple[int, str]]:
        """A workload of ``priority`` now holds quota in ``cq``: the tickets of heads
        there that could preempt it (their bound counted on its absence)."""
        by_prio = self._own.get(cq)
        if not by_prio:
            return []
        out = []
        for key in [k for k in by_prio if k >= priority]:
            for ticket in by_prio.pop(key):
                if self._tickets.pop(ticket, None) is not None:
                    out.append((ticket, cq))
        return out

    def clear(self) -> None:
        """Everything was woken (a spec change): no ticket is live."""
        self._heaps.clear()
        self._tickets.clear()
        self._own.clear()
        self._entries = 0
        self._since, self._budget = 0, 4096

    def _compact(self) -> None:
        alive = self._alive
        self._tickets = {t: cq for t, cq in self._tickets.items() if alive(t, cq)}
        self._since, self._budget = 0, len(self._tickets) + 4096
        live = self._tickets
        self._entries = 0
        for key, heap in list(self._heaps.items()):
            kept = [e for e in heap if e[1] in live]
            if kept:
                heapq.heapify(kept)
                self._heaps[key] = kept
                self._entries += len(kept)
            else:
                del self._heaps[key]
        for cq, by_prio in list(self._own.items()):
            for prio, lst in list(by_prio.items()):
                lst[:] = [t for t in lst if t in live]
                if not lst:
                    del by_prio[prio]
            if not by_prio:
                del self._own[cq]
