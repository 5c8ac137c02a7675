"""Kueue's v1beta1 objects in their v1beta2 form, as Kueue's conversion webhook makes them
(apis/kueue/v1beta1/*_conversion.go).

``spec.cohort`` → ``spec.cohortName``; ``priorityClassName`` + ``priorityClassSource``
→ ``priorityClassRef``; fungibility ``Borrow``/``Preempt`` → ``MayStopSearch``;
``admissionChecks`` → ``admissionChecksStrategy``. The renamed paths come back with the
new document, so error paths keep v1beta1 names.
"""

from __future__ import annotations

from typing import Any

from queues.api.fields import Problems
from queues.api.kinds import KUEUE_GROUP

__all__ = ["to_v1beta2"]

WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PC_SOURCE = "scheduling.k8s.io/priorityclass"


def to_v1beta2(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], Problems]:
    """The v1beta2 form of a v1beta1 object, the renamed paths (new → old), and problems."""
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return doc, {}, []
    spec = dict(spec)
    if doc["kind"] == "ClusterQueue":
        renames, problems = _convert_cluster_queue_spec(spec)
    elif doc["kind"] == "Workload":
        renames, problems = _convert_workload_spec(spec)
        status = doc.get("status")
        if isinstance(status, dict) and "accumulatedPastExexcutionTimeSeconds" in status:
            status = dict(status)
            status["accumulatedPastExecutionTimeSeconds"] = status.pop(
                "accumulatedPastExexcutionTimeSeconds"
            )
            doc = {**doc, "status": status}
    else:
        return doc, {}, []
    return {**doc, "spec": spec}, renames, problems


def _convert_cluster_queue_spec(spec: dict[str, Any]) -> tuple[dict[str, str], Problems]:
    renames: dict[str, str] = {}
    problems: Problems = []
    if "cohortName" in spec:
        problems.append(("spec.cohortName", "unknown field"))
    if "cohort" in spec:
        spec["cohortName"] = spec.pop("cohort")
        renames["spec.cohortName"] = "spec.cohort"
    fungibility = spec.get("flavorFungibility")
    if isinstance(fungibility, dict):
        fungibility = dict(fungibility)
        if fungibility.get("whenCanBorrow") == "Borrow":
            fungibility["whenCanBorrow"] = "MayStopSearch"
        if fungibility.get("whenCanPreempt") == "Preempt":
            fungibility["whenCanPreempt"] = "MayStopSearch"
        spec["flavorFungibility"] = fungibility
    if "admissionChecks" in spec:
        checks = spec.pop("admissionChecks")
        if checks is not None and not isinstance(checks, list):
            problems.append(("spec.admissionChecks", "must be of type array"))
        elif checks and spec.get("admissionChecksStrategy"):
            problems.append(
                (
                    "spec.admissionChecks",
                    "Either admissionChecks or admissionChecksStrategy can be set, but not both",
                )
            )
        elif checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
            renames["spec.admissionChecksStrategy.admissionChecks"] = "spec.admissionChecks"
    return renames, problems


def _convert_workload_spec(spec: dict[str, Any]) -> tuple[dict[str, str], Problems]:
    renames: dict[str, str] = {}
    problems: Problems = []
    if "priorityClassRef" in spec:
        problems.append(("spec.priorityClassRef", "unknown field"))
    source = spec.pop("priorityClassSource", "")
    pc_name = spec.pop("priorityClassName", None)
    if source not in ("", None, WPC_SOURCE, POD_PC_SOURCE):
        problems.append(
            (
                "spec.priorityClassSource",
                f'Unsupported value: "{source}": supported values: "{WPC_SOURCE}", '
                f'"{POD_PC_SOURCE}", ""',
            )
        )
    elif pc_name is not None and source == WPC_SOURCE:
        spec["priorityClassRef"] = {
            "group": KUEUE_GROUP,
            "kind": "WorkloadPriorityClass",
            "name": pc_name,
        }
    elif pc_name is not None and source == POD_PC_SOURCE:
        spec["priorityClassRef"] = {
            "group": "scheduling.k8s.io",
            "kind": "PriorityClass",
            "name": pc_name,
        }
    if "priorityClassRef" in spec:
        renames["spec.priorityClassRef.name"] = "spec.priorityClassName"
        renames["spec.priorityClassRef"] = "spec.priorityClassName"
    return renames, problems
