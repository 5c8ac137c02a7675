"""A pending reason's message refreshed alone (the numbers in it moved, the reason did
not) follows the decisions, not the time: it needs the low-priority share that the
decisions' requests earn. On a starved machine the gaps between decisions grow long,
and refreshes paced only by ``pending_refresh`` grew with the wall time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from admission.engine.queue_manager import PendingStatus
from admission.kube import objects as kobj
from queues.api.conditions import condition
from tests.support.kube_harness import eventually, stack
from tests.support.write_economy import (
    NS,
    create,
    objects,
    options,
    service_writes,
    standalone,
)


def test_a_message_refresh_waits_for_the_share_the_decisions_earn(tmp_path: Path) -> None:
    async def main() -> None:
        opts = options(pending_refresh=0.1)
        async with stack(tmp_path, objects=objects(cpu=1), controller=opts) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            key = f"{NS}/w"
            await create(s, standalone("w", cpu="2"))  # never fits: a reason, then messages

            def reason() -> dict[str, str]:
                return condition(s.get("workloads", "w", NS) or {}, kobj.QUOTA_RESERVED) or {}

            await eventually(lambda: reason().get("status") == "False", what="its reason")
            first = reason()
            share = s.service.client.share  # type: ignore[union-attr]
            share.credit = 0.0  # nothing decided: nothing earned
            mark = len(s.server.requests)
            await asyncio.sleep(1.5)  # past pending_refresh, and a new second for the LTT
            ctrl.applier.note_pending(key, PendingStatus(first["reason"], "the numbers moved"))
            await asyncio.sleep(1.0)
            assert service_writes(s, "workloads/status", "w", since=mark) == 0
            assert reason()["message"] == first["message"]
            share.credit = 1.0  # what 25 decision requests earn
            ctrl.applier.note_pending(key, PendingStatus(first["reason"], "the numbers moved"))
            await eventually(
                lambda: reason().get("message") == "the numbers moved", what="the refresh"
            )
            assert share.credit < 1.0

    asyncio.run(main())
