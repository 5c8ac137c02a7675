"""A tenant's ways around quota, per kind, on the double and on a real API server.

Each test runs a kind's object to admission through ``serve`` and then tries what a
namespace user (or one allowed to patch ``workloads/status``) could do to run more
than was admitted: per kind with a :class:`~tests.support.integration_kit.KindCase`, and for
pods (single and in groups).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import resources as k
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import JSON_PATCH
from admission.kube.control.context import ControllerOptions
from tests.support.integration_kit import (
    NS,
    KindCase,
    crds_of,
    lifecycle_objects,
    meta,
    workload_of,
)
from tests.support.kube_harness import (
    Obj,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    namespace,
    stack,
)
from tests.unit.integrations import (
    test_integration_jobset,
    test_integration_mpijob,
    test_integration_pytorchjob,
    test_integration_raycluster,
    test_integration_rayjob,
    test_integration_trainjob,
)

CASES = [
    pytest.param(m.CASE, id=m.CASE.integration.kind)
    for m in (
        test_integration_jobset,
        test_integration_raycluster,
        test_integration_pytorchjob,
        test_integration_mpijob,
        test_integration_rayjob,
        test_integration_trainjob,
    )
]


async def admitted_object(s: Any, case: KindCase, name: str) -> dict[str, Any]:
    """Create ``name`` of the case's kind and wait for its Workload's admission."""
    await s.user.create(case.resource, case.make(name, case.roles, meta(name)), namespace=NS)
    return await eventually(  # type: ignore[no-any-return]
        lambda: admitted(w := workload_of(s.server, case.integration, name)) and w,
        what=f"{name} admitted",
    )


@pytest.mark.parametrize("case", CASES)
def test_a_tenant_cannot_mark_pods_of_a_running_workload_reclaimable(
    case: KindCase, tmp_path: Path, backend: Any
) -> None:
    """``status.reclaimablePods`` on a running object's Workload would let an identical
    second object be admitted on the quota the first still uses."""

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=lifecycle_objects(case),
            crds=crds_of(case.integration),
        ) as s:  # fmt: skip
            wl = await admitted_object(s, case, "first")
            first_set, count = case.roles[0]
            patch = [{"op": "add", "path": "/status/reclaimablePods",
                      "value": [{"name": first_set, "count": count}]}]  # fmt: skip
            with pytest.raises(ApiError) as caught:
                await s.user.patch(
                    k.WORKLOADS, wl["metadata"]["name"], patch, namespace=NS,
                    subresource="status", content_type=JSON_PATCH,
                )  # fmt: skip
            assert caught.value.status == 403, caught.value
            assert "can only be changed by the admission service" in caught.value.message
            stored = workload_of(s.server, case.integration, "first")
            assert stored is not None and not (stored.get("status") or {}).get("reclaimablePods")
            await s.user.create(
                case.resource, case.make("second", case.roles, meta("second")), namespace=NS
            )
            await eventually(
                lambda: workload_of(s.server, case.integration, "second"), what="second queued"
            )
            await asyncio.sleep(0.5)  # a cycle or more: the second must still wait
            assert not admitted(workload_of(s.server, case.integration, "second"))

    asyncio.run(main())


def queued_pod(name: str, *, cpu: str, group: str | None = None, total: int = 0) -> Obj:
    labels = {"kueue.x-k8s.io/queue-name": "lq"}
    annotations = {}
    if group:
        labels["kueue.x-k8s.io/pod-group-name"] = group
        annotations["kueue.x-k8s.io/pod-group-total-count"] = str(total)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels,
                     "annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]},
    }  # fmt: skip


GATE = "kueue.x-k8s.io/admission"
SMALL_QUEUE = [
    namespace("team-a"),
    flavor("f"),
    cluster_queue("cq", {"f": {"cpu": 2}}),
    local_queue("team-a", "lq", "cq"),
]


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param([queued_pod("single", cpu="4")], id="single-pod"),
        pytest.param(
            [queued_pod(f"g-{i}", cpu="2", group="g", total=2) for i in range(2)],
            id="group-member",
        ),
    ],
)
def test_a_tenant_cannot_remove_the_admission_gate_of_a_pending_pod(
    pods: list[Obj], tmp_path: Path, backend: Any
) -> None:
    """A pod without its gate runs whatever its Workload holds: only the service lifts it."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=SMALL_QUEUE) as s:
            for p in pods:
                created = await s.user.create(k.PODS, p, namespace="team-a")
                assert GATE in [g["name"] for g in created["spec"]["schedulingGates"]]
            name = pods[0]["metadata"]["name"]
            await eventually(
                lambda: any(
                    not admitted(w) and (w.get("status") or {}).get("conditions")
                    for w in s.workloads("team-a")
                ),
                what="the pending Workload",
            )
            with pytest.raises(ApiError) as caught:
                await s.user.patch(
                    k.PODS, name, [{"op": "replace", "path": "/spec/schedulingGates",
                                    "value": []}],
                    namespace="team-a", content_type=JSON_PATCH,
                )  # fmt: skip
            assert caught.value.status == 403, caught.value
            assert f"the {GATE} gate can only be removed by the admission service" in (
                caught.value.message
            )
            stored = s.get("pods", name, "team-a")
            assert stored is not None
            assert GATE in [g["name"] for g in stored["spec"]["schedulingGates"]]

    asyncio.run(main())


MANAGED = "kueue.x-k8s.io/managed"
TENANT_PATCHES = {
    "gate": [{"op": "replace", "path": "/spec/schedulingGates", "value": []}],
    "managed-label": [{"op": "remove", "path": "/metadata/labels/kueue.x-k8s.io~1managed"}],
}


async def manage_pods_without_queue_name(s: Any) -> None:
    """Register the pod mutating webhook as the manifest says for
    ``manageJobsWithoutQueueName: true`` (mpod.kb.io without its objectSelector), and
    wait until a pod without a queue-name label comes back gated."""
    name = "quartermaster-mutating-webhook-configuration"
    cfg = await s.user.get(k.MUTATING_WEBHOOKS, name)
    (i,) = [n for n, h in enumerate(cfg["webhooks"]) if h["name"] == "mpod.kb.io"]
    await s.user.patch(
        k.MUTATING_WEBHOOKS, name, [{"op": "remove", "path": f"/webhooks/{i}/objectSelector"}],
        content_type=JSON_PATCH,
    )  # fmt: skip
    tries = iter(range(1000))

    async def probe_gated() -> bool:
        pod = queued_pod(f"probe-{next(tries)}", cpu="1")
        del pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
        created = await s.user.create(k.PODS, pod, namespace="team-a")
        if created["spec"].get("schedulingGates"):
            return True
        await s.user.delete(k.PODS, created["metadata"]["name"], namespace="team-a")
        return False

    await eventually(probe_gated, what="pods without a queue-name label gated", interval=0.2)


@pytest.mark.parametrize("edit", list(TENANT_PATCHES))
def test_a_tenant_cannot_ungate_a_pod_managed_without_a_queue_name(
    edit: str, tmp_path: Path, backend: Any
) -> None:
    """With manageJobsWithoutQueueName a gated pod carries no queue-name label: the
    validating webhook still sees its updates (by the managed label), so neither its gate
    nor that label can be taken off by a tenant while it waits."""
    controller = ControllerOptions(
        status_interval=0.2, tick=0.05, pending_delay=0.02, schedule_batch=0.0,
        excluded_namespaces=("kube-system", "quartermaster-system"),
        manage_jobs_without_queue_name=True,
    )  # fmt: skip

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=SMALL_QUEUE, controller=controller
        ) as s:
            await manage_pods_without_queue_name(s)
            pod = queued_pod("free", cpu="4")
            del pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
            created = await s.user.create(k.PODS, pod, namespace="team-a")
            assert GATE in [g["name"] for g in created["spec"]["schedulingGates"]]
            assert created["metadata"]["labels"][MANAGED] == "true"
            await eventually(
                lambda: any(
                    w["metadata"]["name"].startswith("pod-free-") for w in s.workloads("team-a")
                ),
                what="the pod's Workload",
            )
            with pytest.raises(ApiError) as caught:
                await s.user.patch(
                    k.PODS, "free", TENANT_PATCHES[edit], namespace="team-a",
                    content_type=JSON_PATCH,
                )  # fmt: skip
            assert caught.value.status == 403, caught.value
            assert "can only be removed" in caught.value.message, caught.value.message
            assert "by the admission service" in caught.value.message, caught.value.message
            stored = s.get("pods", "free", "team-a")
            assert stored is not None
            assert GATE in [g["name"] for g in stored["spec"]["schedulingGates"]]
            assert stored["metadata"]["labels"][MANAGED] == "true"
            assert not any(admitted(w) for w in s.workloads("team-a"))

    asyncio.run(main())


# -------------------------------------------------------------- children naming an owner


def forged_pod(name: str, owner: Obj, *, cpu: str = "1") -> Obj:
    """A pod naming ``owner`` as its controller, written by a tenant (not its controller)."""
    pod = queued_pod(name, cpu=cpu)
    pod["metadata"]["namespace"] = NS
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "controller": True,
         "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
    ]  # fmt: skip
    return pod


def gated(pod: Obj | None) -> bool:
    return GATE in [
        g.get("name") for g in ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    ]


def pod_workload(s: Any, pod_name: str) -> Obj | None:
    for wl in s.workloads(NS):
        refs = wl["metadata"].get("ownerReferences") or []
        if any(r.get("kind") == "Pod" and r.get("name") == pod_name for r in refs):
            return wl
    return None


@pytest.mark.parametrize("case", CASES)
def test_a_pod_naming_a_running_object_as_its_owner_is_queued_on_its_own(
    case: KindCase, tmp_path: Path, backend: Any
) -> None:
    """No kind's controller makes a pod like this one (no name or label of its
    replicas): the owner's admission does not cover it, so it is gated with its own
    Workload."""

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=lifecycle_objects(case),
            crds=crds_of(case.integration),
        ) as s:  # fmt: skip
            await admitted_object(s, case, "first")
            owner = s.get(case.resource.plural, "first", NS)
            assert owner is not None
            created = await s.user.create(k.PODS, forged_pod("stowaway", owner), namespace=NS)
            assert gated(created), created["spec"]
            await eventually(lambda: pod_workload(s, "stowaway"), what="the pod's own Workload")
            assert gated(s.get("pods", "stowaway", NS))

    asyncio.run(main())


def test_a_wide_job_naming_an_admitted_jobset_is_suspended_and_queued_on_its_own(
    tmp_path: Path, backend: Any
) -> None:
    """A batch Job of parallelism 20 naming an admitted 2-pod JobSet: none of its
    replicated Jobs' replicas is like it, so the JobSet's admission does not cover it."""
    from tests.unit.integrations.test_integration_jobset import child_job, jobset

    case = test_integration_jobset.CASE
    roles = [("driver", 1), ("workers", 1)]

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=lifecycle_objects(case),
            crds=crds_of(case.integration),
        ) as s:  # fmt: skip
            await s.user.create(case.resource, jobset("js", roles, meta("js")), namespace=NS)
            await eventually(
                lambda: admitted(workload_of(s.server, case.integration, "js")), what="admitted"
            )
            js = await eventually(
                lambda: (j := s.get("jobsets", "js", NS)) and not j["spec"]["suspend"] and j,
                what="the JobSet started",
            )
            wide = child_job(js, "workers", 0)
            wide["metadata"]["name"] = "js-workers-1"  # replicas: 1, so index 0 only
            wide["spec"]["parallelism"] = wide["spec"]["completions"] = 20
            created = await s.user.create(k.JOBS, wide, namespace=NS)
            assert created["spec"]["suspend"] is True
            wl = await eventually(lambda: s.workload_of_job(NS, "js-workers-1"), what="its own")
            assert wl["spec"]["podSets"][0]["count"] == 20
            # the JobSet controller's own Job for that replica is still its
            legit = await s.user.create(k.JOBS, child_job(js, "workers", 0), namespace=NS)
            assert legit["spec"]["suspend"] is False
            await asyncio.sleep(0.5)
            assert s.workload_of_job(NS, "js-workers-0") is None

    asyncio.run(main())


def test_pods_naming_owners_that_cost_nothing_are_queued_on_their_own(
    tmp_path: Path, backend: Any
) -> None:
    """Pods naming a queued Deployment or StatefulSet of 0 replicas, or an admitted Job
    whose selector they do not match: each is gated, with its own Workload."""
    from admission.integrations.kinds.deployment import DEPLOYMENT
    from admission.integrations.kinds.statefulset import STATEFULSET
    from tests.support.kube_harness import job
    from tests.unit.integrations.test_integration_deployment import deployment
    from tests.unit.integrations.test_integration_statefulset import statefulset

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=SMALL_QUEUE) as s:
            owners = [
                await s.user.create(
                    DEPLOYMENT.resource, deployment("web", 0, meta("web")), namespace=NS
                ),
                await s.user.create(
                    STATEFULSET.resource, statefulset("db", [("main", 0)], meta("db")), namespace=NS
                ),
                await s.user.create(k.JOBS, job(NS, "j", queue="lq", cpu="1"), namespace=NS),
            ]
            await eventually(lambda: admitted(s.workload_of_job(NS, "j")), what="j admitted")
            owners[2] = s.get("jobs", "j", NS)
            for i, owner in enumerate(owners):
                for n in range(2):
                    name = f"free-{i}-{n}"
                    created = await s.user.create(k.PODS, forged_pod(name, owner), namespace=NS)
                    assert gated(created), (owner["kind"], created["spec"])
            for i in range(len(owners)):
                await eventually(lambda i=i: pod_workload(s, f"free-{i}-0"), what="own Workload")

    asyncio.run(main())


def test_a_jobset_named_like_an_admitted_trainjob_but_not_its_is_queued_on_its_own(
    tmp_path: Path, backend: Any
) -> None:
    """A TrainJob's JobSet is the one its controller reference names by UID: a JobSet
    named like an admitted TrainJob whose reference carries another UID (an earlier
    TrainJob of that name, or a forged one) is suspended and charged on its own."""
    from admission.integrations.kinds.jobset import JOBSET
    from tests.unit.integrations.test_integration_jobset import jobset

    case = test_integration_trainjob.CASE

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=lifecycle_objects(case),
            crds=crds_of(case.integration, JOBSET),
        ) as s:  # fmt: skip
            await admitted_object(s, case, "t")
            tj = s.get(case.resource.plural, "t", NS)
            assert tj is not None
            child = jobset("t", case.roles, meta("t"))
            child["metadata"]["ownerReferences"] = [
                {"apiVersion": tj["apiVersion"], "kind": "TrainJob", "name": "t",
                 "uid": "0a0a0a0a-0000-4000-8000-000000000000", "controller": True}
            ]  # fmt: skip
            created = await s.user.create(JOBSET.resource, child, namespace=NS)
            assert created["spec"]["suspend"] is True
            # On a real cluster the garbage collector deletes a dependent whose owner
            # reference names no existing object (the double keeps it): either way the
            # JobSet never runs on the TrainJob's admission.
            await eventually(
                lambda: workload_of(s.server, JOBSET, "t") or s.get("jobsets", "t", NS) is None,
                what="the JobSet's own Workload, or the JobSet collected",
            )
            forged = s.get("jobsets", "t", NS)
            if forged is not None:
                wl = workload_of(s.server, JOBSET, "t")
                assert forged["spec"]["suspend"] or admitted(wl), "runs only on its own quota"

    asyncio.run(main())
