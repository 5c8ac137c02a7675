"""What a node-failure run measures, and its JSON.

Every GPU-µs a workload holds (from its admission to its release) is charged to exactly
one of:

* **useful** — the work of a run that the workload kept: saved by a checkpoint before
  an interruption, or run to its finish. A finished workload has done ``runtime`` of it;
* **lost to failures** — work since the last checkpoint (or since its run started) when
  a node failed under it: the gang restarts from its checkpoint;
* **lost to preemptions** — the same, when the scheduler preempted it;
* **lost to restarts** — GPUs held but idle: each restart's overhead (image, rendezvous,
  loading the checkpoint), the time a broken gang holds its GPUs until it is hot-swapped
  or evicted, and a gang waiting for its pods to start;
* **stranded** — saved work of a workload deactivated before it finished (it runs again
  only when a person reactivates it): reported, not counted in ``gpuHoursLost``.

``goodput`` is useful ÷ held GPU-hours (the GPU-hours the cluster gave to workloads);
``utilization`` is held ÷ the cluster's GPU-hours over the run (capacity includes the
time nodes were down). ``recoverySeconds``: for each interruption by a node failure,
the time from the failure until the workload ran again (hot swap or re-admission);
interruptions of workloads deactivated before they ran again are counted as never
recovered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

UNIT_US_PER_GPU_HOUR = 3_600_000_000


@dataclass(slots=True)
class FailureStats:
    """The totals of one run (GPU-µs unless named otherwise)."""

    gpus: int = 0
    end_us: int = 0
    held: int = 0
    useful: int = 0
    lost_failures: int = 0
    lost_preemptions: int = 0
    overhead: int = 0  # restarts: each restart's overhead
    broken_held: int = 0  # ... a broken gang holding its GPUs until hot swap or eviction
    waiting_for_pods: int = 0  # ... an admitted gang waiting for its pods to start
    stranded: int = 0
    outages: int = 0
    down: int = 0  # GPU-µs of nodes down, within the run
    interruptions: int = 0  # a running workload's node failed
    hot_swaps: int = 0
    evictions: dict[str, int] = field(default_factory=dict)  # reason -> count
    deactivated: int = 0
    deactivated_after_infra: int = 0  # ... that a node failure had interrupted
    quarantined: int = 0  # nodes cordoned (the quarantine variant)
    flaky_reports: int = 0  # the product's flaky-node reports (Event and metric)
    recoveries_us: list[int] = field(default_factory=list)
    never_recovered: int = 0
    flaky_readmissions_in_window: int = 0
    flaky_readmissions_day: int = 0
    flaky_readmissions: int = 0
    finished: int = 0
    workloads: int = 0

    def evicted(self, reason: str) -> None:
        self.evictions[reason] = self.evictions.get(reason, 0) + 1

    @property
    def lost_restarts(self) -> int:
        return self.overhead + self.broken_held + self.waiting_for_pods

    @property
    def lost(self) -> int:
        return self.lost_failures + self.lost_preemptions + self.lost_restarts

    def as_json(self) -> dict[str, Any]:
        h = UNIT_US_PER_GPU_HOUR
        capacity = self.gpus * self.end_us
        rec = sorted(self.recoveries_us)
        return {
            "gpuHoursLost": round(self.lost / h, 1),
            "gpuHoursLostBy": {
                "failures": round(self.lost_failures / h, 1),
                "restarts": round(self.lost_restarts / h, 1),
                "preemptions": round(self.lost_preemptions / h, 1),
            },
            "restartsBy": {
                "overhead": round(self.overhead / h, 1),
                "brokenGangHeld": round(self.broken_held / h, 1),
                "waitingForPods": round(self.waiting_for_pods / h, 1),
            },
            "goodput": round(self.useful / self.held, 4) if self.held else None,
            "usefulGpuHours": round(self.useful / h, 1),
            "heldGpuHours": round(self.held / h, 1),
            "strandedGpuHours": round(self.stranded / h, 1),
            "utilization": round(self.held / capacity, 4) if capacity else None,
            "jobsDeactivated": self.deactivated,
            "jobsDeactivatedAfterInfraEvictions": self.deactivated_after_infra,
            "readmissionsOntoFlakyNode": self.flaky_readmissions_in_window,
            "readmissionsOntoFlakyNodeWithin24h": self.flaky_readmissions_day,
            "readmissionsOntoFlakyNodeAnyTime": self.flaky_readmissions,
            "recoverySeconds": {
                "p50": _pct(rec, 50),
                "p99": _pct(rec, 99),
                "max": round(rec[-1] / 1e6, 1) if rec else None,
                "recovered": len(rec),
                "neverRecovered": self.never_recovered,
            },
            "outages": self.outages,
            "nodeDownGpuHours": round(self.down / h, 1),
            "flakyNodeReports": self.flaky_reports,
            "nodesQuarantined": self.quarantined,
            "interruptions": self.interruptions,
            "hotSwaps": self.hot_swaps,
            "evictions": dict(sorted(self.evictions.items())),
            "finished": self.finished,
            "workloads": self.workloads,
            "makespanHours": round(self.end_us / 3.6e9, 2),
        }


def _pct(sorted_us: list[int], p: float) -> float | None:
    """Nearest-rank percentile, in seconds."""
    if not sorted_us:
        return None
    i = max(0, math.ceil(p / 100 * len(sorted_us)) - 1)
    return round(sorted_us[i] / 1e6, 1)
