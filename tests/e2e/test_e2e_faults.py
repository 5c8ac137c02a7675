"""Convergence under a flaky API server: 500s, conflicts, dropped watches, expired windows.

The same cluster (jobs and their Workloads present before the service starts, so the
scheduler's first view is complete) is run twice: once cleanly, once while a seeded
fault injector makes requests fail (500, 409, 429), drops watches (cleanly or by
killing the connection) and expires the watch window (forcing 410 relists). Both runs
must end with the same admissions; the invariant checker watches every write of the
faulty run: never more quota in use than a ClusterQueue has, never a Workload admitted
twice.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from admission.integrations.framework.composition import compose
from admission.integrations.kinds.job import JOB
from queues.model import PriorityClass
from tests.support.kube_harness import (
    admitted,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
    priority_class,
    stack,
)
from tests.support.kube_invariants import InvariantChecker, quotas_of

NAMESPACES = ["ns-0", "ns-1", "ns-2"]
QUEUES = [cluster_queue(f"cq-{i}", {"f": {"cpu": 4}}) for i in range(3)]


def cluster(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Queue objects, and jobs with distinct priorities (a deterministic greedy order)."""
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = [namespace(n) for n in NAMESPACES]
    objects += [flavor("f"), *QUEUES]
    objects += [local_queue(n, "lq", f"cq-{i}") for i, n in enumerate(NAMESPACES)]
    jobs = []
    for i in range(18):
        objects.append(priority_class(f"p{i}", 100 + i * 7 % 18))
        jobs.append(
            job(NAMESPACES[i % 3], f"job-{i}", queue="lq", cpu=str(rng.choice([1, 2, 3])),
                priority_class=f"p{i}", suspend=True)
        )  # fmt: skip
    return objects, jobs


def preload(jobs: list[dict[str, Any]], wpcs: dict[str, PriorityClass]):  # type: ignore[no-untyped-def]
    def install(server: Any) -> None:
        for j in jobs:
            stored = server.put_object(j)
            _, body = compose(JOB, stored, workload_priority_classes=wpcs, priority_classes={})
            server.put_object(body)

    return install


def admitted_jobs(server: Any) -> dict[str, str]:
    """job name -> ClusterQueue of its admitted, unfinished Workload."""
    out = {}
    for wl in server.list_objects("workloads"):
        if admitted(wl) and not is_true(wl, "Finished"):
            owner = wl["metadata"]["ownerReferences"][0]["name"]
            out[owner] = wl["status"]["admission"]["clusterQueue"]
    return out


def started_jobs(server: Any) -> set[str]:
    """Running Jobs: unsuspended and not finished (a real Job controller also leaves a
    ``Suspended=False`` condition on a resumed Job)."""
    return {
        j["metadata"]["name"]
        for j in server.list_objects("jobs")
        if not j["spec"]["suspend"] and not is_true(j, "Complete") and not is_true(j, "Failed")
    }


async def inject_faults(
    server: Any, rng: random.Random, stop: asyncio.Event, log: list[str]
) -> None:
    actions = [
        ("500 on workload status", lambda: server.fail_next(rng.randint(1, 3), code=500, verb="patch", resource="workloads/status")),
        ("409 on workload status", lambda: server.fail_next(1, code=409, verb="patch", resource="workloads/status")),
        ("500 on job patch", lambda: server.fail_next(1, code=500, verb="patch", resource="jobs")),
        ("429 on anything", lambda: server.fail_next(2, code=429, retry_after=0)),
        ("500 on list", lambda: server.fail_next(1, code=500, verb="list")),
        ("drop watches", lambda: server.drop_watches(abrupt=False)),
        ("kill watches", lambda: server.drop_watches(abrupt=True)),
        ("expire window", lambda: (server.compact(), server.drop_watches())),
    ]  # fmt: skip
    while not stop.is_set():
        await asyncio.sleep(rng.uniform(0.002, 0.02))
        name, act = rng.choice(actions)
        act()
        log.append(name)


def test_faults_converge_to_the_clean_runs_admissions(tmp_path: Path, backend: Any) -> None:
    objects, jobs = cluster(seed=3)
    wpcs = {o["metadata"]["name"]: PriorityClass(o["metadata"]["name"], o["value"])
            for o in objects if o["kind"] == "WorkloadPriorityClass"}  # fmt: skip

    async def run_once(
        faults: bool, where: Path
    ) -> tuple[list[dict[str, str]], InvariantChecker, list[str]]:
        checker = InvariantChecker(quotas_of(QUEUES))

        def before(server: Any) -> None:
            preload(jobs, wpcs)(server)
            checker.install(server)
            if faults:  # the first requests already fail
                server.fail_next(1, code=500, verb="list", resource="workloads")
                server.fail_next(2, code=500, verb="patch", resource="workloads/status")
                server.fail_next(1, code=409, verb="patch", resource="workloads/status")
                server.fail_next(1, code=500, verb="patch", resource="jobs")

        injected: list[str] = []
        phases: list[dict[str, str]] = []
        async with stack(
            where, backend=backend, objects=objects, webhooks=False, before_start=before
        ) as s:
            ctl = s.service.controller
            assert ctl is not None
            rng = random.Random(11)

            async def faulty_period() -> None:
                if not faults:
                    return
                stop = asyncio.Event()
                goal = len(injected) + 30
                injector = asyncio.create_task(inject_faults(s.server, rng, stop, injected))
                await eventually(lambda: len(injected) >= goal, what="faults were injected")
                stop.set()
                await injector
                s.server.clear_faults()

            async def settle(finished: frozenset[str] = frozenset()) -> dict[str, str]:
                """Wait until the admitted jobs run and the ``finished`` ones no longer
                hold quota: a Job controller marks a Job complete a while after its pods
                succeed, and until then nothing has changed yet."""

                def settled() -> bool:
                    running = set(admitted_jobs(s.server))
                    return (
                        ctl.idle() and not running & finished and running == started_jobs(s.server)
                    )

                await eventually(settled, what="the controller settles", timeout=60)
                return admitted_jobs(s.server)

            await faulty_period()
            phases.append(await settle())
            # the admitted jobs finish; the waiting ones get their turn, still under faults
            for name in sorted(phases[0]):
                ns = next(j["metadata"]["namespace"] for j in jobs if j["metadata"]["name"] == name)
                await s.finish_job(ns, name)
            await faulty_period()
            phases.append(await settle(frozenset(phases[0])))
        return phases, checker, injected

    async def main() -> None:
        clean, clean_check, _ = await run_once(False, tmp_path / "clean")
        faulty, check, injected = await run_once(True, tmp_path / "faulty")
        assert clean[0] and clean[1], "the clean run admitted nothing"
        assert faulty == clean
        assert clean_check.violations == [] and check.violations == []
        assert check.twice() == {}
        assert len(set(injected)) >= 5  # most kinds of fault really happened

    asyncio.run(main())
