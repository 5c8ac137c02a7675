"""Write economy of pending reasons: only a reason still true when its turn comes is written.

A workload admitted while its reason waited gets no reason, a newer reason replaces the
waiting one, a head re-evaluated every cycle still gets its reason, and reasons yield to
waiting decisions for a bounded time only.

The writes are counted and held back as in test_kube_write_economy.py
(tests/support/write_economy.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.engine.queue_manager import PendingStatus
from admission.kube import objects as kobj
from admission.kube.client import resources as kr
from queues.api.conditions import condition
from tests.support.kube_harness import (
    Stack,
    admitted,
    cluster_queue,
    eventually,
    local_queue,
    stack,
    workload,
)
from tests.support.write_economy import (
    NS,
    Gate,
    create,
    objects,
    options,
    service_writes,
    shut,
    standalone,
    writes_of_kind,
)


async def pending_reason_waiting(s: Stack, name: str) -> Gate:
    """Shut the budget, create a Workload that does not fit (2 cpu), and return once its
    pending reason was taken from the queue and waits for its turn."""
    ctrl = s.service.controller
    assert ctrl is not None
    key = f"{NS}/{name}"
    gate = shut(s)
    await create(s, standalone(name, cpu="2"))
    await eventually(lambda: key in ctrl.applier.pending, what="its pending reason is noted")
    await eventually(
        lambda: key not in ctrl.applier.pending and gate.waiting,
        what="its pending reason waits for its turn",
    )
    return gate


def test_no_pending_reason_is_written_for_a_workload_admitted_while_it_waited(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects(cpu=1)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            key = f"{NS}/w"
            gate = await pending_reason_waiting(s, "w")
            cq = s.get("clusterqueues", "cq")
            assert cq is not None
            cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "4"
            await s.user.replace(kr.CLUSTER_QUEUES, "cq", cq)
            await eventually(lambda: key in ctrl.cache.admitted, what="the admission is decided")
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "w", NS)), what="w admitted")
            await eventually(lambda: not ctrl.applier.tasks, what="writes settled")
            assert service_writes(s, "workloads/status", "w") == 1  # the admission only
            assert writes_of_kind(s, "pending") == 0

    asyncio.run(main())


def test_a_newer_pending_reason_replaces_the_one_waiting(tmp_path: Path) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=objects(cpu=1)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            key = f"{NS}/w"
            gate = await pending_reason_waiting(s, "w")
            ctrl.applier.note_pending(key, PendingStatus("Newer", "the newest reason"))
            gate.open()
            await eventually(
                lambda: (
                    (condition(s.get("workloads", "w", NS) or {}, kobj.QUOTA_RESERVED) or {}).get(
                        "reason"
                    )
                    == "Newer"
                ),
                what="the newer reason written",
            )
            # the API stored the condition before the service read the answer and
            # counted the write: wait for the count, not for a time
            await eventually(
                lambda: writes_of_kind(s, "pending") >= 1, what="the pending write counted"
            )
            assert writes_of_kind(s, "pending") == 1
            assert service_writes(s, "workloads/status", "w") == 1

    asyncio.run(main())


def test_a_head_re_evaluated_every_cycle_still_gets_its_reason(tmp_path: Path) -> None:
    """The hold before a reason is written counts from when the reason appeared: a
    head that fails every few milliseconds (a busy cluster) is not postponed forever."""

    async def main() -> None:
        async with stack(
            tmp_path, objects=objects(cpu=1), controller=options(pending_delay=0.3)
        ) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            key = f"{NS}/w"
            await create(s, standalone("w", cpu="2"))
            await eventually(lambda: key in ctrl.cache.workloads, what="w queued")
            written_during_the_churn = False
            for i in range(150):  # 1.5 s of cycles, each with new numbers in the message
                ctrl.applier.note_pending(key, PendingStatus("Pending", f"short by {i}"))
                await asyncio.sleep(0.01)
                w = s.get("workloads", "w", NS) or {}
                if (condition(w, kobj.QUOTA_RESERVED) or {}).get("status") == "False":
                    written_during_the_churn = True
                    break
            assert written_during_the_churn
            # the API stored the condition before the service read the answer and
            # counted the write: wait for the count, not for a time
            await eventually(
                lambda: writes_of_kind(s, "pending") == 1, what="the pending write counted"
            )

    asyncio.run(main())


def test_pending_reasons_yield_to_waiting_decisions_for_a_bounded_time(tmp_path: Path) -> None:
    """A due pending reason waits while an admission waits for the budget (the head may
    be admitted meanwhile), but no longer than ``pending_max_hold``."""
    cqs = [
        *objects(cpu=4),
        cluster_queue("small", {"f": {"cpu": 1}}),
        local_queue(NS, "lq2", "small"),
    ]

    async def main() -> None:
        # no back-pressure here: the next cycle must run while "fits" waits at the gate
        opts = options(pending_max_hold=1.5, decision_lead=0.0, low_share=0.0)
        async with stack(tmp_path, objects=cqs, controller=opts) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            gate = shut(s)
            await create(s, standalone("fits"))  # its admission waits for the budget
            await eventually(lambda: gate.decisions_waiting, what="the admission waits")
            big = workload(NS, "big", queue="lq2", pod_sets=[("main", 1, "2")])
            await create(s, big)  # never fits: its reason is due after pending_delay
            await eventually(lambda: f"{NS}/big" in ctrl.applier.pending, what="reason noted")

            def reason_waiting() -> bool:
                # taken from the pending queue: it waits for its turn at the budget (a
                # queue status pass may be waiting there too: that one is not counted)
                return f"{NS}/big" not in ctrl.applier.pending

            await asyncio.sleep(0.5)
            assert not reason_waiting()  # held back while the admission waits
            await eventually(reason_waiting, what="the reason goes after pending_max_hold")
            gate.open()
            await eventually(
                lambda: (
                    (condition(s.get("workloads", "big", NS) or {}, kobj.QUOTA_RESERVED) or {}).get(
                        "status"
                    )
                    == "False"
                ),
                what="the reason is written",
            )

    asyncio.run(main())
