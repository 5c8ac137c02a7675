"""MultiKueue's dispatchers (``multiKueue.dispatcherName``): Incremental adds workers in
the config's order a step at a time, an external dispatcher's ``nominatedClusterNames``
are obeyed as written, and the ``fits`` dispatcher nominates only a worker whose
ClusterQueue can admit the gang now, the one with the most room, with its reasons on
the check and in an event. On the double, and on real control planes with
``KUBEBUILDER_ASSETS``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admission.config import multikueue as mk_config
from admission.config.load import parse_config
from admission.config.schema import Config
from admission.kube.client import resources as k
from tests.e2e.test_e2e_multikueue import MANAGER, NS, check_state, mk_job
from tests.support.kube_harness import (
    Obj,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    local_queue,
    namespace,
)
from tests.support.multicluster import MultiStack, multi_stack, real_workers_or_none


@pytest.fixture(scope="session")
def real_workers() -> Iterator[Any]:
    yield from real_workers_or_none()


def config(name: str, **more: Any) -> Config:
    return parse_config({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
                         "multiKueue": {"dispatcherName": name, **more}})  # fmt: skip


def worker_objects(cpu: int) -> list[Obj]:
    return [namespace(NS), flavor("f"), cluster_queue("cq", {"f": {"cpu": cpu}}),
            local_queue(NS, "lq", "cq")]  # fmt: skip


async def set_quota(m: MultiStack, worker: str, cpu: int) -> None:
    s = m.workers[worker]
    cq = s.get("clusterqueues", "cq")
    assert cq is not None
    groups = cq["spec"]["resourceGroups"]
    groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = str(cpu)
    await s.user.patch(k.CLUSTER_QUEUES, "cq", {"spec": {"resourceGroups": groups}})


def manager_workload(m: MultiStack, job: str) -> Obj | None:
    return m.manager.workload_of_job(NS, job)


def test_incremental_adds_workers_in_order_a_step_at_a_time(
    tmp_path: Path, backend: Any, real_workers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mk_config, "INCREMENTAL_ROUND_SECONDS", 3.0)
    cfg = config(mk_config.INCREMENTAL, incrementalDispatcherConfig={"stepSize": 1})

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=worker_objects(4),
                               config=cfg) as m:  # fmt: skip
            await set_quota(m, "worker1", 0)  # the first worker cannot admit it
            await m.manager.user.create(k.JOBS, mk_job("j"), namespace=NS)
            wl = await eventually(
                lambda: (
                    (w := manager_workload(m, "j"))
                    and (w.get("status") or {}).get("nominatedClusterNames")
                    and w
                ),
                what="a first nomination",
            )
            assert wl["status"]["nominatedClusterNames"] == ["worker1"]
            name = wl["metadata"]["name"]
            await eventually(lambda: set(m.copies(NS, name)) == {"worker1"}, what="one copy")
            wl = await eventually(
                lambda: (w := manager_workload(m, "j")) and is_true(w, "Admitted") and w,
                what="admitted after the next round nominated worker2",
                timeout=60,
            )
            assert wl["status"]["clusterName"] == "worker2"
            await eventually(lambda: set(m.copies(NS, name)) == {"worker2"}, what="only there")

    asyncio.run(main())


def test_an_external_dispatcher_nominates_and_the_service_obeys(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=worker_objects(4),
                               config=config("example.com/my-dispatcher")) as m:  # fmt: skip
            await m.manager.user.create(k.JOBS, mk_job("j"), namespace=NS)
            wl = await eventually(
                lambda: (w := manager_workload(m, "j")) and check_state(w) == "Pending" and w,
                what="quota reserved, the check pending",
            )
            name = wl["metadata"]["name"]
            await asyncio.sleep(1.0)
            assert m.copies(NS, name) == {}  # nobody nominated: no copy anywhere
            await m.manager.user.patch(
                k.WORKLOADS, name, {"status": {"nominatedClusterNames": ["worker2"]}},
                namespace=NS, subresource="status",
            )  # fmt: skip
            wl = await eventually(
                lambda: (w := manager_workload(m, "j")) and is_true(w, "Admitted") and w,
                what="admitted where the dispatcher said",
            )
            assert wl["status"]["clusterName"] == "worker2"
            assert set(m.copies(NS, name)) == {"worker2"}

    asyncio.run(main())


def test_fits_nominates_only_the_worker_where_the_gang_fits_now(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=worker_objects(4),
                               config=config(mk_config.FITS)) as m:  # fmt: skip
            await set_quota(m, "worker1", 1)  # a 2-cpu gang does not fit there
            seen: set[str] = set()

            async def watch() -> None:
                while True:
                    for wl in m.manager.workloads(NS):
                        seen.update(m.copies(NS, wl["metadata"]["name"]))
                    await asyncio.sleep(0.02)

            watcher = asyncio.create_task(watch())
            await m.manager.user.create(k.JOBS, mk_job("j", cpu="2"), namespace=NS)
            wl = await eventually(
                lambda: (w := manager_workload(m, "j")) and is_true(w, "Admitted") and w,
                what="admitted",
                timeout=60,
            )
            watcher.cancel()
            assert wl["status"]["clusterName"] == "worker2"
            assert seen == {"worker2"}  # never raced to worker1
            message = await eventually(
                lambda: _event_message(m, wl["metadata"]["name"]), what="the reasons event"
            )
            assert "nominated worker2" in message
            assert "worker1: does not fit ClusterQueue cq now without preemption" in message
            assert "worker2: fits in flavor f of ClusterQueue cq within nominal quota" in message

    asyncio.run(main())


def _event_message(m: MultiStack, wl_name: str) -> str | None:
    for ev in m.manager.server.list_objects("events", NS):
        involved = ev.get("involvedObject") or ev.get("regarding") or {}
        if involved.get("name") == wl_name and ev.get("reason") == "MultiKueue":
            if "nominated" in str(ev.get("message") or ev.get("note")):
                return str(ev.get("message") or ev.get("note"))
    return None
