"""Training progress in the simulator: checkpoints, lost work and notice time.

A scenario workload with a checkpoint interval (``SimWorkload.checkpoint_interval_us``)
saves its progress every interval of run time, each checkpoint up to ±jitter off (a
deterministic function of the workload's name and the checkpoint's index, so a run is
a pure function of its inputs). It reports each checkpoint to the engine
(``Cache.progress``) as a training loop would set the annotation, and when it is
readmitted after an eviction it resumes from its last checkpoint. A workload without
an interval reruns from the start (Kueue's runner semantics).

For every eviction the work lost since the last checkpoint (or since the run started)
is recorded: the workload's units of the lost-work resources (the GPUs) × that time.
For every notice, how long the victim ran on after it, and whether it then yielded
with a checkpoint or ran out its deadline (that wait bought nothing: *wasted notice
time*).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from admission.engine.preemption.checkpoint import DEFAULT_LOST_WORK_RESOURCES

SIM_SOURCE = "simulator"


@dataclass(slots=True)
class RunProgress:
    """One workload's progress across its runs."""

    saved_us: int = 0  # work saved by its last checkpoint (what a rerun resumes from)
    run_start_us: int | None = None  # when the current run started (admission landed)
    run_base_us: int = 0  # work already done when the current run started
    last_checkpoint_us: int | None = None  # simulated time of the last checkpoint, this run
    checkpoints: int = 0  # checkpoints taken so far, all runs (indexes the jitter)
    noticed_us: int | None = None  # a notice in flight: when it was given


@dataclass(slots=True)
class LossReport:
    """Totals of a run (``SimResult.loss``)."""

    resources: tuple[str, ...] = DEFAULT_LOST_WORK_RESOURCES
    evictions: int = 0
    lost_unit_us: int = 0  # Σ units × µs lost
    notices: int = 0
    yielded: int = 0  # noticed victims that checkpointed and were evicted early
    notice_wait_us: int = 0  # Σ time noticed victims ran on after their notice
    wasted_notice_us: int = 0  # ... of which victims that ran out their deadline
    deactivated: int = 0  # requeue policy: deactivated after a preemption
    preemptors: set[str] = field(default_factory=set)

    def as_json(self) -> dict[str, Any]:
        return {
            "resources": list(self.resources),
            "evictions": self.evictions,
            "gpuHoursLost": round(self.lost_unit_us / 3.6e9, 3),
            "notices": self.notices,
            "yieldedOnCheckpoint": self.yielded,
            "noticeWaitSeconds": round(self.notice_wait_us / 1e6, 3),
            "wastedNoticeSeconds": round(self.wasted_notice_us / 1e6, 3),
            "deactivated": self.deactivated,
        }


def checkpoint_offset(key: str, index: int, interval_us: int, jitter_us: int) -> int:
    """Run time between checkpoint ``index`` and the one before it: the interval,
    ±jitter (deterministic per workload and index), never below 1 µs."""
    if not jitter_us:
        return interval_us
    h = zlib.crc32(f"{key}#{index}".encode())
    return max(1, interval_us + (h % (2 * jitter_us + 1)) - jitter_us)


def units(usage: dict[str, int], resources: tuple[str, ...]) -> int:
    """Units of the lost-work resources an admission holds (per resource totals)."""
    return sum(v for r, v in usage.items() if r in resources)
