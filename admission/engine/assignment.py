"""What flavor assignment answers, and the question it asks preemption.

An :class:`Assignment` is a workload's flavors, per podSet
(:class:`PodSetAssignmentResult`) and overall; the scheduler, the entry orders and the
preemption searches read it. A :data:`PreemptionOracle` is how flavor assignment asks
whether preemption could make a request fit, so that the preemption strategy stays a
separate concern (:func:`no_preemption` answers for a ClusterQueue that cannot preempt).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from admission.engine.tas.admission import PlacementCheck
from admission.engine.vocabulary import AssignmentMode, PendingReason
from queues.model import FlavorResource, TopologyAssignment, Workload
from queues.quota_node import QuotaNode

NO_CANDIDATES = AssignmentMode.NO_CANDIDATES
FIT = AssignmentMode.FIT


class OracleAnswer(NamedTuple):
    """Would preemption free enough for a request (Kueue's PreemptionOracle answer)?"""

    mode: AssignmentMode  # PREEMPT, RECLAIM, or NO_CANDIDATES
    borrow: int  # the borrowing level once the victims are gone


PreemptionOracle = Callable[[Workload, QuotaNode, FlavorResource, int], OracleAnswer]
"""(preemptor, cq node, fr, value) -> could preemption make ``value`` of ``fr`` fit?"""


def no_preemption(_wl: Workload, node: QuotaNode, fr: FlavorResource, val: int) -> OracleAnswer:
    return OracleAnswer(NO_CANDIDATES, node.height_of_lowest_subtree_that_fits(fr, val).height)


@dataclass(slots=True)
class PodSetAssignmentResult:
    name: str
    count: int
    flavors: dict[str, str] = field(default_factory=dict)  # resource -> flavor
    usage: dict[str, int] = field(default_factory=dict)  # resource -> total
    mode: AssignmentMode = FIT
    borrow: int = 0
    reason: PendingReason | None = None
    messages: list[str] = field(default_factory=list)
    topology: TopologyAssignment | None = None  # where its pods go (TAS podSets)


@dataclass(slots=True)
class Assignment:
    """A workload's flavors: per podSet, and overall (the worst podSet's mode, the highest
    borrowing level, the usage it would charge, and why it does not fit, if it does not)."""

    pod_sets: list[PodSetAssignmentResult]
    mode: AssignmentMode = FIT
    borrow: int = 0
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    # Frs on which the chosen flavors need preemption (for the preemption search).
    frs_need_preemption: set[FlavorResource] = field(default_factory=set)
    reason: PendingReason | None = None
    message: str = ""
    # TAS podSets needing preemption: do they fit once given victims are gone?
    placement: PlacementCheck | None = None

    def counts(self) -> dict[str, int]:
        return {p.name: p.count for p in self.pod_sets}
