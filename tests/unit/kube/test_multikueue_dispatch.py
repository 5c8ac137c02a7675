"""MultiKueue's pure parts: the remote copies of a Job and a Workload, which status comes
back, the merge patch that replaces a status, and how the fits dispatcher judges a
worker's ClusterQueue; and the check's Ready written with the admission it completes."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from typing import Any

from admission.kube.client.errors import ApiError
from admission.kube.multikueue.adapters import ADAPTERS
from admission.kube.multikueue.dispatch import (
    READY,
    RETRY,
    Dispatch,
    Group,
    first_true,
    remote_workload,
    replacing,
)
from queues.multikueue_fit import fit_in, requests_of

JOB = ADAPTERS["Job"]


def manager_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                     "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "suspend": True,
                 "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
                 "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u1",
                                                      "job-name": "j", "app": "x"}}},
                 **spec},
        "status": {},
    }  # fmt: skip


def test_the_worker_copy_of_a_job_runs_on_the_prebuilt_workload_without_managed_by() -> None:
    copy = JOB.remote_copy(manager_job(), "job-j-abc", "mgr")
    assert copy["metadata"] == {
        "name": "j",
        "namespace": "ns",
        "labels": {"kueue.x-k8s.io/queue-name": "lq",
                   "kueue.x-k8s.io/prebuilt-workload-name": "job-j-abc",
                   "kueue.x-k8s.io/multikueue-origin": "mgr"},
    }  # fmt: skip
    assert "managedBy" not in copy["spec"] and "selector" not in copy["spec"]
    assert copy["spec"]["template"]["metadata"]["labels"] == {"app": "x"}


def test_a_job_not_managed_by_multikueue_is_named_with_kueues_message() -> None:
    assert JOB.unmanaged_reason(manager_job()) == ""
    assert JOB.unmanaged_reason(manager_job(managedBy=None)) == (
        'Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not ""'
    )


def test_status_comes_back_while_the_managers_job_runs_or_once_the_workers_finished() -> None:
    running = {"spec": {"suspend": False}, "status": {"active": 1}}
    done = {"spec": {"suspend": False},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]}}  # fmt: skip
    suspended = manager_job()
    assert JOB.status_to_copy(suspended, running) is None  # not on a suspended Job
    assert JOB.status_to_copy(suspended, done) == done["status"]
    assert JOB.status_to_copy(manager_job(suspend=False), running) == {"active": 1}
    same = manager_job(suspend=False)
    same["status"] = {"active": 1}
    assert JOB.status_to_copy(same, running) is None


def test_a_status_replacement_nulls_what_the_new_status_lacks_at_every_depth() -> None:
    old = {"active": 1, "uncountedTerminatedPods": {"succeeded": ["p"]}, "startTime": "t"}
    new = {"uncountedTerminatedPods": {}, "startTime": "t", "succeeded": 1}
    assert replacing(old, new) == {
        "active": None,
        "uncountedTerminatedPods": {"succeeded": None},
        "startTime": "t",
        "succeeded": 1,
    }


def test_the_workload_copy_keeps_spec_and_labels_but_not_the_job_uid() -> None:
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
             "metadata": {"name": "w", "namespace": "ns", "uid": "x", "resourceVersion": "3",
                          "labels": {"kueue.x-k8s.io/job-uid": "u1", "team": "a"},
                          "ownerReferences": [{"kind": "Job", "name": "j"}]},
             "spec": {"queueName": "lq", "podSets": []}, "status": {"admission": {}}}  # fmt: skip
    copy = remote_workload(local, "mgr")
    assert copy["metadata"] == {
        "name": "w", "namespace": "ns",
        "labels": {"team": "a", "kueue.x-k8s.io/multikueue-origin": "mgr"},
    }  # fmt: skip
    assert copy["spec"] == local["spec"] and "status" not in copy


def test_the_first_copy_to_be_admitted_wins() -> None:
    def admitted(at: str) -> dict[str, Any]:
        return {"status": {"conditions": [
            {"type": "Admitted", "status": "True", "lastTransitionTime": at}]}}  # fmt: skip

    copies = {"a": admitted("2026-01-01T00:00:05Z"), "b": admitted("2026-01-01T00:00:02Z"),
              "c": {"status": {}}}  # fmt: skip
    assert first_true(copies, "Admitted") == ("b", copies["b"])
    assert first_true({"c": {}}, "Admitted") is None


def cq(nominal: str, reserved: str, *, cohort: bool = False, limit: str | None = None) -> Any:
    res: dict[str, Any] = {"name": "cpu", "nominalQuota": nominal}
    if limit is not None:
        res["borrowingLimit"] = limit
    spec: dict[str, Any] = {"resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [res]}]}]}  # fmt: skip
    if cohort:
        spec["cohortName"] = "co"
    return {"metadata": {"name": "cq"}, "spec": spec, "status": {"flavorsReservation": [
        {"name": "f", "resources": [{"name": "cpu", "total": reserved}]}]}}  # fmt: skip


def test_fits_within_nominal_quota_by_borrowing_or_not_at_all() -> None:
    want = {"cpu": Fraction(2)}
    fit = fit_in("w", cq("4", "1"), want)
    assert (fit.fits, fit.borrowed, fit.room) == (True, 0, Fraction(1, 4))
    assert fit.why == "fits in flavor f of ClusterQueue cq within nominal quota"
    assert not fit_in("w", cq("4", "3"), want).fits  # would need preemption
    borrowing = fit_in("w", cq("4", "3", cohort=True), want)
    assert (borrowing.fits, borrowing.borrowed) == (True, 1)
    assert not fit_in("w", cq("4", "3", cohort=True, limit="0"), want).fits


def test_a_workloads_request_is_its_pods_times_their_requests() -> None:
    wl = {"spec": {"podSets": [
        {"count": 3, "template": {"spec": {"containers": [
            {"resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "1"}}},
            {"resources": {"requests": {"cpu": "1"}}}]}}}]}}  # fmt: skip
    assert requests_of(wl) == {"cpu": Fraction(9, 2), "nvidia.com/gpu": Fraction(3)}


class StatusClient:
    """Answers each status patch with the Workload it makes (or with ``error``)."""

    def __init__(self, wl: dict[str, Any], error: ApiError | None = None) -> None:
        self.wl = wl
        self.error = error
        self.bodies: list[dict[str, Any]] = []

    async def patch(self, _res: Any, _name: str, body: dict[str, Any], **_kw: Any) -> Any:
        self.bodies.append(body)
        if self.error is not None:
            raise self.error
        return {**self.wl, "status": {**self.wl["status"], **body["status"]}}


def dispatching(
    client: StatusClient, admit: list[dict[str, Any]] | None
) -> tuple[Dispatch, list[Any]]:
    calls: list[Any] = []

    async def nothing(*_a: Any) -> None:
        return None

    def admit_with(key: str, wl: Any, checks: list[Any], now: float) -> Any:
        calls.append(("admit_with", key, [c["state"] for c in checks], now))
        return admit

    d = Dispatch(
        client,  # type: ignore[arg-type]
        origin="mgr", worker_lost_timeout=900, nominate=nothing,
        record_event=lambda *a: calls.append(("event", a[2])),
        clock=lambda: 100.0, full=nothing, full_job=nothing,
        admit_with=admit_with,
        admitted=lambda key, new, now: calls.append(("admitted", key, now)),
    )  # fmt: skip
    return d, calls


def pending_group() -> Group:
    entry = {"name": "mk", "state": "Pending", "message": ""}
    wl = {"metadata": {"name": "w", "namespace": "ns", "resourceVersion": "5"},
          "status": {"admissionChecks": [entry], "conditions": []}}  # fmt: skip
    return Group(key="ns/w", local=wl, check="mk", state=entry, workers=["a"], remotes={})


ADMITTED = [{"type": "Admitted", "status": "True", "reason": "Admitted",
             "message": "The workload is admitted",
             "lastTransitionTime": "1970-01-01T00:01:40Z"}]  # fmt: skip


def test_the_checks_ready_carries_the_admission_it_completes_in_one_write() -> None:
    client = StatusClient(pending_group().local)
    d, calls = dispatching(client, ADMITTED)
    assert asyncio.run(d.set_state(pending_group(), READY, "admitted on a", clusterName="a"))
    [body] = client.bodies
    assert body["status"]["conditions"] == ADMITTED and body["status"]["clusterName"] == "a"
    assert body["status"]["admissionChecks"][0]["state"] == "Ready"
    # the entry's lastTransitionTime is the instant of the admission (both at now)
    assert body["status"]["admissionChecks"][0]["lastTransitionTime"] == "1970-01-01T00:01:40Z"
    assert calls == [("admit_with", "ns/w", ["Ready"], 100.0), ("event", "MultiKueue"),
                     ("admitted", "ns/w", 100.0)]  # fmt: skip


def test_without_the_admission_or_without_the_write_the_service_admits_as_before() -> None:
    client = StatusClient(pending_group().local)
    d, calls = dispatching(client, None)  # another check is not Ready yet
    assert asyncio.run(d.set_state(pending_group(), READY, "admitted on a", clusterName="a"))
    assert "conditions" not in client.bodies[0]["status"]
    assert [c[0] for c in calls] == ["admit_with", "event"]
    client = StatusClient(pending_group().local, ApiError(409, "Conflict", "changed"))
    d, calls = dispatching(client, ADMITTED)
    assert not asyncio.run(d.set_state(pending_group(), READY, "admitted on a", clusterName="a"))
    assert [c[0] for c in calls] == ["admit_with"]  # nothing counted: its event decides again
    client = StatusClient(pending_group().local)
    d, calls = dispatching(client, ADMITTED)
    assert asyncio.run(d.set_state(pending_group(), RETRY, "lost"))
    assert "conditions" not in client.bodies[0]["status"] and calls == [("event", "MultiKueue")]
