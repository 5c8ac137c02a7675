"""What the real control plane showed about writes: refused ones back off, each carries the field manager.

A refused stop write backs off with an Event and then completes, every write is recorded
under the product's field manager, preempting a started Job takes three writes and no
retries, and transient errors on an admission write do not cost a workload its place.

Each test runs on the double and on a real kube-apiserver (``[real]``, with
``KUBEBUILDER_ASSETS``); faults on the real one come from the fault proxy.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube.client import resources as kr
from tests.e2e._control_plane import BASE, controller, run
from tests.support.kube_harness import (
    SA_USERNAME,
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


def test_a_refused_stop_write_backs_off_with_an_event_then_completes(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=BASE, controller=controller(retry_base=0.2)
        ) as s:
            await s.user.create(kr.JOBS, job("team-a", "train", queue="lq"), namespace="team-a")
            await eventually(
                lambda: (j := s.get("jobs", "train", "team-a")) and not j["spec"]["suspend"],
                what="the job starts",
            )
            wl = await eventually(lambda: s.workload_of_job("team-a", "train"), what="workload")
            loop = asyncio.get_running_loop()
            stamps: list[float] = []
            client = s.service.client
            counted = client.on_request

            def on_request(call: str) -> None:
                if call == "patch batch/jobs":
                    stamps.append(loop.time())
                if counted is not None:
                    counted(call)

            client.on_request = on_request
            s.server.fail_next(1000, code=403, verb="patch", resource="jobs", name="train")
            await s.user.patch(
                kr.WORKLOADS,
                wl["metadata"]["name"],
                {"spec": {"active": False}},
                namespace="team-a",
            )
            t0 = loop.time()
            await asyncio.sleep(5.0)
            elapsed = loop.time() - t0
            attempts = len(stamps)
            # retries after 0.2, 0.4, 0.8, 1.6, 3.2 s; one more may come from the
            # eviction's own status event (an event reconciles at once, as in
            # controller-runtime). A fixed 0.5 s retry would make ~10.
            allowed = 2
            delay, t = 0.2, 0.0
            while t + delay <= elapsed:
                t += delay
                delay *= 2
                allowed += 1
            assert 3 <= attempts <= allowed, (attempts, allowed)
            gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
            assert gaps[-1] >= 1.5, gaps  # the backoff grew; no fixed-rate retry
            events = (await s.user.list(kr.EVENTS, namespace="team-a"))["items"]
            refused = [e for e in events if e.get("reason") == "ApiRequestRefused"]
            assert len(refused) == 1  # once per run of failures, not per retry
            assert refused[0]["involvedObject"]["name"] == "train"
            assert "403" in refused[0]["message"]
            metrics = s.service.metrics.reconcile_errors
            assert metrics.labels("job", "403")._value.get() >= 2
            s.server.clear_faults()
            await eventually(
                lambda: (j := s.get("jobs", "train", "team-a")) and j["spec"]["suspend"],
                what="the job is stopped once the API accepts the write",
                timeout=20,
            )
            await eventually(
                lambda: is_true(s.workload_of_job("team-a", "train"), "Evicted"),
                what="the workload is evicted",
            )

    run(main)


def test_every_write_is_recorded_under_the_quartermaster_field_manager(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await s.user.create(kr.JOBS, job("team-a", "train", queue="lq"), namespace="team-a")
            await eventually(
                lambda: (j := s.get("jobs", "train", "team-a")) and not j["spec"]["suspend"],
                what="the job starts",
            )
            service_writes = [
                r
                for r in s.server.requests
                if r.verb in ("create", "update", "patch")
                and r.user in ("", SA_USERNAME)  # the proxy sees only the service's
            ]
            assert service_writes
            assert all(r.query.get("fieldManager") == "quartermaster" for r in service_writes)
            if hasattr(s.server, "cluster"):  # the real server records managedFields
                wl = s.workload_of_job("team-a", "train")
                job_obj = s.get("jobs", "train", "team-a")
                managers = {
                    m["manager"]
                    for o in (wl, job_obj)
                    for m in o["metadata"].get("managedFields") or []
                }
                assert "quartermaster" in managers
                assert "OpenAPI-Generator" not in managers

    run(main)


def test_preempting_a_started_job_takes_three_writes_and_no_retries(
    tmp_path: Path, backend: Any
) -> None:
    """Suspend, clear status.startTime, restore the template: the victim's Job is
    stopped in exactly the writes the API server allows, none refused or repeated."""
    from admission.apiserver_double.jobcontroller import start_patch
    from tests.support.kube_harness import priority_class

    objects = [
        namespace("team-a"),
        flavor("f", pool="a"),
        cluster_queue("cq", {"f": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("high", 1000),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            controller_manager = getattr(
                getattr(s.server, "cluster", None), "controller_manager", False
            )
            await s.user.create(
                kr.JOBS, job("team-a", "victim", queue="lq", cpu="3", priority_class="low"),
                namespace="team-a",
            )  # fmt: skip
            j = await eventually(
                lambda: (j := s.get("jobs", "victim", "team-a")) and not j["spec"]["suspend"] and j,
                what="the victim starts",
            )
            if not controller_manager:  # play the Job controller: the Job has started
                patch = start_patch(j)
                assert patch is not None
                await s.user.patch(
                    kr.JOBS, "victim", patch, namespace="team-a", subresource="status"
                )
            await eventually(
                lambda: (
                    (j := s.get("jobs", "victim", "team-a"))
                    and (j.get("status") or {}).get("startTime")
                    and (j.get("status") or {}).get("active")
                ),
                what="the victim's Job has started pods",
            )
            calls: list[str] = []
            client = s.service.client
            counted = client.on_request

            def on_request(call: str) -> None:
                calls.append(call)
                if counted is not None:
                    counted(call)

            client.on_request = on_request
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await s.user.create(
                kr.JOBS, job("team-a", "urgent", queue="lq", cpu="3", priority_class="high"),
                namespace="team-a",
            )  # fmt: skip
            await eventually(
                lambda: (j := s.get("jobs", "victim", "team-a")) and j["spec"]["suspend"],
                what="the victim is suspended",
            )
            if not controller_manager:  # its pods go away
                await s.user.patch(
                    kr.JOBS, "victim", {"status": {"active": 0}}, namespace="team-a",
                    subresource="status",
                )  # fmt: skip
            await eventually(
                lambda: (j := s.get("jobs", "urgent", "team-a")) and not j["spec"]["suspend"],
                what="the preemptor starts",
                timeout=30,
            )
            took = loop.time() - t0
            victim = s.get("jobs", "victim", "team-a")
            assert victim["spec"]["suspend"] is True
            assert not victim["status"].get("startTime")
            assert "kueue.x-k8s.io/podset" not in victim["spec"]["template"]["metadata"].get(
                "labels", {}
            )
            # victim: suspend, startTime cleared, template restored; preemptor: started
            assert calls.count("patch batch/jobs") == 3, calls
            assert calls.count("patch batch/jobs/status") == 1, calls
            assert s.service.metrics.reconcile_errors._metrics == {}  # nothing was refused
            print(f"preempting a started Job took {took:.2f} s on {backend!s:.40}")

    run(main)


def test_transient_admission_write_errors_do_not_cost_a_workload_its_place(
    tmp_path: Path, backend: Any
) -> None:
    """Three 500s on the higher-priority workload's admission write: it is admitted at
    the next try; the lower-priority one, which would fit in its place, waits."""
    from admission.integrations.framework.composition import compose
    from admission.integrations.kinds.job import JOB
    from queues.model import PriorityClass
    from tests.support.kube_harness import priority_class

    objects = [
        namespace("team-a"),
        flavor("f"),
        cluster_queue("cq", {"f": {"cpu": 4}}),
        local_queue("team-a", "lq", "cq"),
        priority_class("low", 10),
        priority_class("high", 1000),
    ]
    wpcs = {"low": PriorityClass("low", 10), "high": PriorityClass("high", 1000)}
    jobs = [
        job("team-a", "high", queue="lq", cpu="3", priority_class="high", suspend=True),
        job("team-a", "low", queue="lq", cpu="3", priority_class="low", suspend=True),
    ]

    def before(server: Any) -> None:
        for j in jobs:
            stored = server.put_object(j)
            _, body = compose(JOB, stored, workload_priority_classes=wpcs, priority_classes={})
            server.put_object(body)
            if j["metadata"]["name"] == "high":
                server.fail_next(
                    3, code=500, verb="patch", resource="workloads/status",
                    name=body["metadata"]["name"],
                )  # fmt: skip

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects, webhooks=False, before_start=before
        ) as s:
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "high")), what="high admitted"
            )
            await asyncio.sleep(0.5)
            assert not admitted(s.workload_of_job("team-a", "low"))

    run(main)
