"""Queue positions of ``plan``'s pending workloads, as the visibility API reports them.

After the plan's cycles, each pending workload has a place in its ClusterQueue and in
its LocalQueue: the order the next cycles take heads in (priority, then creation time;
:mod:`admission.serve.queueview`, which the live visibility API serves from). ``plan``
adds both to its ``pending`` entries, so the offline answer carries the same numbers
``kubectl get --raw .../pendingworkloads`` gives on the cluster (docs/semantics.md §5.5).
"""

from __future__ import annotations

from typing import Any

from admission.serve.queueview import positions

__all__ = ["add_positions"]


def add_positions(doc: dict[str, Any], cache: Any) -> None:
    """Set ``positionInClusterQueue`` and ``positionInLocalQueue`` (0-based, as Kueue's
    ``PendingWorkload``) on every entry of ``doc["pending"]`` that waits in a queue."""
    if cache is None:
        return
    wanted = {p["clusterQueue"] for p in doc["pending"] if p.get("clusterQueue")}
    found: dict[str, tuple[int, int]] = {}
    for cq in sorted(wanted):
        for entry in positions(cache, cq):
            found[entry.workload.key] = (
                entry.position_in_cluster_queue,
                entry.position_in_local_queue,
            )
    for p in doc["pending"]:
        place = found.get(p["workload"])
        if place is not None:
            p["positionInClusterQueue"], p["positionInLocalQueue"] = place
