"""queues.api.parse and queues.api.kinds turn valid Kueue objects into queues.model objects.

The example manifests and hand-built objects parse with Kueue's defaults, null fields
mean unset, quantities and timestamps take the forms YAML gives them, and workload status
(admission, conditions, partial admission) becomes the model's state; the kinds' JSON
schema stays one a CRD can carry. Bad input and the v1beta1 conversion have modules of
their own.
"""

from __future__ import annotations

from datetime import UTC, datetime

import yaml

from queues import model as m
from queues.api import kinds
from queues.api import parse as api
from queues.api.fields import KubeJsonSchema

from ._support import POD_TEMPLATE, cluster_queue, examples, model_of, one_group, workload


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
