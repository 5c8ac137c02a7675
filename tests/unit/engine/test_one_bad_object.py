"""One head the engine fails on never stops admission: its ClusterQueue is inactive,
saying which workload and why, and every other queue keeps admitting, in ``plan`` and in
``serve`` (where the error used to end the scheduling loop, and the service, on every
restart)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.engine.flavors import FlavorAssigner
from admission.kube.client import resources as k
from tests.support.kube_harness import (
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    stack,
)
from tests.support.scenario_runner import run_plan_cli

OBJECTS = [
    namespace("team"),
    flavor("default"),
    cluster_queue("good", {"default": {"cpu": 4}}),
    cluster_queue("bad", {"default": {"cpu": 4}}),
    local_queue("team", "good-lq", "good"),
    local_queue("team", "bad-lq", "bad"),
]
WHY = "evaluating workload team/job-bad-job-"


@pytest.fixture
def failing_for_bad(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flavor assigner raises for the workloads of LocalQueue ``bad-lq`` (a defect,
    or an input no check caught)."""
    assign = FlavorAssigner.assign

    def failing(self: FlavorAssigner, wl: Any, *args: Any, **kw: Any) -> Any:
        if wl.queue_name == "bad-lq":
            raise RuntimeError("boom")
        return assign(self, wl, *args, **kw)

    monkeypatch.setattr(FlavorAssigner, "assign", failing)


@pytest.mark.usefixtures("failing_for_bad")
def test_plan_admits_elsewhere_and_says_which_workload_failed(tmp_path: Path) -> None:
    path = tmp_path / "objects.yaml"
    jobs = [job("team", "bad-job", queue="bad-lq"), job("team", "good-job", queue="good-lq")]
    path.write_text(yaml.safe_dump_all([*OBJECTS, *jobs]))
    code, doc, err = run_plan_cli(["-f", str(path)])
    assert code == 0, err
    assert doc is not None
    assert [a["clusterQueue"] for a in doc["admitted"]] == ["good"]
    (pending,) = doc["pending"]
    assert pending["reason"] == "Misconfigured"
    assert pending["message"].startswith(f"ClusterQueue bad is inactive: {WHY}")
    assert pending["message"].endswith("failed: RuntimeError: boom")


@pytest.mark.usefixtures("failing_for_bad")
def test_serve_keeps_admitting_and_marks_the_queue_inactive(tmp_path: Path) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS) as s:
            await s.user.create(k.JOBS, job("team", "bad-job", queue="bad-lq"), namespace="team")
            await s.user.create(k.JOBS, job("team", "good-job", queue="good-lq"),
                                namespace="team")  # fmt: skip
            await eventually(
                lambda: (w := s.workload_of_job("team", "good-job")) and is_true(w, "Admitted"),
                what="the good queue's job is admitted",
            )

            def inactive() -> dict[str, Any] | None:
                cq = s.get("clusterqueues", "bad") or {}
                conds = (cq.get("status") or {}).get("conditions") or []
                return next((c for c in conds if c["type"] == "Active"
                             and c["status"] == "False"), None)  # fmt: skip

            cond = await eventually(inactive, what="the failing queue is inactive")
            assert WHY in cond["message"] and "RuntimeError: boom" in cond["message"]
            assert not s.task.done()

    asyncio.run(main())


def test_a_cycle_that_raises_is_retried_and_never_ends_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past nomination (deciding, committing) a failing cycle is abandoned with the cache
    as it was; the service logs it and tries again, and admits once it passes."""
    from admission.engine.scheduler import Scheduler

    schedule = Scheduler.schedule
    failures = {"left": 2}

    def flaky(self: Scheduler) -> Any:
        if failures["left"] and self._cache.queues.get("good") and len(self._cache.queues["good"]):
            failures["left"] -= 1
            raise RuntimeError("injected")
        return schedule(self)

    monkeypatch.setattr(Scheduler, "schedule", flaky)

    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS) as s:
            await s.user.create(k.JOBS, job("team", "good-job", queue="good-lq"),
                                namespace="team")  # fmt: skip
            await eventually(
                lambda: (w := s.workload_of_job("team", "good-job")) and is_true(w, "Admitted"),
                what="the job is admitted once the cycle passes",
            )
            assert failures["left"] == 0
            assert not s.task.done()

    asyncio.run(main())
