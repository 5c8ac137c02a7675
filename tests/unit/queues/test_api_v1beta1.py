"""queues.api.parse converts Kueue v1beta1 objects to v1beta2 and keeps the two versions apart.

Clusters still send v1beta1 objects; they are converted (a priority class becomes a
reference) and their errors name the v1beta1 fields the user wrote, while v1beta2 refuses
v1beta1 field names.
"""

from __future__ import annotations

import pytest

from queues import model as m
from queues.api import parse as api

from ._support import cluster_queue, workload


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
