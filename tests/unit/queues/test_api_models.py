"""queues.api.parse and queues.api.kinds: parsing Kueue objects, Kueue's validation rules, conversion to queues.model."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from queues import model as m
from queues.api import kinds
from queues.api import parse as api
from queues.api.fields import KubeJsonSchema

# The example manifests of docs/semantics.md §1.9 (the batch/v1 Job is the loader's).
EXAMPLES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {cloud.example.com/accelerator: nvidia-h100}
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org-root}
spec:
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec:
  parentName: org-root
  fairSharing: {weight: "2"}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 0, borrowingLimit: 16, lendingLimit: 0}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a-cq}
spec:
  cohortName: research
  namespaceSelector: {}
  queueingStrategy: BestEffortFIFO
  resourceGroups:
  - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
      - {name: nvidia.com/gpu, nominalQuota: 16, borrowingLimit: 8, lendingLimit: 4}
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: TryNextFlavor}
  fairSharing: {weight: "1"}
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  stopPolicy: None
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-a, name: team-a-queue}
spec:
  clusterQueue: team-a-cq
  fairSharing: {weight: "1"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 10000
description: "production training"
"""


def examples() -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(EXAMPLES)}


def model_of(doc: dict[str, Any]) -> Any:
    return api.to_model(api.parse_object(doc))


def cluster_queue(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": spec,
    }


def one_group(*quotas: dict[str, Any], covered: list[str] | None = None) -> list[dict[str, Any]]:
    return [
        {
            "coveredResources": covered or [q["name"] for q in quotas],
            "flavors": [{"name": "default", "resources": list(quotas)}],
        }
    ]


POD_TEMPLATE = {
    "spec": {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]
    }
}


def workload(**spec: Any) -> dict[str, Any]:
    spec.setdefault("podSets", [{"name": "main", "count": 2, "template": POD_TEMPLATE}])
    spec.setdefault("queueName", "lq")
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "wl",
            "namespace": "ns",
            "uid": "uid-1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
    }


# ------------------------------------------------------------------ valid objects


def test_example_manifests_parse_into_model_objects() -> None:
    docs = examples()
    flavor = model_of(docs["ResourceFlavor/h100"])
    assert flavor == m.ResourceFlavor(
        name="h100",
        node_labels={"cloud.example.com/accelerator": "nvidia-h100"},
        tolerations=[m.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
    )
    root = model_of(docs["Cohort/org-root"])
    assert root.parent is None
    assert root.resource_groups[0].flavors[0].resources["nvidia.com/gpu"].nominal == 8
    research = model_of(docs["Cohort/research"])
    assert research.parent == "org-root"
    assert research.fair_weight == 2.0
    quota = research.resource_groups[0].flavors[0].resources["nvidia.com/gpu"]
    assert (quota.nominal, quota.borrowing_limit, quota.lending_limit) == (0, 16, 0)

    cq = model_of(docs["ClusterQueue/team-a-cq"])
    assert cq.cohort == "research"
    quotas = cq.resource_groups[0].flavors[0].resources
    assert list(quotas) == ["cpu", "memory", "nvidia.com/gpu"]
    assert quotas["cpu"].nominal == 64_000  # milli-cores
    assert quotas["memory"].nominal == 512 * 2**30
    assert quotas["nvidia.com/gpu"] == m.ResourceQuota(
        nominal=16, borrowing_limit=8, lending_limit=4
    )
    assert cq.preemption == m.PreemptionPolicy(
        within_cluster_queue="LowerPriority",
        reclaim_within_cohort="Any",
        borrow_within_cohort="LowerPriority",
        max_priority_threshold=100,
    )
    assert cq.admission_mode == m.USAGE_BASED_AFS
    assert cq.namespace_selector is not None and cq.namespace_selector.matches({"any": "thing"})

    lq = model_of(docs["LocalQueue/team-a-queue"])
    assert (lq.key, lq.cluster_queue, lq.fair_weight) == ("team-a/team-a-queue", "team-a-cq", 1.0)
    wpc = model_of(docs["WorkloadPriorityClass/high"])
    assert wpc == m.PriorityClass(name="high", value=10000, kind="WorkloadPriorityClass")


def test_cluster_queue_defaults_follow_kueue() -> None:
    cq = model_of(cluster_queue())
    assert cq.namespace_selector is None  # omitted: no namespace is eligible
    assert cq.queueing_strategy == "BestEffortFIFO"
    assert cq.preemption == m.PreemptionPolicy("Never", "Never", "Never", None)
    assert cq.flavor_fungibility == m.FlavorFungibility("MayStopSearch", "TryNextFlavor", None)
    assert (cq.stop_policy, cq.fair_weight, cq.admission_mode, cq.cohort) == (
        "None",
        1.0,
        None,
        None,
    )
    parsed = api.parse_object(cluster_queue())
    assert parsed.spec.preemption.borrow_within_cohort.policy == "Never"


def test_empty_namespace_selector_matches_every_namespace() -> None:
    cq = model_of(cluster_queue(namespaceSelector={}))
    assert cq.namespace_selector == m.LabelSelector()
    assert cq.namespace_selector.matches({})


def test_namespace_selector_expressions_are_kept() -> None:
    sel = {
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}],
    }
    cq = model_of(cluster_queue(namespaceSelector=sel))
    assert cq.namespace_selector.matches({"team": "a", "tier": "x"})
    assert not cq.namespace_selector.matches({"team": "a", "tier": "y"})


def test_null_fields_mean_unset() -> None:
    cq = model_of(cluster_queue(queueingStrategy=None, namespaceSelector=None, preemption=None))
    assert cq.queueing_strategy == "BestEffortFIFO"
    assert cq.namespace_selector is None


def test_fair_sharing_weights_become_floats() -> None:
    assert model_of(cluster_queue(fairSharing={"weight": "0.5"})).fair_weight == 0.5
    assert model_of(cluster_queue(fairSharing={"weight": 0})).fair_weight == 0.0
    assert model_of(cluster_queue(fairSharing={"weight": "1500m"})).fair_weight == 1.5


def test_quantities_may_be_yaml_numbers() -> None:
    cq = model_of(cluster_queue(resourceGroups=one_group({"name": "cpu", "nominalQuota": 1.5})))
    assert cq.resource_groups[0].flavors[0].resources["cpu"].nominal == 1500


def test_resource_flavor_taints_and_tolerations() -> None:
    doc = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "spot"},
        "spec": {
            "nodeTaints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}],
            "tolerations": [{"key": "spot", "operator": "Equal", "value": "true"}],
        },
    }
    rf = model_of(doc)
    assert rf.node_taints == [m.Taint(key="spot", value="true", effect="NoSchedule")]
    assert rf.tolerations[0].tolerates(rf.node_taints[0])


def test_workload_pending_with_defaults() -> None:
    doc = workload()
    doc["spec"]["podSets"] = [{"template": POD_TEMPLATE}]
    wl = model_of(doc)
    assert wl.key == "ns/wl"
    assert wl.pod_sets == [m.PodSet(name="main", count=1, requests={"cpu": 500, "memory": 2**30})]
    assert (wl.priority, wl.priority_class, wl.active, wl.finished) == (0, None, True, False)
    assert wl.admission is None and wl.admission_time is None
    assert wl.creation_time == datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert wl.uid == "uid-1"


def test_admitted_workload_carries_admission_and_time() -> None:
    doc = workload(
        priorityClassRef={
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": "high",
        },
        priority=100,
    )
    doc["status"] = {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "f1", "memory": "f1"},
                    "resourceUsage": {"cpu": "1", "memory": "2Gi"},
                    "count": 2,
                }
            ],
        },
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:10:00Z",
            },
            {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-01T00:10:00Z"},
        ],
        "resourceRequests": [{"name": "main"}],  # other status content is ignored
    }
    wl = model_of(doc)
    assert (wl.priority, wl.priority_class, wl.priority_class_kind) == (
        100,
        "high",
        "WorkloadPriorityClass",
    )
    assert wl.admission == m.Admission(
        cluster_queue="cq",
        pod_set_assignments=[
            m.PodSetAssignment(
                name="main",
                flavors={"cpu": "f1", "memory": "f1"},
                resource_usage={"cpu": 1000, "memory": 2 * 2**30},
                count=2,
            )
        ],
    )
    assert wl.admission.usage() == {("f1", "cpu"): 1000, ("f1", "memory"): 2 * 2**30}
    assert wl.admission_time == datetime(2026, 1, 1, 0, 10, tzinfo=UTC).timestamp()


def test_admission_without_quota_reserved_is_pending() -> None:
    doc = workload()
    doc["status"] = {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [{"name": "main", "resourceUsage": {"cpu": "1"}}],
        },
        "conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}],
    }
    assert model_of(doc).admission is None


def test_finished_inactive_and_evicted_workloads() -> None:
    doc = workload(active=False)
    doc["status"] = {
        "conditions": [
            {"type": "Finished", "status": "True", "reason": "Succeeded"},
            {
                "type": "Evicted",
                "status": "True",
                "reason": "PodsReadyTimeout",
                "lastTransitionTime": "2026-01-02T00:00:00Z",
            },
        ]
    }
    wl = model_of(doc)
    assert wl.finished and not wl.active
    assert wl.requeue_time == datetime(2026, 1, 2, tzinfo=UTC).timestamp()
    assert wl.queue_order_time == wl.requeue_time


def test_partial_admission_min_count() -> None:
    doc = workload(
        podSets=[{"name": "workers", "count": 8, "minCount": 2, "template": POD_TEMPLATE}]
    )
    assert model_of(doc).pod_sets[0].min_count == 2


def test_local_queue_admission_fair_sharing_status() -> None:
    doc = examples()["LocalQueue/team-a-queue"]
    doc["status"] = {
        "pendingWorkloads": 3,
        "fairSharing": {
            "weightedShare": 0,
            "admissionFairSharingStatus": {
                "consumedResources": {"cpu": "1500m", "nvidia.com/gpu": "2"},
                "lastUpdate": "2026-01-01T00:00:00Z",
            },
        },
    }
    lq = model_of(doc)
    assert lq.consumed_resources == {"cpu": 1500, "nvidia.com/gpu": 2}
    assert lq.last_update == datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def test_priority_class_and_namespace() -> None:
    pc = model_of(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "p"},
            "value": 7,
            "globalDefault": True,
        }
    )
    assert pc == m.PriorityClass(name="p", value=7, kind="PriorityClass", global_default=True)
    ns = model_of(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "team-a", "labels": {"tier": "gold"}},
        }
    )
    assert ns == m.Namespace(
        name="team-a", labels={"tier": "gold", "kubernetes.io/metadata.name": "team-a"}
    )


def test_status_of_cluster_queue_is_accepted() -> None:
    doc = cluster_queue()
    doc["status"] = {"pendingWorkloads": 1, "conditions": [{"type": "Active", "status": "True"}]}
    assert model_of(doc).name == "cq"


def test_yaml_timestamps_are_accepted() -> None:
    doc = yaml.safe_load(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w, creationTimestamp: 2026-01-01T00:00:05Z}\n"
        "spec: {podSets: [{template: {spec: {containers: [{name: c}]}}}]}\n"
    )
    wl = model_of(doc)
    assert wl.creation_time == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC).timestamp()
    assert wl.namespace == "default"


# ------------------------------------------------------------------ v1beta1


def test_v1beta1_cluster_queue_is_converted() -> None:
    doc = cluster_queue(
        cohort="research",
        flavorFungibility={"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"},
        admissionChecks=["prov"],
    )
    doc["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    parsed = api.parse_object(doc)
    assert parsed.spec.cohort_name == "research"
    assert parsed.spec.admission_checks_strategy.admission_checks[0].name == "prov"
    cq = api.to_model(parsed)
    assert cq.cohort == "research"
    assert cq.flavor_fungibility == m.FlavorFungibility("MayStopSearch", "MayStopSearch", None)


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("kueue.x-k8s.io/workloadpriorityclass", "WorkloadPriorityClass"),
        ("scheduling.k8s.io/priorityclass", "PriorityClass"),
    ],
)
def test_v1beta1_workload_priority_class_becomes_ref(source: str, kind: str) -> None:
    doc = workload(priorityClassName="high", priorityClassSource=source, priority=5)
    doc["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    parsed = api.parse_object(doc)
    ref = parsed.spec.priority_class_ref
    assert (ref.kind, ref.name) == (kind, "high")
    wl = api.to_model(parsed)
    assert (wl.priority_class, wl.priority_class_kind, wl.priority) == ("high", kind, 5)


def test_v1beta1_workload_without_source_has_no_ref() -> None:
    doc = workload(priorityClassName="high", priorityClassSource="")
    doc["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    assert api.parse_object(doc).spec.priority_class_ref is None


def test_v1beta1_errors_keep_v1beta1_field_names() -> None:
    doc = cluster_queue(cohort="Not_Valid")
    doc["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    with pytest.raises(api.InputError) as info:
        api.parse_object(doc)
    assert info.value.path == "spec.cohort"
    doc = cluster_queue(cohortName="x")
    doc["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    with pytest.raises(api.InputError) as info:
        api.parse_object(doc)
    assert (info.value.path, info.value.message) == ("spec.cohortName", "unknown field")


def test_v1beta2_rejects_v1beta1_field_names() -> None:
    with pytest.raises(api.InputError) as info:
        api.parse_object(cluster_queue(cohort="research"))
    assert (info.value.path, info.value.message) == ("spec.cohort", "unknown field")


# ------------------------------------------------------------------ bad input


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


# ------------------------------------------------------------------ JSON schema


def test_json_schema_is_crd_friendly() -> None:
    schema = kinds.ClusterQueue.model_json_schema(by_alias=True, schema_generator=KubeJsonSchema)
    spec = schema["$defs"]["ClusterQueueSpec"]["properties"]
    assert spec["queueingStrategy"] == {
        "default": "BestEffortFIFO",
        "enum": ["StrictFIFO", "BestEffortFIFO"],
        "type": "string",
    }
    assert spec["resourceGroups"]["maxItems"] == 16
    assert spec["flavorFungibility"]["default"] == {}
    assert "anyOf" not in spec["cohortName"] and "default" not in spec["cohortName"]
    quota = schema["$defs"]["ResourceQuota"]["properties"]["nominalQuota"]
    assert quota["x-kubernetes-int-or-string"] is True
    wl = kinds.Workload.model_json_schema(by_alias=True, schema_generator=KubeJsonSchema)
    assert wl["$defs"]["PodSet"]["properties"]["template"]["x-kubernetes-preserve-unknown-fields"]
    assert wl["$defs"]["WorkloadSpec"]["properties"]["podSets"]["maxItems"] == 18
