"""What a Workload counts is what the kind's controller will run, before and after an
edit: a RayCluster's worker groups as KubeRay clamps them, a TrainJob's podSets from its
runtime as it is now, no negative overhead or requests hiding other pods, and no replica
type a Kubeflow job's Workload does not know."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.integrations.framework.composition import compose
from admission.integrations.kinds.jobset import JOBSET
from admission.integrations.kinds.pytorchjob import PYTORCHJOB
from admission.integrations.kinds.raycluster import RAYCLUSTER
from admission.integrations.kinds.trainjob import TRAINJOB
from admission.kube.client.resources import resource_of
from admission.kube.objects import job_mismatch
from tests.support.integration_kit import NS, crds_of, meta, pod_template, review, workload_of
from tests.support.kube_harness import admitted, eventually, is_true, namespace, stack
from tests.support.scenario_runner import run_plan_cli
from tests.unit.integrations.test_integration_jobset import jobset
from tests.unit.integrations.test_integration_pytorchjob import pytorchjob
from tests.unit.integrations.test_integration_raycluster import raycluster
from tests.unit.integrations.test_integration_trainjob import RUNTIME, trainjob
from webhooks.handlers.quota import schema_problems

Obj = dict[str, Any]
API = "kueue.x-k8s.io/v1beta2"


def _queues(cpu: int) -> list[Obj]:
    return [
        namespace(NS),
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["cpu"], "flavors": [
                 {"name": "default", "resources": [{"name": "cpu",
                                                    "nominalQuota": str(cpu)}]}]}]}},
        {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": NS},
         "spec": {"clusterQueue": "cq"}},
    ]  # fmt: skip


def _body(integ: Any, obj: Obj) -> Obj:
    return compose(integ, obj, workload_priority_classes={}, priority_classes={})[1]


# ---------------------------------------------------------------- RayCluster


def _ray(replicas: int | None, low: int | None, high: int | None) -> Obj:
    obj = raycluster("rc", [("head", 1), ("workers", 1)], meta("rc", uid="u"))
    group = obj["spec"]["workerGroupSpecs"][0]
    for key, value in (("replicas", replicas), ("minReplicas", low), ("maxReplicas", high)):
        if value is None:
            group.pop(key, None)
        else:
            group[key] = value
    return obj


@pytest.mark.parametrize(
    ("replicas", "low", "high", "runs"),
    [
        (1, 6, 6, 6),  # below minReplicas: raised to it
        (9, 0, 4, 4),  # above maxReplicas: lowered to it
        (3, 5, 2, 2),  # crossed bounds: maxReplicas
        (None, 2, None, 2),  # unset replicas (1) below minReplicas
        (3, None, None, 3),
    ],
)
def test_a_ray_worker_group_counts_the_pods_kuberay_runs(
    replicas: int | None, low: int | None, high: int | None, runs: int
) -> None:
    roles = RAYCLUSTER.roles(_ray(replicas, low, high))
    assert [(r.name, r.count) for r in roles] == [("head", 1), ("workers", runs)]


def test_plan_does_not_admit_six_workers_as_one(tmp_path: Path) -> None:
    path = tmp_path / "ray.yaml"
    path.write_text(yaml.safe_dump_all([*_queues(2), _ray(1, 6, 6)]))
    code, doc, err = run_plan_cli(["-f", str(path)])
    assert code == 0, err
    assert doc is not None and doc["admitted"] == []
    (pending,) = doc["pending"]
    assert pending["reason"] == "ExceedsMaxQuota"
    assert "podSet workers" in pending["message"]


def test_raising_min_replicas_of_a_running_raycluster_no_longer_matches_its_workload() -> None:
    admitted_as = _body(RAYCLUSTER, _ray(1, 0, 8))
    why = job_mismatch(admitted_as, _body(RAYCLUSTER, _ray(1, 6, 8)), started=True)
    assert why == "podSet workers: admitted for 1 pods, the job now has 6"
    assert job_mismatch(admitted_as, _body(RAYCLUSTER, _ray(1, 1, 8)), started=True) is None


# ---------------------------------------------------------------- TrainJob


def test_a_runtime_edited_after_start_requeues_the_trainjob_with_the_new_counts(
    tmp_path: Path,
) -> None:
    res, runtime_res = resource_of(TRAINJOB), TRAINJOB.references[-1]
    runtime = copy.deepcopy(RUNTIME)

    async def main() -> None:
        async with stack(tmp_path, objects=[*_queues(20), runtime],
                         crds=crds_of(TRAINJOB)) as s:  # fmt: skip
            await s.user.create(res, trainjob("tj", [("node", 4)], meta("tj")), namespace=NS)
            wl = await eventually(
                lambda: admitted(w := workload_of(s.server, TRAINJOB, "tj")) and w,
                what="the TrainJob is admitted",
            )
            assert [p["count"] for p in wl["spec"]["podSets"]] == [1, 4]
            await eventually(
                lambda: not TRAINJOB.is_suspended(s.get(res.plural, "tj", NS) or {}),
                what="the TrainJob is started",
            )
            edited = copy.deepcopy(s.get(runtime_res.plural, runtime["metadata"]["name"]))
            node = edited["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]
            node["parallelism"] = node["completions"] = 8
            await s.user.replace(runtime_res, edited["metadata"]["name"], edited)
            wl = await eventually(
                lambda: (
                    (w := workload_of(s.server, TRAINJOB, "tj"))
                    and [p["count"] for p in w["spec"]["podSets"]] == [1, 8]
                    and w
                ),
                what="the Workload takes the runtime's new counts",
            )
            events = [e for e in s.server.list_objects("events", NS)
                      if e.get("reason") == "NoMatchingWorkload"]  # fmt: skip
            assert events, "the running TrainJob was stopped: it no longer matched"
            assert is_true(wl, "Evicted") or admitted(wl)

    asyncio.run(main())


# ---------------------------------------------------------------- negative quantities


def _negative_overhead_jobset() -> Obj:
    obj = jobset("js", [("workers", 21)], meta("js", uid="u"))
    spec = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    spec["overhead"] = {"cpu": "-20"}
    return obj


NEGATIVE = 'spec.overhead["cpu"]: must be greater than or equal to 0, got "-20"'


def test_plan_refuses_negative_overhead_naming_object_and_field(tmp_path: Path) -> None:
    path = tmp_path / "js.yaml"
    path.write_text(yaml.safe_dump_all([*_queues(2), _negative_overhead_jobset()]))
    code, _doc, err = run_plan_cli(["-f", str(path)])
    assert code == 2
    assert f"JobSet {NS}/js: spec.replicatedJobs[0].template.spec.template.spec: " in err
    assert NEGATIVE in err


@pytest.mark.parametrize("field", ["overhead", "requests", "limits"])
def test_the_webhook_refuses_negative_quantities_for_a_kind(field: str) -> None:
    obj = jobset("js", [("workers", 2)], meta("js"))
    spec = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    if field == "overhead":
        spec["overhead"] = {"cpu": "-20"}
    else:
        spec["containers"][0]["resources"] = {field: {"cpu": "-1"}}
    allowed, _patch, message = review(JOBSET, obj, mutating=False)
    assert not allowed
    assert message.startswith("spec.replicatedJobs[0].template.spec.template.spec: Invalid value")
    assert "must be greater than or equal to 0" in message


def test_a_workload_with_negative_overhead_is_refused() -> None:
    wl = {"apiVersion": API, "kind": "Workload", "metadata": {"name": "w", "namespace": NS},
          "spec": {"queueName": "lq", "podSets": [
              {"name": "main", "count": 21,
               "template": {"spec": {"overhead": {"cpu": "-20"}, **pod_template()["spec"]}}}]}}  # fmt: skip
    assert (
        "spec.podSets[0].template.spec.overhead.cpu: must be greater than or equal to 0"
        in schema_problems(wl)
    )


def test_serve_reports_a_negative_overhead_jobset_written_past_the_webhook(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        js = _negative_overhead_jobset()
        js["spec"]["suspend"] = True
        async with stack(tmp_path, objects=[*_queues(2), js], crds=crds_of(JOBSET)) as s:
            event = await eventually(
                lambda: next(
                    (
                        e
                        for e in s.server.list_objects("events", NS)
                        if e.get("reason") == "ErrWorkloadCompose"
                    ),
                    None,
                ),
                what="the JobSet says why it gets no Workload",
            )
            assert NEGATIVE in event["message"]
            assert workload_of(s.server, JOBSET, "js") is None
            assert JOBSET.is_suspended(s.get("jobsets", "js", NS) or {})

    asyncio.run(main())


# ---------------------------------------------------------------- Kubeflow replica types


def test_an_unknown_replica_type_is_refused_on_create_and_update() -> None:
    old = pytorchjob("pt", [("master", 1), ("worker", 2)], meta("pt"))
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Evaluator"] = {"replicas": 20,
                                                      "template": pod_template()}  # fmt: skip
    for operation, previous in (("CREATE", None), ("UPDATE", old)):
        allowed, _patch, message = review(PYTORCHJOB, new, mutating=False,
                                          operation=operation, old=previous)  # fmt: skip
        assert not allowed
        assert message.startswith(
            "spec.pytorchReplicaSpecs.Evaluator: Unsupported value: 'Evaluator'"
        )


def test_a_running_job_edited_past_the_webhook_into_no_valid_workload_is_stopped(
    tmp_path: Path,
) -> None:
    """Whatever makes a running object's Workload impossible to build (here a pod template
    left without containers; an unknown replica type where the operator's CRD allows
    one) stops it: it would otherwise run on no podSet's quota."""
    res = resource_of(PYTORCHJOB)

    async def main() -> None:
        async with stack(tmp_path, objects=_queues(10), crds=crds_of(PYTORCHJOB),
                         webhooks=False) as s:  # fmt: skip
            pt = pytorchjob("pt", [("master", 1), ("worker", 2)], meta("pt"))
            pt["spec"]["runPolicy"]["suspend"] = True  # as the webhook would
            await s.user.create(res, pt, namespace=NS)
            await eventually(
                lambda: not PYTORCHJOB.is_suspended(s.get(res.plural, "pt", NS) or {}),
                what="the PyTorchJob is started",
            )
            running = copy.deepcopy(s.get(res.plural, "pt", NS))
            worker = running["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
            worker["containers"] = []
            await s.user.replace(res, "pt", running, namespace=NS)
            await eventually(
                lambda: PYTORCHJOB.is_suspended(s.get(res.plural, "pt", NS) or {}),
                what="the PyTorchJob is stopped",
            )
            await eventually(
                lambda: (
                    (w := workload_of(s.server, PYTORCHJOB, "pt")) is not None and not admitted(w)
                ),
                what="its Workload no longer holds quota",
            )

    asyncio.run(main())


def test_raising_min_replicas_of_a_running_raycluster_evicts_and_requeues_it(
    tmp_path: Path,
) -> None:
    res = resource_of(RAYCLUSTER)

    async def main() -> None:
        async with stack(tmp_path, objects=_queues(10), crds=crds_of(RAYCLUSTER)) as s:
            rc = _ray(1, 0, 8)
            rc["metadata"].pop("uid")
            await s.user.create(res, rc, namespace=NS)
            await eventually(
                lambda: not RAYCLUSTER.is_suspended(s.get(res.plural, "rc", NS) or {}),
                what="the RayCluster is started",
            )
            patch = {"spec": {"workerGroupSpecs": [
                {**rc["spec"]["workerGroupSpecs"][0], "minReplicas": 6}]}}  # fmt: skip
            await s.user.patch(res, "rc", patch, namespace=NS)
            wl = await eventually(
                lambda: (
                    (w := workload_of(s.server, RAYCLUSTER, "rc"))
                    and [p["count"] for p in w["spec"]["podSets"]] == [1, 6]
                    and w
                ),
                what="the Workload counts the six workers KubeRay runs",
            )
            events = [e for e in s.server.list_objects("events", NS)
                      if e.get("reason") == "NoMatchingWorkload"]  # fmt: skip
            assert any("admitted for 1 pods, the job now has 6" in e["message"] for e in events)
            assert is_true(wl, "Evicted") or admitted(wl)

    asyncio.run(main())
