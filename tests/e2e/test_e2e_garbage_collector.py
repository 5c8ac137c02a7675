"""The garbage collector writes through the API, and so through the webhooks.

kube-controller-manager's collector orphans dependents by patching them through the API
server, whose admission webhooks see the write, as
``system:serviceaccount:kube-system:generic-garbage-collector``; only that identity (the
Configuration's ``webhook.garbageCollectorUsernames``) may drop a Workload's controller
reference. The double's collector does the same: a Job deleted with ``propagationPolicy:
Orphan`` goes once its Workload is orphaned when the webhook lets the collector, and
stays (its ``orphan`` finalizer with it) while the webhook refuses it — on both backends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.config.load import parse_config
from admission.kube.client import resources as k
from tests.e2e.test_e2e_tenant_escapes import SMALL_QUEUE
from tests.support.kube_harness import admitted, eventually, job, stack

NS = "team-a"
GC = "system:serviceaccount:kube-system:generic-garbage-collector"


def _collector_runs(s: Any) -> bool:
    cluster = getattr(s.server, "cluster", None)
    return cluster is None or bool(getattr(cluster, "controller_manager", None))


def _controlled_by_job(wl: dict[str, Any] | None) -> bool:
    refs = (wl or {}).get("metadata", {}).get("ownerReferences") or []
    return any(r.get("kind") == "Job" and r.get("controller") for r in refs)


@pytest.mark.parametrize("collector", [GC, "system:serviceaccount:kube-system:another"])
def test_the_garbage_collector_orphans_a_workload_only_as_the_webhook_allows(
    collector: str, tmp_path: Path, backend: Any
) -> None:
    config = parse_config({"webhook": {"garbageCollectorUsernames": [collector]}})

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=SMALL_QUEUE, config=config) as s:
            if not _collector_runs(s):
                pytest.skip("no kube-controller-manager: nothing collects garbage")
            await s.user.create(k.JOBS, job(NS, "j", queue="lq", cpu="1"), namespace=NS)
            wl = await eventually(
                lambda: admitted(w := s.workload_of_job(NS, "j")) and w, what="j admitted"
            )
            name = wl["metadata"]["name"]
            await s.user.delete(k.JOBS, "j", namespace=NS, propagation="Orphan")
            if collector == GC:
                await eventually(lambda: s.get("jobs", "j", NS) is None, what="j gone")
                assert not _controlled_by_job(s.get("workloads", name, NS))
                return
            await asyncio.sleep(2.0)  # several collector passes, each refused
            wl = s.get("workloads", name, NS)
            if not isinstance(backend, str):
                # a young cluster's collector may not watch Workloads yet (it discovers
                # resources every 30 s): it lets the Job go at once, and the Workload of
                # a Job that is gone is deleted; orphaned, it never is
                assert wl is None or _controlled_by_job(wl)
                return
            assert _controlled_by_job(wl)
            left = s.get("jobs", "j", NS)
            assert left is not None and "orphan" in left["metadata"].get("finalizers", [])

    asyncio.run(main())
