"""AdmissionChecks end to end: a test-owned check controller writes the check's state
through the Workload's status subresource, and the service admits, retries or
deactivates (docs/semantics.md, AdmissionChecks)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from admission.kube.client import resources as k
from admission.kube.control.context import ControllerOptions
from admission.kube.objects import rfc3339
from admission.serve.dashboard import DashboardSource, admitted_page
from queues.api.conditions import condition
from tests.support.kube_harness import (
    Stack,
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
from tests.unit.cli.test_kueuectl import cli, table

NS = "team-a"
CHECK = "check-a"
CONTROLLER = "example.com/test-check"
OPTS = ControllerOptions(status_interval=0.2, tick=0.02, pending_delay=0.02)


def _cq() -> dict[str, Any]:
    cq = cluster_queue("cq", {"f": {"cpu": 2}})
    cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK}]}
    return cq


OBJECTS = [
    namespace(NS),
    flavor("f"),
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": CHECK},
        "spec": {"controllerName": CONTROLLER},
    },
    _cq(),
    local_queue(NS, "lq", "cq"),
]


async def _activate(s: Stack, now: float) -> None:
    """The check controller says it can evaluate its check."""
    await s.user.patch(
        k.ADMISSION_CHECKS,
        CHECK,
        {"status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready",
                                    "message": "ready", "lastTransitionTime": rfc3339(now)}]}},
        subresource="status",
    )  # fmt: skip


async def _set_check(s: Stack, wl: dict[str, Any], state: str, now: float, **extra: Any) -> None:
    """The check controller's verdict, on the Workload's status subresource."""
    entry = {"name": CHECK, "state": state, "message": extra.pop("message", ""),
             "lastTransitionTime": rfc3339(now), **extra}  # fmt: skip
    body = {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]},
            "status": {"admissionChecks": [entry]}}  # fmt: skip
    await s.user.patch(
        k.WORKLOADS, wl["metadata"]["name"], body, namespace=NS, subresource="status"
    )


def _started(s: Stack, name: str) -> bool:
    j = s.get("jobs", name, NS)
    return j is not None and j["spec"]["suspend"] is False


def _cq_active(s: Stack) -> dict[str, Any] | None:
    return condition(s.get("clusterqueues", "cq"), "Active")


async def _reserved(s: Stack, name: str) -> dict[str, Any]:
    wl: dict[str, Any] = await eventually(
        lambda: admitted(w := s.workload_of_job(NS, name)) and w, what=f"{name} reserves quota"
    )
    return wl


async def _shows_the_wait(s: Stack, tmp_path: Path, name: str) -> None:
    """``why``, ``list workloads -o wide``, the ClusterQueue's status and the dashboard
    say the workload reserved quota and waits for its check."""
    kc = s.kubeconfig(tmp_path / "kc", namespace=NS)
    code, out, err = await cli(kc, "why", "job/j", "-o", "json")
    assert code == 0, err
    why = json.loads(out)
    assert why["reason"] == "UnsatisfiedAdmissionChecks"
    assert why["message"] == (
        "Quota reserved in ClusterQueue cq; waiting for AdmissionChecks: check-a (Pending)"
    )
    code, out, err = await cli(kc, "list", "workloads", "-o", "wide")
    assert code == 0, err
    (row,) = table(out)
    assert row["STATUS"] == "QUOTARESERVED"
    assert row["REASON"] == "UnsatisfiedAdmissionChecks: check-a=Pending"
    status = await eventually(
        lambda: (
            (st := (s.get("clusterqueues", "cq") or {}).get("status") or {}).get(
                "reservingWorkloads"
            )
            == 1
            and st
        ),
        what="the ClusterQueue counts the reservation",
    )
    assert status["admittedWorkloads"] == 0
    controller = s.service.controller
    source = DashboardSource(controller.cache, controller.cache_ready, lambda cq: None,
                             lambda name, cohort: None)  # fmt: skip
    page = admitted_page(source, "cq", 0, 10)
    (item,) = page["items"]
    assert item["waitingFor"] == [{"name": CHECK, "state": "Pending", "message": ""}]


def test_ready_check_admits_and_only_then_the_job_starts(tmp_path: Path, backend: Any) -> None:
    now = [1_800_000_000.0]

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=OBJECTS, controller=OPTS, clock=lambda: now[0]
        ) as s:
            # an inactive check keeps the ClusterQueue inactive: nothing reserves quota
            active = await eventually(
                lambda: (c := _cq_active(s)) and c["status"] == "False" and c,
                what="the ClusterQueue is inactive",
            )
            assert active["reason"] == "AdmissionCheckInactive"
            assert "references inactive AdmissionCheck(s): check-a" in active["message"]
            await s.user.create(k.JOBS, job(NS, "j", queue="lq", parallelism=1), namespace=NS)
            await eventually(lambda: s.workload_of_job(NS, "j"), what="the Workload")
            await _activate(s, now[0])
            wl = await _reserved(s, "j")
            admitted_cond = condition(wl, "Admitted")
            assert admitted_cond["status"] == "False"
            assert admitted_cond["reason"] == "UnsatisfiedAdmissionChecks"
            (state,) = wl["status"]["admissionChecks"]
            assert (state["name"], state["state"]) == (CHECK, "Pending")
            assert not _started(s, "j")  # quota reserved, not admitted: still suspended
            assert s.service.controller.cache.admitted  # the reservation holds quota
            await _shows_the_wait(s, tmp_path, wl["metadata"]["name"])

            now[0] += 5
            await _set_check(s, wl, "Ready", now[0], message="provisioned")
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job(NS, "j"), "Admitted") and w,
                what="admitted once the check is Ready",
            )
            await eventually(lambda: _started(s, "j"), what="the job starts")
            assert wl["status"]["admissionChecks"][0]["message"] == "provisioned"
            registry = s.service.controller.ctx.metrics.registry
            labels = {"cluster_queue": "cq"}
            # Kueue's kueue_admission_checks_wait_time_seconds: reservation to admission
            assert (
                registry.get_sample_value("kueue_admission_checks_wait_time_seconds_count", labels)
                == 1
            )
            assert (
                registry.get_sample_value("kueue_admission_checks_wait_time_seconds_sum", labels)
                == 5.0
            )
            assert registry.get_sample_value("kueue_admitted_workloads_total", labels) == 1
            assert registry.get_sample_value("kueue_quota_reserved_workloads_total", labels) == 1

    asyncio.run(main())


def test_retry_releases_the_quota_and_requeues_after_requeue_after_seconds(
    tmp_path: Path, backend: Any
) -> None:
    now = [1_800_000_000.0]

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=OBJECTS, controller=OPTS, clock=lambda: now[0]
        ) as s:
            await _activate(s, now[0])
            await eventually(lambda: (c := _cq_active(s)) and c["status"] == "True", what="active")
            await s.user.create(k.JOBS, job(NS, "j", queue="lq", parallelism=2), namespace=NS)
            wl = await _reserved(s, "j")
            await _set_check(s, wl, "Retry", now[0], message="no capacity", requeueAfterSeconds=60)
            wl = await eventually(
                lambda: (
                    not admitted(w := s.workload_of_job(NS, "j")) and is_true(w, "Evicted") and w
                ),
                what="evicted and its quota released",
            )
            ev = condition(wl, "Evicted")
            assert ev["reason"] == "AdmissionCheck"
            assert (
                ev["message"]
                == 'Evicted due to AdmissionCheck in Retry state: "check-a" (no capacity)'
            )
            (state,) = wl["status"]["admissionChecks"]
            assert state["state"] == "Pending"
            assert state["retryCount"] == 1
            assert state["message"] == "Reset to Pending after eviction. Previously: Retry"
            assert wl["status"]["requeueState"]["requeueAt"] == rfc3339(now[0] + 60)
            assert not _started(s, "j")
            # the quota is free, but the workload waits out requeueAfterSeconds
            await eventually(lambda: s.service.controller.sync.backoff, what="in backoff")
            assert not s.service.controller.cache.admitted

            now[0] += 61
            wl = await _reserved(s, "j")
            assert wl["status"]["admissionChecks"][0]["state"] == "Pending"
            assert not _started(s, "j")
            await _set_check(s, wl, "Ready", now[0])
            await eventually(lambda: _started(s, "j"), what="the job starts after the retry")

    asyncio.run(main())


def test_rejected_deactivates_the_workload(tmp_path: Path, backend: Any) -> None:
    now = [1_800_000_000.0]

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=OBJECTS, controller=OPTS, clock=lambda: now[0]
        ) as s:
            await _activate(s, now[0])
            await s.user.create(k.JOBS, job(NS, "j", queue="lq", parallelism=2), namespace=NS)
            wl = await _reserved(s, "j")
            await _set_check(s, wl, "Rejected", now[0], message="never fits")
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job(NS, "j"))["spec"].get("active") is False
                    and not admitted(w)
                    and w
                ),
                what="deactivated and its quota released",
            )
            ev = condition(wl, "Evicted")
            assert ev["reason"] == "DeactivatedDueToAdmissionCheck"
            assert ev["message"] == (
                "The workload is deactivated due to AdmissionCheck in Rejected state: "
                '"check-a" (never fits)'
            )
            assert condition(wl, "DeactivationTarget") is None
            assert not _started(s, "j")
            await eventually(
                lambda: not s.service.controller.cache.admitted, what="the engine releases it"
            )

    asyncio.run(main())


def test_a_reservation_whose_queue_drops_its_check_is_admitted(
    tmp_path: Path, backend: Any
) -> None:
    now = [1_800_000_000.0]

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=OBJECTS, controller=OPTS, clock=lambda: now[0]
        ) as s:
            await _activate(s, now[0])
            await s.user.create(k.JOBS, job(NS, "j", queue="lq", parallelism=1), namespace=NS)
            wl = await _reserved(s, "j")
            assert not is_true(wl, "Admitted")
            await s.user.patch(k.CLUSTER_QUEUES, "cq", {"spec": {"admissionChecksStrategy": None}})
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job(NS, "j"), "Admitted") and w,
                what="admitted without the check",
            )
            assert "admissionChecks" not in wl["status"]
            await eventually(lambda: _started(s, "j"), what="the job starts")

    asyncio.run(main())


def test_the_checks_pod_set_updates_reach_the_started_job(tmp_path: Path, backend: Any) -> None:
    now = [1_800_000_000.0]
    update = {"name": "main", "labels": {"example.com/provisioned": "yes"},
              "annotations": {"example.com/request": "r-1"},
              "nodeSelector": {"example.com/pool": "a"},
              "tolerations": [{"key": "example.com/pool", "operator": "Exists",
                               "effect": "NoSchedule"}]}  # fmt: skip

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=OBJECTS, controller=OPTS, clock=lambda: now[0]
        ) as s:
            await _activate(s, now[0])
            await s.user.create(k.JOBS, job(NS, "j", queue="lq", parallelism=1), namespace=NS)
            wl = await _reserved(s, "j")
            await _set_check(s, wl, "Ready", now[0], podSetUpdates=[update])
            await eventually(lambda: _started(s, "j"), what="the job starts")
            template = s.get("jobs", "j", NS)["spec"]["template"]
            assert template["metadata"]["labels"]["example.com/provisioned"] == "yes"
            assert template["metadata"]["annotations"]["example.com/request"] == "r-1"
            assert template["spec"]["nodeSelector"]["example.com/pool"] == "a"
            assert update["tolerations"][0] in template["spec"]["tolerations"]

    asyncio.run(main())


def test_a_conflicting_pod_set_update_fails_the_workload(tmp_path: Path, backend: Any) -> None:
    """Kueue: a podSetUpdate that contradicts what the podSet gets cannot be applied, and
    retrying cannot help: the Workload finishes, FailedToStart."""
    now = [1_800_000_000.0]
    update = {"name": "main", "labels": {"kueue.x-k8s.io/podset": "other"}}

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=OBJECTS, controller=OPTS, clock=lambda: now[0]
        ) as s:
            await _activate(s, now[0])
            await s.user.create(k.JOBS, job(NS, "j", queue="lq", parallelism=1), namespace=NS)
            wl = await _reserved(s, "j")
            await _set_check(s, wl, "Ready", now[0], podSetUpdates=[update])
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job(NS, "j"), "Finished") and w,
                what="the Workload fails",
            )
            finished = condition(wl, "Finished")
            assert finished["reason"] == "FailedToStart"
            assert finished["message"] == (
                'in admission check "check-a": invalid admission check PodSetUpdate: conflict '
                "for labels: conflict for key=kueue.x-k8s.io/podset, value1=main, value2=other"
            )
            assert not _started(s, "j")

    asyncio.run(main())
