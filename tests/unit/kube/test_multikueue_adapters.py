"""MultiKueue's rules for each job kind it dispatches (Kueue's
pkg/controller/jobs/*/*_multikueue_adapter.go): where ``managedBy`` is and Kueue's
message when it is not MultiKueue's, what the worker's copy keeps and drops, which
status comes back, and when the worker's job counts as finished; the same for a pod
of a pod group. The webhook's ``managedBy`` defaulting writes the field where the
adapter reads it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admission.kube.multikueue.adapters import ADAPTERS
from admission.kube.multikueue.pods import POD_GROUPS, adapter_for, owner_kind
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


# -- pod groups (Kueue's pod/pod_multikueue_adapter.go) -------------------------------------

GATE = {"name": "kueue.x-k8s.io/admission"}
GATED_CONDITION = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}


def group_pod(**status: Any) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-0", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                     "finalizers": ["kueue.x-k8s.io/managed"],
                     "labels": {"kueue.x-k8s.io/pod-group-name": "g",
                                "kueue.x-k8s.io/queue-name": "lq"},
                     "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"}},
        "spec": {"schedulingGates": [GATE], "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Pending", "conditions": [GATED_CONDITION], **status},
    }  # fmt: skip


def test_a_pods_copy_keeps_its_spec_and_gate_and_names_the_groups_workload() -> None:
    local = group_pod()
    remote = POD_GROUPS.remote_copy(local, "g", "mgr")
    assert remote["metadata"] == {
        "name": "p-0", "namespace": "ns",
        "labels": {**local["metadata"]["labels"], PREBUILT: "g", ORIGIN: "mgr"},
        "annotations": local["metadata"]["annotations"],
    }  # fmt: skip
    assert remote["spec"] == local["spec"] and remote["spec"] is not local["spec"]
    assert POD_GROUPS.unmanaged_reason(local) == ""  # no managedBy: gated instead


def test_a_gated_manager_pod_keeps_scheduling_gated_until_the_workers_is_scheduled() -> None:
    local = group_pod()
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    waiting = {"status": {"phase": "Pending", "conditions": [unschedulable]}}
    assert POD_GROUPS.status_to_copy(local, waiting) is None  # nothing else changed
    waiting["status"]["startTime"] = "t"
    assert POD_GROUPS.status_to_copy(local, waiting) == {
        "phase": "Pending", "startTime": "t", "conditions": [GATED_CONDITION]}  # fmt: skip
    scheduled = {"type": "PodScheduled", "status": "True"}
    running = {"status": {"phase": "Running", "conditions": [scheduled]}}
    assert POD_GROUPS.status_to_copy(local, running) == running["status"]
    local["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert POD_GROUPS.status_to_copy(local, running) is None  # a pod being deleted: left


def test_a_worker_pod_is_finished_once_it_succeeded_or_failed() -> None:
    assert not POD_GROUPS.finished(group_pod())
    assert not POD_GROUPS.finished(group_pod(phase="Running"))
    assert POD_GROUPS.finished(group_pod(phase="Succeeded"))
    assert POD_GROUPS.finished(group_pod(phase="Failed"))


def test_a_pods_workload_gets_the_pod_adapter() -> None:
    group_wl = {"metadata": {"annotations": {"kueue.x-k8s.io/is-group-workload": "true"}}}
    single_wl = {"metadata": {"ownerReferences": [
        {"kind": "Pod", "name": "p", "controller": True, "apiVersion": "v1"}]}}  # fmt: skip
    job_wl = {"metadata": {"ownerReferences": [
        {"kind": "Job", "name": "j", "controller": True, "apiVersion": "batch/v1"}]}}  # fmt: skip
    assert adapter_for(group_wl) is POD_GROUPS and owner_kind(group_wl) == "Pod"
    assert adapter_for(single_wl) is POD_GROUPS and owner_kind(single_wl) == "Pod"
    assert adapter_for(job_wl) is ADAPTERS["Job"]
    assert adapter_for({"metadata": {}}) is None and owner_kind({"metadata": {}}) == ""


def test_the_webhook_defaults_managed_by_only_over_the_kinds_own_operator() -> None:
    from types import SimpleNamespace

    from webhooks.handlers.managed_by import managed_by_default

    view = SimpleNamespace(
        local_queues={"ns/lq": SimpleNamespace(cluster_queue="cq"),
                      "ns/plain": SimpleNamespace(cluster_queue="plain")},
        cluster_queues={"cq": SimpleNamespace(admission_checks=["mk"]),
                        "plain": SimpleNamespace(admission_checks=[])},
        admission_checks={"mk": SimpleNamespace(controller_name=MK)},
    )  # fmt: skip

    def where(kind: str, spec: dict, queue: str = "lq") -> tuple[str, ...] | None:
        return managed_by_default(kind, {"spec": spec}, view, "ns", queue)

    assert where("pytorchjob", {}) == ("spec", "runPolicy")  # no runPolicy yet: made
    own = {"runPolicy": {"managedBy": "kubeflow.org/training-operator"}}
    assert where("pytorchjob", own) == ("spec", "runPolicy")
    assert where("mpijob", {"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}}) == (
        "spec", "runPolicy")  # fmt: skip
    assert where("pytorchjob", {"runPolicy": {"managedBy": "example.com/mine"}}) is None
    assert where("pytorchjob", {"runPolicy": "bad"}) is None
    assert where("rayjob", {"managedBy": "ray.io/kuberay-operator"}) == ("spec",)
    assert where("trainjob", {}) == ("spec",)
    assert where("trainjob", {}, queue="plain") is None  # no MultiKueue check there
    assert where("statefulset", {}) is None  # no managedBy to default
