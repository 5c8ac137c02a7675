"""End to end: the double + the real webhook server + the real controller + kubernetes.aio.

Each test builds a small cluster (namespaces, flavors, queues), then acts as a user
would — create Jobs, edit a ClusterQueue, let jobs finish — and checks what the
service did through the API objects alone.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.errors import ApiError
from tests.support.kube_harness import (
    admitted,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    priority_class,
    stack,
    workload,
)

BASE = [
    namespace("team-a"),
    flavor("a100", **{"gpu.example.com/model": "a100"}),
    cluster_queue("cq", {"a100": {"cpu": 4}}),
    local_queue("team-a", "lq", "cq"),
]


def run(coro_fn) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro_fn())


def test_a_queued_job_is_suspended_gets_a_workload_and_starts_on_its_flavor(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            created = await s.user.create(
                kr.JOBS, job("team-a", "train", queue="lq", cpu="2"), namespace="team-a"
            )
            assert created["spec"]["suspend"] is True  # the mutating webhook suspended it
            wl = await eventually(lambda: s.workload_of_job("team-a", "train"), what="a Workload")
            assert wl["spec"]["queueName"] == "lq"
            assert wl["spec"]["podSets"][0]["count"] == 1
            assert wl["metadata"]["ownerReferences"][0]["controller"] is True
            wl = await eventually(
                lambda: admitted(w := s.workload_of_job("team-a", "train")) and w, what="admission"
            )
            assert wl["status"]["admission"]["clusterQueue"] == "cq"
            psa = wl["status"]["admission"]["podSetAssignments"][0]
            assert psa == {
                "name": "main",
                "flavors": {"cpu": "a100"},
                "resourceUsage": {"cpu": "2"},
                "count": 1,
            }
            assert is_true(wl, "Admitted")
            reserved = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
            assert reserved["message"] == "Quota reserved in ClusterQueue cq"
            j = await eventually(
                lambda: (j := s.get("jobs", "train", "team-a")) and not j["spec"]["suspend"] and j,
                what="the job is unsuspended",
            )
            tmpl = j["spec"]["template"]
            assert tmpl["spec"]["nodeSelector"] == {"gpu.example.com/model": "a100"}
            assert tmpl["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"

    run(main)


def test_a_job_without_a_queue_label_is_left_alone(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await s.user.create(kr.JOBS, job("team-a", "plain", queue=None), namespace="team-a")
            await s.user.create(kr.JOBS, job("team-a", "queued", queue="lq"), namespace="team-a")
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "queued")), what="admission"
            )
            assert s.workload_of_job("team-a", "plain") is None
            assert s.get("jobs", "plain", "team-a")["spec"]["suspend"] is False

    run(main)


def test_a_gang_of_pod_sets_is_admitted_only_when_all_of_it_fits(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            small = workload("team-a", "small", queue="lq", pod_sets=[("main", 1, "2")])
            await s.user.create(kr.WORKLOADS, small, namespace="team-a")
            await eventually(
                lambda: admitted(s.get("workloads", "small", "team-a")), what="small admitted"
            )
            # launcher 1 cpu + 2 workers x 1 cpu = 3 > 2 free: nothing of it starts
            gang = workload(
                "team-a", "gang", queue="lq", pod_sets=[("launcher", 1, "1"), ("worker", 2, "1")]
            )
            await s.user.create(kr.WORKLOADS, gang, namespace="team-a")
            wl = await eventually(
                lambda: (
                    (w := s.get("workloads", "gang", "team-a"))
                    and any(
                        c["type"] == "QuotaReserved" and c["status"] == "False"
                        for c in w.get("status", {}).get("conditions", [])
                    )
                    and w
                ),
                what="the gang is pending with a reason",
            )
            assert not admitted(wl)
            cond = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
            assert cond["reason"] in ("WaitingForQuota", "Pending")
            assert "cpu" in cond["message"]
            # the small one finishes: the whole gang fits and is admitted at once
            await s.user.patch(
                kr.WORKLOADS,
                "small",
                [
                    {
                        "op": "add",
                        "path": "/status/conditions/-",
                        "value": {
                            "type": "Finished",
                            "status": "True",
                            "reason": "Succeeded",
                            "message": "done",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        },
                    }
                ],
                namespace="team-a",
                subresource="status",
                content_type=k.JSON_PATCH,
            )
            wl = await eventually(
                lambda: admitted(w := s.get("workloads", "gang", "team-a")) and w,
                what="gang admitted",
            )
            names = [p["name"] for p in wl["status"]["admission"]["podSetAssignments"]]
            assert names == ["launcher", "worker"]
            assert [p["count"] for p in wl["status"]["admission"]["podSetAssignments"]] == [1, 2]

    run(main)


def test_preemption_suspends_the_victims_job_and_starts_the_preemptor(
    tmp_path: Path, backend: Any
) -> None:
    objects = [
        namespace("team-a"),
        flavor("a100"),
        cluster_queue(
            "cq", {"a100": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}
        ),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("high", 1000),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            await s.user.create(
                kr.JOBS,
                job("team-a", "victim", queue="lq", cpu="3", priority_class="low"),
                namespace="team-a",
            )
            await eventually(
                lambda: (j := s.get("jobs", "victim", "team-a")) and not j["spec"]["suspend"],
                what="victim runs",
            )
            # the job controller would report active pods; let the victim be running
            await s.user.patch(
                kr.JOBS,
                "victim",
                {"status": {"active": 1}},
                namespace="team-a",
                subresource="status",
            )
            await s.user.create(
                kr.JOBS,
                job("team-a", "urgent", queue="lq", cpu="3", priority_class="high"),
                namespace="team-a",
            )
            vwl = await eventually(
                lambda: is_true(w := s.workload_of_job("team-a", "victim"), "Evicted") and w,
                what="victim evicted",
            )
            pre = next(c for c in vwl["status"]["conditions"] if c["type"] == "Preempted")
            assert pre["reason"] == "InClusterQueue"
            ev = next(c for c in vwl["status"]["conditions"] if c["type"] == "Evicted")
            assert ev["reason"] == "Preempted"
            await eventually(
                lambda: (j := s.get("jobs", "victim", "team-a")) and j["spec"]["suspend"] and j,
                what="the victim's job is suspended",
            )
            # still holding quota while its pods run: the preemptor waits
            assert admitted(s.workload_of_job("team-a", "victim"))
            assert not admitted(s.workload_of_job("team-a", "urgent"))
            await s.user.patch(
                kr.JOBS,
                "victim",
                {"status": {"active": 0}},
                namespace="team-a",
                subresource="status",
            )
            # pods gone: the template is restored (Kubernetes >= 1.36 allows it only now)
            j = await eventually(
                lambda: (
                    (j := s.get("jobs", "victim", "team-a"))
                    and "kueue.x-k8s.io/podset"
                    not in (j["spec"]["template"].get("metadata") or {}).get("labels", {})
                    and j
                ),
                what="the victim's template is restored",
            )
            assert j["spec"]["suspend"] is True
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "urgent")),
                what="the preemptor is admitted",
            )
            await eventually(
                lambda: not s.get("jobs", "urgent", "team-a")["spec"]["suspend"],
                what="the preemptor starts",
            )
            vwl = s.workload_of_job("team-a", "victim")
            assert not admitted(vwl)
            requeued = next(c for c in vwl["status"]["conditions"] if c["type"] == "Requeued")
            assert requeued["status"] == "True" and requeued["reason"] == "Preempted"

    run(main)


def test_a_finished_job_lets_the_next_one_in(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await s.user.create(
                kr.JOBS, job("team-a", "first", queue="lq", cpu="3"), namespace="team-a"
            )
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "first")), what="first admitted"
            )
            await s.user.create(
                kr.JOBS, job("team-a", "second", queue="lq", cpu="3"), namespace="team-a"
            )
            await eventually(
                lambda: s.workload_of_job("team-a", "second"), what="second has a workload"
            )
            assert not admitted(s.workload_of_job("team-a", "second"))
            await s.finish_job("team-a", "first")
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job("team-a", "first"), "Finished") and w,
                what="first finished",
            )
            assert (
                next(c for c in wl["status"]["conditions"] if c["type"] == "Finished")["reason"]
                == "Succeeded"
            )
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "second")), what="second admitted"
            )
            await eventually(
                lambda: not s.get("jobs", "second", "team-a")["spec"]["suspend"],
                what="second starts",
            )

    run(main)


def test_a_quota_edit_through_the_api_changes_admissions(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await s.user.create(
                kr.JOBS, job("team-a", "big", queue="lq", cpu="6"), namespace="team-a"
            )
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job("team-a", "big"))
                    and any(
                        c["type"] == "QuotaReserved"
                        for c in w.get("status", {}).get("conditions", [])
                    )
                    and w
                ),
                what="big is pending",
            )
            assert not admitted(wl)
            patch = {
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": "a100",
                                    "resources": [{"name": "cpu", "nominalQuota": "8"}],
                                }
                            ],
                        }
                    ]
                }
            }
            await s.user.patch(kr.CLUSTER_QUEUES, "cq", patch)
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "big")), what="admitted after the edit"
            )
            cq = await eventually(
                lambda: (
                    (c := s.get("clusterqueues", "cq"))
                    and c.get("status", {}).get("admittedWorkloads") == 1
                    and c
                ),
                what="the ClusterQueue status counts it",
            )
            usage = cq["status"]["flavorsUsage"][0]
            assert usage == {
                "name": "a100",
                "resources": [{"name": "cpu", "total": "6", "borrowed": "0"}],
            }

    run(main)


def test_an_invalid_quota_edit_is_denied_with_kueues_message(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:

            def edit(resource: dict) -> dict:
                return {
                    "spec": {
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [
                                    {"name": "a100", "resources": [{"name": "cpu", **resource}]}
                                ],
                            }
                        ]
                    }
                }

            with pytest.raises(ApiError) as err:
                await s.user.patch(
                    kr.CLUSTER_QUEUES, "cq", edit({"nominalQuota": "4", "borrowingLimit": "2"})
                )
            # the CRD's CEL rule refuses it before any validating webhook runs (as
            # kube-apiserver does): 422, not the webhook's 403
            assert err.value.status == 422
            assert "borrowingLimit must be nil when cohort is empty" in err.value.message
            assert "admission webhook" not in err.value.message
            with pytest.raises(ApiError) as err:
                await s.user.patch(kr.CLUSTER_QUEUES, "cq", edit({"nominalQuota": "-1"}))
            assert "nominalQuota" in err.value.message
            cq = s.get("clusterqueues", "cq")
            assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == {
                "name": "cpu",
                "nominalQuota": "4",
            }

    run(main)


def test_a_deleted_cluster_queue_admits_nothing_and_goes_once_its_workloads_finish(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE[:1] + BASE[3:]) as s:
            # created through the API: the mutating webhook adds the resource-in-use finalizer
            await s.user.create(kr.RESOURCE_FLAVORS, flavor("a100"))
            await s.user.create(kr.CLUSTER_QUEUES, cluster_queue("cq", {"a100": {"cpu": 4}}))
            assert s.get("clusterqueues", "cq")["metadata"]["finalizers"] == [
                "kueue.x-k8s.io/resource-in-use"
            ]
            await s.user.create(
                kr.JOBS, job("team-a", "first", queue="lq", cpu="2"), namespace="team-a"
            )
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "first")), what="first admitted"
            )
            await s.user.delete(kr.CLUSTER_QUEUES, "cq")
            assert s.get("clusterqueues", "cq")["metadata"].get("deletionTimestamp")
            await s.user.create(
                kr.JOBS, job("team-a", "second", queue="lq", cpu="1"), namespace="team-a"
            )
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job("team-a", "second"))
                    and any(
                        c["type"] == "QuotaReserved"
                        for c in w.get("status", {}).get("conditions", [])
                    )
                    and w
                ),
                what="second is pending",
            )
            assert not admitted(wl)
            assert s.get("clusterqueues", "cq") is not None  # first still holds quota in it
            await s.finish_job("team-a", "first")
            await eventually(
                lambda: s.get("clusterqueues", "cq") is None, what="the finalizer is removed"
            )
            assert not admitted(s.workload_of_job("team-a", "second"))

    run(main)


def test_deleting_a_job_deletes_its_workload_and_frees_its_quota(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await s.user.create(
                kr.JOBS, job("team-a", "gone", queue="lq", cpu="3"), namespace="team-a"
            )
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "gone")), what="gone admitted"
            )
            # only once "gone" holds the quota: a cycle may otherwise see "next" alone
            await s.user.create(
                kr.JOBS, job("team-a", "next", queue="lq", cpu="3"), namespace="team-a"
            )
            lq = await eventually(
                lambda: (
                    (q := s.get("localqueues", "lq", "team-a"))
                    and q.get("status", {}).get("pendingWorkloads") == 1
                    and q["status"].get("admittedWorkloads") == 1
                    and q
                ),
                what="the LocalQueue status counts one admitted, one pending",
            )
            assert lq["status"]["flavorsUsage"] == [
                {"name": "a100", "resources": [{"name": "cpu", "total": "3"}]}
            ]
            # kubectl's default for Jobs orphans dependents: the controller deletes it
            await s.user.delete(kr.JOBS, "gone", namespace="team-a", propagation="Orphan")
            await eventually(
                lambda: (
                    s.workload_of_job("team-a", "gone") is None
                    and not any(
                        w["metadata"].get("labels", {}).get("kueue.x-k8s.io/job-uid")
                        and not w["metadata"].get("ownerReferences")
                        for w in s.workloads("team-a")
                    )
                ),
                what="the orphaned Workload is deleted",
            )
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "next")), what="next admitted"
            )

    run(main)
