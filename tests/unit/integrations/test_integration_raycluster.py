"""RayCluster (ray.io/v1): podSets head and one per worker group, suspended at
spec.suspend, never finished (it serves until deleted).

The tests play KubeRay (they write the cluster's status). The CRD served to both
backends is ``tests/support/crds/ray.io_rayclusters.yaml``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.integrations.framework.composition import workload_model
from admission.integrations.kinds.raycluster import RAYCLUSTER
from tests.support.integration_kit import (
    KindCase,
    Roles,
    gang_scenario,
    meta,
    pod_template,
    review,
    run_lifecycle,
)


def raycluster(name: str, roles: Roles, metadata: dict[str, Any]) -> dict:
    """``roles``: ("head", 1) first, then the worker groups."""
    (head, _), *workers = roles
    assert head == "head"
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": metadata,
        "spec": {
            "rayVersion": "2.9.0",
            "headGroupSpec": {"rayStartParams": {}, "template": pod_template()},
            "workerGroupSpecs": [
                {
                    "groupName": group,
                    "replicas": pods,
                    "minReplicas": 0,
                    "maxReplicas": pods,
                    "rayStartParams": {},
                    "template": pod_template(),
                }
                for group, pods in workers
            ],
        },
    }


CASE = KindCase(RAYCLUSTER, raycluster, [("head", 1), ("gpu-workers", 4)], None)


def test_head_and_worker_group_podsets_counting_hosts() -> None:
    rc = raycluster("ray", [("head", 1), ("Small", 2), ("tpu", 2)], meta("ray", uid="u"))
    rc["spec"]["workerGroupSpecs"][1]["numOfHosts"] = 4
    del rc["spec"]["workerGroupSpecs"][0]["replicas"]  # defaults to 1
    wl = workload_model(RAYCLUSTER, rc, workload_priority_classes={}, priority_classes={})
    assert [(p.name, p.count) for p in wl.pod_sets] == [("head", 1), ("small", 1), ("tpu", 8)]
    assert wl.name.startswith("raycluster-ray-")


def test_a_ready_cluster_is_active_and_never_finishes() -> None:
    rc = raycluster("ray", CASE.roles, meta("ray"))
    assert not RAYCLUSTER.is_active(rc) and RAYCLUSTER.finished(rc) is None
    rc["status"] = {"state": "ready"}
    assert RAYCLUSTER.is_active(rc) and RAYCLUSTER.pods_ready(rc, 5)
    rc["status"] = {"state": "failed", "reason": "x"}
    assert RAYCLUSTER.finished(rc) is None


def test_the_webhook_suspends_and_refuses_autoscaling_and_a_worker_group_named_head() -> None:
    allowed, patch, _ = review(RAYCLUSTER, raycluster("a", CASE.roles, meta("a")), mutating=True)
    assert allowed and patch == [{"op": "add", "path": "/spec/suspend", "value": True}]
    bad = raycluster("b", [("head", 1), ("head", 2)], meta("b"))
    bad["spec"]["enableInTreeAutoscaling"] = True
    allowed, _, message = review(RAYCLUSTER, bad, mutating=False)
    assert not allowed
    assert "spec.enableInTreeAutoscaling: Invalid value: true" in message
    assert 'spec.workerGroupSpecs[0].groupName: Forbidden: "head" is reserved' in message


def test_plan_admits_a_raycluster_only_when_head_and_workers_fit(tmp_path: Path) -> None:
    gang_scenario(CASE, tmp_path)


def test_a_raycluster_is_admitted_started_per_podset_preempted_restored_and_deleted(
    tmp_path: Path, backend: Any
) -> None:
    asyncio.run(run_lifecycle(CASE, tmp_path, backend))
