"""Reclaimable pods: a job's finished pods give their quota back before the whole job
finishes (Kueue's ``JobWithReclaimablePods``, ``status.reclaimablePods``,
``totalRequestsFromAdmission``).

The kinds say how many pods finished for good (batch/v1 Job: once fewer completions
remain than ``parallelism``; JobSet: succeeded replicated Jobs); the reconciler writes
the counts into the Workload's status, and the engine charges an admitted workload
only for its other pods, so a waiting workload is admitted into the freed quota.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.apiserver_double.jobcontroller import start_patch
from admission.integrations.kinds.job import JOB, terminal_indexes
from admission.integrations.kinds.jobset import JOBSET
from admission.kube.client import resources as k
from queues.model import Admission, PodSet, PodSetAssignment, Workload
from tests.support.integration_kit import NS, lifecycle_objects, meta, workload_of
from tests.support.kube_harness import (
    admitted,
    cluster_queue,
    eventually,
    job,
    local_queue,
    namespace,
    stack,
)
from tests.support.kube_harness import flavor as flavor_obj
from tests.unit.integrations.test_integration_jobset import CASE, jobset


def batch_job(parallelism: int, completions: int, status: dict, *, indexed: bool = False) -> dict:
    spec: dict[str, Any] = {"parallelism": parallelism, "completions": completions}
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"spec": spec, "status": status}


def test_a_job_reclaims_the_slots_its_remaining_completions_no_longer_fill() -> None:
    assert JOB.reclaimable_pods(batch_job(4, 4, {"succeeded": 1})) == {"main": 1}
    assert JOB.reclaimable_pods(batch_job(4, 10, {"succeeded": 6})) == {}  # 4 remain for 4
    assert JOB.reclaimable_pods(batch_job(4, 10, {"succeeded": 7})) == {"main": 1}
    assert JOB.reclaimable_pods(batch_job(4, 4, {"succeeded": 9})) == {"main": 4}
    assert JOB.reclaimable_pods(batch_job(1, 1, {"succeeded": 1})) == {}  # a single pod
    assert JOB.reclaimable_pods(batch_job(4, 4, {})) == {}
    # Indexed: completed and failed indexes below completions, counted once
    indexed = batch_job(4, 4, {"succeeded": 0, "completedIndexes": "0,2", "failedIndexes": "2-3"},
                        indexed=True)  # fmt: skip
    assert JOB.reclaimable_pods(indexed) == {"main": 3}
    assert terminal_indexes("0-9", "", 4) == 4  # indexes past an elastic scale-down ignored
    assert terminal_indexes("bad,1", "3-x", 4) == 1


def test_a_jobset_reclaims_its_succeeded_replicated_jobs_pods() -> None:
    js = jobset("js", [("driver", 1), ("workers", 8)], meta("js"), parallelism=2)
    assert JOBSET.reclaimable_pods(js) == {}
    js["status"] = {"replicatedJobsStatus": [
        {"name": "workers", "succeeded": 3, "active": 1},
        {"name": "driver", "succeeded": 0, "active": 1},
    ]}  # fmt: skip
    assert JOBSET.reclaimable_pods(js) == {"workers": 6}  # 3 replicas x 2 pods
    js["status"]["replicatedJobsStatus"][0]["succeeded"] = 5  # more than its 4 replicas
    assert JOBSET.reclaimable_pods(js) == {}


def test_an_admitted_workload_is_charged_for_its_pods_that_are_not_reclaimable() -> None:
    wl = Workload(
        NS, "w", [PodSet("a", 4, {"cpu": 1000}), PodSet("b", 2, {"cpu": 500})],
        admission=Admission("cq", [
            PodSetAssignment("a", {"cpu": "fa"}, {"cpu": 4000}, 4),
            PodSetAssignment("b", {"cpu": "fb"}, {"cpu": 1000}, 2),
        ]),
    )  # fmt: skip
    assert wl.admitted_usage() == {("fa", "cpu"): 4000, ("fb", "cpu"): 1000}
    wl.reclaimable_pods = {"a": 3, "b": 2}
    assert wl.admitted_usage() == {("fa", "cpu"): 1000, ("fb", "cpu"): 0}
    # partially admitted (2 of 4): reclaiming 1 still leaves 3 > 2 admitted, unchanged
    assert wl.admission is not None
    wl.admission.pod_set_assignments[0] = PodSetAssignment("a", {"cpu": "fa"}, {"cpu": 2000}, 2)
    wl.reclaimable_pods = {"a": 1}
    assert wl.admitted_usage()[("fa", "cpu")] == 2000


def reclaimable_of(wl: dict | None) -> dict[str, int]:
    items = ((wl or {}).get("status") or {}).get("reclaimablePods") or []
    return {i["name"]: i["count"] for i in items}


def test_a_jobsets_succeeded_workers_free_quota_another_jobset_is_admitted_into(
    tmp_path: Path, backend: Any
) -> None:
    res = CASE.resource

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=lifecycle_objects(CASE), crds=("jobsets",)
        ) as s:
            await s.user.create(res, jobset("a", CASE.roles, meta("a")), namespace=NS)
            await eventually(
                lambda: admitted(workload_of(s.server, JOBSET, "a")), what="a admitted"
            )
            # b's two workers fit flavor fb only once two of a's four are done
            await s.user.create(res, jobset("b", [("workers", 2)], meta("b")), namespace=NS)
            await eventually(lambda: workload_of(s.server, JOBSET, "b"), what="b's Workload")
            await asyncio.sleep(0.5)
            assert not admitted(workload_of(s.server, JOBSET, "b"))
            status = {"replicatedJobsStatus": [
                {"name": "driver", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
                 "suspended": 0},
                {"name": "workers", "ready": 2, "succeeded": 2, "failed": 0, "active": 2,
                 "suspended": 0},
            ]}  # fmt: skip
            await s.user.patch(res, "a", {"status": status}, namespace=NS, subresource="status")
            wl = await eventually(
                lambda: reclaimable_of(w := workload_of(s.server, JOBSET, "a")) and w,
                what="a's Workload reports its reclaimable pods",
            )
            assert reclaimable_of(wl) == {"workers": 2}
            assert admitted(wl) and not wl["status"].get("conditions", [{}])[0].get("Finished")
            b = await eventually(
                lambda: admitted(w := workload_of(s.server, JOBSET, "b")) and w,
                what="b admitted into the quota a's finished workers gave back",
            )
            assert b["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "fb"}

            def fb_usage() -> str | None:
                cq = s.get("clusterqueues", "cq") or {}
                for f in (cq.get("status") or {}).get("flavorsUsage") or []:
                    if f["name"] == "fb":
                        return str(f["resources"][0]["total"])
                return None

            await eventually(lambda: fb_usage() == "4", what="fb: a's 2 running workers + b's 2")

    asyncio.run(main())


def test_a_jobs_succeeded_pods_free_quota_another_job_is_admitted_into(tmp_path: Path) -> None:
    """On the double, which plays the Job controller's status writes."""
    objects = [
        namespace(NS), flavor_obj("default"),
        cluster_queue("cq", {"default": {"cpu": "4"}}),
        local_queue(NS, "lq", "cq"),
    ]  # fmt: skip

    async def main() -> None:
        async with stack(tmp_path, objects=objects) as s:
            await s.user.create(k.JOBS, job(NS, "big", queue="lq", parallelism=4), namespace=NS)
            await eventually(lambda: admitted(s.workload_of_job(NS, "big")), what="big admitted")
            await s.user.create(k.JOBS, job(NS, "next", queue="lq", parallelism=3), namespace=NS)
            await eventually(lambda: s.workload_of_job(NS, "next"), what="next's Workload")
            big = await eventually(
                lambda: (j := s.get("jobs", "big", NS)) and not j["spec"]["suspend"] and j,
                what="big started",
            )
            started = start_patch(big, "2026-01-01T00:00:00Z")
            if started is not None:
                await s.user.patch(k.JOBS, "big", started, namespace=NS, subresource="status")
            await s.user.patch(k.JOBS, "big", {"status": {"succeeded": 3, "active": 1}},
                               namespace=NS, subresource="status")  # fmt: skip
            await eventually(
                lambda: reclaimable_of(s.workload_of_job(NS, "big")) == {"main": 3},
                what="big's Workload reports 3 reclaimable pods",
            )
            await eventually(lambda: admitted(s.workload_of_job(NS, "next")), what="next admitted")

    asyncio.run(main())
