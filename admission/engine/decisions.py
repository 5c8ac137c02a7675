"""What a scheduling cycle decides.

Per head, processing it against the cycle's snapshot ends in one :data:`Outcome` (admit,
wait for victims, or stay pending), which the cycle commits to the cache after the last
head. Per cycle, a :class:`CycleResult` holds the decisions the drivers apply: the
admissions to write, the preemptions to issue, and why each head left pending waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from admission.engine.queue_manager import PendingStatus
from queues.model import Admission, FlavorResource, Workload


@dataclass(slots=True)
class AdmittedDecision:
    workload: Workload
    cluster_queue: str
    admission: Admission
    cycle: int
    # The AdmissionChecks this reservation must pass before the workload is admitted
    # (admission.engine.admission_checks); empty: it is admitted at once.
    checks: tuple[str, ...] = ()


@dataclass(slots=True)
class PreemptedDecision:
    workload: Workload
    cluster_queue: str
    by: str
    reason: str
    message: str
    cycle: int
    # Progress-aware preemption: the victim is noticed and evicted by this deadline
    # (or when it checkpoints); None: evicted at once (Kueue).
    notice_deadline: float | None = None


@dataclass(slots=True)
class CycleResult:
    cycle: int
    admitted: list[AdmittedDecision] = field(default_factory=list)
    preempted: list[PreemptedDecision] = field(default_factory=list)
    pending: dict[str, PendingStatus] = field(default_factory=dict)
    changed: bool = False
    heads: int = 0


@dataclass(slots=True, frozen=True)
class Admit:
    """Admit: the admission to write and the usage it charges."""

    admission: Admission
    usage: dict[FlavorResource, int]


@dataclass(slots=True, frozen=True)
class Preempt:
    """Wait for victims: the preemptions newly issued (none when all are under way)."""

    issued: list[PreemptedDecision]


@dataclass(slots=True, frozen=True)
class Requeue:
    """Stay pending: parked (BestEffortFIFO) or back in the heap, and whether
    interchangeable workloads are parked with it."""

    park: bool
    equivalents: bool = False
    no_longer_preempting: bool = False  # it gave up waiting for victims


Outcome = Admit | Preempt | Requeue

# The requeue outcomes, shared (frozen): thousands of heads a cycle end in one of them.
PARK = Requeue(park=True)
PARK_EQUIVALENTS = Requeue(park=True, equivalents=True, no_longer_preempting=True)
BACK_TO_THE_HEAP = Requeue(park=False)


@dataclass(frozen=True, slots=True)
class Refill:
    """The bounds of scheduling refill: a cycle runs another round only while the last
    one admitted something, fewer than ``max_rounds`` refill rounds have run, and fewer
    than ``max_heads`` heads were evaluated in the cycle's rounds so far. A round is
    never cut short, so every round is a whole cycle."""

    max_heads: int = 1000
    max_rounds: int = 100


def merge_round(into: CycleResult, part: CycleResult) -> None:
    """Add a refill round's decisions to its cycle's: a head left pending by an earlier
    round and admitted by a later one is not pending; a later status replaces an
    earlier one."""
    into.admitted += part.admitted
    into.preempted += part.preempted
    pending = into.pending
    for d in part.admitted:
        pending.pop(d.workload.key, None)
    for key, status in part.pending.items():
        pending.pop(key, None)
        pending[key] = status
    into.changed = into.changed or part.changed
    into.heads += part.heads
