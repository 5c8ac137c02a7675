"""The generated CRDs are as strict as Kueue's: broken copies are refused with the path of the field.

Each broken copy of a valid example must be rejected by the CRDs and by the pydantic
models alike, naming the broken field; the unbroken originals must be valid, the CEL
transition rules must refuse the updates Kueue refuses, and defaults must be filled as
Kueue fills them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from queues.api.parse import InputError, parse_object
from tests.support.crd_validation import (
    EXAMPLES,
    GROUP,
    V1BETA2,
    Obj,
    apply_defaults,
    crd_problems,
    load_all,
    served_schema,
)


def _example(kind: str, name: str | None = None) -> Obj:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for obj in load_all(path):
            if obj["kind"] == kind and name in (None, obj["metadata"]["name"]):
                return copy.deepcopy(obj)
    raise AssertionError(f"no example {kind} {name}")


def _cq() -> Obj:
    return _example("ClusterQueue", "llm-research")


def _quota(obj: Obj) -> Obj:
    return obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]


def _set(obj: Obj, path: str, value: Any) -> Obj:
    node = obj
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return obj


_DELETE = object()


RG0 = "spec.resourceGroups.0"


Q0 = f"{RG0}.flavors.0.resources.0"


def _workload() -> Obj:
    return {
        "apiVersion": V1BETA2,
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": {
            "queueName": "team-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                }
            ],
        },
    }


# (case id, make the broken object, expected path, expected message fragment); the
# pydantic models (queues.api.parse.parse_object) must reject every one of them too.
BROKEN: list[tuple[str, Callable[[], Obj], str, str]] = [
    (
        "unknown-field",
        lambda: _set(_cq(), "spec.queueingStrategyy", "StrictFIFO"),
        "spec.queueingStrategyy",
        "unknown field",
    ),
    (
        "unknown-field-in-quota",
        lambda: _set(_cq(), f"{Q0}.nominal", "8"),
        "spec.resourceGroups[0].flavors[0].resources[0].nominal",
        "unknown field",
    ),
    (
        "wrong-enum",
        lambda: _set(_cq(), "spec.queueingStrategy", "LIFO"),
        "spec.queueingStrategy",
        'Unsupported value: "LIFO"',
    ),
    (
        "wrong-enum-preemption",
        lambda: _set(_cq(), "spec.preemption.withinClusterQueue", "Always"),
        "spec.preemption.withinClusterQueue",
        "Unsupported value",
    ),
    (
        "negative-quantity-string",
        lambda: _set(_cq(), f"{Q0}.nominalQuota", "-8"),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "does not match",
    ),
    (
        "negative-quantity-int",
        lambda: _set(_cq(), f"{Q0}.nominalQuota", -8),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "less than the minimum of 0",
    ),
    (
        "negative-fair-sharing-weight",
        lambda: _set(_cq(), "spec.fairSharing", {"weight": "-1"}),
        "spec.fairSharing.weight",
        "does not match",
    ),
    (
        "malformed-quantity",
        lambda: _set(_cq(), f"{Q0}.nominalQuota", "8 GPUs"),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "does not match",
    ),
    (
        "missing-required-nominal-quota",
        lambda: _set(_cq(), f"{Q0}.nominalQuota", _DELETE),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "Required value",
    ),
    (
        "missing-required-covered-resources",
        lambda: _set(_cq(), f"{RG0}.coveredResources", _DELETE),
        "spec.resourceGroups[0].coveredResources",
        "Required value",
    ),
    (
        "missing-required-local-queue-spec",
        lambda: _set(_example("LocalQueue"), "spec", _DELETE),
        "spec",
        "Required value",
    ),
    (
        "missing-required-priority-value",
        lambda: _set(_example("WorkloadPriorityClass"), "value", _DELETE),
        "value",
        "Required value",
    ),
    (
        "wrong-type",
        lambda: _set(_example("LocalQueue"), "spec.clusterQueue", ["cq"]),
        "spec.clusterQueue",
        "is not of type 'string'",
    ),
    (
        "bad-dns-name",
        lambda: _set(_example("LocalQueue"), "spec.clusterQueue", "Team_A"),
        "spec.clusterQueue",
        "does not match",
    ),
    (
        "too-many-resource-groups",
        lambda: _set(_cq(), "spec.resourceGroups", _cq()["spec"]["resourceGroups"] * 17),
        "spec.resourceGroups",
        "is too long",
    ),
    (
        "empty-flavors",
        lambda: _set(_cq(), f"{RG0}.flavors", []),
        "spec.resourceGroups[0].flavors",
        "should be non-empty",
    ),
    (
        "duplicate-flavor",
        lambda: _set(
            _cq(), f"{RG0}.flavors", _cq()["spec"]["resourceGroups"][0]["flavors"][:1] * 2
        ),
        "spec.resourceGroups[0].flavors[1]",
        "Duplicate value",
    ),
    (
        "borrowing-limit-without-cohort",
        lambda: _set(_set(_cq(), "spec.cohortName", _DELETE), f"{Q0}.borrowingLimit", 1),
        "spec",
        "borrowingLimit must be nil when cohort is empty",
    ),
    (
        "lending-limit-without-cohort",
        lambda: _set(_set(_cq(), "spec.cohortName", _DELETE), f"{Q0}.lendingLimit", 1),
        "spec",
        "lendingLimit must be nil when cohort is empty",
    ),
    (
        "cohort-limit-without-parent",
        lambda: _set(
            _example("Cohort", "research"),
            "spec.parentName",
            _DELETE,
        ),
        "spec",
        "must be nil when parent is empty",
    ),
    (
        "flavor-resources-differ-from-covered",
        lambda: _set(_cq(), f"{RG0}.coveredResources", ["nvidia.com/gpu", "example.com/extra"]),
        "spec.resourceGroups[0]",
        "flavors must have the same number of resources as the coveredResources",
    ),
    (
        "borrow-within-cohort-without-reclaim",
        lambda: _set(
            _cq(),
            "spec.preemption",
            {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}},
        ),
        "spec.preemption",
        "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
    ),
    (
        "fungibility-preference-without-try-next",
        lambda: _set(_cq(), "spec.flavorFungibility", {"preference": "BorrowingOverPreemption"}),
        "spec.flavorFungibility",
        "preference can only be set",
    ),
    (
        "taint-effect",
        lambda: _set(
            _example("ResourceFlavor", "h100"),
            "spec.nodeTaints",
            [{"key": "k", "value": "v", "effect": "Sometimes"}],
        ),
        "spec.nodeTaints[0].effect",
        "Unsupported value",
    ),
    (
        "toleration-exists-with-value",
        lambda: _set(
            _example("ResourceFlavor", "h100"),
            "spec.tolerations",
            [{"key": "k", "operator": "Exists", "value": "v"}],
        ),
        "spec.tolerations[0]",
        "a value must be empty when 'operator' is 'Exists'",
    ),
    (
        "toleration-empty-key-equal",
        lambda: _set(
            _example("ResourceFlavor", "h100"), "spec.tolerations", [{"operator": "Equal"}]
        ),
        "spec.tolerations[0]",
        "operator must be Exists when 'key' is empty",
    ),
    (
        "topology-without-node-labels",
        lambda: {
            "apiVersion": V1BETA2,
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"topologyName": "default"},
        },
        "spec",
        "at least one nodeLabel is required when topology is set",
    ),
    (
        "workload-no-pod-sets",
        lambda: _set(_workload(), "spec.podSets", []),
        "spec.podSets",
        "should be non-empty",
    ),
    (
        "workload-min-count-above-count",
        lambda: _set(_workload(), "spec.podSets.0.minCount", 3),
        "spec.podSets[0]",
        "minCount should be positive and less or equal to count",
    ),
    (
        "workload-priority-class-without-priority",
        lambda: _set(
            _workload(),
            "spec.priorityClassRef",
            {"group": GROUP, "kind": "WorkloadPriorityClass", "name": "research"},
        ),
        "spec",
        "priority should not be nil when priorityClassRef is set",
    ),
    (
        "workload-priority-class-group-kind-mismatch",
        lambda: _set(
            _set(_workload(), "spec.priority", 10),
            "spec.priorityClassRef",
            {"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "x"},
        ),
        "spec.priorityClassRef",
        "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
    ),
    (
        "workload-admission-pod-set-count",
        lambda: _set(
            _workload(),
            "status",
            {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "True",
                        "reason": "QuotaReserved",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
                "admission": {"clusterQueue": "cq", "podSetAssignments": []},
            },
        ),
        "<root>",
        "podSetAssignments must have the same number of podSets as the spec",
    ),
]


@pytest.mark.parametrize(
    ("make", "path", "message"),
    [case[1:] for case in BROKEN],
    ids=[case[0] for case in BROKEN],
)
def test_broken_copy_is_rejected_with_the_path_of_the_field(
    make: Callable[[], Obj], path: str, message: str
) -> None:
    obj = make()
    problems = crd_problems(obj)
    assert any(p == path and message in m for p, m in problems), problems
    with pytest.raises(InputError):  # the CRD and the pydantic models agree
        parse_object(obj)


def test_a_non_integer_number_quantity_is_refused_though_plan_accepts_it() -> None:
    # Quantities are int-or-string in a CRD: YAML `weight: 0.5` is a JSON number the API
    # server refuses, while queues.api.kinds (and so `plan`) reads it as "0.5".
    obj = _set(_cq(), "spec.fairSharing", {"weight": 0.5})
    assert crd_problems(obj) == [
        (
            "spec.fairSharing.weight",
            "must be an integer or a string, got the number 0.5: "
            'the API server refuses it, quote it ("0.5")',
        )
    ]
    parse_object(obj)
    assert crd_problems(_set(obj, "spec.fairSharing.weight", "0.5")) == []


def test_the_unbroken_originals_of_the_broken_copies_are_valid() -> None:
    for obj in (_cq(), _example("LocalQueue"), _example("ResourceFlavor", "h100"), _workload()):
        assert crd_problems(obj) == []
        parse_object(obj)


def test_local_queue_cluster_queue_cannot_change_on_update() -> None:
    old = _example("LocalQueue")
    assert crd_problems(copy.deepcopy(old), old=old) == []
    new = _set(copy.deepcopy(old), "spec.clusterQueue", "other-queue")
    assert crd_problems(new) == []  # a create may name any ClusterQueue
    assert crd_problems(new, old=old) == [("spec.clusterQueue", "field is immutable")]


def test_workload_queue_name_cannot_change_while_quota_is_reserved() -> None:
    old = _workload()
    moved = _set(copy.deepcopy(old), "spec.queueName", "elsewhere")
    assert crd_problems(moved, old=old) == []
    old["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main"}]},
    }
    moved["status"] = copy.deepcopy(old["status"])
    assert crd_problems(moved, old=old) == [
        ("<root>", "queueName is immutable while the workload has quota reserved")
    ]


def test_defaults_are_filled_as_kueue_does() -> None:
    schema = served_schema("ClusterQueue")
    cq = apply_defaults(schema, {"spec": {}})
    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert cq["spec"]["stopPolicy"] == "None"
    assert cq["spec"]["preemption"] == {
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "Never",
        "borrowWithinCohort": {"policy": "Never"},
    }
    assert cq["spec"]["flavorFungibility"] == {
        "whenCanBorrow": "MayStopSearch",
        "whenCanPreempt": "TryNextFlavor",
    }
    wl = apply_defaults(served_schema("Workload"), {"spec": {"podSets": [{"template": {}}]}})
    assert wl["spec"]["active"] is True
    assert wl["spec"]["podSets"][0]["name"] == "main"
    assert wl["spec"]["podSets"][0]["count"] == 1
