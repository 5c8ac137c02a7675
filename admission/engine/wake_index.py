"""The wake index of deficit-bounded parking (``parkUntilFeasible``).

``admission.engine.preemption.feasibility`` works out why a parked head cannot be admitted before
enough quota is freed (its *evidence*: usage thresholds on nodes of the cohort tree);
this index keeps the parked heads by those thresholds, so that a release wakes exactly
the heads it may help, and by the own priorities they could preempt, so that an
admission into their ClusterQueue of a workload they could preempt wakes them too.
It sits below the cache, which feeds it releases and admissions.

A ticket parked with its *demand* (the exact usage its head would take: one podSet, one
flavor) is not woken by the release that reaches its threshold: it becomes *eligible*,
and the next cycle decides, before it takes its heads, which eligible heads to wake
(``QueueManager.settle_wakes``): in the cycle's own order, those that still fit once
the ones before them are charged. A release in a full tree makes every small head
eligible at once, and only the first few of them can have what it frees.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from queues.model import LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER, FlavorResource
from queues.quota_node import QuotaNode

Evidence = list[tuple[QuotaNode, FlavorResource, int]]
"""Per blocked flavor, for one pair of it: (node, pair, threshold) — the head may only
be admitted once that node's usage of the pair has fallen to the threshold (any one)."""
Demand = dict[FlavorResource, int]  # what a parked head requests, per flavor and resource

NEVER_ADMISSIBLE = float("inf")
COMPACT_SLACK = 4096  # parks between compactions, beyond the live tickets


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

    __slots__ = (
        "_heaps",
        "_tickets",
        "_own",
        "_next",
        "_since",
        "_budget",
        "_entries",
        "_alive",
        "_meta",
        "_eligible",
    )

    def __init__(self, alive: Callable[[int, str], bool]) -> None:
        self._heaps: dict[tuple[QuotaNode, FlavorResource], list[tuple[int, int]]] = {}
        self._tickets: dict[int, str] = {}  # live ticket -> its ClusterQueue
        # ClusterQueue -> highest own priority a head could preempt -> tickets
        self._own: dict[str, dict[float, set[int]]] = {}
        # ticket -> (ClusterQueue, evidence, own key, demand), while live or eligible
        self._meta: dict[int, tuple[str, Evidence, float, Demand | None]] = {}
        # tickets with a demand whose threshold a release reached: the next cycle decides
        self._eligible: dict[int, str] = {}
        self._next = 0
        self._since = 0  # tickets made since the last compaction
        self._budget = COMPACT_SLACK  # how many more before the next: live ones then, plus this
        self._entries = 0
        self._alive = alive  # (ticket, ClusterQueue) -> does the queue still hold it

    def __len__(self) -> int:
        return len(self._tickets)

    def park(self, cq: str, evidence: Evidence, own: float, demand: Demand | None = None) -> int:
        """A new ticket for a head parked in ``cq`` with ``evidence``; ``own``: the
        highest own priority it could preempt (-inf: none); ``demand``: the usage its
        head takes if admitted, when that is certain (None: woken at once when reached)."""
        self._since += 1
        if self._since > self._budget:
            # amortised: after at least as many parks as live tickets; before the new
            # ticket is filed, as its queue holds nothing with it yet
            self._compact()
        self._next += 1
        ticket = self._next
        self._meta[ticket] = (cq, evidence, own, demand)
        self._file(ticket, cq, evidence, own)
        return ticket

    def _file(self, ticket: int, cq: str, evidence: Evidence, own: float) -> None:
        self._tickets[ticket] = cq
        heaps = self._heaps
        push = heapq.heappush
        for node, fr, threshold in evidence:
            heap = heaps.get((node, fr))
            if heap is None:
                heap = heaps[node, fr] = []
            push(heap, (-threshold, ticket))
        self._entries += len(evidence)
        if own != -NEVER_ADMISSIBLE:
            self._own.setdefault(cq, {}).setdefault(own, set()).add(ticket)

    def demand(self, ticket: int) -> Demand | None:
        meta = self._meta.get(ticket)
        return None if meta is None else meta[3]

    def reached(self, ticket: int) -> bool:
        """Has the usage of some node fallen to one of the ticket's thresholds?"""
        meta = self._meta.get(ticket)
        if meta is None:
            return False
        for node, fr, threshold in meta[1]:  # (a loop, not any(): asked per eligible ticket)
            if node.usage.get(fr, 0) <= threshold:
                return True
        return False

    def take_eligible(self) -> dict[int, str]:
        """The eligible tickets (and their ClusterQueues); each must be woken,
        :meth:`defer`-red, :meth:`refile`-d or :meth:`forget`-ten."""
        out, self._eligible = self._eligible, {}
        return out

    def has_eligible(self) -> bool:
        return bool(self._eligible)

    def is_eligible(self, ticket: int) -> bool:
        return ticket in self._eligible

    def defer(self, ticket: int, cq: str) -> None:
        """Still eligible: decided again by the next cycle."""
        self._eligible[ticket] = cq

    def undefer(self, ticket: int) -> None:
        self._eligible.pop(ticket, None)

    def refile(self, ticket: int) -> None:
        """No threshold is reached any more: parked again, with the same entries."""
        cq, evidence, own, _ = self._meta[ticket]
        self._file(ticket, cq, evidence, own)  # (entries still filed are doubled until
        self._since += 1  # the next compaction, at a park, which drops the doubles)

    def forget(self, ticket: int) -> None:
        """Woken (or gone): no longer tracked."""
        self._meta.pop(ticket, None)

    def released(
        self, path: Iterable[QuotaNode], frs: Iterable[FlavorResource] | None
    ) -> list[tuple[int, str]]:
        """Usage of ``frs`` (None: of anything) fell on the nodes of ``path``: the
        tickets (and their ClusterQueues) whose threshold it reached, to wake now; those
        with a demand become eligible instead (:meth:`take_eligible`)."""
        out: list[tuple[int, str]] = []
        heaps = self._heaps
        tickets = self._tickets
        meta = self._meta
        eligible = self._eligible
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
                    if cq is None:
                        continue
                    m = meta.get(ticket)
                    if m is not None and m[3] is not None:
                        eligible[ticket] = cq
                    else:
                        meta.pop(ticket, None)
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
                live = self._tickets.pop(ticket, None) is not None
                if live or self._eligible.pop(ticket, None) is not None:
                    self._meta.pop(ticket, None)
                    out.append((ticket, cq))
        return out

    def clear(self) -> None:
        """Everything was woken (a spec change): no ticket is live."""
        self._heaps.clear()
        self._tickets.clear()
        self._own.clear()
        self._meta.clear()
        self._eligible.clear()
        self._entries = 0
        self._since, self._budget = 0, COMPACT_SLACK

    def _compact(self) -> None:
        alive = self._alive
        self._tickets = {t: cq for t, cq in self._tickets.items() if alive(t, cq)}
        self._since, self._budget = 0, len(self._tickets) + COMPACT_SLACK
        live = self._tickets
        eligible = self._eligible
        self._meta = {t: m for t, m in self._meta.items() if t in live or t in eligible}
        self._entries = 0
        for key, heap in list(self._heaps.items()):
            kept = [e for e in set(heap) if e[1] in live]
            if kept:
                heapq.heapify(kept)
                self._heaps[key] = kept
                self._entries += len(kept)
            else:
                del self._heaps[key]
        tracked = live.keys() | eligible.keys()  # (once: not per queue and priority)
        for cq, by_prio in list(self._own.items()):
            for prio, tickets in list(by_prio.items()):
                tickets.intersection_update(tracked)
                if not tickets:
                    del by_prio[prio]
            if not by_prio:
                del self._own[cq]
