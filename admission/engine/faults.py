"""What a cycle does with a head it fails on: that one workload waits, its ClusterQueue is
inactive saying why, and every other head of the cycle is decided as usual.

The engine's inputs are checked at the edges (webhooks, the loader), but one object the
checks missed, or a defect, must not stop admission for the whole cluster: a cycle that
raised for one head would raise again on every retry and every restart. The
ClusterQueue stays inactive until the objects change (the cache recomputes which queues
are inactive on every structural change), so it is retried then."""

from __future__ import annotations

import logging

from admission.engine.cache import Cache
from admission.engine.messages import cluster_queue_inactive
from admission.engine.ordering import Entry
from admission.engine.queue_manager import PendingStatus
from admission.engine.vocabulary import PendingReason

log = logging.getLogger("quartermaster.engine")


def cannot_evaluate(cache: Cache, e: Entry, err: Exception) -> None:
    """Mark head ``e`` pending and its ClusterQueue inactive with ``err`` as the reason."""
    why = f"evaluating workload {e.workload.key} failed: {type(err).__name__}: {err}"
    log.error("ClusterQueue %s: %s", e.cluster_queue, why, exc_info=err)
    status = PendingStatus(
        PendingReason.MISCONFIGURED, cluster_queue_inactive(e.cluster_queue, why)
    )
    e.assignment, e.targets, e.status = None, [], status
    e.park_even_if_strict = True
    cache.inactive[e.cluster_queue] = status
