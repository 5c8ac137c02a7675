"""``Integration.may_own``: the children each kind's controller makes, and nothing else.

Every registered kind refuses a pod written to name it; each kind accepts what its
controller creates (a JobSet's ``<jobset>-<replicatedJob>-<i>`` Jobs, a Job's pods
matching its selector, KubeRay's pods, the training operator's indexed pods, a
LeaderWorkerSet's leader StatefulSet, the held pods of a pod owner) and refuses the
same child when it is wider, beyond the replicas, or its owner runs nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admission.integrations.kinds.deployment import DEPLOYMENT
from admission.integrations.kinds.job import JOB
from admission.integrations.kinds.jobset import JOBSET
from admission.integrations.kinds.leaderworkerset import LEADERWORKERSET
from admission.integrations.kinds.mpijob import MPIJOB
from admission.integrations.kinds.pytorchjob import PYTORCHJOB
from admission.integrations.kinds.raycluster import RAYCLUSTER
from admission.integrations.kinds.rayjob import RAYJOB
from admission.integrations.kinds.statefulset import STATEFULSET
from admission.integrations.kinds.trainjob import TRAINJOB
from admission.integrations.registry import INTEGRATIONS
from tests.support.integration_kit import meta, pod_template
from tests.unit.integrations.test_integration_jobset import child_job, jobset
from tests.unit.integrations.test_integration_leaderworkerset import lws
from tests.unit.integrations.test_integration_mpijob import mpijob
from tests.unit.integrations.test_integration_pytorchjob import pytorchjob
from tests.unit.integrations.test_integration_raycluster import raycluster
from tests.unit.integrations.test_integration_rayjob import rayjob
from tests.unit.integrations.test_integration_trainjob import ROLES, trainjob

Obj = dict[str, Any]
HELD = {"kueue.x-k8s.io/pod-suspending-parent": "x"}


def pod(name: str = "p", *, labels: dict[str, str] | None = None, **annotations: str) -> Obj:
    tmpl = pod_template("64")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "spec": tmpl["spec"],
    }


def of(api_version: str, kind: str, name: str, spec: Obj | None = None) -> Obj:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name},
            "spec": spec or {}}  # fmt: skip


def owner_of(integ: Any) -> Obj:
    return {"apiVersion": integ.api_version, "kind": integ.kind,
            "metadata": {"name": "o", "uid": "u"}, "spec": {}}  # fmt: skip


@pytest.mark.parametrize("integ", INTEGRATIONS, ids=lambda i: i.kind)
def test_no_kind_covers_a_pod_written_to_name_it(integ: Any) -> None:
    refused = integ.may_own(owner_of(integ), pod())
    assert refused and refused.startswith("Pod p is not one that")


def test_a_job_covers_its_pods_while_it_runs_and_only_those_matching_its_selector() -> None:
    job = of(
        "batch/v1",
        "Job",
        "j",
        {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}}},
    )
    mine = pod(labels={"batch.kubernetes.io/controller-uid": "u"})
    assert JOB.may_own(job, mine) is None
    assert "do not match the Job's selector" in (JOB.may_own(job, pod()) or "")
    job["spec"]["suspend"] = True
    assert "a suspended Job runs no pods" in (JOB.may_own(job, mine) or "")


def test_a_jobset_covers_the_jobs_of_its_replicated_jobs_replicas() -> None:
    js = jobset("js", [("driver", 1), ("workers", 2)], meta("js", uid="u"))
    for role, i in (("driver", 0), ("workers", 0), ("workers", 1)):
        assert JOBSET.may_own(js, child_job(js, role, i)) is None
    beyond = child_job(js, "workers", 0)
    beyond["metadata"]["name"] = "js-workers-2"
    wide = child_job(js, "workers", 1)
    wide["spec"]["parallelism"] = 20
    bigger = child_job(js, "driver", 0)
    bigger["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "8"}
    padded = child_job(js, "workers", 0)
    padded["metadata"]["name"] = "js-workers-01"
    for child, why in ((beyond, "no replicated Job's replica"), (wide, "wider than"),
                       (bigger, "resources are not"), (padded, "no replicated Job's replica")):  # fmt: skip
        assert why in (JOBSET.may_own(js, child) or ""), child["metadata"]["name"]


def test_kuberays_pods_of_a_running_cluster() -> None:
    rc = raycluster("rc", [("head", 1), ("gpu", 2)], meta("rc"))
    head = pod(labels={"ray.io/cluster": "rc", "ray.io/group": "headgroup"})
    worker = pod(labels={"ray.io/cluster": "rc", "ray.io/group": "gpu"})
    assert RAYCLUSTER.may_own(rc, head) is None and RAYCLUSTER.may_own(rc, worker) is None
    other = pod(labels={"ray.io/cluster": "other", "ray.io/group": "gpu"})
    assert RAYCLUSTER.may_own(rc, other)
    rc["spec"]["suspend"] = True
    assert "runs no pods" in (RAYCLUSTER.may_own(rc, worker) or "")


def controlled(child: Obj, owner: Obj, uid: str | None = None) -> Obj:
    """``child`` with a controller reference to ``owner`` (``uid``: another UID)."""
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "controller": True,
         "name": owner["metadata"]["name"], "uid": uid or owner["metadata"]["uid"]}
    ]  # fmt: skip
    return child


def test_a_rayjobs_cluster_and_submitter() -> None:
    rj = rayjob("rj", [("head", 1), ("workers", 2), ("submitter", 1)], meta("rj", uid="rj-uid"))

    def child(api_version: str, kind: str, name: str) -> Obj:
        return controlled(of(api_version, kind, name), rj)

    assert RAYJOB.may_own(rj, child("ray.io/v1", "RayCluster", "rj-abcde"))  # no status yet
    rj["status"] = {"rayClusterName": "rj-abcde"}
    assert RAYJOB.may_own(rj, child("ray.io/v1", "RayCluster", "rj-abcde")) is None
    assert RAYJOB.may_own(rj, child("ray.io/v1", "RayCluster", "rj-other"))
    assert RAYJOB.may_own(rj, child("batch/v1", "Job", "rj")) is None
    assert RAYJOB.may_own(rj, child("batch/v1", "Job", "rj-2"))


def test_the_training_operators_indexed_pods() -> None:
    pj = pytorchjob("pt", [("master", 1), ("worker", 4)], meta("pt"))
    assert PYTORCHJOB.may_own(pj, pod("pt-worker-3")) is None
    assert PYTORCHJOB.may_own(pj, pod("pt-master-0")) is None
    assert PYTORCHJOB.may_own(pj, pod("pt-worker-4"))
    mj = mpijob("mpi", [("launcher", 1), ("worker", 2)], meta("mpi"))
    assert MPIJOB.may_own(mj, pod("mpi-worker-1")) is None
    launcher = of("batch/v1", "Job", "mpi-launcher",
                  {"template": copy.deepcopy(mj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"])})  # fmt: skip
    assert MPIJOB.may_own(mj, launcher) is None
    launcher["spec"]["parallelism"] = 9
    assert MPIJOB.may_own(mj, launcher)


def test_a_trainjobs_jobset_and_a_leaderworkersets_leader_statefulset() -> None:
    tj = trainjob("t", ROLES, meta("t", uid="t-uid"))
    js = "jobset.x-k8s.io/v1alpha2", "JobSet"
    assert TRAINJOB.may_own(tj, controlled(of(*js, "t"), tj)) is None
    assert TRAINJOB.may_own(tj, controlled(of(*js, "t2"), tj))
    obj = lws("infer", 2, 4, meta("infer", uid="infer-uid"))
    sts = "apps/v1", "StatefulSet"
    assert LEADERWORKERSET.may_own(obj, controlled(of(*sts, "infer"), obj)) is None
    assert LEADERWORKERSET.may_own(obj, controlled(of(*sts, "infer-0"), obj))


@pytest.mark.parametrize("uid", [None, "another-uid"], ids=["no-owner", "another-owner"])
def test_a_child_named_like_its_owner_is_not_covered_unless_the_owner_controls_it(
    uid: str | None,
) -> None:
    """A JobSet named like an admitted TrainJob (a RayCluster or submitter Job like a
    RayJob's, a StatefulSet like a LeaderWorkerSet's) but whose controller reference
    does not carry that object's UID — none, or an earlier object's of the same name —
    is not the one its controller made: it does not ride on that object's quota."""
    tj = trainjob("t", ROLES, meta("t", uid="t-uid"))
    rj = rayjob("rj", [("head", 1), ("workers", 2), ("submitter", 1)], meta("rj", uid="rj-uid"))
    rj["status"] = {"rayClusterName": "rj-abcde"}
    obj = lws("infer", 2, 4, meta("infer", uid="infer-uid"))
    for integ, owner, child in [
        (TRAINJOB, tj, of("jobset.x-k8s.io/v1alpha2", "JobSet", "t")),
        (RAYJOB, rj, of("ray.io/v1", "RayCluster", "rj-abcde")),
        (RAYJOB, rj, of("batch/v1", "Job", "rj")),
        (LEADERWORKERSET, obj, of("apps/v1", "StatefulSet", "infer")),
    ]:
        if uid is not None:
            controlled(child, owner, uid)
        why = integ.may_own(owner, child) or ""
        assert "its controller reference does not name" in why, (integ.kind, why)
        assert integ.may_own(owner, controlled(child, owner)) is None


@pytest.mark.parametrize("integ", [STATEFULSET, DEPLOYMENT, LEADERWORKERSET], ids=lambda i: i.kind)
def test_a_pod_owner_covers_only_the_pods_of_its_held_templates(integ: Any) -> None:
    """Those are gated in their own groups anyway; nothing else it names is its."""
    owner = owner_of(integ)
    assert integ.may_own(owner, pod(**HELD)) is None
    assert integ.may_own(owner, of("apps/v1", "ReplicaSet", "o-1"))


@pytest.mark.parametrize("integ", [STATEFULSET, DEPLOYMENT, LEADERWORKERSET], ids=lambda i: i.kind)
def test_a_pod_owner_cannot_name_a_prebuilt_workload(integ: Any) -> None:
    """Kueue's rule: its pods' groups get their own Workloads, there is none to name."""
    from tests.support.integration_kit import review
    from tests.unit.integrations.test_integration_deployment import deployment
    from tests.unit.integrations.test_integration_statefulset import statefulset

    make = {
        "StatefulSet": lambda: statefulset("o", [("main", 2)], meta("o")),
        "Deployment": lambda: deployment("o", 2, meta("o")),
        "LeaderWorkerSet": lambda: lws("o", 1, 2, meta("o")),
    }[integ.kind]
    obj = make()
    obj["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] = "pre"
    allowed, _, message = review(integ, obj, mutating=False)
    assert not allowed
    assert message == (
        "metadata.labels[kueue.x-k8s.io/prebuilt-workload-name]: Forbidden: Is not supported "
        f'for "{integ.api_version}, Kind={integ.kind}"'
    )
    del obj["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"]
    assert review(integ, obj, mutating=False)[0]


def test_a_covered_pod_asks_for_no_more_accelerators_than_its_template() -> None:
    """cpu and memory may grow (LimitRange defaults, injected sidecars); GPUs may not."""
    job = of("batch/v1", "Job", "j", {
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
        "template": pod_template("1"),
    })  # fmt: skip
    mine = pod(labels={"batch.kubernetes.io/controller-uid": "u"})  # 64 cpu: allowed
    assert JOB.may_own(job, mine) is None
    mine["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "8"}
    assert "asks for more nvidia.com/gpu than its template" in (JOB.may_own(job, mine) or "")
    rc = raycluster("rc", [("head", 1), ("gpu", 2)], meta("rc"))
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"][
        "limits"
    ] = {"nvidia.com/gpu": "1"}
    worker = pod(labels={"ray.io/cluster": "rc", "ray.io/group": "gpu"})
    worker["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    assert RAYCLUSTER.may_own(rc, worker) is None
    worker["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "4"}
    assert RAYCLUSTER.may_own(rc, worker)
    head = pod(labels={"ray.io/cluster": "rc", "ray.io/group": "headgroup"})
    head["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    assert "more nvidia.com/gpu" in (RAYCLUSTER.may_own(rc, head) or "")
    pj = pytorchjob("pt", [("master", 1), ("worker", 4)], meta("pt"))
    greedy = pod("pt-worker-0")
    greedy["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "2"}
    assert "more nvidia.com/gpu" in (PYTORCHJOB.may_own(pj, greedy) or "")
