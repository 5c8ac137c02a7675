"""RayJob (ray.io/v1): the cluster's podSets plus the submitter's, suspended at
spec.suspend, finished by status.jobDeploymentStatus; on an existing cluster not managed.

The tests play KubeRay (they write the job's status). The CRD served to both backends is
``tests/support/crds/ray.io_rayjobs.yaml``.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from admission.integrations.framework.composition import workload_body, workload_model
from admission.integrations.framework.fields import apply_merge_patch
from admission.integrations.framework.podset_info import flavor_info, original_info
from admission.integrations.kinds.rayjob import RAYJOB
from queues.model import ResourceFlavor
from tests.support.integration_kit import (
    KindCase,
    Roles,
    gang_scenario,
    meta,
    pod_template,
    review,
    run_lifecycle,
)


def rayjob(name: str, roles: Roles, metadata: dict[str, Any]) -> dict:
    """``roles``: ("head", 1), the worker groups, then ("submitter", 1)."""
    (head, _), *workers, (submitter, _) = roles
    assert (head, submitter) == ("head", "submitter")
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": metadata,
        "spec": {
            "entrypoint": "python /home/ray/samples/train.py",
            "shutdownAfterJobFinishes": True,
            "submitterPodTemplate": pod_template(),
            "rayClusterSpec": {
                "rayVersion": "2.9.0",
                "headGroupSpec": {"rayStartParams": {}, "template": pod_template()},
                "workerGroupSpecs": [
                    {
                        "groupName": group,
                        "replicas": pods,
                        "rayStartParams": {},
                        "template": pod_template(),
                    }
                    for group, pods in workers
                ],
            },
        },
    }


def complete(_obj: dict) -> dict:
    return {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED",
            "message": "Job finished successfully."}  # fmt: skip


CASE = KindCase(RAYJOB, rayjob, [("head", 1), ("workers", 2), ("submitter", 1)], complete)


def model(obj: dict) -> Any:
    return workload_model(RAYJOB, obj, workload_priority_classes={}, priority_classes={})


def test_cluster_podsets_then_the_submitter_with_kuberays_default_template() -> None:
    job = rayjob("train", CASE.roles, meta("train", uid="u"))
    del job["spec"]["submitterPodTemplate"]
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = (
        "rayproject/ray:2.9.0"
    )
    wl = model(job)
    assert [(p.name, p.count) for p in wl.pod_sets] == CASE.roles
    assert wl.pod_sets[2].requests == {"cpu": 500, "memory": 200 * 2**20}
    assert wl.name.startswith("rayjob-train-")


def test_in_sidecar_mode_the_head_podset_carries_the_submitter() -> None:
    job = rayjob("train", CASE.roles, meta("train"))
    job["spec"]["submissionMode"] = "SidecarMode"
    wl = model(job)
    assert [(p.name, p.count) for p in wl.pod_sets] == [("head", 1), ("workers", 2)]
    assert wl.pod_sets[0].requests["cpu"] == 1500  # 1 cpu + the sidecar's 500m
    job["spec"]["submissionMode"] = "HTTPMode"
    assert [p.name for p in model(job).pod_sets] == ["head", "workers"]


def test_starting_writes_the_default_submitter_template_with_its_flavor() -> None:
    job = rayjob("train", CASE.roles, meta("train"))
    del job["spec"]["submitterPodTemplate"]
    job["spec"]["suspend"] = True
    flavors = {"head": "fa", "workers": "fb", "submitter": "fa"}
    infos = [flavor_info(n, c, [ResourceFlavor(flavors[n], node_labels={"pool": flavors[n]})])
             for n, c in CASE.roles]  # fmt: skip
    started = apply_merge_patch(job, RAYJOB.run_patch(job, infos))
    assert started["spec"]["suspend"] is False
    submitter = started["spec"]["submitterPodTemplate"]
    assert submitter["spec"]["nodeSelector"] == {"pool": "fa"}
    assert submitter["spec"]["containers"][0]["name"] == "ray-job-submitter"
    workers = started["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    assert workers["spec"]["nodeSelector"] == {"pool": "fb"}
    body = workload_body(RAYJOB, job, model(job), RAYJOB.roles(job))
    originals = [original_info(ps) for ps in body["spec"]["podSets"]]
    step = RAYJOB.stop_step(started, originals)
    assert step is not None
    stopped = apply_merge_patch(started, step.patch)
    assert stopped["spec"]["suspend"] is True
    assert "nodeSelector" not in stopped["spec"]["submitterPodTemplate"]["spec"]
    assert stopped["spec"]["rayClusterSpec"] == job["spec"]["rayClusterSpec"]
    assert RAYJOB.stop_step(stopped, originals) is None
    # a never-started RayJob is stopped without gaining a submitter template
    running = copy.deepcopy(job)
    running["spec"]["suspend"] = False
    assert RAYJOB.stop_step(running, originals).patch == {"spec": {"suspend": True}}


def test_finished_active_and_ready_come_from_the_deployment_and_cluster_status() -> None:
    job = rayjob("train", CASE.roles, meta("train"))
    assert not RAYJOB.is_active(job) and RAYJOB.finished(job) is None
    job["status"] = {"jobDeploymentStatus": "Running", "rayClusterStatus": {"state": "ready"}}
    assert RAYJOB.is_active(job) and RAYJOB.pods_ready(job, 4)
    job["status"] = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "message": "oom"}
    finished = RAYJOB.finished(job)
    assert finished is not None and not finished.succeeded and finished.message == "oom"


def test_a_rayjob_on_an_existing_cluster_is_not_managed() -> None:
    job = rayjob("train", CASE.roles, meta("train"))
    del job["spec"]["rayClusterSpec"]
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    assert RAYJOB.skip(job)
    assert review(RAYJOB, job, mutating=True)[:2] == (True, [])
    assert review(RAYJOB, job, mutating=False)[0]


def test_the_webhook_refuses_what_would_make_the_quota_wrong() -> None:
    job = rayjob("train", CASE.roles, meta("train"))
    job["spec"]["shutdownAfterJobFinishes"] = False
    job["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    allowed, _, message = review(RAYJOB, job, mutating=False)
    assert not allowed
    assert "spec.shutdownAfterJobFinishes: Invalid value: false" in message
    assert "spec.rayClusterSpec.enableInTreeAutoscaling: Invalid value: true" in message
    both = rayjob("b", CASE.roles, meta("b"))
    both["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    allowed, _, message = review(RAYJOB, both, mutating=False)
    assert not allowed and "should not use an existing cluster" in message
    allowed, patch, _ = review(RAYJOB, rayjob("c", CASE.roles, meta("c")), mutating=True)
    assert allowed and patch == [{"op": "add", "path": "/spec/suspend", "value": True}]


def test_plan_admits_a_rayjob_only_when_cluster_and_submitter_fit(tmp_path: Path) -> None:
    gang_scenario(CASE, tmp_path)


def test_a_rayjob_is_admitted_started_per_podset_preempted_restored_and_finished(
    tmp_path: Path, backend: Any
) -> None:
    asyncio.run(run_lifecycle(CASE, tmp_path, backend))
