"""MultiKueue under faults between the manager and a worker (the fault proxy on each
link) and a manager restart: no workload is lost, and none ever runs on two workers at
once. On the double, and on three real control planes with ``KUBEBUILDER_ASSETS``.

A watcher samples, all along each test, on how many workers each job exists; it must
never be more than one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admission.config.load import parse_config
from admission.kube.client import resources as k
from admission.serve.service import Service
from tests.e2e.test_e2e_multikueue import MANAGER, NS, WORKER, mk_job
from tests.support.kube_harness import SERVICE_ROUTE, eventually, is_true, settled
from tests.support.multicluster import MultiStack, multi_stack, real_workers_or_none

JOBS = ("a", "b", "c")
CONFIG = parse_config({"apiVersion": "config.kueue.x-k8s.io/v1beta2",
                       "kind": "Configuration",
                       "multiKueue": {"workerLostTimeout": "2s"}})  # fmt: skip


@pytest.fixture(scope="session")
def real_workers() -> Iterator[Any]:
    yield from real_workers_or_none()


@contextlib.asynccontextmanager
async def never_twice(m: MultiStack, names: tuple[str, ...] = JOBS) -> Any:
    """Sample every 20 ms on how many workers each job exists; the most seen, by job."""
    seen: dict[str, int] = dict.fromkeys(names, 0)
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            for name in names:
                running = [w for w, j in m.jobs(NS, name).items() if not j["spec"].get("suspend")]
                seen[name] = max(seen[name], len(running))
            await asyncio.sleep(0.02)

    task = asyncio.create_task(watch())
    try:
        yield seen
    finally:
        stop.set()
        await task
    assert max(seen.values()) <= 1, f"a job ran on two workers at once: {seen}"


async def all_finish(m: MultiStack, names: tuple[str, ...] = JOBS) -> None:
    """Play each worker's Job controller until every job has finished on the manager."""

    async def done() -> bool:
        for name in names:
            for worker, j in m.jobs(NS, name).items():
                if not j["spec"].get("suspend") and not is_true(j, "Complete"):
                    with contextlib.suppress(Exception):
                        await m.workers[worker].finish_job(NS, name)
        return all(
            is_true(m.manager.get("jobs", n, NS), "Complete")
            and is_true(m.manager.workload_of_job(NS, n), "Finished")
            for n in names
        )

    await eventually(done, what="every job finished, synced to the manager", timeout=120)


def test_a_worker_refusing_writes_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER,
                               config=CONFIG) as m:  # fmt: skip
            link = m.links["worker1"]
            link.fail_next(40, code=500, verb="create")  # copies and jobs refused for a while
            link.fail_next(20, code=409, verb="delete")
            async with never_twice(m):
                for name in JOBS:
                    await m.manager.user.create(k.JOBS, mk_job(name), namespace=NS)
                await all_finish(m)

    asyncio.run(main())


def test_a_slow_worker_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER,
                               config=CONFIG) as m:  # fmt: skip
            async with never_twice(m):
                for name in JOBS:
                    await m.manager.user.create(k.JOBS, mk_job(name), namespace=NS)
                for _ in range(3):  # the worker answers, then not, then again
                    m.links["worker1"].pause()
                    await asyncio.sleep(1.5)
                    m.links["worker1"].resume()
                    await asyncio.sleep(0.5)
                await all_finish(m)

    asyncio.run(main())


def test_a_worker_disappearing_mid_dispatch_loses_nothing(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER,
                               config=CONFIG) as m:  # fmt: skip
            async with never_twice(m):
                for name in JOBS:
                    await m.manager.user.create(k.JOBS, mk_job(name), namespace=NS)
                m.links["worker1"].pause()  # gone for good
                m.links["worker1"].drop_watches(abrupt=True)
                await all_finish(m)
                for name in JOBS:
                    wl = m.manager.workload_of_job(NS, name)
                    assert wl is not None
                    assert m.jobs(NS, name).keys() <= {"worker2"}
            m.links["worker1"].resume()

    asyncio.run(main())


async def restart(s: Any) -> None:
    """Stop the stack's service and start another with the same options."""
    s.service.stop()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(s.task), timeout=20)
    if not s.task.done():  # say what the stop waits for, then end it
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.print_stack(limit=4, file=sys.stderr)
        s.task.cancel()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await s.task
    service = Service(dataclasses.replace(s.service.options))
    s.service, s.task = service, asyncio.create_task(service.run())
    await eventually(lambda: service.ready.is_set() or s.task.done(), what="restarted")
    if s.task.done():
        s.task.result()
    await settled(service)
    if hasattr(s.server, "set_service_route") and not hasattr(s.server, "cluster"):
        s.server.set_service_route(SERVICE_ROUTE, f"https://127.0.0.1:{service.ports['webhook']}")


def test_a_manager_restarted_mid_dispatch_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER,
                               config=CONFIG) as m:  # fmt: skip
            async with never_twice(m):
                for name in JOBS:
                    await m.manager.user.create(k.JOBS, mk_job(name), namespace=NS)
                await eventually(
                    lambda: any(m.copies(NS, w["metadata"]["name"])
                                for w in m.manager.workloads(NS)),
                    what="a copy on a worker",
                )  # fmt: skip
                await restart(m.manager)
                await all_finish(m)
            for name in JOBS:
                assert len(m.jobs(NS, name)) <= 1

    asyncio.run(main())
