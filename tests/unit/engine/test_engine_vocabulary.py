"""One vocabulary (issue 12, "The shape"): the engine's modes, reasons and strategies are
enums spelled as the API spells them, and the limit a pending message names is the one
the quota tree's arithmetic actually applies (``QuotaNode.available_limit`` and
``potential_limit`` explain ``available`` and ``potential_available`` exactly)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine.messages import explain_available, explain_max_capacity
from admission.engine.queue_manager import PendingStatus, same_status
from admission.engine.vocabulary import (
    AssignmentMode,
    FairSharingStrategy,
    PendingReason,
    PreemptionReason,
)
from queues.model import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    ResourceGroup,
    ResourceQuota,
)
from queues.quota_node import QuotaNode
from queues.tree import CohortTree
from tests.unit.engine.test_engine_properties import FLAVORS, RESOURCES, world


def test_string_enums_are_their_api_spelling() -> None:
    assert PendingReason.WAITING_FOR_QUOTA == "WaitingForQuota"
    assert PreemptionReason.IN_COHORT_FAIR_SHARING == "InCohortFairSharing"
    assert FairSharingStrategy.LESS_THAN_INITIAL_SHARE == "LessThanInitialShare"
    status = PendingStatus(PendingReason.EXCEEDS_MAX_QUOTA, "m")
    assert json.dumps({"reason": status.reason}) == '{"reason": "ExceedsMaxQuota"}'
    assert f"{status.reason}" == "ExceedsMaxQuota"


def test_assignment_modes_order_worst_first() -> None:
    assert min(AssignmentMode.FIT, AssignmentMode.PREEMPT) is AssignmentMode.PREEMPT
    assert sorted(AssignmentMode) == [
        AssignmentMode.NO_FIT,
        AssignmentMode.NO_CANDIDATES,
        AssignmentMode.PREEMPT,
        AssignmentMode.RECLAIM,
        AssignmentMode.FIT,
    ]
    assert [m for m in AssignmentMode if m.needs_preemption] == [
        AssignmentMode.PREEMPT,
        AssignmentMode.RECLAIM,
    ]
    assert AssignmentMode.NO_CANDIDATES.label == "NoCandidates"


def _path_below(node: QuotaNode, stop: QuotaNode) -> list[QuotaNode]:
    """``node`` and its ancestors strictly below ``stop``."""
    out = []
    for n in node.path_to_root():
        if n is stop:
            break
        out.append(n)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.data())
def test_the_binding_limit_is_the_one_the_arithmetic_applies(w: tuple, data: st.DataObject) -> None:
    """available(cq) = the local remainders up to the binding node + what it leaves;
    potential_available(cq) likewise with the binding cap. So a message that names the
    binding limit names the one that decides."""
    cqs, cohorts, _ops = w
    tree = CohortTree(cqs, cohorts)
    for name in sorted(tree.queues):
        for fr in [(f, r) for f in FLAVORS for r in RESOURCES]:
            used = data.draw(st.integers(0, 20000 if fr[1] == "cpu" else 20))
            tree.add_usage(name, {fr: used})
    for node in tree.queues.values():
        if node.disabled_reason:
            continue
        for fr in [(f, r) for f in FLAVORS for r in RESOURCES]:
            limit = node.available_limit(fr)
            if limit.at_root:
                below = _path_below(node, limit.node)
                want = sum(n.local_available(fr) for n in below) + limit.amount
            else:
                below = [*_path_below(node, limit.node), limit.node]
                want = sum(n.local_available(fr) for n in below) + limit.amount
                assert limit.node.borrowing_headroom(fr) is not None
            assert node.available(fr) == want, (node, fr, limit)
            cap = node.potential_limit(fr)
            below = _path_below(node, cap.node)
            assert (
                node.potential_available(fr)
                == sum(n.local_quota.get(fr, 0) for n in below) + cap.amount
            ), (node, fr, cap)
            # the explanations name these very nodes
            if not limit.at_root:
                assert (
                    f" of {'Cohort' if limit.node.is_cohort else 'ClusterQueue'} {limit.node.name} binds"
                    in explain_available(node, fr)
                )
            if not cap.at_root:
                assert f"{cap.node.name} quota" in explain_max_capacity(node, fr)


def _cq(name: str, nominal: int, *, cohort: str | None, bl: int | None) -> ClusterQueue:
    return ClusterQueue(
        name=name,
        cohort=cohort,
        namespace_selector=LabelSelector(),
        resource_groups=[
            ResourceGroup(
                covered_resources=["cpu"],
                flavors=[
                    FlavorQuotas("f", {"cpu": ResourceQuota(nominal=nominal, borrowing_limit=bl)})
                ],
            )
        ],
    )


def test_a_borrowing_limit_below_the_cohort_spare_is_the_limit_named() -> None:
    tree = CohortTree(
        {
            "a": _cq("a", 4000, cohort="co", bl=1000),
            "b": _cq("b", 10000, cohort="co", bl=None),
        },
        {"co": Cohort(name="co")},
    )
    fr = ("f", "cpu")
    a = tree.queues["a"]
    limit = a.available_limit(fr)
    assert (limit.node, limit.amount) == (a, 5000)  # its own 4 (lent up) + 1 to borrow, of 14
    assert a.available(fr) == 5000
    assert (
        "borrowingLimit 1 of ClusterQueue a binds: at most 1 more can be borrowed from Cohort co"
        in explain_available(a, fr)
    )
    cap = a.potential_limit(fr)
    assert (cap.node, cap.amount) == (a, 5000)
    b = tree.queues["b"]
    assert b.available_limit(fr).node is tree.cohorts["co"]
    assert "Cohort co (root) has 14 unused of subtree quota 14" in explain_available(b, fr)


def test_heads_told_the_same_share_one_immutable_status() -> None:
    """A head keeps the status it has when it is told the same again; heads told the
    same thing otherwise share one status object, which nobody can change."""
    reason = PendingReason.WAITING_FOR_QUOTA
    a = same_status({}, "ns/a", reason, "short on cpu")
    b = same_status({}, "ns/b", reason, "short on cpu")
    assert a is b and a == PendingStatus(reason, "short on cpu")
    own = PendingStatus(reason, "short on cpu")
    assert same_status({"ns/c": own}, "ns/c", reason, "short on cpu") is own
    other = same_status({"ns/c": own}, "ns/c", PendingReason.MISCONFIGURED, "short on cpu")
    assert other is not a and other.reason == PendingReason.MISCONFIGURED
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.message = "changed"  # type: ignore[misc]
