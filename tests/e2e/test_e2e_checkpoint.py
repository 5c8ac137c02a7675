"""End to end through ``serve``: preemption notices and checkpoint-and-yield.

Two low-priority Jobs run; a high-priority one needs the quota of both. With a notice
window both victims are *noticed*, not evicted: the PreemptionNotice condition on their
Workloads, the eviction-deadline annotation on their Jobs. One Job saves a checkpoint
(its training loop sets the last-checkpoint annotation) and is evicted at once; the
other ignores the notice and is evicted at its deadline. Then the preemptor runs.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from admission.config.load import parse_config
from admission.kube.client import resources as k
from queues.api.conditions import condition
from queues.api.progress import (
    CHECKPOINT_ANNOTATION,
    DEADLINE_ANNOTATION,
    NOTICE_CONDITION,
    parse_time,
)
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
)

NOTICE_SECONDS = 4.0
OBJECTS = [
    namespace("ml"),
    flavor("default"),
    cluster_queue(
        "cq", {"default": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}
    ),
    local_queue("ml", "lq", "cq"),
    priority_class("research", 10),
    priority_class("production", 1000),
]


def _condition(obj: dict | None, kind: str) -> dict:
    c = condition(obj, kind)
    assert c is not None, f"no {kind} condition"
    return c


def test_a_noticed_job_that_checkpoints_is_evicted_at_once_the_other_at_its_deadline(
    tmp_path: Path, backend: Any
) -> None:
    config = parse_config({"progressAwarePreemption": {"noticeWindow": f"{NOTICE_SECONDS:g}s"}})

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS, config=config) as s:
            for name in ("saver", "ignorer"):
                await s.user.create(
                    k.JOBS,
                    job("ml", name, queue="lq", cpu="2", priority_class="research"),
                    namespace="ml",
                )
            for name in ("saver", "ignorer"):
                await eventually(
                    lambda n=name: (j := s.get("jobs", n, "ml")) and not j["spec"]["suspend"],
                    what=f"{name} runs",
                )
                await s.user.patch(
                    k.JOBS, name, {"status": {"active": 1}}, namespace="ml", subresource="status"
                )
            await s.user.create(
                k.JOBS,
                job("ml", "urgent", queue="lq", cpu="4", priority_class="production"),
                namespace="ml",
            )
            # both victims are noticed: condition on the Workload, deadline on the Job
            noticed = {}
            for name in ("saver", "ignorer"):
                wl = await eventually(
                    lambda n=name: is_true(w := s.workload_of_job("ml", n), NOTICE_CONDITION) and w,
                    what=f"{name} noticed",
                )
                assert not is_true(wl, "Evicted") and admitted(wl)
                j = await eventually(
                    lambda n=name: (
                        (j := s.get("jobs", n, "ml"))
                        and DEADLINE_ANNOTATION in (j["metadata"].get("annotations") or {})
                        and j
                    ),
                    what=f"the eviction deadline on {name}'s Job",
                )
                deadline = parse_time(j["metadata"]["annotations"][DEADLINE_ANNOTATION], "deadline")
                assert "to accommodate ml/" in _condition(wl, NOTICE_CONDITION)["message"]
                assert not j["spec"]["suspend"]  # it keeps running during the notice
                noticed[name] = deadline
            urgent = s.workload_of_job("ml", "urgent")
            assert not admitted(urgent)
            pending = _condition(urgent, "QuotaReserved")
            assert pending["reason"] == "WaitingForPreemptedWorkloads"
            assert "noticed victim(s)" in pending["message"]

            # saver's training loop saves and says so: evicted at once, well before its deadline
            saved = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            await s.user.patch(
                k.JOBS,
                "saver",
                {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: saved}}},
                namespace="ml",
            )
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job("ml", "saver"), "Evicted") and w,
                what="saver evicted on its checkpoint",
            )
            assert time.time() < noticed["saver"]
            ev = _condition(wl, "Evicted")
            assert ev["reason"] == "Preempted"
            assert "reported a checkpoint newer than its notice" in ev["message"]
            assert _condition(wl, "Preempted")["reason"] == "InClusterQueue"
            assert _condition(wl, NOTICE_CONDITION)["status"] == "False"
            # ignorer still runs until its deadline
            assert not is_true(s.workload_of_job("ml", "ignorer"), "Evicted")
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job("ml", "ignorer"), "Evicted") and w,
                what="ignorer evicted at its deadline",
                timeout=NOTICE_SECONDS + 20,
            )
            assert time.time() >= noticed["ignorer"] - 1.0  # deadlines are whole seconds
            assert "notice deadline" in _condition(wl, "Evicted")["message"]
            # the deadline annotation goes with the eviction
            for name in ("saver", "ignorer"):
                await eventually(
                    lambda n=name: (
                        DEADLINE_ANNOTATION
                        not in ((s.get("jobs", n, "ml") or {})["metadata"].get("annotations") or {})
                    ),
                    what=f"{name}'s deadline annotation removed",
                )
                await eventually(
                    lambda n=name: s.get("jobs", n, "ml")["spec"]["suspend"],
                    what=f"{name}'s job suspended",
                )
                await s.user.patch(
                    k.JOBS, name, {"status": {"active": 0}}, namespace="ml", subresource="status"
                )
            await eventually(
                lambda: admitted(s.workload_of_job("ml", "urgent")), what="the preemptor runs"
            )
            m = s.service.metrics
            assert m.notices_total.labels("cq")._value.get() == 2
            assert m.noticed_evictions_total.labels("cq", "checkpoint")._value.get() == 1
            assert m.noticed_evictions_total.labels("cq", "deadline")._value.get() == 1
            # silent jobs, charged from their admission: 2 cpu × the seconds they ran
            assert m.lost_work_total.labels("cq")._value.get() > 0

    asyncio.run(main())


def test_requeue_policies_after_preemption_backoff_and_never(tmp_path: Path, backend: Any) -> None:
    """The ClusterQueue's backoff writes requeueState (the victim is not queued before
    requeueAt); the ci LocalQueue's backoffLimitCount 0 deactivates its victim."""
    config = parse_config(
        {
            "progressAwarePreemption": {
                "clusterQueues": {"cq": {"requeuingStrategy": {"backoffBaseSeconds": 600}}},
                "localQueues": {"ml/ci": {"requeuingStrategy": {"backoffLimitCount": 0}}},
            }
        }
    )
    objects = [*OBJECTS, local_queue("ml", "ci", "cq")]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects, config=config) as s:
            for name, queue in (("trainer", "lq"), ("runner", "ci")):
                await s.user.create(
                    k.JOBS,
                    job("ml", name, queue=queue, cpu="2", priority_class="research"),
                    namespace="ml",
                )
                await eventually(
                    lambda n=name: admitted(s.workload_of_job("ml", n)), what=f"{name} admitted"
                )
            await s.user.create(
                k.JOBS,
                job("ml", "urgent", queue="lq", cpu="4", priority_class="production"),
                namespace="ml",
            )
            trainer = await eventually(
                lambda: is_true(w := s.workload_of_job("ml", "trainer"), "Evicted") and w,
                what="trainer evicted",
            )
            state = trainer["status"]["requeueState"]
            assert state["count"] == 1
            assert parse_time(state["requeueAt"], "requeueAt") > time.time() + 500
            assert "requeue #1 after preemption" in _condition(trainer, "Evicted")["message"]
            runner = await eventually(
                lambda: (
                    (w := s.workload_of_job("ml", "runner")) and w["spec"]["active"] is False and w
                ),
                what="runner deactivated",
            )
            assert (
                "requeuing after preemption is disabled" in _condition(runner, "Evicted")["message"]
            )
            await eventually(
                lambda: admitted(s.workload_of_job("ml", "urgent")), what="the preemptor runs"
            )
            # the backed-off victim stays out of the queue: no admission, no pending write
            await asyncio.sleep(1.0)
            trainer = s.workload_of_job("ml", "trainer")
            assert not admitted(trainer) and trainer["spec"]["active"] is True

    asyncio.run(main())


def _gang_pod(name: str, job: dict) -> dict:
    """A bound pod of the Job ``job`` (namespace ml), as the Job controller makes it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"kueue.x-k8s.io/podset": "main"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                 "uid": job["metadata"]["uid"], "controller": True}
            ],
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "4"}}}
            ],
        },
    }  # fmt: skip


def test_a_pod_of_the_gang_gets_the_deadline_and_reports_the_checkpoint(
    tmp_path: Path, backend: Any
) -> None:
    """The deadline reaches the job's running pods (for the Downward API), and a
    checkpoint annotated on one pod counts for the whole job."""
    config = parse_config({"progressAwarePreemption": {"noticeWindow": "60s"}})

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS, config=config) as s:
            created = await s.user.create(
                k.JOBS,
                job("ml", "gang", queue="lq", cpu="4", priority_class="research"),
                namespace="ml",
            )
            await eventually(
                lambda: (j := s.get("jobs", "gang", "ml")) and not j["spec"]["suspend"],
                what="gang runs",
            )
            await s.user.create(k.PODS, _gang_pod("gang-0", created), namespace="ml")
            await s.user.create(
                k.JOBS,
                job("ml", "urgent", queue="lq", cpu="4", priority_class="production"),
                namespace="ml",
            )
            p = await eventually(
                lambda: (
                    (p := s.get("pods", "gang-0", "ml"))
                    and DEADLINE_ANNOTATION in (p["metadata"].get("annotations") or {})
                    and p
                ),
                what="the eviction deadline on the gang's pod",
            )
            deadline = parse_time(p["metadata"]["annotations"][DEADLINE_ANNOTATION], "deadline")
            assert deadline > time.time() + 30
            assert not is_true(s.workload_of_job("ml", "gang"), "Evicted")
            saved = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            await s.user.patch(
                k.PODS,
                "gang-0",
                {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: saved}}},
                namespace="ml",
            )
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job("ml", "gang"), "Evicted") and w,
                what="gang evicted on its pod's checkpoint",
            )
            assert time.time() < deadline
            assert (
                "reported a checkpoint newer than its notice"
                in _condition(wl, "Evicted")["message"]
            )

    asyncio.run(main())


def test_a_pod_bound_after_the_notice_gets_the_deadline_too(tmp_path: Path, backend: Any) -> None:
    """A pod of the noticed job that the service sees only after the notice was written
    (bound late, or a slow watch) still gets the deadline: it is for every running pod."""
    config = parse_config({"progressAwarePreemption": {"noticeWindow": "60s"}})

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=OBJECTS, config=config) as s:
            created = await s.user.create(
                k.JOBS,
                job("ml", "gang", queue="lq", cpu="4", priority_class="research"),
                namespace="ml",
            )
            await eventually(
                lambda: (j := s.get("jobs", "gang", "ml")) and not j["spec"]["suspend"],
                what="gang runs",
            )
            await s.user.create(
                k.JOBS,
                job("ml", "urgent", queue="lq", cpu="4", priority_class="production"),
                namespace="ml",
            )
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job("ml", "gang"))
                    and DEADLINE_ANNOTATION in (w["metadata"].get("annotations") or {})
                    and w
                ),
                what="the notice on the gang's Workload",
            )
            deadline = wl["metadata"]["annotations"][DEADLINE_ANNOTATION]
            # the job is annotated last, after its pods as known then: none
            await eventually(
                lambda: (
                    DEADLINE_ANNOTATION
                    in (
                        ((s.get("jobs", "gang", "ml") or {}).get("metadata") or {}).get(
                            "annotations"
                        )
                        or {}
                    )
                ),
                what="the notice written to the gang's Job",
            )
            await s.user.create(k.PODS, _gang_pod("gang-late", created), namespace="ml")
            p = await eventually(
                lambda: (
                    (p := s.get("pods", "gang-late", "ml"))
                    and DEADLINE_ANNOTATION in (p["metadata"].get("annotations") or {})
                    and p
                ),
                what="the deadline on the late pod",
            )
            assert p["metadata"]["annotations"][DEADLINE_ANNOTATION] == deadline

    asyncio.run(main())


def test_a_notice_survives_a_restart_and_is_not_given_twice(tmp_path: Path) -> None:
    """The service restarts during a notice: the new one reads the notice back from the
    Workload, gives no second one, and evicts the victim at the original deadline."""
    from admission.serve.service import Service
    from tests.support.kube_harness import SERVICE_ROUTE

    config = parse_config({"progressAwarePreemption": {"noticeWindow": "6s"}})

    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS, config=config) as s:
            await s.user.create(
                k.JOBS,
                job("ml", "trainer", queue="lq", cpu="4", priority_class="research"),
                namespace="ml",
            )
            await eventually(
                lambda: admitted(s.workload_of_job("ml", "trainer")), what="trainer admitted"
            )
            await s.user.create(
                k.JOBS,
                job("ml", "urgent", queue="lq", cpu="4", priority_class="production"),
                namespace="ml",
            )
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job("ml", "trainer"), NOTICE_CONDITION) and w,
                what="trainer noticed",
            )
            deadline = parse_time(wl["metadata"]["annotations"][DEADLINE_ANNOTATION], "deadline")
            s.service.stop()
            await asyncio.wait_for(s.task, timeout=20)
            again = Service(s.service.options)
            task = asyncio.create_task(again.run())
            try:
                await eventually(lambda: again.ready.is_set() or task.done(), what="restarted")
                s.server.set_service_route(
                    SERVICE_ROUTE, f"https://127.0.0.1:{again.ports['webhook']}"
                )
                assert not is_true(s.workload_of_job("ml", "trainer"), "Evicted")
                wl = await eventually(
                    lambda: is_true(w := s.workload_of_job("ml", "trainer"), "Evicted") and w,
                    what="trainer evicted at its deadline by the new leader",
                    timeout=30,
                )
                assert time.time() >= deadline - 1.0
                assert again.metrics.notices_total.labels("cq")._value.get() == 0  # none again
                ev = _condition(wl, "Evicted")
                assert "notice deadline" in ev["message"] and ev["message"].startswith(
                    "Preempted to accommodate a workload"
                )
                assert _condition(wl, "Preempted")["reason"] == "InClusterQueue"
                notice = _condition(wl, NOTICE_CONDITION)
                assert notice["status"] == "False"
                await eventually(
                    lambda: admitted(s.workload_of_job("ml", "urgent")), what="the preemptor runs"
                )
            finally:
                again.stop()
                await asyncio.wait_for(task, timeout=20)

    asyncio.run(main())


def test_a_bad_checkpoint_annotation_is_an_event_and_never_drops_the_workload(
    tmp_path: Path,
) -> None:
    config = parse_config({"progressAwarePreemption": {"noticeWindow": "60s"}})

    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS, config=config) as s:
            await s.user.create(
                k.JOBS,
                job("ml", "trainer", queue="lq", cpu="4", priority_class="research"),
                namespace="ml",
            )
            wl = await eventually(
                lambda: admitted(w := s.workload_of_job("ml", "trainer")) and w,
                what="trainer admitted",
            )
            name = wl["metadata"]["name"]
            for res, obj_name in ((k.WORKLOADS, name), (k.JOBS, "trainer")):
                await s.user.patch(
                    res,
                    obj_name,
                    {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: "after lunch"}}},
                    namespace="ml",
                )

            async def warned() -> set[str]:
                events = (await s.user.list(k.EVENTS, namespace="ml"))["items"]
                return {
                    e["involvedObject"]["kind"]
                    for e in events
                    if e.get("reason") == "InvalidCheckpoint" and "after lunch" in e["message"]
                }

            await eventually(
                lambda: _kinds_include(warned(), {"Workload", "Job"}),
                what="an event on the Workload and on the Job",
            )
            # a restarted service reads the Workload afresh: it still keeps its quota,
            # so a second job does not fit
            from admission.serve.service import Service
            from tests.support.kube_harness import SERVICE_ROUTE

            s.service.stop()
            await asyncio.wait_for(s.task, timeout=20)
            again = Service(s.service.options)
            task = asyncio.create_task(again.run())
            try:
                await eventually(lambda: again.ready.is_set() or task.done(), what="restarted")
                s.server.set_service_route(
                    SERVICE_ROUTE, f"https://127.0.0.1:{again.ports['webhook']}"
                )
                await s.user.create(
                    k.JOBS,
                    job("ml", "second", queue="lq", cpu="4", priority_class="research"),
                    namespace="ml",
                )
                await eventually(
                    lambda: s.workload_of_job("ml", "second"), what="second's Workload"
                )
                await asyncio.sleep(1.0)
                assert admitted(s.workload_of_job("ml", "trainer"))
                assert not admitted(s.workload_of_job("ml", "second"))
            finally:
                again.stop()
                await asyncio.wait_for(task, timeout=20)

    asyncio.run(main())


async def _kinds_include(kinds: Any, want: set[str]) -> bool:
    return want <= await kinds
