"""Kueue documents the queues/ API tests share: the example manifests and builders of valid objects.

The parsing tests start from the example manifests of docs/semantics.md §1.9 and from
small valid ClusterQueues and Workloads; keeping them in one place means every test
module parses the same documents the docs show.
"""

from __future__ import annotations

from typing import Any

import yaml

from queues.api import parse as api

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
