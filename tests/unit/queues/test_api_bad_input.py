"""queues.api.parse refuses bad Kueue objects with an error naming the object and the field.

Each case breaks one of Kueue's validation rules in an otherwise valid example and checks
the path and message of the InputError, so a user is told which field of which object to
fix, as kube-apiserver would tell them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queues.api import parse as api

from ._support import POD_TEMPLATE, examples, workload


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return doc


_DELETE = object()


EX = examples()


CQ = EX["ClusterQueue/team-a-cq"]


CO = EX["Cohort/research"]


ROOT = EX["Cohort/org-root"]


RF = EX["ResourceFlavor/h100"]


LQ = EX["LocalQueue/team-a-queue"]


WPC = EX["WorkloadPriorityClass/high"]


WL = workload()


Q0 = "spec.resourceGroups.0.flavors.0.resources"


BAD_INPUTS = [
    # (case id, document, expected path, expected message or message fragment)
    (
        "unknown field deep in spec",
        _set(CQ, f"{Q0}.0.nominalQuotaa", 1),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuotaa",
        "unknown field",
    ),
    ("unknown top-level field", _set(CQ, "specs", {}), "specs", "unknown field"),
    ("unknown metadata field", _set(CQ, "metadata.nam", "x"), "metadata.nam", "unknown field"),
    (
        "unknown field in pod template",
        _set(WL, "spec.podSets.0.template.specs", {}),
        "spec.podSets[0].template.specs",
        "unknown field",
    ),
    (
        "bad queueingStrategy",
        _set(CQ, "spec.queueingStrategy", "FIFO"),
        "spec.queueingStrategy",
        'Unsupported value: "FIFO": supported values: "StrictFIFO", "BestEffortFIFO"',
    ),
    (
        "cohort name not DNS-1123",
        _set(CQ, "spec.cohortName", "Research"),
        "spec.cohortName",
        "a lowercase RFC 1123 subdomain must consist of",
    ),
    (
        "object name not DNS-1123",
        _set(CQ, "metadata.name", "Team_A"),
        "metadata.name",
        "a lowercase RFC 1123 subdomain",
    ),
    (
        "too many resource groups",
        _set(
            CQ,
            "spec.resourceGroups",
            [
                {
                    "coveredResources": [f"r{i}"],
                    "flavors": [
                        {"name": f"f{i}", "resources": [{"name": f"r{i}", "nominalQuota": 1}]}
                    ],
                }
                for i in range(17)
            ],
        ),
        "spec.resourceGroups",
        "must have at most 16 items",
    ),
    (
        "no covered resources",
        _set(CQ, "spec.resourceGroups.0.coveredResources", []),
        "spec.resourceGroups[0].coveredResources",
        "Required value: must have at least 1 item",
    ),
    (
        "resource count differs from coveredResources",
        _set(CQ, f"{Q0}", [{"name": "cpu", "nominalQuota": 1}]),
        "spec.resourceGroups[0]",
        "flavors must have the same number of resources as the coveredResources",
    ),
    (
        "resources out of order",
        _set(CQ, f"{Q0}.0.name", "memory"),
        "spec.resourceGroups[0].flavors[0].resources[0].name",
        "must match the name in coveredResources",
    ),
    (
        "negative nominal quota",
        _set(CQ, f"{Q0}.0.nominalQuota", "-1"),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "must be greater than or equal to 0",
    ),
    (
        "negative borrowing limit",
        _set(CQ, f"{Q0}.2.borrowingLimit", -2),
        "spec.resourceGroups[0].flavors[0].resources[2].borrowingLimit",
        "must be greater than or equal to 0",
    ),
    (
        "unparseable quantity",
        _set(CQ, f"{Q0}.1.nominalQuota", "12 GiB"),
        "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota",
        "quantities must match the regular expression",
    ),
    (
        "boolean quantity",
        _set(CQ, f"{Q0}.1.nominalQuota", True),
        "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota",
        "must be of type string, got boolean",
    ),
    (
        "borrowingLimit without cohort",
        _set(CQ, "spec.cohortName", _DELETE),
        "spec.resourceGroups[0].flavors[0].resources[2].borrowingLimit",
        "must be nil when cohort is empty",
    ),
    (
        "lendingLimit above nominal",
        _set(CQ, f"{Q0}.2.lendingLimit", 17),
        "spec.resourceGroups[0].flavors[0].resources[2].lendingLimit",
        "must be less than or equal to the nominalQuota",
    ),
    (
        "cohort limits without parent",
        _set(CO, "spec.parentName", _DELETE),
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
        "must be nil when parent is empty",
    ),
    (
        "reclaim Never with borrowWithinCohort",
        _set(CQ, "spec.preemption.reclaimWithinCohort", "Never"),
        "spec.preemption",
        "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
    ),
    (
        "preference without TryNextFlavor",
        _set(CQ, "spec.flavorFungibility.preference", "PreemptionOverBorrowing"),
        "spec.flavorFungibility.preference",
        'preference "PreemptionOverBorrowing" requires both whenCanBorrow and whenCanPreempt to be TryNextFlavor',
    ),
    (
        "negative fair sharing weight",
        _set(CQ, "spec.fairSharing.weight", "-1"),
        "spec.fairSharing.weight",
        "must be greater than or equal to 0",
    ),
    (
        "tiny fair sharing weight",
        _set(CO, "spec.fairSharing.weight", "1n"),
        "spec.fairSharing.weight",
        "When not 0, weight must be > 10e-9",
    ),
    (
        "resource in two groups",
        _set(
            CQ,
            "spec.resourceGroups",
            CQ["spec"]["resourceGroups"]
            + [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "other", "resources": [{"name": "cpu", "nominalQuota": 1}]}
                    ],
                }
            ],
        ),
        "spec.resourceGroups[1].coveredResources[0]",
        'Duplicate value: "cpu"',
    ),
    (
        "flavor in two groups",
        _set(
            CQ,
            "spec.resourceGroups",
            CQ["spec"]["resourceGroups"]
            + [
                {
                    "coveredResources": ["pods"],
                    "flavors": [
                        {"name": "h100", "resources": [{"name": "pods", "nominalQuota": 1}]}
                    ],
                }
            ],
        ),
        "spec.resourceGroups[1].flavors[0].name",
        'Duplicate value: "h100"',
    ),
    (
        "more than 256 flavors",
        _set(
            CQ,
            "spec.resourceGroups",
            [
                {
                    "coveredResources": [f"r{g}"],
                    "flavors": [
                        {"name": f"f{g}-{i}", "resources": [{"name": f"r{g}", "nominalQuota": 1}]}
                        for i in range(52)
                    ],
                }
                for g in range(5)
            ],
        ),
        "spec.resourceGroups",
        "total number of flavors across all resourceGroups must be ≤ 256, got 260",
    ),
    (
        "bad namespaceSelector operator",
        _set(CQ, "spec.namespaceSelector", {"matchExpressions": [{"key": "a", "operator": "Is"}]}),
        "spec.namespaceSelector.matchExpressions[0].operator",
        'Unsupported value: "Is"',
    ),
    (
        "namespaceSelector In without values",
        _set(CQ, "spec.namespaceSelector", {"matchExpressions": [{"key": "a", "operator": "In"}]}),
        "spec.namespaceSelector.matchExpressions[0].values",
        "must be specified when `operator` is 'In' or 'NotIn'",
    ),
    (
        "local queue without clusterQueue",
        _set(LQ, "spec", {}),
        "spec.clusterQueue",
        "Required value",
    ),
    (
        "local queue stopPolicy",
        _set(LQ, "spec.stopPolicy", "Stop"),
        "spec.stopPolicy",
        'Unsupported value: "Stop"',
    ),
    (
        "priority class value not an integer",
        _set(WPC, "value", "high"),
        "value",
        "must be of type integer, got string",
    ),
    (
        "priority class value above int32",
        _set(WPC, "value", 2**31),
        "value",
        "must be less than or equal to 2147483647",
    ),
    (
        "taint with bad effect",
        _set(RF, "spec.nodeTaints", [{"key": "a", "effect": "NoRun"}]),
        "spec.nodeTaints[0].effect",
        "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
    ),
    (
        "duplicate taints",
        _set(
            RF,
            "spec.nodeTaints",
            [
                {"key": "a", "effect": "NoSchedule"},
                {"key": "a", "value": "b", "effect": "NoSchedule"},
            ],
        ),
        "spec.nodeTaints[1]",
        "taints must be unique by key and effect pair",
    ),
    (
        "toleration without key must be Exists",
        _set(RF, "spec.tolerations", [{"operator": "Equal", "value": "x"}]),
        "spec.tolerations[0]",
        "operator must be Exists when 'key' is empty",
    ),
    (
        "toleration Exists with value",
        _set(RF, "spec.tolerations", [{"key": "k", "operator": "Exists", "value": "x"}]),
        "spec.tolerations[0].value",
        "a value must be empty when 'operator' is 'Exists'",
    ),
    (
        "too many node labels",
        _set(RF, "spec.nodeLabels", {f"k{i}": "v" for i in range(9)}),
        "spec.nodeLabels",
        "must have at most 8 properties",
    ),
    (
        "node label value invalid",
        _set(RF, "spec.nodeLabels", {"zone": "a b"}),
        "spec.nodeLabels.zone",
        "a valid label must be an empty string",
    ),
    (
        "topology without node labels",
        _set(RF, "spec", {"topologyName": "default"}),
        "spec",
        "at least one nodeLabel is required when topology is set",
    ),
    (
        "workload without podSets",
        _set(WL, "spec.podSets", _DELETE),
        "spec.podSets",
        "Required value",
    ),
    (
        "workload with 19 podSets",
        _set(WL, "spec.podSets", [{"name": f"p{i}", "template": POD_TEMPLATE} for i in range(19)]),
        "spec.podSets",
        "must have at most 18 items",
    ),
    (
        "pods key reserved",
        _set(WL, "spec.podSets.0.template.spec.containers.0.resources.requests.pods", "1"),
        "spec.podSets[0].template.spec.containers[0].resources.requests.pods",
        "the key is reserved for internal kueue use",
    ),
    (
        "negative request",
        _set(WL, "spec.podSets.0.template.spec.containers.0.resources.requests.cpu", "-1"),
        "spec.podSets[0].template.spec.containers[0].resources.requests.cpu",
        "must be greater than or equal to 0",
    ),
    (
        "two podSets with minCount",
        _set(
            WL,
            "spec.podSets",
            [
                {"name": "a", "count": 2, "minCount": 1, "template": POD_TEMPLATE},
                {"name": "b", "count": 2, "minCount": 1, "template": POD_TEMPLATE},
            ],
        ),
        "spec.podSets",
        "at most one podSet can use minCount",
    ),
    (
        "minCount above count",
        _set(WL, "spec.podSets.0.minCount", 3),
        "spec.podSets[0]",
        "minCount should be positive and less or equal to count",
    ),
    (
        "minCount zero",
        _set(WL, "spec.podSets.0.minCount", 0),
        "spec.podSets[0].minCount",
        "must be greater than or equal to 1",
    ),
    (
        "negative count",
        _set(WL, "spec.podSets.0.count", -1),
        "spec.podSets[0].count",
        "must be greater than or equal to 0",
    ),
    (
        "duplicate podSet names",
        _set(WL, "spec.podSets", [{"template": POD_TEMPLATE}, {"template": POD_TEMPLATE}]),
        "spec.podSets[1].name",
        'Duplicate value: "main"',
    ),
    (
        "template spec not a mapping",
        _set(WL, "spec.podSets.0.template.spec", ["x"]),
        "spec.podSets[0].template.spec",
        "must be of type object",
    ),
    (
        "template without containers",
        _set(WL, "spec.podSets.0.template.spec", {}),
        "spec.podSets[0].template.spec.containers",
        "Required value",
    ),
    (
        "priorityClassRef without priority",
        _set(
            WL,
            "spec.priorityClassRef",
            {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
        ),
        "spec",
        "priority should not be nil when priorityClassRef is set",
    ),
    (
        "priorityClassRef group/kind mismatch",
        _set(
            _set(WL, "spec.priority", 1),
            "spec.priorityClassRef",
            {"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
        ),
        "spec.priorityClassRef",
        "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
    ),
    (
        "QuotaReserved without admission",
        _set(
            WL,
            "status",
            {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "True",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            },
        ),
        "status.admission",
        "must be set while the QuotaReserved condition is true",
    ),
    (
        "assignment for unknown podSet",
        _set(
            WL,
            "status",
            {
                "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "other"}]},
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "True",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            },
        ),
        "status.admission.podSetAssignments[0].name",
        'Not found: "other"',
    ),
    (
        "condition with bad status",
        _set(WL, "status", {"conditions": [{"type": "Finished", "status": "Yes"}]}),
        "status.conditions[0].status",
        'Unsupported value: "Yes"',
    ),
    (
        "bad creationTimestamp",
        _set(WL, "metadata.creationTimestamp", "yesterday"),
        "metadata.creationTimestamp",
        '"yesterday" is not an RFC 3339 date-time',
    ),
    (
        "label value not a string",
        _set(WL, "metadata.labels", {"a": 1}),
        "metadata.labels.a",
        "must be of type string, got integer",
    ),
    (
        "active not a boolean",
        _set(WL, "spec.active", "false"),
        "spec.active",
        "must be of type boolean, got string",
    ),
    ("missing metadata.name", _set(CQ, "metadata", {}), "metadata.name", "Required value"),
    ("missing kind", _set(CQ, "kind", _DELETE), "kind", "Required value"),
    ("unknown kind", _set(CQ, "kind", "Queue"), "kind", 'unsupported kind "Queue"'),
    (
        "unknown apiVersion",
        _set(CQ, "apiVersion", "kueue.x-k8s.io/v1alpha1"),
        "apiVersion",
        'Unsupported value: "kueue.x-k8s.io/v1alpha1"',
    ),
    (
        "v1beta1 bad priorityClassSource",
        _set(_set(WL, "apiVersion", "kueue.x-k8s.io/v1beta1"), "spec.priorityClassSource", "pods"),
        "spec.priorityClassSource",
        'Unsupported value: "pods"',
    ),
]


@pytest.mark.parametrize(
    ("doc", "path", "message"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_names_the_field(doc: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(api.InputError) as info:
        api.parse_object(doc)
    err = info.value
    assert err.path == path
    assert message in err.message
    assert str(err) == f"{err.kind or 'object'} {err.name or '(unnamed)'}: {path}: {err.message}"


def test_input_error_names_kind_and_namespaced_name() -> None:
    with pytest.raises(api.InputError) as info:
        api.parse_object(_set(LQ, "spec.clusterQueue", "Bad"))
    assert str(info.value).startswith("LocalQueue team-a/team-a-queue: spec.clusterQueue: ")
    assert isinstance(info.value, ValueError)


def test_input_error_lists_every_problem() -> None:
    doc = _set(_set(CQ, f"{Q0}.0.nominalQuota", "-1"), "spec.cohortName", _DELETE)
    with pytest.raises(api.InputError) as info:
        api.parse_object(doc)
    paths = [p for p, _ in info.value.errors]
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in paths
    assert "spec.resourceGroups[0].flavors[0].resources[2].lendingLimit" in paths


def test_non_mapping_document_is_an_input_error() -> None:
    with pytest.raises(api.InputError):
        api.parse_object(["not", "a", "mapping"])
