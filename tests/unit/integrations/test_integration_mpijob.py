"""MPIJob (kubeflow.org/v2beta1): podSets launcher and worker, suspended at
spec.runPolicy.suspend, finished by a Succeeded/Failed condition.

The tests play mpi-operator (they write the job's status). The CRD served to both
backends is ``tests/support/crds/kubeflow.org_mpijobs.yaml``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.integrations.framework.composition import workload_model
from admission.integrations.kinds.mpijob import MPIJOB
from tests.support.integration_kit import (
    KindCase,
    Roles,
    gang_scenario,
    meta,
    pod_template,
    review,
    run_lifecycle,
)


def mpijob(name: str, roles: Roles, metadata: dict[str, Any]) -> dict:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": metadata,
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                role.capitalize(): {"replicas": pods, "template": pod_template()}
                for role, pods in roles
            },
        },
    }


def succeeded(_obj: dict) -> dict:
    return {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "MPIJobCreated"},
            {"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded",
             "message": "MPIJob team-a/pi successfully completed."},
        ],
        "replicaStatuses": {"Launcher": {"succeeded": 1}, "Worker": {}},
    }  # fmt: skip


CASE = KindCase(MPIJOB, mpijob, [("launcher", 1), ("worker", 4)], succeeded)


def test_launcher_then_worker_podsets() -> None:
    job = mpijob("pi", [("worker", 8), ("launcher", 1)], meta("pi", uid="u"))
    del job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"]  # defaults to 1
    wl = workload_model(MPIJOB, job, workload_priority_classes={}, priority_classes={})
    assert [(p.name, p.count) for p in wl.pod_sets] == [("launcher", 1), ("worker", 8)]
    assert wl.name.startswith("mpijob-pi-")


def test_running_and_active_replicas_say_ready_and_active() -> None:
    job = mpijob("pi", CASE.roles, meta("pi"))
    assert not MPIJOB.is_active(job) and not MPIJOB.pods_ready(job, 5)
    job["status"] = {"replicaStatuses": {"Worker": {"active": 4}},
                     "conditions": [{"type": "Running", "status": "True"}]}  # fmt: skip
    assert MPIJOB.is_active(job) and MPIJOB.pods_ready(job, 5)
    job["status"]["conditions"].append({"type": "Failed", "status": "True", "reason": "OOM"})
    finished = MPIJOB.finished(job)
    assert finished is not None and not finished.succeeded and finished.message == "OOM"


def test_the_mutating_webhook_suspends_through_the_run_policy() -> None:
    allowed, patch, _ = review(MPIJOB, mpijob("pi", CASE.roles, meta("pi")), mutating=True)
    assert allowed and patch == [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]


def test_plan_admits_an_mpijob_only_when_launcher_and_workers_fit(tmp_path: Path) -> None:
    gang_scenario(CASE, tmp_path)


def test_an_mpijob_is_admitted_started_per_podset_preempted_restored_and_finished(
    tmp_path: Path, backend: Any
) -> None:
    asyncio.run(run_lifecycle(CASE, tmp_path, backend))
