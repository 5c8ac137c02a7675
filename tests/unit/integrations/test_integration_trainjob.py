"""Kubeflow TrainJob (trainer.kubeflow.org/v1alpha1): podSets from the runtime it names
(TrainingRuntime or ClusterTrainingRuntime) as the trainer builds its JobSet, started and
stopped through Kueue's runtime patch, finished by its conditions.

The tests play the trainer controller (they write the TrainJob's status). The CRDs served
to both backends are ``tests/support/crds/trainer.kubeflow.org_*.yaml``; the TrainJob CRD carries
the trainer webhook's rule that runtime patches change only around a suspension.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from admission.drivers.loader import load_documents
from admission.integrations.framework.composition import workload_model
from admission.integrations.framework.fields import IntegrationError
from admission.integrations.framework.podset_info import flavor_info
from admission.integrations.kinds.trainjob import (
    ANCESTOR_LABEL,
    CLUSTER_TRAINING_RUNTIMES,
    KUEUE_MANAGER,
    TRAINING_RUNTIMES,
    TRAINJOB,
)
from admission.kube.client.errors import ApiError
from queues.model import ResourceFlavor
from tests.support.integration_kit import (
    NS,
    PODSET,
    KindCase,
    Roles,
    gang_scenario,
    lifecycle_objects,
    meta,
    pod_template,
    review,
    run_lifecycle,
    workload_of,
)
from tests.support.kube_harness import admitted, eventually, stack


def runtime(name: str, roles: Roles, *, kind: str = "ClusterTrainingRuntime",
            num_nodes: int | None = None) -> dict:  # fmt: skip
    """A runtime whose first role is an initializer Job (1 pod) and whose other roles
    are trainer-node Jobs of ``pods`` parallel pods; with ``num_nodes`` an mlPolicy."""
    rjobs = []
    for i, (role, pods) in enumerate(roles):
        tmpl = pod_template()
        tmpl["spec"]["containers"][0]["name"] = "node" if i else role
        job: dict[str, Any] = {"spec": {"parallelism": pods, "completions": pods,
                                        "template": tmpl}}  # fmt: skip
        if i:
            job["metadata"] = {"labels": {ANCESTOR_LABEL: "trainer"}}
        rjobs.append({"name": role, "replicas": 1, "template": job})
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": rjobs}}}
    if num_nodes is not None:
        spec["mlPolicy"] = {"numNodes": num_nodes, "torch": {}}
    m: dict[str, Any] = {"name": name}
    if kind == "TrainingRuntime":
        m["namespace"] = NS
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": m,
            "spec": spec}  # fmt: skip


ROLES = [("dataset-initializer", 1), ("node", 4)]
RUNTIME = runtime("torch-distributed", ROLES)


def trainjob(name: str, roles: Roles, metadata: dict[str, Any], *,
             runtime_name: str = "torch-distributed", kind: str | None = None) -> dict:  # fmt: skip
    """A TrainJob on ``runtime_name``; ``roles`` fix the trainer nodes (``numNodes``)."""
    ref: dict[str, Any] = {"name": runtime_name}
    if kind:
        ref["kind"] = kind
    spec: dict[str, Any] = {"runtimeRef": ref, "trainer": {"image": "pytorch/pytorch:2.5"}}
    nodes = dict(roles).get("node")
    if nodes is not None and nodes != dict(ROLES)["node"]:
        spec["trainer"]["numNodes"] = nodes
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": metadata, "spec": spec}  # fmt: skip


def complete(_obj: dict) -> dict:
    return {"conditions": [{"type": "Complete", "status": "True", "reason": "JobsCompleted",
                            "message": "TrainJob is completed",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}  # fmt: skip


def started_templates(obj: dict) -> dict[str, dict]:
    """Kueue's runtime patch of the TrainJob: podSet -> the pod template patch."""
    for patch in obj["spec"].get("runtimePatches") or []:
        if patch.get("manager") == KUEUE_MANAGER:
            rjobs = patch["trainingRuntimeSpec"]["template"]["spec"].get("replicatedJobs") or []
            out = {rj["name"]: rj["template"]["spec"]["template"] for rj in rjobs}
            return {name: out.get(name, {}) for name, _ in ROLES}
    return {name: {} for name, _ in ROLES}


CASE = KindCase(
    TRAINJOB, trainjob, ROLES, complete,
    extra_objects=[runtime("torch-distributed", [("dataset-initializer", 1), ("node", 2)],
                           num_nodes=4)],
    started_templates=started_templates,
)  # fmt: skip


def lookup_of(*objects: dict) -> Any:
    by = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}
    return lambda res, ns, name: by.get((res.kind, ns, name))


def model(obj: dict, *runtimes: dict) -> Any:
    resolved = TRAINJOB.resolve(obj, lookup_of(*(runtimes or (RUNTIME,))))
    return workload_model(TRAINJOB, resolved, workload_priority_classes={}, priority_classes={})


# ----------------------------------------------------------------------- the integration


def test_podsets_are_the_runtimes_replicated_jobs_with_the_trainers_node_count() -> None:
    wl = model(trainjob("t", ROLES, meta("t", uid="u")))
    assert [(p.name, p.count) for p in wl.pod_sets] == ROLES
    assert wl.name.startswith("trainjob-t-")
    # spec.trainer.numNodes over the runtime's mlPolicy.numNodes over parallelism
    with_policy = runtime("torch-distributed", ROLES, num_nodes=8)
    assert [p.count for p in model(trainjob("t", ROLES, meta("t")), with_policy).pod_sets] == [1, 8]
    six = trainjob("t", [("dataset-initializer", 1), ("node", 6)], meta("t"))
    assert [p.count for p in model(six, with_policy).pod_sets] == [1, 6]


def mpi_runtime(name: str, *, launcher_as_node: bool) -> dict:
    """As the trainer's MPI runtimes: a ``node`` Job and a ``launcher`` Job, the
    trainer step the launcher when it runs as a node (deepspeed-distributed), else the
    nodes (mpi-distributed)."""

    def job(container: str, trainer: bool) -> dict:
        tmpl = pod_template()
        tmpl["spec"]["containers"][0]["name"] = container
        out: dict[str, Any] = {"spec": {"template": tmpl}}
        if trainer:
            out["metadata"] = {"labels": {ANCESTOR_LABEL: "trainer"}}
        return out

    rjobs = [{"name": "node", "template": job("node", not launcher_as_node)},
             {"name": "launcher", "template": job("node" if launcher_as_node else "launcher",
                                                  launcher_as_node)}]  # fmt: skip
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name},
            "spec": {"mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1,
                                                         "runLauncherAsNode": launcher_as_node}},
                     "template": {"spec": {"replicatedJobs": rjobs}}}}  # fmt: skip


def test_an_mpi_runtime_that_runs_its_launcher_as_a_node_gets_one_node_fewer() -> None:
    """The trainer's MPI plugin: numNodes counts the launcher when it runs as a node
    (the node Job gets numNodes - 1, at least 1) and resourcesPerNode goes to both."""

    def on(runtime_name: str, launcher_as_node: bool, nodes: int) -> Any:
        job = trainjob("t", ROLES, meta("t"), runtime_name=runtime_name)
        job["spec"]["trainer"]["numNodes"] = nodes
        job["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"nvidia.com/gpu": "8"}}
        return model(job, mpi_runtime(runtime_name, launcher_as_node=launcher_as_node))

    wl = on("deepspeed-distributed", True, 4)
    assert [(p.name, p.count) for p in wl.pod_sets] == [("node", 3), ("launcher", 1)]
    assert all(p.requests == {"cpu": 1000, "nvidia.com/gpu": 8} for p in wl.pod_sets)
    assert [p.count for p in on("deepspeed-distributed", True, 1).pod_sets] == [1, 1]
    wl = on("mpi-distributed", False, 4)
    assert [(p.name, p.count) for p in wl.pod_sets] == [("node", 4), ("launcher", 1)]
    assert [p.requests.get("nvidia.com/gpu") for p in wl.pod_sets] == [8, None]


def test_num_nodes_sets_the_trainer_job_without_an_ml_policy_too() -> None:
    """The trainer's plain-ML plugin: numNodes applies without an mlPolicy; the other
    Jobs run their parallelism, with as many completions (Kueue's child JobSet)."""
    job = trainjob("t", [("dataset-initializer", 1), ("node", 6)], meta("t"))
    assert [p.count for p in model(job).pod_sets] == [1, 6]
    odd = runtime("torch-distributed", [("dataset-initializer", 2), ("node", 4)])
    odd["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"] = 1
    assert [p.count for p in model(trainjob("t", ROLES, meta("t")), odd).pod_sets] == [2, 4]


def test_resources_per_node_and_runtime_patches_shape_the_trainer_pods() -> None:
    job = trainjob("t", ROLES, meta("t"))
    job["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"nvidia.com/gpu": "8"}}
    job["spec"]["runtimePatches"] = [{
        "manager": "example.com/platform",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
            "name": "node", "template": {"spec": {"template": {
                "metadata": {"annotations": {
                    "kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/rack"}},
                "spec": {"nodeSelector": {"pool": "gpu"},
                         "containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]},
            }}},
        }]}}},
    }]  # fmt: skip
    wl = model(job, runtime("torch-distributed", ROLES, num_nodes=4))
    node = wl.pod_sets[1]
    assert node.requests == {"cpu": 1000, "nvidia.com/gpu": 8}
    assert node.topology is not None and node.topology.required == "cloud.provider.com/rack"
    assert wl.pod_sets[0].requests == {"cpu": 1000}  # the initializer untouched
    job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"][0]["name"] = "nope"  # fmt: skip
    with pytest.raises(IntegrationError, match=r"runtimePatches\[0\]: replicated Job 'nope'"):
        model(job)


def test_the_runtime_is_a_cluster_runtime_by_default_or_one_of_the_namespace() -> None:
    local = runtime("local", ROLES, kind="TrainingRuntime")
    job = trainjob("t", ROLES, meta("t"), runtime_name="local", kind="TrainingRuntime")
    assert [p.count for p in model(job, local).pod_sets] == [1, 4]
    with pytest.raises(
        IntegrationError, match="spec.runtimeRef: ClusterTrainingRuntime 'local' not found"
    ):
        model(trainjob("t", ROLES, meta("t"), runtime_name="local"), local)
    other_ns = copy.deepcopy(local)
    other_ns["metadata"]["namespace"] = "elsewhere"
    with pytest.raises(IntegrationError, match="'local' not found in namespace team-a"):
        model(job, other_ns)
    assert TRAINJOB.references == (TRAINING_RUNTIMES, CLUSTER_TRAINING_RUNTIMES)


def test_started_through_kueues_runtime_patch_and_stopped_in_two_steps() -> None:
    job = trainjob("t", ROLES, meta("t"))
    job["spec"]["suspend"] = True
    job["spec"]["runtimePatches"] = [{"manager": "example.com/other"}]
    resolved = TRAINJOB.resolve(job, lookup_of(RUNTIME))
    infos = [flavor_info(n, c, [ResourceFlavor(f, node_labels={"pool": f})])
             for (n, c), f in zip(ROLES, ("fa", "fb"), strict=True)]  # fmt: skip
    patch = TRAINJOB.run_patch(resolved, infos)
    assert patch["spec"]["suspend"] is False
    others, ours = patch["spec"]["runtimePatches"]
    assert others == {"manager": "example.com/other"}
    assert ours["manager"] == KUEUE_MANAGER
    started = {**job, "spec": {**job["spec"], **patch["spec"]}}
    templates = started_templates(started)
    assert templates["node"]["spec"]["nodeSelector"] == {"pool": "fb"}
    assert templates["node"]["metadata"]["labels"] == {PODSET: "node"}
    # the started job's podSets keep their counts and requests
    assert [(p.name, p.count) for p in model(started).pod_sets] == ROLES
    step = TRAINJOB.stop_step(started, None)
    assert step is not None and step.patch == {"spec": {"suspend": True}}
    suspended = {**started, "spec": {**started["spec"], "suspend": True},
                 "status": {"jobsStatus": [{"name": "node", "active": 2}]}}  # fmt: skip
    assert TRAINJOB.stop_step(suspended, None) is None  # waits for the pods to go
    suspended["status"]["jobsStatus"][0]["active"] = 0
    step = TRAINJOB.stop_step(suspended, None)
    assert step is not None
    restored = {**suspended, "spec": {**suspended["spec"], **step.patch["spec"]}}
    assert started_templates(restored) == {"dataset-initializer": {}, "node": {}}
    assert TRAINJOB.stop_step(restored, None) is None


def test_finished_active_ready_and_reclaimable_come_from_its_status() -> None:
    job = TRAINJOB.resolve(trainjob("t", ROLES, meta("t")), lookup_of(RUNTIME))
    assert TRAINJOB.finished(job) is None and not TRAINJOB.is_active(job)
    job["status"] = {"jobsStatus": [
        {"name": "dataset-initializer", "succeeded": 1, "active": 0},
        {"name": "node", "ready": 1, "active": 1},
    ]}  # fmt: skip
    assert TRAINJOB.is_active(job) and TRAINJOB.pods_ready(job, 5)
    assert TRAINJOB.reclaimable_pods(job) == {"dataset-initializer": 1}
    job["status"]["conditions"] = [{"type": "Failed", "status": "True", "message": "oom"}]
    finished = TRAINJOB.finished(job)
    assert finished is not None and not finished.succeeded and finished.message == "oom"


def test_the_webhook_suspends_a_queued_trainjob() -> None:
    allowed, patch, _ = review(TRAINJOB, trainjob("t", ROLES, meta("t")), mutating=True)
    assert allowed and patch == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert review(TRAINJOB, trainjob("t", ROLES, meta("t", queue=None)), mutating=True)[1] == []


def test_plan_reads_the_runtimes_and_names_a_missing_one() -> None:
    docs = [("f.yaml", 0, RUNTIME), ("f.yaml", 1, trainjob("t", ROLES, meta("t")))]
    inputs = load_documents(docs)
    (wl,) = inputs.workloads
    assert [(p.name, p.count) for p in wl.pod_sets] == ROLES
    with pytest.raises(Exception, match="ClusterTrainingRuntime 'torch-distributed' not found"):
        load_documents(docs[1:])


def test_plan_admits_a_trainjob_only_when_every_replicated_job_fits(tmp_path: Path) -> None:
    gang_scenario(CASE, tmp_path)


# ---------------------------------------------------------------------------- serve


def test_a_trainjob_is_admitted_started_per_podset_preempted_restored_and_finished(
    tmp_path: Path, backend: Any
) -> None:
    asyncio.run(run_lifecycle(CASE, tmp_path, backend))


def test_a_trainjob_waits_for_its_runtime_and_its_jobset_is_left_to_it(
    tmp_path: Path, backend: Any
) -> None:
    """Created before its runtime: no Workload, then one when the runtime appears. The
    JobSet the trainer creates for it (controlled by the TrainJob, no queue label) is
    not managed on its own: the TrainJob is its managed ancestor."""
    objects = [o for o in lifecycle_objects(CASE) if o["kind"] != "ClusterTrainingRuntime"]
    from admission.integrations.kinds.jobset import JOBSET
    from tests.unit.integrations.test_integration_jobset import jobset

    crds = ("trainjobs", "trainingruntimes", "clustertrainingruntimes", "jobsets")

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects, crds=crds) as s:
            tj = await s.user.create(CASE.resource, trainjob("t", ROLES, meta("t")), namespace=NS)
            await asyncio.sleep(0.5)
            assert workload_of(s.server, TRAINJOB, "t") is None
            await s.user.create(CLUSTER_TRAINING_RUNTIMES, CASE.extra_objects[0])
            await eventually(
                lambda: admitted(workload_of(s.server, TRAINJOB, "t")), what="admitted"
            )
            child = jobset("t", ROLES, meta("t", queue=None))
            child["metadata"]["ownerReferences"] = [
                {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                 "name": "t", "uid": tj["metadata"]["uid"], "controller": True}]  # fmt: skip
            child["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}  # even labelled
            created = await s.user.create(JOBSET.resource, child, namespace=NS)
            assert created["spec"].get("suspend") is not True
            await asyncio.sleep(0.5)
            assert workload_of(s.server, JOBSET, "t") is None
            # the trainer's rule: a running TrainJob's runtime patches are fixed
            with pytest.raises(ApiError) as refused:
                await s.user.patch(CASE.resource, "t", {"spec": {"runtimePatches": []}},
                                   namespace=NS)  # fmt: skip
            assert refused.value.status == 422

    asyncio.run(main())
