"""MultiKueue's requests, counted where they are made.

To the workers, at the proxy on each link: a burst of Jobs dispatched by AllAtOnce costs
each worker one Workload copy per Job, the losing copies one delete each, and the winner
one job; the events of the other workers' copies that start a Workload's reconcile again
before the watch brings back what it wrote never make it create or delete a copy twice.

To the manager's own API server, from the service's ``quartermaster_api_requests_total``:
a dispatched Job costs its Workload, three status writes (quota reserved, workers
nominated, then the check Ready with the worker's name and ``Admitted=True`` together:
Kueue writes those last two apart, four in all), the start of its job and events, and
no read: the informers have the Job (whole, for the copy to the worker) and the
Workload webhook reads no owner. The admission in the check's write is the service's
own, counted once: its metrics, its ``Admitted`` event and its job's start."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import resources as k
from tests.e2e.test_e2e_multikueue import MANAGER, NS, check_state, manager_queue, mk_job
from tests.support.kube_harness import (
    cluster_queue,
    eventually,
    flavor,
    is_true,
    local_queue,
    namespace,
)
from tests.support.multicluster import CHECK, WORKERS, MultiStack, multi_stack, real_workers_or_none

JOBS = 12
EVENTS_PER_JOB = 5  # CreatedWorkload, QuotaReserved, MultiKueue (Ready), Admitted, Started


def economy_stack(tmp_path: Path, backend: Any, real_workers: Any) -> Any:
    """A manager and the workers, each with room for ``JOBS`` one-cpu Jobs."""
    manager = [*MANAGER[:2], manager_queue(cpu=JOBS), MANAGER[3]]
    worker = [namespace(NS), flavor("f"), cluster_queue("cq", {"f": {"cpu": JOBS}}),
              local_queue(NS, "lq", "cq")]  # fmt: skip
    return multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                       manager_objects=manager, worker_objects=worker)  # fmt: skip


async def create_jobs(m: MultiStack, count: int) -> None:
    """A burst of Jobs j0, j1, ... created on the manager at once."""
    await asyncio.gather(
        *(m.manager.user.create(k.JOBS, mk_job(f"j{i}"), namespace=NS) for i in range(count))
    )


@pytest.fixture(scope="session")
def real_workers() -> Iterator[Any]:
    yield from real_workers_or_none()


def test_a_burst_of_jobs_copies_each_workload_once_per_worker_and_deletes_each_loser_once(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:

    async def main() -> None:
        async with economy_stack(tmp_path, backend, real_workers) as m:
            await create_jobs(m, JOBS)

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


def manager_requests(m: MultiStack) -> dict[str, float]:
    """The manager service's requests by call (``quartermaster_api_requests_total``)."""
    service = m.manager.service
    assert service.metrics is not None
    out: dict[str, float] = {}
    for metric in service.metrics.api_requests.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                out[sample.labels["call"]] = sample.value
    return out


def writes_of(m: MultiStack, kind: str) -> float:
    """The manager service's status writes of ``kind`` (``quartermaster_api_writes_total``)."""
    service = m.manager.service
    assert service.metrics is not None
    return sum(
        sample.value
        for metric in service.metrics.api_writes.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("kind") == kind
    )


def errors_of(m: MultiStack, call: str, code: str) -> float:
    """The manager service's answers ``code`` to ``call`` (``quartermaster_api_errors_total``)."""
    service = m.manager.service
    assert service.metrics is not None
    return sum(
        sample.value
        for metric in service.metrics.api_errors.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
        and sample.labels.get("call") == call
        and sample.labels.get("code") == code
    )


def test_a_dispatched_job_costs_the_manager_its_kueue_writes_and_no_reads(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:

    async def main() -> None:
        async with economy_stack(tmp_path, backend, real_workers) as m:
            before = manager_requests(m)
            pending_before = writes_of(m, "pending")
            conflicts_before = errors_of(m, "patch kueue.x-k8s.io/workloads/status", "409")
            await create_jobs(m, JOBS)

            def started() -> bool:
                wls = m.manager.workloads(NS)
                return len(wls) == JOBS and all(
                    check_state(w) == "Ready"
                    and (j := m.manager.get("jobs", f"j{i}", NS)) is not None
                    and not j["spec"].get("suspend")
                    for i, w in enumerate(wls)
                )

            await eventually(started, what="every job admitted on a worker and started",
                             timeout=120)  # fmt: skip
            await eventually(
                lambda: sum(len(m.jobs(NS, f"j{i}")) for i in range(JOBS)) == JOBS,
                what="each job created on its winner",
                timeout=60,
            )
            after = manager_requests(m)
            spent = {c: n - before.get(c, 0.0) for c, n in after.items() if n > before.get(c, 0.0)}
            reads = {c: n for c, n in spent.items() if c.startswith("get ")}
            # the Job's whole object comes from the informer, not a GET (the Workload
            # webhook's owner walk and the copy to the worker each read it once before)
            assert not any(c.endswith("batch/jobs") for c in reads), spent
            assert spent.get("create kueue.x-k8s.io/workloads") == JOBS, spent
            # beside the pending reasons a cycle may write first (QuotaReserved=False, as
            # Kueue's scheduler does), three status writes each: the check's Ready
            # carries Admitted=True (Kueue: four, the admission on its own). A write the
            # API server refused with a conflict changed nothing and is made again: under
            # load two writers of one Workload meet, so those are counted apart.
            pending = writes_of(m, "pending") - pending_before
            call = "patch kueue.x-k8s.io/workloads/status"
            status = spent.get(call, 0)
            conflicts = errors_of(m, call, "409") - conflicts_before
            assert status - pending - conflicts <= 3 * JOBS, (spent, pending, conflicts)
            assert spent.get("patch batch/jobs", 0) <= JOBS, spent
            assert spent.get("create core/events", 0) <= EVENTS_PER_JOB * JOBS, spent

    asyncio.run(main())


def samples(m: MultiStack, metric_name: str, suffix: str) -> float:
    """The manager's ``metric_name`` samples ending in ``suffix`` for ClusterQueue cq."""
    registry = m.manager.service.metrics
    assert registry is not None
    return sum(
        sample.value
        for metric in registry.registry.collect()
        if metric.name == metric_name
        for sample in metric.samples
        if sample.name == metric_name + suffix and sample.labels.get("cluster_queue") == "cq"
    )


def test_an_admission_written_with_the_checks_ready_counts_once_and_starts_its_job_once(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    jobs = 4

    async def main() -> None:
        async with economy_stack(tmp_path, backend, real_workers) as m:
            await create_jobs(m, jobs)

            def started() -> bool:
                wls = m.manager.workloads(NS)
                return len(wls) == jobs and all(
                    check_state(w) == "Ready"
                    and is_true(w, "Admitted")
                    and (j := m.manager.get("jobs", f"j{i}", NS)) is not None
                    and not j["spec"].get("suspend")
                    for i, w in enumerate(wls)
                )

            await eventually(started, what="every job admitted on a worker and started",
                             timeout=120)  # fmt: skip
            await asyncio.sleep(0.5)  # a second admission or start would be written by now
            for wl in m.manager.workloads(NS):
                # one write made the check Ready and admitted it, at the same instant
                ready = next(c for c in wl["status"]["admissionChecks"] if c["name"] == CHECK)
                admitted = next(c for c in wl["status"]["conditions"] if c["type"] == "Admitted")
                assert admitted["reason"] == "Admitted", admitted
                assert admitted["message"] == "The workload is admitted", admitted
                assert admitted["lastTransitionTime"] == ready["lastTransitionTime"], wl["status"]
            assert samples(m, "kueue_admitted_workloads", "_total") == jobs
            assert samples(m, "kueue_quota_reserved_workloads", "_total") == jobs
            assert samples(m, "kueue_admission_wait_time_seconds", "_count") == jobs
            assert samples(m, "kueue_admission_checks_wait_time_seconds", "_count") == jobs
            assert manager_requests(m).get("patch batch/jobs", 0) == jobs  # each started once
            admitted_events: dict[str, int] = {}
            for ev in m.manager.server.list_objects("events", NS):
                if ev.get("reason") == "Admitted":
                    name = ev["involvedObject"]["name"]
                    admitted_events[name] = admitted_events.get(name, 0) + int(ev.get("count") or 1)
            assert sorted(admitted_events.values()) == [1] * jobs, admitted_events
            cache = m.manager.service.controller.cache
            models = [w for key, w in cache.workloads.items() if key.startswith(f"{NS}/")]
            assert len(models) == jobs and all(w.admitted for w in models), models

    asyncio.run(main())
