"""``serve`` freezes its heap's survivors after the startup sync, again after the
leader's first cycle, compacts between cycles only, and gives everything back when it
stops (admission.serve.heap); ``quartermaster serve`` turns it on, a ``Service`` among
others in one process does not."""

from __future__ import annotations

import argparse
import asyncio
import gc
from pathlib import Path

import pytest

from admission.config.load import parse_config
from admission.engine import gc_pause
from admission.serve.heap import HeapFreezing
from admission.serve.options import ServiceOptions, options_from_args
from tests.support.kube_harness import cluster_queue, flavor, local_queue, namespace, stack


def test_quartermaster_serve_freezes_its_heap_and_a_service_among_others_does_not() -> None:
    assert options_from_args(argparse.Namespace(), parse_config({})).freeze_heap is True
    assert ServiceOptions().freeze_heap is False


def test_freezes_after_sync_then_after_the_first_cycle_and_compacts_only_between_cycles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    cycle_running = [False]
    cycles = [0]
    monkeypatch.setattr(gc_pause, "freeze_survivors", lambda: calls.append("freeze") or 1)

    def between() -> bool:
        assert not cycle_running[0], "a compaction inside a cycle"
        calls.append("between")
        return False

    monkeypatch.setattr(gc_pause, "between_cycles", between)
    monkeypatch.setattr(gc_pause, "release", lambda: calls.append("release") or 0)

    async def main() -> None:
        idle = asyncio.Event()
        idle.set()

        async def wait_idle() -> None:
            while not idle.is_set():
                await idle.wait()

        heap = HeapFreezing(idle=wait_idle, cycles=lambda: cycles[0], period=0.001)
        heap.after_sync()
        assert calls == ["freeze"]
        task = asyncio.create_task(heap.run())
        while calls.count("between") < 3:  # no cycle yet: compaction checks only
            await asyncio.sleep(0.001)
        cycle_running[0] = True  # the first cycle runs: nothing is done meanwhile
        idle.clear()
        seen = len(calls)
        await asyncio.sleep(0.02)
        assert len(calls) == seen
        cycles[0] = 1
        cycle_running[0] = False
        idle.set()
        while calls.count("freeze") < 2:  # what the first cycle kept
            await asyncio.sleep(0.001)
        while calls[-1] != "between":
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        heap.release()
        heap.release()  # once only

    asyncio.run(asyncio.wait_for(main(), timeout=10))
    assert calls[0] == "freeze" and calls.count("freeze") == 2
    assert calls[-1] == "release" and calls.count("release") == 1
    first_cycle = calls.index("freeze", 1)
    assert set(calls[1:first_cycle]) == {"between"} and "between" in calls[first_cycle:]


def test_the_service_freezes_after_its_startup_sync_and_releases_when_it_stops(
    tmp_path: Path,
) -> None:
    """With ``freeze_heap``, once the service is ready the permanent generation holds
    its synced state (the cache, the informers' stores) and the freezing hook is on;
    when it stops, everything is given back to the collector."""
    objects = [
        namespace("team"),
        flavor("default"),
        cluster_queue("cq", {"default": {"cpu": 4}}),
        local_queue("team", "q", "cq"),
    ]
    assert gc.get_freeze_count() == 0 and not gc_pause.frozen_state()["installed"]

    async def main() -> tuple[dict[str, object], int]:
        async with stack(tmp_path, objects=objects, freeze_heap=True) as s:
            state = gc_pause.frozen_state()
            cq = s.service.controller.cache.queues.get("cq") if s.service.controller else None
            in_permanent = cq is not None and not any(o is cq for o in gc.get_objects())
            return state, int(in_permanent)

    try:
        state, in_permanent = asyncio.run(main())
    finally:
        frozen_after = gc.get_freeze_count()
        installed_after = gc_pause.frozen_state()["installed"]
        gc_pause.release()
    assert state["installed"] and int(state["frozen"]) > 10_000  # type: ignore[call-overload]
    assert in_permanent == 1  # the cache's ClusterQueue is frozen: no collection walks it
    assert frozen_after == 0 and not installed_after
