"""The event loop's reconcilers beside a scheduling cycle running in its worker thread.

``serve`` runs each cycle in a worker thread with the cache frozen: changes wait in
``CacheSync`` until the cycle returns. Code on the event loop therefore must not change
the cache while a cycle runs, and must not iterate what the cycle changes:

* a TAS workload's node replacement writes ``status.unhealthyNodes`` first; a cycle may
  start during that write, and the replacement (which builds the flavor's domain tree
  and changes the workload's TAS charges) waits for it to end;
* a Node event (or the ticker) lists the workloads charged on the node, and
  ``HoldAndDrain`` on a LocalQueue lists its admitted workloads: both read mappings the
  cycle changes, so both wait for it (``CacheSync.apply``); iterating them beside the
  cycle raised "dictionary changed size during iteration", and copying them first is
  not enough (a collection run by the copy's allocations can run Python code and hand
  the GIL over mid-copy).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from admission.kube.reconcilers import node_failures
from admission.kube.reconcilers.node_failures import NodeFailures
from admission.kube.watch.cachesync import CacheSync
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


class _CycleOwned(dict):  # type: ignore[type-arg]
    """A cache mapping while a cycle runs: its thread changes it, so reading it from the
    event loop then fails the test."""

    def __init__(self, entries: dict[str, Any], sync: CacheSync) -> None:
        super().__init__(entries)
        self.sync = sync

    def _check(self) -> None:
        assert not self.sync.paused, "read from the event loop while a cycle runs"

    def __iter__(self) -> Any:
        self._check()
        return super().__iter__()

    def items(self) -> Any:
        self._check()
        return super().items()


def test_the_workloads_on_a_failed_node_are_looked_up_once_the_running_cycle_returned() -> None:
    """A Node event (or the ticker) lists the workloads charged on the node: not while a
    cycle's thread charges admissions, but once it returned."""
    from admission.engine.tas.domains import HOSTNAME

    def charge(host: str) -> list[SimpleNamespace]:
        assignment = SimpleNamespace(levels=("block", HOSTNAME), domains=[(("b0", host), 1)])
        return [SimpleNamespace(assignment=assignment)]

    sync = CacheSync(SimpleNamespace(), clock=lambda: 0.0)  # type: ignore[arg-type]
    charged = {f"ns/wl-{i}": charge(f"node-{i % 50}") for i in range(200)}
    enqueued: list[object] = []
    ctx = SimpleNamespace(
        options=SimpleNamespace(node_failures=NodeFailurePolicy()),
        cache=SimpleNamespace(tas_charged=_CycleOwned(charged, sync), admitted={}),
        informers={},
        sync=sync,
        enqueue=enqueued.append,
    )
    reconciler = NodeFailures(ctx)  # type: ignore[arg-type]
    sync.pause()  # a cycle runs in its thread
    reconciler._enqueue_affected("node-7")
    assert enqueued == []
    sync.resume()  # it returned
    assert [item.key for item in enqueued] == sorted(f"ns/wl-{i}" for i in range(7, 200, 50))  # type: ignore[attr-defined]


def test_a_drained_local_queues_workloads_are_looked_up_once_the_running_cycle_returned() -> None:
    """``stopPolicy: HoldAndDrain`` on a LocalQueue lists its admitted workloads: not
    while a cycle's thread admits others, but once it returned."""
    from admission.kube.controller import Controller

    sync = CacheSync(SimpleNamespace(), clock=lambda: 0.0)  # type: ignore[arg-type]
    workloads = {
        f"ns/wl-{i}": SimpleNamespace(namespace="ns", queue_name=f"lq-{i % 20}") for i in range(200)
    }
    enqueued: list[object] = []
    controller = SimpleNamespace(
        ctx=SimpleNamespace(
            cache=SimpleNamespace(
                admitted=_CycleOwned(dict.fromkeys(workloads, True), sync), workloads=workloads
            )
        ),
        sync=sync,
        enqueue=enqueued.append,
    )
    stopped = {"spec": {"stopPolicy": "HoldAndDrain"}}
    sync.pause()
    Controller._drain_if_stopped(controller, "LocalQueue", "ns/lq-3", stopped)  # type: ignore[arg-type]
    assert enqueued == []
    sync.resume()
    assert [item.key for item in enqueued] == [f"ns/wl-{i}" for i in range(3, 200, 20)]  # type: ignore[attr-defined]
