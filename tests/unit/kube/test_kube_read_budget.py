"""A read (get, list, watch) waits for the client's budget like any request, but it is
no decision: the scheduler's back-pressure counts only the writes it decided."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from admission.kube.client import resources as k
from admission.kube.client.errors import ApiError
from tests.support.kube_harness import admitted, eventually, stack
from tests.support.write_economy import NS, create, objects, shut, standalone


def test_a_read_waiting_for_the_budget_does_not_hold_back_decisions(tmp_path: Path) -> None:
    """An informer's relist or a get waits for a token like any request, but it is no
    decision: the scheduler still decides what the budget can write next."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects(cpu=8)) as s:
            ctrl, kube = s.service.controller, s.service.client
            assert ctrl is not None and kube is not None
            gate = shut(s)
            read = asyncio.create_task(kube.get(k.WORKLOADS, "absent", namespace=NS))
            await eventually(lambda: gate.reads_waiting == 1, what="the read waits for a token")
            assert not gate.decisions_waiting
            await create(s, standalone("w0", cpu="2"))
            await eventually(
                lambda: len(ctrl.cache.admitted) == 1 and gate.decisions_waiting,
                what="the admission is decided and waits",
            )
            gate.open()
            with contextlib.suppress(ApiError):
                await read  # 404: the read was only something to wait
            await eventually(lambda: admitted(s.get("workloads", "w0", NS)), what="w0 admitted")

    asyncio.run(main())
