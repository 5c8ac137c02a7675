"""What the real control plane showed about queueing: sizes, priorities and cohorts the cluster can reach.

A ClusterQueue whose quota the model cannot hold is reported inactive, scaling a running
Job stops and requeues it at its new size, a partially admitted Job runs at the admitted
count, a raised priority protects an admitted workload from preemption, and a cohort
cycle that slipped past the webhook disables its members.

Each test runs on the double and on a real kube-apiserver (``[real]``, with
``KUBEBUILDER_ASSETS``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube.client import resources as kr
from tests.e2e._control_plane import BASE, run
from tests.support.kube_harness import (
    admitted,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    stack,
)


def test_a_cluster_queue_the_model_cannot_hold_is_reported_inactive(
    tmp_path: Path, backend: Any
) -> None:
    """1e1001 is a valid Kubernetes quantity (the API server stores it) but beyond any
    exact arithmetic: the ClusterQueue says so in its status instead of vanishing."""
    huge = cluster_queue("huge", {"f": {"cpu": "1e1001"}})

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=[*BASE, huge]) as s:
            cq = await eventually(
                lambda: (
                    (c := s.get("clusterqueues", "huge"))
                    and any(
                        x["type"] == "Active" and x["status"] == "False"
                        for x in (c.get("status") or {}).get("conditions") or []
                    )
                    and c
                ),
                what="the ClusterQueue is reported inactive",
            )
            (active,) = cq["status"]["conditions"]
            assert active["reason"] == "InvalidSpec"
            assert "nominalQuota" in active["message"], active
            ok = await eventually(lambda: s.get("clusterqueues", "cq"), what="cq")
            assert ok is not None  # the others keep working
            await s.user.create(kr.JOBS, job("team-a", "fine", queue="lq"), namespace="team-a")
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "fine")), what="cq still admits"
            )

    run(main)


def test_scaling_a_running_job_stops_it_and_requeues_it_at_its_new_size(
    tmp_path: Path, backend: Any
) -> None:
    """Issue 13's quota escape: parallelism 1 -> 8 on an admitted, running Job must not
    run 8 pods on a 1-pod admission. The Job is stopped, its Workload takes the new
    shape and waits (8 cpu do not fit in 4)."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            grow = job("team-a", "grow", queue="lq", cpu="1")
            del grow["spec"]["completions"]  # work queue style: parallelism pods run
            await s.user.create(kr.JOBS, grow, namespace="team-a")
            await eventually(
                lambda: (j := s.get("jobs", "grow", "team-a")) and not j["spec"]["suspend"],
                what="the job runs",
            )
            await s.user.patch(kr.JOBS, "grow", {"spec": {"parallelism": 8}}, namespace="team-a")
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job("team-a", "grow"))
                    and w["spec"]["podSets"][0]["count"] == 8
                    and not admitted(w)
                    and w
                ),
                what="the Workload takes the new shape and gives the quota back",
                timeout=30,
            )
            evicted = next(c for c in wl["status"]["conditions"] if c["type"] == "Evicted")
            assert evicted["reason"] == "NoMatchingWorkload"
            assert "admitted for 1 pods, the job now has 8" in evicted["message"]
            j = s.get("jobs", "grow", "team-a")
            assert j["spec"]["suspend"] is True
            reserved = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
            assert reserved["status"] == "False"
            # the freed quota is the ClusterQueue's again: a 4-cpu job is admitted
            await s.user.create(
                kr.JOBS, job("team-a", "other", queue="lq", cpu="4"), namespace="team-a"
            )
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "other")), what="other admitted"
            )
            assert not admitted(s.workload_of_job("team-a", "grow"))

    run(main)


def test_a_partially_admitted_job_runs_at_the_admitted_count(tmp_path: Path, backend: Any) -> None:
    """job-min-parallelism: 6 pods asked, 4 fit: the Job starts with parallelism 4 (not
    6 pods on a 4-pod admission), and gets 6 back when it is stopped."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            body = job("team-a", "elastic", queue="lq", cpu="1", parallelism=6)
            body["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "2"}
            await s.user.create(kr.JOBS, body, namespace="team-a")
            j = await eventually(
                lambda: (
                    (j := s.get("jobs", "elastic", "team-a")) and not j["spec"]["suspend"] and j
                ),
                what="the job starts",
            )
            assert j["spec"]["parallelism"] == 4
            wl = s.workload_of_job("team-a", "elastic")
            assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 4
            await asyncio.sleep(0.5)  # no eviction for the lowered parallelism
            assert admitted(s.workload_of_job("team-a", "elastic"))
            assert not is_true(s.workload_of_job("team-a", "elastic"), "Evicted")
            await s.user.patch(
                kr.WORKLOADS,
                wl["metadata"]["name"],
                {"spec": {"active": False}},
                namespace="team-a",
            )
            await eventually(
                lambda: (
                    (j := s.get("jobs", "elastic", "team-a"))
                    and j["spec"]["suspend"]
                    and j["spec"]["parallelism"] == 6
                ),
                what="stopped, with its parallelism restored",
                timeout=30,
            )

    run(main)


def test_a_raised_priority_of_an_admitted_workload_protects_it_from_preemption(
    tmp_path: Path, backend: Any
) -> None:
    """Issue 12 bug 6 through serve: the cache re-reads an admitted Workload whose spec
    changed, so preemption compares against its new priority."""
    from tests.support.kube_harness import priority_class

    objects = [
        namespace("team-a"),
        flavor("f"),
        cluster_queue("cq", {"f": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("mid", 1000),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            await s.user.create(
                kr.JOBS, job("team-a", "a", queue="lq", cpu="3", priority_class="low"),
                namespace="team-a",
            )  # fmt: skip
            wl = await eventually(
                lambda: admitted(w := s.workload_of_job("team-a", "a")) and w, what="a admitted"
            )
            await s.user.patch(
                kr.WORKLOADS,
                wl["metadata"]["name"],
                {"spec": {"priority": 5000}},
                namespace="team-a",
            )
            key = f"team-a/{wl['metadata']['name']}"
            await eventually(
                lambda: (
                    (w := s.service.controller.cache.workloads.get(key)) is not None
                    and w.priority == 5000
                ),
                what="the service sees the new priority",
            )
            await s.user.create(
                kr.JOBS, job("team-a", "b", queue="lq", cpu="3", priority_class="mid"),
                namespace="team-a",
            )  # fmt: skip
            await eventually(lambda: s.workload_of_job("team-a", "b"), what="b's Workload")
            await asyncio.sleep(1.0)
            assert admitted(s.workload_of_job("team-a", "a"))
            assert not is_true(s.workload_of_job("team-a", "a"), "Evicted")
            assert not admitted(s.workload_of_job("team-a", "b"))

    run(main)


def test_a_cohort_cycle_that_slipped_past_the_webhook_disables_its_members(
    tmp_path: Path, backend: Any
) -> None:
    """The webhook's cycle check is best effort: two concurrent edits (a.parent=b and
    b.parent=a) are each valid alone and are both admitted. At run time the members of
    the cycle are inactive, with the cycle spelled out, and admit nothing."""

    def cohort(name: str, parent: str) -> dict[str, Any]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": name},
            "spec": {"parentName": parent},
        }

    objects = [
        namespace("team-a"),
        flavor("f"),
        cohort("a", "b"),
        cohort("b", "a"),
        cluster_queue("cq", {"f": {"cpu": 4}}, cohort="a"),
        local_queue("team-a", "lq", "cq"),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            cq = await eventually(
                lambda: (
                    (c := s.get("clusterqueues", "cq"))
                    and any(
                        x["type"] == "Active" and x["status"] == "False"
                        for x in (c.get("status") or {}).get("conditions") or []
                    )
                    and c
                ),
                what="the ClusterQueue in the cycle is inactive",
            )
            (active,) = cq["status"]["conditions"]
            assert "cycle" in active["message"].lower(), active
            assert "a" in active["message"] and "b" in active["message"]
            await s.user.create(kr.JOBS, job("team-a", "j", queue="lq"), namespace="team-a")
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job("team-a", "j"))
                    and any(
                        c["type"] == "QuotaReserved" and c["status"] == "False"
                        for c in (w.get("status") or {}).get("conditions") or []
                    )
                    and w
                ),
                what="the job's Workload says why it waits",
            )
            reserved = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
            assert "cycle" in reserved["message"].lower(), reserved
            assert not admitted(wl)

    run(main)
