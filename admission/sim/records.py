"""What a simulated run records and returns: one record per workload, per-ClusterQueue
usage accounting, the report's time series, and the result of the run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from admission.sim.progress import LossReport, RunProgress
from admission.sim.scenario import US_PER_S, Scenario, SimWorkload
from admission.sim.sharing import EMPTY
from queues.model import ClusterQueue, TopologyAssignment


def _no_usage() -> dict[str, int]:
    return EMPTY  # shared and never written: an admission assigns a map of its own


@dataclass(slots=True)
class WorkloadRecord:
    """What happened to one workload of the scenario.

    Kept small: one exists per workload for the whole run.
    ``usage`` is the shared empty map until an admission gives it one of its own, and
    the run-progress bookkeeping exists only once the workload has run."""

    sim: SimWorkload
    cluster_queue: str | None = None
    admitted_us: int | None = None  # last admission
    first_admitted_us: int | None = None
    finished_us: int | None = None
    evictions: int = 0
    generation: int = 0  # bumped at every admission and preemption; stale finishes drop
    usage: dict[str, int] = field(default_factory=_no_usage)  # per resource, while admitted
    # podSet -> its topology assignment at the first admission (placement quality)
    placement: dict[str, TopologyAssignment] | None = None
    running: bool = False  # its admission landed (counted in its queue's usage)
    run_progress: RunProgress | None = None  # checkpoints, notices: from its first run

    @property
    def key(self) -> str:
        return self.sim.workload.key

    @property
    def progress(self) -> RunProgress:
        """Its progress across runs (checkpoints, notices), made when first needed."""
        pr = self.run_progress
        if pr is None:
            pr = self.run_progress = RunProgress()
        return pr


@dataclass(slots=True)
class QueueRecord:
    """Per-ClusterQueue accounting: current usage and its time integral, per resource."""

    name: str
    primary: str | None  # the resource usagePercent is computed on (first covered one)
    nominal: dict[str, int]  # per resource, summed over flavors
    usage: dict[str, int] = field(default_factory=dict)
    integral: dict[str, int] = field(default_factory=dict)  # units × µs
    peak: dict[str, int] = field(default_factory=dict)
    last_change_us: int = 0
    last_event_us: int = 0  # last arrival, admission or release (Kueue's last CQ event)

    def add(self, now_us: int, usage: dict[str, int], sign: int) -> None:
        dt = now_us - self.last_change_us
        cur = self.usage
        if dt:
            integral = self.integral
            for r, v in cur.items():
                if v:
                    integral[r] = integral.get(r, 0) + v * dt
            self.last_change_us = now_us
        for r, v in usage.items():
            nv = cur.get(r, 0) + sign * v
            cur[r] = nv
            if nv > self.peak.get(r, 0):
                self.peak[r] = nv
        self.last_event_us = now_us

    def settle(self, now_us: int) -> None:
        self.add(now_us, {}, 0)


@dataclass(slots=True)
class Samples:
    """Time series for the report: one column per ClusterQueue (scenario order)."""

    interval_us: int
    times_us: list[int] = field(default_factory=list)
    usage: list[list[int]] = field(default_factory=list)  # [cq][sample], primary resource
    pending: list[list[int]] = field(default_factory=list)  # [cq][sample]
    # Cohort credits per ClusterQueue (when the configuration enables them).
    credits: dict[str, list[float]] = field(default_factory=dict)


@dataclass(slots=True)
class SimResult:
    scenario: Scenario
    records: list[WorkloadRecord]
    queues: dict[str, QueueRecord]
    samples: Samples
    stats: dict[str, int]
    end_us: int
    cpu_seconds: float
    truncated: bool = False  # stopped before the scenario ran out (``stopped_by`` says why)
    livelock_breaks: int = 0
    cycle_cpu_seconds: float = 0.0  # CPU time inside schedule(), all cycles
    api_writes: int = 0  # with an API model: decision writes sent
    api_wait_seconds: float = 0.0  # ... and the simulated time they waited for tokens
    # Work lost to preemption, notices (admission.sim.progress); None when the scenario
    # has no checkpoints and the configuration no progressAwarePreemption.
    loss: LossReport | None = None
    # A run stopped early: by which limit ("maxCycles", "cpuLimit"), the simulated time
    # it had reached, and how many workloads had arrived by then.
    stopped_by: str | None = None
    stopped_at_us: int = 0
    arrived: int = 0


def workload_records(scenario: Scenario, epoch: float, *, copy: bool) -> list[WorkloadRecord]:
    """One record per scenario workload, its engine object reset to "just created" at
    ``epoch`` + its arrival. With ``copy`` the engine gets fresh objects (the scenario
    can be run again); without, the scenario's own objects are the engine's (it is
    spent by the run)."""
    if copy:
        return [
            WorkloadRecord(
                sim=dataclasses.replace(
                    s,
                    workload=dataclasses.replace(
                        s.workload,
                        admission=None,
                        admission_time=None,
                        creation_time=epoch + s.arrival_us / US_PER_S,
                    ),
                )
            )
            for s in scenario.workloads
        ]
    records = []
    for s in scenario.workloads:
        wl = s.workload
        wl.admission = None
        wl.admission_time = None
        wl.creation_time = epoch + s.arrival_us / US_PER_S
        records.append(WorkloadRecord(sim=s))
    return records


def queue_record(name: str, cq: ClusterQueue) -> QueueRecord:
    """An empty record of ``cq``: its nominal quota per resource, summed over flavors."""
    nominal: dict[str, int] = {}
    primary: str | None = None
    for g in cq.resource_groups:
        for r in g.covered_resources:
            if primary is None:
                primary = r
        for fq in g.flavors:
            for r, q in fq.resources.items():
                nominal[r] = nominal.get(r, 0) + q.nominal
    return QueueRecord(name=name, primary=primary, nominal=nominal)
