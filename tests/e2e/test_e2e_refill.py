"""Scheduling refill through the Kubernetes adapter (docs/semantics.md §4.2).

A ClusterQueue of 4 cpu is held by one 4-cpu workload while five 1-cpu workloads wait
behind it. When it finishes, Kueue's rules admit the waiting ones one per cycle; with
``schedulingRefill`` on, the cycle that sees the quota freed admits all four that fit,
and the fifth stays pending (no over-admission). Each admission is one status write
of its Workload either way. Runs on the double and, with ``KUBEBUILDER_ASSETS``, on a
real API server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.config.load import parse_config
from admission.engine.decisions import CycleResult
from admission.engine.scheduler import Scheduler
from tests.support.kube_harness import admitted, eventually, stack
from tests.support.write_economy import (
    NS,
    create,
    mark_finished,
    objects,
    options,
    service_writes,
    standalone,
)

WAITING = [f"w{i}" for i in range(5)]


@pytest.mark.parametrize("refill", [False, True], ids=["kueue", "refill"])
def test_a_queue_of_waiting_workloads_that_fit_is_drained_in_one_refill_cycle(
    tmp_path: Path, backend: Any, refill: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cycles: list[list[str]] = []  # the workloads each cycle admitted, cycles that admitted
    original = Scheduler.schedule

    def recorded(self: Scheduler) -> CycleResult:
        result = original(self)
        if result.admitted:
            cycles.append([d.workload.name for d in result.admitted])
        return result

    monkeypatch.setattr(Scheduler, "schedule", recorded)
    doc: dict[str, Any] = {"schedulingRefill": {"enable": True}} if refill else {}
    config = parse_config(doc, source="test")

    async def main() -> None:
        async with stack(
            tmp_path,
            backend=backend,
            objects=objects(cpu=4),
            config=config,
            controller=options(pending_delay=60),  # no pending-reason writes in the count
        ) as s:
            await create(s, standalone("holder", cpu="4"))
            await eventually(lambda: admitted(s.get("workloads", "holder", NS)), what="holder")
            for name in WAITING:
                await create(s, standalone(name, cpu="1"))
            ctrl = s.service.controller
            assert ctrl is not None
            queue = ctrl.cache.queues["cq"]
            await eventually(
                lambda: all(queue.is_parked(f"{NS}/{n}") for n in WAITING),
                what="the five wait for quota",
            )
            mark = len(s.server.requests)
            del cycles[:]
            await mark_finished(s, "holder")
            await eventually(
                lambda: sum(admitted(s.get("workloads", n, NS)) for n in WAITING) == 4,
                what="four admitted",
            )
            await asyncio.sleep(0.3)  # room for a wrong fifth admission
            winners = [n for n in WAITING if admitted(s.get("workloads", n, NS))]
            assert len(winners) == 4, "the fifth does not fit in 4 cpu"
            assert sorted(n for c in cycles for n in c) == winners
            if refill:
                assert cycles == [cycles[0]] and len(cycles[0]) == 4, cycles
            else:
                assert [len(c) for c in cycles] == [1, 1, 1, 1], cycles
            for name in winners:
                assert service_writes(s, "workloads/status", name, since=mark) == 1, name
            (loser,) = set(WAITING) - set(winners)
            assert service_writes(s, "workloads/status", loser, since=mark) == 0

    asyncio.run(main())
