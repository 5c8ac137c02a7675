"""Write economy on a starved machine: a service that gets too little CPU (its event loop
lags by seconds) sends no more requests per workload than one that gets enough.

Starvation is played by blocking the event loop (``time.sleep`` on it): the service's
watches, ticker and writes all stop meanwhile, as they do when the process is not
scheduled. Requests are counted from what the API double received from the service.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from admission.kube import controller
from admission.kube.client import resources as k
from admission.kube.control.context import ControllerOptions
from tests.support.kube_harness import (
    SA_USERNAME,
    SERVICE_NS,
    Stack,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    namespace,
    stack,
    workload,
)

NS = "team-a"


def objects(cpu: int = 8) -> list[dict[str, Any]]:
    return [namespace(NS), flavor("f"), cluster_queue("cq", {"f": {"cpu": cpu}}),
            local_queue(NS, "lq", "cq")]  # fmt: skip


def options(**kw: Any) -> ControllerOptions:
    opts = ControllerOptions(status_interval=0.2, tick=0.05, pending_delay=0.02, schedule_batch=0.0)
    opts.excluded_namespaces = ("kube-system", SERVICE_NS)
    for name, value in kw.items():
        setattr(opts, name, value)
    return opts


def standalone(name: str, cpu: str = "2") -> dict[str, Any]:
    return workload(NS, name, queue="lq", pod_sets=[("main", 1, cpu)])


def service_requests(s: Stack, verb: str, resource: str, *, since: int = 0) -> int:
    return sum(
        1
        for r in s.server.requests[since:]
        if r.verb == verb and r.resource == resource and r.user in (SA_USERNAME, "")
    )


def cq_status(s: Stack) -> dict[str, Any]:
    return dict((s.get("clusterqueues", "cq") or {}).get("status") or {})


def test_a_lagging_event_loop_does_not_end_the_deciding_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after a decision the scheduler counts as deciding for ``DECIDING_GRACE``
    seconds, and a queue status change that is not significant (reserving 1 -> 2) waits
    for the low-priority share (none here). Seconds the event loop did not run do not
    end that grace: a pass that runs right after the loop was stalled past the grace
    writes nothing, as it would have a moment after the decision.

    The grace is lengthened here: what the event loop does between the decision and
    the stall (the admission's write, the test's polls) counts against it, and on a
    loaded machine that alone took over a second of the service's 2 s."""
    DECIDING_GRACE = 5.0
    monkeypatch.setattr(controller, "DECIDING_GRACE", DECIDING_GRACE)

    async def main() -> None:
        async with stack(tmp_path, objects=objects(), controller=options(low_share=0.0)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await s.user.create(k.WORKLOADS, standalone("a"), namespace=NS)
            await eventually(lambda: cq_status(s).get("reservingWorkloads") == 1, what="a counted")
            await s.user.create(k.WORKLOADS, standalone("b"), namespace=NS)
            await eventually(lambda: admitted(s.get("workloads", "b", NS)), what="b admitted")
            await eventually(lambda: not ctrl.applier.tasks, what="b's write settled")
            mark = len(s.server.requests)
            time.sleep(DECIDING_GRACE + 0.5)  # the process starved: nothing of it runs
            await asyncio.sleep(ctrl.options.status_interval * 3)  # passes run: busy ones
            assert service_requests(s, "patch", "clusterqueues/status", since=mark) == 0
            await eventually(  # once the grace has passed in the loop's own time
                lambda: cq_status(s).get("reservingWorkloads") == 2,
                what="the count is written when nothing is being decided",
                timeout=DECIDING_GRACE * 5,
            )
            assert service_requests(s, "patch", "clusterqueues/status", since=mark) == 1

    asyncio.run(main())
