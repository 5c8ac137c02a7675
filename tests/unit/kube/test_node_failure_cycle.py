"""A node's replacement never touches the cache while a scheduling cycle runs.

``serve`` runs each cycle in a worker thread, with the cache frozen: changes wait in
``CacheSync`` until the cycle returns. A TAS workload's node replacement writes
``status.unhealthyNodes`` first; a cycle may start during that write, and the
replacement (which builds the flavor's domain tree and changes the workload's TAS
charges in the cache) must wait for it to end.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from admission.kube.reconcilers import node_failures
from admission.kube.reconcilers.node_failures import NodeFailures
from queues.node_health import NodeFailurePolicy


class _Cycles:
    """A scheduler's cycles as the cache sees them: ``cache_ready`` waits for the one
    running now; ``start`` begins one, ended by ``end``."""

    def __init__(self) -> None:
        self.idle = asyncio.Event()
        self.idle.set()
        self.running = False

    def start(self) -> None:
        self.running = True
        self.idle.clear()

    def end(self) -> None:
        self.running = False
        self.idle.set()

    async def cache_ready(self) -> None:
        while not self.idle.is_set():
            await self.idle.wait()


def _reconciler(cycles: _Cycles, writes: list[str]) -> NodeFailures:
    async def update_status(wkey: str, compute: Any) -> None:
        writes.append(wkey)
        cycles.start()  # a cycle starts while the write is on the wire
        asyncio.get_running_loop().call_later(0.01, cycles.end)
        await asyncio.sleep(0)
        return None

    model = SimpleNamespace(admission=object())
    ctx = SimpleNamespace(
        options=SimpleNamespace(node_failures=NodeFailurePolicy(fail_fast=False)),
        cache=SimpleNamespace(workloads={"ns/wl": model}, topology=object(), flavors={}),
        writer=SimpleNamespace(update_status=update_status),
        cache_ready=cycles.cache_ready,
        clock=lambda: 100.0,
    )
    return NodeFailures(ctx)  # type: ignore[arg-type]


def test_a_replacement_waits_for_the_cycle_that_started_during_its_unhealthy_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cycles = _Cycles()
    writes: list[str] = []
    seen: list[bool] = []

    def replacement(topology: object, flavors: object, model: object, host: str) -> tuple:
        seen.append(cycles.running)  # what it reads (and then changes) is the cycle's
        return {}, "no spare fits"

    monkeypatch.setattr(node_failures, "node_replacement", replacement)
    reconciler = _reconciler(cycles, writes)

    async def run() -> None:
        await reconciler._replace("ns/wl", {"status": {}}, "node-1", {"node-1": "NotReady"})

    asyncio.run(run())
    assert writes == ["ns/wl"]  # status.unhealthyNodes was written first
    assert seen == [False]  # and the replacement ran only once that cycle had returned
    assert reconciler.retry_at == {"ns/wl": 105.0}  # failFast off: tried again later
