"""The event loop's reconcilers beside a scheduling cycle running in its worker thread.

``serve`` runs each cycle in a worker thread with the cache frozen: changes wait in
``CacheSync`` until the cycle returns. Code on the event loop therefore must not change
the cache while a cycle runs, and must not iterate what the cycle changes:

* a TAS workload's node replacement writes ``status.unhealthyNodes`` first; a cycle may
  start during that write, and the replacement (which builds the flavor's domain tree
  and changes the workload's TAS charges) waits for it to end;
* a Node event lists the workloads charged on the node, and ``HoldAndDrain`` on a
  LocalQueue lists its admitted workloads, while the cycle admits others: never
  "dictionary changed size during iteration". These tests hand the GIL over as often
  as the interpreter can, and fail nearly every run when the loop iterates the live
  mapping.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
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


def _while_a_cycle_admits(live: dict[str, Any], value: Any, ask: Callable[[], Any]) -> list[Any]:
    """``ask()`` 300 times on the event loop's side while another thread, as a cycle's
    commits do, puts keys into ``live`` and takes them out again; the GIL is handed over
    as often as the interpreter can, so iterating ``live`` itself fails nearly always."""
    stop = threading.Event()

    def cycles() -> None:
        keys = [f"other/new-{i}" for i in range(10)]
        while not stop.is_set():
            for key in keys:
                live[key] = value
            for key in keys:
                del live[key]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=cycles)
    thread.start()
    try:
        return [ask() for _ in range(300)]
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)


def test_the_workloads_on_a_node_are_found_while_a_cycle_charges_admissions() -> None:
    """A Node event lists the workloads charged on the node from the event loop while a
    cycle's thread charges admissions into the same mapping."""
    from admission.engine.tas.domains import HOSTNAME

    def charge(host: str) -> list[SimpleNamespace]:
        assignment = SimpleNamespace(levels=("block", HOSTNAME), domains=[(("b0", host), 1)])
        return [SimpleNamespace(assignment=assignment)]

    charged = {f"ns/wl-{i}": charge(f"node-{i % 50}") for i in range(2000)}
    ctx = SimpleNamespace(
        options=SimpleNamespace(node_failures=NodeFailurePolicy()),
        cache=SimpleNamespace(tas_charged=charged, admitted={}),
        informers={},
    )
    reconciler = NodeFailures(ctx)  # type: ignore[arg-type]
    found = _while_a_cycle_admits(charged, charge("node-0"), lambda: reconciler.affected("node-7"))
    assert found == [sorted(f"ns/wl-{i}" for i in range(7, 2000, 50))] * 300


def test_a_drained_local_queues_admitted_workloads_are_found_while_a_cycle_admits() -> None:
    """``stopPolicy: HoldAndDrain`` on a LocalQueue lists its admitted workloads from
    the event loop while a cycle's thread admits others."""
    from admission.kube.controller import admitted_through

    workloads = {
        f"ns/wl-{i}": SimpleNamespace(namespace="ns", queue_name=f"lq-{i % 20}")
        for i in range(2000)
    }
    cache = SimpleNamespace(admitted=dict.fromkeys(workloads, True), workloads=workloads)
    found = _while_a_cycle_admits(
        cache.admitted,
        True,
        lambda: admitted_through(cache, "ns/lq-3"),  # type: ignore[arg-type]
    )
    assert found == [[f"ns/wl-{i}" for i in range(3, 2000, 20)]] * 300
