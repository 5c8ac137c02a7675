"""waitForPodsReady on an injectable clock: timeout, requeue backoff, deactivation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube.client import resources as k
from admission.kube.control.context import ControllerOptions, PodsReadyOptions
from admission.kube.objects import rfc3339
from queues.api.conditions import condition
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

OBJECTS = [
    namespace("team-a"),
    flavor("f"),
    cluster_queue("cq", {"f": {"cpu": 8}}),
    local_queue("team-a", "lq", "cq"),
]


def test_a_gang_not_ready_in_time_is_evicted_requeued_with_backoff_then_deactivated(
    tmp_path: Path, backend: Any
) -> None:
    now = [1_800_000_000.0]
    opts = ControllerOptions(
        status_interval=0.2,
        tick=0.02,
        pending_delay=0.02,
        pods_ready=PodsReadyOptions(timeout=60, backoff_base=60, backoff_max=3600, backoff_limit=1),
    )

    async def set_job_status(s, name: str, **status: int) -> None:  # type: ignore[no-untyped-def]
        await s.user.patch(
            k.JOBS, name, {"status": status}, namespace="team-a", subresource="status"
        )

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=OBJECTS, controller=opts, clock=lambda: now[0]
        ) as s:

            def started(name: str) -> bool:
                j = s.get("jobs", name, "team-a")
                return j is not None and j["spec"]["suspend"] is False

            await s.user.create(
                k.JOBS, job("team-a", "gang", queue="lq", parallelism=2), namespace="team-a"
            )
            await s.user.create(
                k.JOBS, job("team-a", "fine", queue="lq", parallelism=2), namespace="team-a"
            )
            await eventually(lambda: started("gang") and started("fine"), what="both start")
            await set_job_status(s, "gang", active=2, ready=1)
            await set_job_status(s, "fine", active=2, ready=2)
            await eventually(
                lambda: s.service.controller.pods_ready.ready, what="fine is seen ready"
            )

            now[0] += 61
            wl = await eventually(
                lambda: is_true(w := s.workload_of_job("team-a", "gang"), "Evicted") and w,
                what="timeout eviction",
            )
            ev = condition(wl, "Evicted")
            assert ev["reason"] == "PodsReadyTimeout"
            assert (
                ev["message"]
                == f"Exceeded the PodsReady timeout {wl['metadata']['namespace']}/{wl['metadata']['name']}"
            )
            assert wl["status"]["requeueState"] == {"count": 1, "requeueAt": rfc3339(now[0] + 60)}
            await eventually(lambda: not started("gang"), what="gang suspended")
            await set_job_status(s, "gang", active=0, ready=0)
            await eventually(
                lambda: not admitted(s.workload_of_job("team-a", "gang")), what="admission cleared"
            )
            # quota is free, but the workload waits out its backoff
            await eventually(lambda: s.service.controller.sync.backoff, what="in backoff")
            assert not admitted(s.workload_of_job("team-a", "gang"))

            now[0] += 61
            await eventually(
                lambda: admitted(s.workload_of_job("team-a", "gang")),
                what="readmitted after backoff",
            )
            await eventually(lambda: started("gang"), what="gang restarted")
            await set_job_status(s, "gang", active=2, ready=0)

            now[0] += 61  # second timeout: past backoffLimitCount=1
            wl = await eventually(
                lambda: (
                    (w := s.workload_of_job("team-a", "gang"))["spec"].get("active") is False and w
                ),
                what="deactivated",
            )
            assert condition(wl, "Evicted")["reason"] == "Deactivated"
            await eventually(lambda: not started("gang"), what="gang suspended again")
            await set_job_status(s, "gang", active=0, ready=0)
            await eventually(
                lambda: not admitted(s.workload_of_job("team-a", "gang")), what="quota released"
            )
            fine = s.workload_of_job("team-a", "fine")
            assert admitted(fine) and not is_true(fine, "Evicted")

    asyncio.run(main())
