"""MultiKueue's requests to the workers, counted at the proxy on each link: a burst of
Jobs dispatched by AllAtOnce costs each worker one Workload copy per Job, the losing
copies one delete each, and the winner one job; the events of the other workers' copies
that start a Workload's reconcile again before the watch brings back what it wrote
never make it create or delete a copy twice."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import resources as k
from tests.e2e.test_e2e_multikueue import MANAGER, NS, check_state, manager_queue, mk_job
from tests.support.kube_harness import cluster_queue, eventually, flavor, local_queue, namespace
from tests.support.multicluster import WORKERS, multi_stack, real_workers_or_none

JOBS = 12


@pytest.fixture(scope="session")
def real_workers() -> Iterator[Any]:
    yield from real_workers_or_none()


def test_a_burst_of_jobs_copies_each_workload_once_per_worker_and_deletes_each_loser_once(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    manager = [*MANAGER[:2], manager_queue(cpu=JOBS), MANAGER[3]]
    worker = [namespace(NS), flavor("f"), cluster_queue("cq", {"f": {"cpu": JOBS}}),
              local_queue(NS, "lq", "cq")]  # fmt: skip

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=manager, worker_objects=worker) as m:  # fmt: skip
            await asyncio.gather(
                *(m.manager.user.create(k.JOBS, mk_job(f"j{i}"), namespace=NS)
                  for i in range(JOBS))
            )  # fmt: skip

            def ready() -> bool:
                wls = m.manager.workloads(NS)
                return len(wls) == JOBS and all(check_state(w) == "Ready" for w in wls)

            await eventually(ready, what="every Workload admitted on a worker", timeout=120)
            names = [w["metadata"]["name"] for w in m.manager.workloads(NS)]
            await eventually(
                lambda: all(len(m.copies(NS, n)) == 1 for n in names),
                what="the losing copies removed",
                timeout=60,
            )
            await eventually(
                lambda: sum(len(m.jobs(NS, f"j{i}")) for i in range(JOBS)) == JOBS,
                what="each job created on its winner",
                timeout=60,
            )
            for name, link in m.links.items():
                assert link.request_count(verb="create", resource="workloads") == JOBS, name
            deletes = sum(
                link.request_count(verb="delete", resource="workloads") for link in m.links.values()
            )
            assert deletes == JOBS * (len(WORKERS) - 1)
            creates = sum(
                link.request_count(verb="create", resource="jobs") for link in m.links.values()
            )
            assert creates == JOBS

    asyncio.run(main())
