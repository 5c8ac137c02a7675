"""MultiKueue's rules for each job kind it dispatches (Kueue's
pkg/controller/jobs/*/*_multikueue_adapter.go): where ``managedBy`` is and Kueue's
message when it is not MultiKueue's, what the worker's copy keeps and drops, which
status comes back, and when the worker's job counts as finished. The webhook's
``managedBy`` defaulting writes the field where the adapter reads it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admission.kube.multikueue.adapters import ADAPTERS
from tests.support.integration_kit import KindCase, meta
from tests.unit.integrations import (
    test_integration_jobset,
    test_integration_mpijob,
    test_integration_pytorchjob,
    test_integration_raycluster,
    test_integration_rayjob,
    test_integration_trainjob,
)
from webhooks.handlers.managed_by import OWN_CONTROLLER

MK = "kueue.x-k8s.io/multikueue"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
ORIGIN = "kueue.x-k8s.io/multikueue-origin"

CASES: dict[str, KindCase] = {
    "JobSet": test_integration_jobset.CASE,
    "TrainJob": test_integration_trainjob.CASE,
    "PyTorchJob": test_integration_pytorchjob.CASE,
    "MPIJob": test_integration_mpijob.CASE,
    "RayJob": test_integration_rayjob.CASE,
    "RayCluster": test_integration_raycluster.CASE,
}
#: where each kind keeps managedBy, and the field Kueue's message names
MANAGED_BY = {
    "JobSet": (("spec", "managedBy"), "spec.managedBy"),
    "TrainJob": (("spec", "managedBy"), "spec.managedBy"),
    "PyTorchJob": (("spec", "runPolicy", "managedBy"), "spec.managedBy"),
    "MPIJob": (("spec", "runPolicy", "managedBy"), "spec.runPolicy.managedBy"),
    "RayJob": (("spec", "managedBy"), "spec.managedBy"),
    "RayCluster": (("spec", "managedBy"), "spec.managedBy"),
}


def set_path(obj: dict, path: tuple[str, ...], value: Any) -> None:
    *parents, leaf = path
    for key in parents:
        obj = obj.setdefault(key, {})
    obj[leaf] = value


def get_path(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def manager_job(kind: str, managed_by: str | None = MK) -> dict:
    case = CASES[kind]
    obj = case.make("j", case.roles, meta("j", uid="u1"))
    obj["metadata"]["annotations"] = {"team": "a"}
    obj["metadata"]["resourceVersion"] = "7"
    if managed_by is not None:
        set_path(obj, MANAGED_BY[kind][0], managed_by)
    return obj


def test_every_kind_with_a_case_has_an_adapter() -> None:
    assert set(ADAPTERS) == {"Job", *CASES}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_job_not_managed_by_multikueue_is_named_with_kueues_message(kind: str) -> None:
    adapter = ADAPTERS[kind]
    _, field = MANAGED_BY[kind]
    assert adapter.unmanaged_reason(manager_job(kind)) == ""
    assert adapter.unmanaged_reason(manager_job(kind, managed_by=None)) == (
        f'Expecting {field} to be "{MK}" not ""'
    )
    assert adapter.unmanaged_reason(manager_job(kind, managed_by="ray.io/kuberay-operator")) == (
        f'Expecting {field} to be "{MK}" not "ray.io/kuberay-operator"'
    )


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_copy_keeps_meta_and_spec_but_not_managed_by_and_names_the_workload(kind: str) -> None:
    local = manager_job(kind)
    before = copy.deepcopy(local)
    remote = ADAPTERS[kind].remote_copy(local, "wl-j", "mgr")
    assert local == before  # the manager's job is not touched
    assert remote["apiVersion"] == local["apiVersion"] and remote["kind"] == kind
    assert remote["metadata"] == {
        "name": "j",
        "namespace": local["metadata"]["namespace"],
        "labels": {**local["metadata"]["labels"], PREBUILT: "wl-j", ORIGIN: "mgr"},
        "annotations": {"team": "a"},
    }
    path = MANAGED_BY[kind][0]
    assert get_path(remote, path) is None
    expected = copy.deepcopy(local["spec"])
    get_path({"spec": expected}, path[:-1]).pop(path[-1])
    assert remote["spec"] == expected
    assert "status" not in remote


def test_a_trainjobs_copy_drops_kueues_runtime_patch_and_keeps_the_users() -> None:
    local = manager_job("TrainJob")
    users = {"manager": "team-a/tuner", "trainingRuntimeSpec": {"template": {}}}
    kueues = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {}}}
    local["spec"]["runtimePatches"] = [users, kueues]
    remote = ADAPTERS["TrainJob"].remote_copy(local, "wl-j", "mgr")
    assert remote["spec"]["runtimePatches"] == [users]
    local["spec"]["runtimePatches"] = [kueues]
    assert "runtimePatches" not in ADAPTERS["TrainJob"].remote_copy(local, "w", "m")["spec"]


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_workers_status_replaces_the_managers_even_while_suspended(kind: str) -> None:
    """Kueue's ``copyJobStatus`` of these kinds copies whenever the remote exists;
    only the batch/v1 Job waits for the manager's job to start."""
    adapter = ADAPTERS[kind]
    local = manager_job(kind)
    set_path(local, adapter.integration.suspend_path, True)
    remote = copy.deepcopy(local)
    set_path(remote, adapter.integration.suspend_path, False)
    remote["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    assert adapter.status_to_copy(local, remote) == remote["status"]
    local["status"] = copy.deepcopy(remote["status"])
    assert adapter.status_to_copy(local, remote) is None  # nothing new


@pytest.mark.parametrize("kind", sorted(kind for kind, c in CASES.items() if c.finished_status))
def test_the_workers_job_is_finished_by_its_kinds_own_rule(kind: str) -> None:
    case, adapter = CASES[kind], ADAPTERS[kind]
    job = manager_job(kind)
    assert not adapter.finished(job)
    job["status"] = case.finished_status(job)  # type: ignore[misc]
    assert adapter.finished(job)


def test_a_raycluster_never_finishes() -> None:
    cluster = manager_job("RayCluster")
    cluster["status"] = {"state": "ready"}
    assert not ADAPTERS["RayCluster"].finished(cluster)


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_the_webhook_defaults_managed_by_where_the_adapter_reads_it(kind: str) -> None:
    adapter = ADAPTERS[kind]
    where, own = OWN_CONTROLLER[kind.lower()]
    assert (*where, "managedBy") == adapter.managed_by
    assert "" in own and len(own) == 2
