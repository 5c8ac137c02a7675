"""Preemption that respects training progress (our extension; off unless configured).

When a high-priority workload preempts a training gang, everything the gang computed
since its last checkpoint is lost: its accelerators × the time since that checkpoint.
The ``progressAwarePreemption`` section of the Configuration (``admission.config.schema``)
turns on any of four rules; with none configured the engine is Kueue's, unchanged.

* **Lost-work victim choice** (``victimOrder: LostWork``). Among the candidates Kueue's
  rules allow, the engine runs Kueue's own search (greedy removal in candidate order,
  then fill-back) with three orders inside each priority tier — Kueue's (most recently
  admitted first), least lost work first, and least lost work per accelerator first —
  and keeps the victim set that loses the least work. The priority tiers, the
  own-ClusterQueue-last rule and the fill-back are Kueue's in every order, so a
  higher-priority workload is never taken to save work and no victim is taken that is
  not needed. *Lost work* is Σ weight × age: the weight is the workload's units of the
  ``lostWorkResources`` (default the GPU resources; a workload holding none weighs its
  pod count), the age is the time since its last checkpoint or, if later, its
  admission. **A workload that reports nothing gains nothing from hiding** (Kueue
  #477): its checkpoint is assumed to be the later of its admission and the median
  checkpoint of the admitted workloads that do report, and it loses ties against
  workloads that report.
* **Notice window** (``noticeWindow``, per ClusterQueue of the victim, with a global
  default). A victim is first *noticed*: it keeps its quota (so the preemptor's is
  reserved: nobody else can take it) and is evicted by the driver at the deadline, or
  as soon as it reports a checkpoint newer than the notice. A victim that finishes
  meanwhile just finishes. A notice is never given twice (the victim stays in
  ``Cache.evicting`` until its eviction completes).
* **Minimum runtime** (``minimumRuntime``, per ClusterQueue of the candidate): a
  workload admitted less than that long ago is no candidate for reclaim or fair-sharing
  preemption from other ClusterQueues; priority preemption within its own ClusterQueue
  still may take it unless ``minimumRuntimeWithinClusterQueue: true``.
* **Requeue after preemption** (``requeuingStrategy``, Kueue's shape, per LocalQueue
  or ClusterQueue): exponential backoff between preemption-driven requeues
  (``backoffBaseSeconds``·2^(n−1), at most ``backoffMaxSeconds``), and past
  ``backoffLimitCount`` requeues the workload is deactivated; ``backoffLimitCount: 0``
  is "never requeue after preemption".

Drivers report progress into :class:`ProgressBook` (``Cache.progress``): checkpoints per
source (the Workload, the job, each pod) and notices in flight; they ask it which
noticed victims are due for eviction.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from admission.engine.progress import WORKLOAD_SOURCE, Notice, ProgressBook
from queues.api.progress import format_time
from queues.backoff import BackoffPolicy

if TYPE_CHECKING:
    from admission.engine.cache import Cache
    from queues.model import Workload

__all__ = ["WORKLOAD_SOURCE", "Notice", "ProgressBook"]  # kept here too (progress.py)


class Keyed(Protocol):
    """What the lost-work choice reads of a preemption target (``preemption.Target``);
    a protocol, so this module imports nothing above it."""

    @property
    def key(self) -> str: ...


T = TypeVar("T", bound=Keyed)

DEFAULT_LOST_WORK_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
MAX_NOTICE_SECONDS = 86_400.0  # a notice window is bounded: one day at most
LOST_WORK = "LostWork"
KUEUE_ORDER = "Kueue"


# -- policy ---------------------------------------------------------------------------


class RequeueDecision(NamedTuple):
    """What to do with a workload whose preemption-driven eviction completes."""

    deactivate: bool
    requeue_count: int  # requeueState.count after this eviction
    requeue_at: float | None  # when it may be queued again (None: at once / never)
    message: str


@dataclass(frozen=True, slots=True)
class RequeuePolicy:
    """Kueue's ``requeuingStrategy`` shape, applied to preemption-driven requeues."""

    backoff_base: float = 60.0
    backoff_max: float = 3600.0
    backoff_limit: int | None = None  # None: requeue forever; 0: never requeue

    def after_preemption(self, previous_count: int, now: float) -> RequeueDecision:
        count = previous_count + 1
        if self.backoff_limit is not None and count > self.backoff_limit:
            why = (
                "requeuing after preemption is disabled (backoffLimitCount: 0)"
                if self.backoff_limit == 0
                else f"preempted {count} times, past backoffLimitCount {self.backoff_limit}"
            )
            return RequeueDecision(True, count, None, f"deactivated: {why}")
        delay = BackoffPolicy(base=self.backoff_base, cap=self.backoff_max).requeue_delay(count)
        return RequeueDecision(
            False,
            count,
            now + delay,
            f"requeue #{count} after preemption at {format_time(now + delay)} (backoff {delay:g}s)",
        )


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """The rules that apply to one ClusterQueue's workloads."""

    notice: float = 0.0  # seconds; 0: evict at once (Kueue)
    minimum_runtime: float = 0.0
    minimum_runtime_within_cq: bool = False
    requeue: RequeuePolicy | None = None


@dataclass(frozen=True, slots=True)
class ProgressPolicy:
    """The whole ``progressAwarePreemption`` section, resolved per queue."""

    victim_order: str = KUEUE_ORDER
    resources: tuple[str, ...] = DEFAULT_LOST_WORK_RESOURCES
    default: QueuePolicy = field(default_factory=QueuePolicy)
    cluster_queues: Mapping[str, QueuePolicy] = field(default_factory=dict)
    local_queues: Mapping[str, RequeuePolicy] = field(default_factory=dict)

    @property
    def lost_work(self) -> bool:
        return self.victim_order == LOST_WORK

    def for_cq(self, name: str) -> QueuePolicy:
        return self.cluster_queues.get(name, self.default)

    def requeue_for(self, wl: Workload, cq: str | None) -> RequeuePolicy | None:
        """LocalQueue's policy, else its ClusterQueue's, else the global one."""
        lq = self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        if lq is not None:
            return lq
        return (self.for_cq(cq) if cq is not None else self.default).requeue

    @property
    def has_notices(self) -> bool:
        return self.default.notice > 0 or any(p.notice > 0 for p in self.cluster_queues.values())


# -- lost work ------------------------------------------------------------------------------


class LostWork:
    """Lost work of admitted workloads at one instant (see the module docstring)."""

    def __init__(self, cache: Cache, policy: ProgressPolicy, now: float) -> None:
        self.cache = cache
        self.resources = policy.resources
        self.now = now
        reported = []
        book = cache.progress
        for key in book.checkpoints:
            if key in cache.admitted:
                c = book.checkpoint(key)
                if c is not None:
                    reported.append(c)
        self.median = statistics.median(reported) if reported else None
        self._memo: dict[str, tuple[float, bool]] = {}

    def weight(self, key: str) -> int:
        units = 0
        for (_flavor, res), v in self.cache.usage_of.get(key, {}).items():
            if res in self.resources:
                units += v
        if units:
            return units
        wl = self.cache.workloads.get(key)
        return sum(ps.count for ps in wl.pod_sets) if wl is not None else 1

    def since(self, key: str) -> tuple[float, bool]:
        """(the checkpoint lost work counts from, whether it was reported)."""
        start = self._start(key)
        c = self.cache.progress.checkpoint(key)
        if c is not None:
            return max(start, c), True
        if self.median is not None:
            return max(start, self.median), False
        return start, False

    def age(self, key: str) -> float:
        return max(0.0, self.now - self.since(key)[0])

    def of(self, key: str) -> tuple[float, bool]:
        """(lost work in unit-seconds, reported)."""
        got = self._memo.get(key)
        if got is None:
            since, reported = self.since(key)
            got = (self.weight(key) * max(0.0, self.now - since), reported)
            self._memo[key] = got
        return got

    def total(self, keys: Iterable[str]) -> float:
        return sum(self.of(k)[0] for k in keys)

    def describe(self, key: str) -> str:
        since, reported = self.since(key)
        age = max(0.0, self.now - since)
        w = self.weight(key)
        what = (
            "since its last checkpoint"
            if reported
            else (
                "since the median checkpoint of the workloads that report (it reports none)"
                if self.median is not None and since > self._start(key)
                else "since its admission (it reports no checkpoint)"
            )
        )
        return f"{w} × {_duration(age)} {what} = {_hours(w * age)} unit-hours"

    def _start(self, key: str) -> float:
        wl = self.cache.workloads.get(key)
        t = wl.admission_time if wl is not None else None
        return self.now if t is None else t


def _hours(unit_seconds: float) -> str:
    return f"{unit_seconds / 3600:.2f}"


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


# -- the engine's hooks ---------------------------------------------------------------------


# Tried in this order; on equal lost work the earlier wins (so ties between sets go to
# the lost-work order, whose tie-break puts silent workloads first).
ORDERS = ("lostWork", "lostWorkPerUnit", KUEUE_ORDER)


class ProgressAware:
    """What the preemptor and the scheduler consult when the section is configured.

    It holds no scheduling state of its own besides, per search, the order being tried
    and the lost-work figures of the last choice (for the victims' messages)."""

    def __init__(self, cache: Cache, policy: ProgressPolicy, clock: Callable[[], float]) -> None:
        self.cache = cache
        self.policy = policy
        self.clock = clock
        self.order: str = KUEUE_ORDER
        self._lost: LostWork | None = None
        # preemptor key -> (lost work of the chosen set, of Kueue's set)
        self.choices: dict[str, tuple[float, float]] = {}

    # minimum runtime
    def protected(self, cand: Workload, cand_cq: str, preemptor_cq: str) -> bool:
        """A candidate admitted less than its ClusterQueue's minimumRuntime ago."""
        p = self.policy.for_cq(cand_cq)
        if p.minimum_runtime <= 0 or cand.admission_time is None:
            return False
        if cand_cq == preemptor_cq and not p.minimum_runtime_within_cq:
            return False  # priority preemption within the ClusterQueue overrides it
        return self.clock() - cand.admission_time < p.minimum_runtime

    # victim order
    def lost_work(self) -> LostWork:
        """The figures of the last search (the same instant), or fresh ones."""
        lw = self._lost
        if lw is None or lw.now != self.clock():
            lw = self._lost = LostWork(self.cache, self.policy, self.clock())
        return lw

    def order_key(self, key: str) -> tuple:
        """The part of the candidate order that replaces Kueue's recency tie-break
        (after priority) while a lost-work order is being tried."""
        lost, reported = self.lost_work().of(key)
        if self.order == "lostWorkPerUnit":
            lost = lost / max(1, self.lost_work().weight(key))
        return (lost, reported)

    def choose(self, preemptor: Workload, search: Callable[[], list[T]]) -> list[T]:
        """Run ``search`` once per order; keep the set that loses the least work
        (Kueue's on a tie)."""
        if not self.policy.lost_work:
            return search()
        # Fresh figures per search: admissions and evictions since the last one change
        # the median and the admissions (plan's clock never moves).
        lw = self._lost = LostWork(self.cache, self.policy, self.clock())
        best: list[T] | None = None
        best_lost = kueue_lost = 0.0
        try:
            for order in ORDERS:
                self.order = order
                found = search()
                if not found:
                    # every order removes the same candidates before giving up: when
                    # one finds no set, none does
                    return found
                lost = lw.total(t.key for t in found)
                if order == KUEUE_ORDER:
                    kueue_lost = lost
                if best is None or lost < best_lost:
                    best, best_lost = found, lost
        finally:
            self.order = KUEUE_ORDER
        if len(self.choices) > 4096:  # only read right after the search: keep it small
            self.choices.clear()
        self.choices[preemptor.key] = (best_lost, kueue_lost)
        return best or []

    def explain(self, preemptor: Workload, victim: str) -> str:
        """Why this victim (appended to its Preempted message)."""
        if not self.policy.lost_work:
            return ""
        lw = self.lost_work()
        chosen, kueue = self.choices.get(preemptor.key, (None, None))
        text = f"; chosen for the least lost work: {lw.describe(victim)}"
        if chosen is not None and kueue is not None:
            text += (
                f"; the victims chosen lose {_hours(chosen)} unit-hours, Kueue's order "
                f"would lose {_hours(kueue)}"
            )
        return text

    # notice window
    def notice_deadline(self, victim_cq: str) -> float | None:
        seconds = self.policy.for_cq(victim_cq).notice
        return self.clock() + seconds if seconds > 0 else None

    def waiting_message(self, targets: Sequence[Keyed], issued: Mapping[str, float]) -> str:
        """The preemptor's pending message while noticed victims run out their window."""
        book = self.cache.progress
        deadlines = [
            issued.get(t.key) or (n.deadline if (n := book.notices.get(t.key)) else None)
            for t in targets
        ]
        known = [d for d in deadlines if d is not None]
        if not known:
            return ""
        noticed = sum(1 for d in deadlines if d is not None)
        return (
            f"; waiting for {noticed} noticed victim(s) to checkpoint or reach their "
            f"eviction deadline, at the latest {format_time(max(known))}"
        )
