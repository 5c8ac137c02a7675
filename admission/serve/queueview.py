"""The live pending queues as an operator sees them: every pending workload of a
ClusterQueue in the order the scheduler will take them, with its positions.

Kueue's visibility API answers from ``ClusterQueue.Snapshot()``
(``pkg/cache/queue/cluster_queue.go``): *all* pending workloads of the ClusterQueue —
those the scheduler may nominate and those parked as inadmissible — sorted together by
the queue's comparison: with admission fair sharing, the LocalQueue with the lower usage
first; then the sticky head (a preemptor waiting for its victims); then higher
priority, earlier queue-order timestamp, UID. ``positionInClusterQueue`` is the index
in that order and ``positionInLocalQueue`` the index among the workloads of the same
LocalQueue (``pkg/visibility/storage/pending_workloads_cq.go``).

This module computes the same from the engine's ``Cache`` (its ``PendingQueue`` per
ClusterQueue uses the same order key, :func:`queues.pending.order_key`), so the
visibility endpoints and the dashboard answer exactly what the scheduler holds. It
reads, never writes; callers make sure no scheduling cycle runs meanwhile
(``Controller.cache_ready``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from admission.engine.cache import Cache
from queues.model import Workload
from queues.pending import order_key

LqUsage = Callable[[str], float] | None
"""Admission fair sharing: LocalQueue key ("ns/name") -> usage, or None when off."""


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """One pending workload and where it stands."""

    workload: Workload
    cluster_queue: str
    position_in_cluster_queue: int
    position_in_local_queue: int
    parked: bool  # inadmissible until a capacity event (BestEffortFIFO)

    @property
    def local_queue(self) -> str:
        return self.workload.queue_name


def ordered_pending(
    cache: Cache, cluster_queue: str, *, lq_usage: LqUsage = None
) -> list[Workload]:
    """Every pending workload of ``cluster_queue`` in the scheduler's order (empty when
    the ClusterQueue has no queue)."""
    q = cache.queues.get(cluster_queue)
    if q is None:
        return []
    sticky = q.sticky

    def key(wl: Workload) -> tuple:
        usage = lq_usage(f"{wl.namespace}/{wl.queue_name}") if lq_usage is not None else 0.0
        return (usage, wl.key != sticky, *order_key(wl))

    return sorted(q.workloads(), key=key)


def positions(
    cache: Cache, cluster_queue: str, *, lq_usage: LqUsage = None
) -> Iterator[PendingEntry]:
    """:func:`ordered_pending` with both positions, lazily (callers page through it)."""
    q = cache.queues.get(cluster_queue)
    if q is None:
        return
    in_lq: dict[str, int] = {}
    for index, wl in enumerate(ordered_pending(cache, cluster_queue, lq_usage=lq_usage)):
        lq = f"{wl.namespace}/{wl.queue_name}"
        lq_pos = in_lq.get(lq, 0)
        in_lq[lq] = lq_pos + 1
        yield PendingEntry(wl, cluster_queue, index, lq_pos, q.is_parked(wl.key))
