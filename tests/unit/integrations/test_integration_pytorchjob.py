"""PyTorchJob (kubeflow.org/v1): podSets master and worker, suspended at
spec.runPolicy.suspend, finished by a Succeeded/Failed condition.

The tests play training-operator (they write the job's status). The CRD served to both
backends is ``tests/support/crds/kubeflow.org_pytorchjobs.yaml``.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from admission.integrations.framework.composition import workload_model
from admission.integrations.framework.fields import IntegrationError, apply_merge_patch
from admission.integrations.kinds.pytorchjob import PYTORCHJOB
from queues.model import PriorityClass
from tests.support.integration_kit import (
    KindCase,
    Q,
    Roles,
    gang_scenario,
    meta,
    pod_template,
    review,
    run_lifecycle,
)


def pytorchjob(name: str, roles: Roles, metadata: dict[str, Any]) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": {
                role.capitalize(): {
                    "replicas": pods,
                    "restartPolicy": "OnFailure",
                    "template": pod_template(),
                }
                for role, pods in roles
            },
        },
    }


def succeeded(_obj: dict) -> dict:
    return {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
            {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded",
             "message": "PyTorchJob train is successfully completed."},
        ],
        "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"succeeded": 4}},
    }  # fmt: skip


CASE = KindCase(PYTORCHJOB, pytorchjob, [("master", 1), ("worker", 4)], succeeded)


def model(obj: dict, **kw: Any) -> Any:
    return workload_model(
        PYTORCHJOB,
        obj,
        workload_priority_classes=kw.get("wpcs", {}),
        priority_classes=kw.get("pcs", {}),
    )


# ----------------------------------------------------------------------- the integration


def test_master_then_worker_podsets_named_in_lower_case() -> None:
    job = pytorchjob("train", [("worker", 8), ("master", 1)], meta("train", uid="u"))
    del job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"]  # defaults to 1
    wl = model(job)
    assert [(p.name, p.count) for p in wl.pod_sets] == [("master", 1), ("worker", 8)]
    assert wl.name.startswith("pytorchjob-train-")


def test_the_run_policy_priority_class_comes_first() -> None:
    job = pytorchjob("train", CASE.roles, meta("train", queue="lq"))
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "low"
    pcs = {n: PriorityClass(n, v, kind="PriorityClass") for n, v in (("low", 1), ("high", 9))}
    assert model(job, pcs=pcs).priority == 1
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "high"}
    assert model(job, pcs=pcs).priority == 9
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "missing"}
    with pytest.raises(IntegrationError, match=r"spec\.runPolicy\.schedulingPolicy\.priorityClass"):
        model(job, pcs=pcs)


def test_an_unknown_replica_type_is_refused_naming_the_field() -> None:
    job = pytorchjob("train", CASE.roles, meta("train"))
    job["spec"]["pytorchReplicaSpecs"]["Chief"] = copy.deepcopy(
        job["spec"]["pytorchReplicaSpecs"]["Master"]
    )
    with pytest.raises(IntegrationError, match=r"spec\.pytorchReplicaSpecs: unknown.*Chief"):
        model(job)


def test_start_and_stop_patch_each_replica_template_and_run_policy_suspend() -> None:
    from admission.integrations.framework.podset_info import PodSetInfo, original_info

    job = pytorchjob("train", CASE.roles, meta("train"))
    job["spec"]["runPolicy"]["suspend"] = True
    infos = [
        PodSetInfo("master", 1, {"pool": "fa"}, [], {"kueue.x-k8s.io/podset": "master"}),
        PodSetInfo("worker", 4, {"pool": "fb"}, [], {"kueue.x-k8s.io/podset": "worker"}),
    ]
    patch = PYTORCHJOB.run_patch(job, infos)
    assert patch["spec"]["runPolicy"] == {"suspend": False}
    worker = patch["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert worker["spec"] == {"nodeSelector": {"pool": "fb"}}
    started = apply_merge_patch(job, patch)
    originals = [original_info({"name": n, "count": c, "template": pod_template()})
                 for n, c in CASE.roles]  # fmt: skip
    step = PYTORCHJOB.stop_step(started, originals)
    assert step is not None
    assert step.patch["spec"]["runPolicy"] == {"suspend": True}
    stopped = apply_merge_patch(started, step.patch)
    assert stopped == job  # suspended, every template as it was
    assert PYTORCHJOB.stop_step(stopped, originals) is None


# ----------------------------------------------------------------------------- webhooks


def test_the_mutating_webhook_suspends_through_the_run_policy() -> None:
    allowed, patch, _ = review(PYTORCHJOB, pytorchjob("a", CASE.roles, meta("a")), mutating=True)
    assert allowed and patch == [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]
    no_policy = pytorchjob("b", CASE.roles, meta("b"))
    del no_policy["spec"]["runPolicy"]
    allowed, patch, _ = review(PYTORCHJOB, no_policy, mutating=True)
    assert allowed and patch == [
        {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}
    ]


def test_the_queue_label_of_a_running_pytorchjob_is_immutable() -> None:
    old = pytorchjob("a", CASE.roles, meta("a"))
    old["spec"]["runPolicy"]["suspend"] = False
    new = copy.deepcopy(old)
    new["metadata"]["labels"][Q] = "other"
    allowed, _, message = review(PYTORCHJOB, new, mutating=False, operation="UPDATE", old=old)
    assert not allowed and "field is immutable" in message


def test_bad_topology_annotations_of_a_replica_template_are_denied() -> None:
    job = pytorchjob("a", CASE.roles, meta("a"))
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-slice-size": "2"}
    }
    allowed, _, message = review(PYTORCHJOB, job, mutating=False)
    assert not allowed
    assert "spec.pytorchReplicaSpecs.Worker.template.metadata.annotations" in message


# ------------------------------------------------------------------------- plan, serve


def test_plan_admits_a_pytorchjob_only_when_master_and_workers_fit(tmp_path: Path) -> None:
    gang_scenario(CASE, tmp_path)


def test_a_pytorchjob_is_admitted_started_per_podset_preempted_restored_and_finished(
    tmp_path: Path, backend: Any
) -> None:
    asyncio.run(run_lifecycle(CASE, tmp_path, backend))
