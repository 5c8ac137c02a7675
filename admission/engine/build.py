"""The one factory of the engine: a ``Scheduler`` wired with the policies a plain
``EnginePolicy`` names (fair sharing, admission fair sharing, credits, progress-aware
preemption, bounded parking, strict eviction, scheduling refill).

``plan``, ``simulate``, ``serve`` and the what-if all build their scheduler here. The
configuration file (``admission.config``) turns its sections into an ``EnginePolicy``;
the engine never reads the configuration itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from admission.engine.cache import Cache
from admission.engine.ordering import EntryOrder, classical_order, credit_order
from admission.engine.preemption.checkpoint import ProgressAware, ProgressPolicy
from admission.engine.preemption.classical import Preemptor
from admission.engine.preemption.fair_sharing import FairPreemptor, Tournament, parse_strategies
from admission.engine.preemption.feasibility import blocking
from admission.engine.scheduler import Refill, Scheduler
from admission.engine.usage import UsageSection, UsageTracker


@dataclass(frozen=True, slots=True)
class EnginePolicy:
    """The settings the engine is built with; the defaults are Kueue's behaviour.

    ``fair_sharing`` is the ordered ``preemptionStrategies`` when fair sharing is on,
    None when it is off. ``evaluated_at`` is ``plan --now`` (None: the clock's time)."""

    fair_sharing: tuple[str, ...] | None = None
    admission_fair_sharing: UsageSection | None = None
    cohort_credits: UsageSection | None = None
    progress: ProgressPolicy | None = None
    park_until_feasible: bool = False
    reserve_evicting_capacity: bool = False
    refill: Refill | None = None
    evaluated_at: float | None = None
    tas_balanced_placement: bool = False  # featureGates.TASBalancedPlacement (Kueue Alpha)


def build_scheduler(
    policy: EnginePolicy, cache: Cache, *, clock: Callable[[], float], explain: bool = True
) -> Scheduler:
    """A scheduler with every policy object built here, once, and handed to
    ``Scheduler(...)``; nothing is changed on the scheduler afterwards.

    ``explain=False`` skips the numeric pending messages (the simulator, which never
    shows them)."""
    cache.topology.balanced_placement = policy.tas_balanced_placement
    tracker: UsageTracker | None = None
    if policy.admission_fair_sharing is not None or policy.cohort_credits is not None:
        tracker = UsageTracker(
            cache,
            admission_fair_sharing=policy.admission_fair_sharing,
            cohort_credits=policy.cohort_credits,
            evaluated_at=policy.evaluated_at,
            now=policy.evaluated_at if policy.evaluated_at is not None else clock(),
        )
    progress = ProgressAware(cache, policy.progress, clock) if policy.progress is not None else None
    if (
        policy.park_until_feasible
        and policy.fair_sharing is None
        and policy.admission_fair_sharing is None
    ):
        cache.enable_bounded_parking(blocking)
    preemptor: Preemptor
    order: EntryOrder
    if policy.fair_sharing is not None:
        preemptor = FairPreemptor(
            cache,
            strategies=parse_strategies(policy.fair_sharing),
            tracker=tracker,
            progress=progress,
        )
        order = Tournament(tracker=tracker)
    else:
        preemptor = Preemptor(cache, tracker=tracker, progress=progress)
        if tracker is not None and policy.cohort_credits is not None:
            order = credit_order(tracker)
        else:
            order = classical_order
    return Scheduler(
        cache,
        clock=clock,
        preemptor=preemptor,
        order=order,
        usage=tracker,
        explain=explain,
        progress=progress,
        reserve_evicting_capacity=policy.reserve_evicting_capacity,
        refill=policy.refill,
    )
