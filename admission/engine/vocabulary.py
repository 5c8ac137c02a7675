"""The engine's words: every mode, reason and strategy it decides with, as one enum each.

Kueue keeps these as typed constants next to the code that decides them
(``flavorassigner.FlavorAssignmentMode``, the ``kueue.WorkloadPreempted*`` reasons,
``config.PreemptionStrategy``); here they live in one module at the bottom of the
engine, so the scheduler, the flavor assigner, the preemption strategies, the
configuration and the adapter all spell them the same way. The string enums are
``StrEnum``: a member *is* its API spelling (``PendingReason.WAITING_FOR_QUOTA ==
"WaitingForQuota"``), so it goes into conditions, events, metrics and JSON unchanged.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class AssignmentMode(IntEnum):
    """How a flavor (a podSet, a workload) can be assigned, worst first (Kueue's granular
    preemption modes): comparisons pick the worse (``min``) or the better (``max``)."""

    NO_FIT = 0
    NO_CANDIDATES = 1  # would need preemption, but nobody can be preempted
    PREEMPT = 2  # fits after preempting, some victim in the workload's own ClusterQueue
    RECLAIM = 3  # fits after preempting only in other ClusterQueues of the cohort
    FIT = 4

    @property
    def needs_preemption(self) -> bool:
        return self in (AssignmentMode.PREEMPT, AssignmentMode.RECLAIM)

    @property
    def label(self) -> str:
        """Kueue's spelling (``NoFit``, ``Preempt``, ...)."""
        return _MODE_LABELS[self]


_MODE_LABELS = {
    AssignmentMode.NO_FIT: "NoFit",
    AssignmentMode.NO_CANDIDATES: "NoCandidates",
    AssignmentMode.PREEMPT: "Preempt",
    AssignmentMode.RECLAIM: "Reclaim",
    AssignmentMode.FIT: "Fit",
}


class PendingReason(StrEnum):
    """``QuotaReserved=False`` reasons of a pending workload (docs/semantics.md §5.2)."""

    WAITING_FOR_QUOTA = "WaitingForQuota"
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"
    MISCONFIGURED = "Misconfigured"
    SUSPENDED = "Suspended"
    TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"


class PreemptionReason(StrEnum):
    """The ``Preempted`` condition's reasons (Kueue's ``WorkloadPreempted*``, §4.7)."""

    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


class FairSharingStrategy(StrEnum):
    """``fairSharing.preemptionStrategies`` of the Configuration (§4.7)."""

    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


DEFAULT_FAIR_SHARING_STRATEGIES = (
    FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
)
"""Kueue's default, and the only order in which both may be given."""
