"""Write economy: the service sends only the writes a decision needs (issue 16, item 2).

Each test removes one write and checks both halves: the write does not happen, and the
state the API ends in is still right. Writes are counted from the requests the API
server received from the service (the double records them; on the real server, the
fault proxy in front of the service does). Where a write must wait for its turn at the
client's rate limit, the test shuts that limit (:class:`Gate`) and changes the world
while the write waits: a write decided before the wait would be stale.

This module covers evictions and finished workloads, and what the decisions' budget is
spent on; pending reasons and queue statuses have modules of their own
(test_kube_pending_reason_writes.py, test_kube_queue_status_writes.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube import objects as kobj
from admission.kube.control.workloads import finish_eviction
from queues.api.conditions import condition, is_true
from tests.support.kube_harness import admitted, eventually, stack
from tests.support.write_economy import (
    NS,
    create,
    mark_finished,
    objects,
    options,
    service_writes,
    shut,
    standalone,
    writes_of_kind,
)


def test_evicting_a_standalone_workload_is_one_write(tmp_path: Path, backend: Any) -> None:
    """Nothing runs on a standalone Workload's admission, so the eviction clears it in
    the same write (Kueue's runner needs a second one; Job-owned workloads still wait
    for their Job to stop). The victim's later pending reason is held back here (a long
    ``pending_delay``): it is a write of its own, not part of the eviction."""

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects(), controller=options(pending_delay=60)
        ) as s:
            await create(s, standalone("low"))
            await eventually(lambda: admitted(s.get("workloads", "low", NS)), what="low admitted")
            mark = len(s.server.requests)
            await create(s, standalone("high", priority=100))
            await eventually(lambda: admitted(s.get("workloads", "high", NS)), what="high admitted")
            low = s.get("workloads", "low", NS)
            assert low is not None and not admitted(low)
            assert not (low.get("status") or {}).get("admission")
            assert is_true(low, kobj.EVICTED) and is_true(low, kobj.PREEMPTED)
            assert (condition(low, kobj.QUOTA_RESERVED) or {}).get("status") == "False"
            assert service_writes(s, "workloads/status", "low", since=mark) == 1
            assert writes_of_kind(s, "clear-admission") == 0
            assert writes_of_kind(s, "evict") == 1

    asyncio.run(main())


def test_no_eviction_is_written_for_a_victim_that_finished_while_it_waited(
    tmp_path: Path, backend: Any
) -> None:
    """The preemption is decided, its write waits for the rate limit, the victim
    finishes meanwhile: the write is dropped (its token refunded) and the preemptor is
    admitted on the quota the finish released."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects()) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await create(s, standalone("low"))
            await eventually(lambda: admitted(s.get("workloads", "low", NS)), what="low admitted")
            gate = shut(s)
            await create(s, standalone("high", priority=100))
            await eventually(
                lambda: ctrl.stats["preempted"] >= 1 and gate.waiting >= 1,
                what="the eviction of low waits for its turn",
            )
            await mark_finished(s, "low")
            await eventually(
                lambda: kobj.is_finished(ctrl.writer.workload(f"{NS}/low")),
                what="the service saw low finish",
            )
            mark = len(s.server.requests)
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "high", NS)), what="high admitted")
            low = s.get("workloads", "low", NS)
            assert low is not None and kobj.is_finished(low)
            assert condition(low, kobj.EVICTED) is None
            assert service_writes(s, "workloads/status", "low", since=mark) == 0
            assert writes_of_kind(s, "evict") == 0

    asyncio.run(main())


def test_a_finished_workload_keeps_its_admission(tmp_path: Path) -> None:
    """Completing an eviction of a workload that finished meanwhile writes nothing: a
    finished Workload keeps its admission (Kueue never clears it)."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects()) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await create(s, standalone("w"))
            await eventually(lambda: admitted(s.get("workloads", "w", NS)), what="w admitted")
            await mark_finished(s, "w")
            key = f"{NS}/w"
            await eventually(
                lambda: kobj.is_finished(ctrl.writer.workload(key)),
                what="the service saw it finish",
            )
            mark = len(s.server.requests)
            await finish_eviction(ctrl.ctx, key)
            assert service_writes(s, "workloads/status", "w", since=mark) == 0
            w = s.get("workloads", "w", NS)
            assert w is not None and (w.get("status") or {}).get("admission")

    asyncio.run(main())


def test_events_do_not_spend_the_decisions_budget(tmp_path: Path) -> None:
    """client-go gives the event recorder its own client and rate limit: an Event is
    sent while every decision waits for the shut budget."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects()) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            shut(s)
            before = s.server.request_count(verb="create", resource="events")
            ns = s.get("namespaces", NS)
            assert ns is not None
            ctrl.ctx.record_event(ns, "Normal", "Test", "sent outside the decisions' budget")
            await eventually(
                lambda: s.server.request_count(verb="create", resource="events") > before,
                what="the Event was sent",
            )

    asyncio.run(main())


def test_cycles_decide_no_further_ahead_than_the_budget_can_write(tmp_path: Path) -> None:
    """Back-pressure: an admission holds quota from the moment it is decided, so while
    more decisions wait for the budget than it sends in ``decision_lead`` seconds no
    further cycle runs (here: one waits, at a shut budget); once they are sent the
    rest is admitted."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects(cpu=8)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            gate = shut(s)
            for i in range(4):
                await create(s, standalone(f"w{i}", cpu="2"))
            await eventually(
                lambda: len(ctrl.cache.admitted) == 1 and gate.decisions_waiting,
                what="the first admission is decided and waits",
            )
            await eventually(
                lambda: sum(len(q) for q in ctrl.cache.queues.values()) == 3,
                what="the rest is queued",
            )
            cycles = ctrl.stats["cycles"]
            await asyncio.sleep(0.5)
            assert len(ctrl.cache.admitted) == 1  # one decided; three wait undecided
            assert ctrl.stats["cycles"] == cycles
            gate.open()
            for i in range(4):
                await eventually(
                    lambda i=i: admitted(s.get("workloads", f"w{i}", NS)), what=f"w{i} admitted"
                )

    asyncio.run(main())
