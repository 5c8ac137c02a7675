"""MultiKueue end to end: a manager and two workers, each with its own API server and
service, set up as Kueue's ``setup_multikueue`` page writes it (an AdmissionCheck with
controllerName ``kueue.x-k8s.io/multikueue``, a MultiKueueConfig, a MultiKueueCluster and
a kubeconfig Secret per worker). On the double, and on three real control planes when
``KUBEBUILDER_ASSETS`` is set (the workers' Job controllers run the pods there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import resources as k
from tests.support.kube_harness import (
    Obj,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
)
from tests.support.multicluster import (
    CHECK,
    WORKERS,
    MultiStack,
    multi_stack,
    real_workers_or_none,
)

NS = "team-a"
MANAGED_BY = "kueue.x-k8s.io/multikueue"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"


def manager_queue(cpu: int = 4) -> Obj:
    cq = cluster_queue("cq", {"f": {"cpu": cpu}})
    cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK}]}
    return cq


MANAGER = [namespace(NS), flavor("f"), manager_queue(), local_queue(NS, "lq", "cq")]
WORKER = [namespace(NS), flavor("f"), cluster_queue("cq", {"f": {"cpu": 4}}),
          local_queue(NS, "lq", "cq")]  # fmt: skip


@pytest.fixture(scope="session")
def real_workers() -> Iterator[Any]:
    yield from real_workers_or_none()


def mk_job(name: str, cpu: str = "1") -> Obj:
    obj = job(NS, name, queue="lq", cpu=cpu)
    obj["spec"]["managedBy"] = MANAGED_BY
    return obj


def check_state(wl: Obj | None) -> str | None:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if entry["name"] == CHECK:
            return str(entry["state"])
    return None


def reserved_cpu(s: Any) -> str | None:
    cq = s.get("clusterqueues", "cq") or {}
    for f in (cq.get("status") or {}).get("flavorsReservation") or []:
        return str(f["resources"][0]["total"])
    return None


async def dispatched(m: MultiStack, name: str) -> tuple[str, Obj]:
    """(the worker, the manager's Workload) once the job's Workload is admitted there."""
    wl = await eventually(
        lambda: (w := m.manager.workload_of_job(NS, name)) and is_true(w, "Admitted") and w,
        what=f"{name}'s Workload admitted on the manager",
        timeout=60,
    )
    worker = wl["status"].get("clusterName")
    assert worker in WORKERS and check_state(wl) == "Ready", wl["status"]
    return worker, wl


def test_a_job_runs_on_exactly_one_worker_and_comes_back(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER) as m:  # fmt: skip
            await m.manager.user.create(k.JOBS, mk_job("j"), namespace=NS)
            worker, wl = await dispatched(m, "j")
            name = wl["metadata"]["name"]
            # the copy admitted there is the only one; the job exists only there
            await eventually(lambda: set(m.copies(NS, name)) == {worker},
                             what="the other copies removed")  # fmt: skip
            remote_job = await eventually(
                lambda: m.jobs(NS, "j").get(worker), what="the job created on the worker"
            )
            assert set(m.jobs(NS, "j")) == {worker}
            assert remote_job["metadata"]["labels"][PREBUILT] == name
            assert "managedBy" not in remote_job["spec"]
            # quota is held on both levels
            await eventually(lambda: reserved_cpu(m.manager) == "1", what="manager quota")
            await eventually(lambda: reserved_cpu(m.workers[worker]) == "1", what="worker quota")
            await eventually(
                lambda: (j := m.workers[worker].get("jobs", "j", NS)) and not j["spec"]["suspend"],
                what="the worker's job started",
            )
            await m.workers[worker].finish_job(NS, "j")
            local = await eventually(
                lambda: is_true(j := m.manager.get("jobs", "j", NS), "Complete") and j,
                what="the worker's status synced to the manager's job",
                timeout=60,
            )
            assert local["spec"]["managedBy"] == MANAGED_BY
            await eventually(
                lambda: is_true(m.manager.get("workloads", name, NS), "Finished"),
                what="the manager's Workload finished",
            )
            await eventually(
                lambda: not m.copies(NS, name) and not m.jobs(NS, "j"),
                what="the remote objects collected",
                timeout=60,
            )

    asyncio.run(main())


def test_deleting_the_managers_job_removes_its_remote_objects(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER) as m:  # fmt: skip
            await m.manager.user.create(k.JOBS, mk_job("j"), namespace=NS)
            worker, wl = await dispatched(m, "j")
            await eventually(lambda: m.jobs(NS, "j").get(worker), what="the remote job")
            await m.manager.user.delete(k.JOBS, "j", namespace=NS, propagation="Foreground")
            await eventually(
                lambda: not m.copies(NS, wl["metadata"]["name"]) and not m.jobs(NS, "j"),
                what="the remote Workload and job removed",
                timeout=60,
            )

    asyncio.run(main())


def test_a_workers_own_job_of_the_same_name_is_never_taken_for_the_copy(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    """A worker's own Job with the manager's job's name is not this manager's copy (it
    lacks ``multikueue-origin``): its status is never copied to the manager's job, so
    it cannot finish the manager's Workload."""

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER) as m:  # fmt: skip
            for s in m.workers.values():  # the workers' own, not queued, already done
                await s.user.create(k.JOBS, job(NS, "j", queue=None), namespace=NS)
                await s.finish_job(NS, "j")
            await eventually(
                lambda: all(is_true(s.get("jobs", "j", NS), "Complete")
                            for s in m.workers.values()),
                what="the workers' own Jobs complete",
                timeout=60,
            )  # fmt: skip
            await m.manager.user.create(k.JOBS, mk_job("j"), namespace=NS)
            _, wl = await dispatched(m, "j")
            await asyncio.sleep(1.0)  # the copy's job was looked for meanwhile
            local = m.manager.get("jobs", "j", NS) or {}
            assert not (local.get("status") or {}).get("conditions"), local.get("status")
            assert not is_true(m.manager.get("workloads", wl["metadata"]["name"], NS), "Finished")

    asyncio.run(main())


def test_a_lost_worker_gets_its_workload_dispatched_again(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    from admission.config.load import parse_config

    config = parse_config({"apiVersion": "config.kueue.x-k8s.io/v1beta2",
                           "kind": "Configuration",
                           "multiKueue": {"workerLostTimeout": "2s"}})  # fmt: skip

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER,
                               config=config) as m:  # fmt: skip
            await m.manager.user.create(k.JOBS, mk_job("j"), namespace=NS)
            first, wl = await dispatched(m, "j")
            name = wl["metadata"]["name"]
            await eventually(lambda: m.jobs(NS, "j").get(first), what="the remote job")
            m.links[first].pause()  # the worker stops answering
            mkc = await eventually(
                lambda: _inactive(m, first), what="its MultiKueueCluster inactive", timeout=60
            )
            assert mkc["reason"] == "ClientConnectionFailed"
            other = next(w for w in WORKERS if w != first)
            try:
                await eventually(
                    lambda: (
                        (w := m.manager.get("workloads", name, NS))
                        and is_true(w, "Admitted")
                        and w["status"].get("clusterName") == other
                    ),
                    what="dispatched again, to the other worker",
                    timeout=90,
                )
            except AssertionError as exc:  # say where the re-dispatch stopped
                status = (m.manager.get("workloads", name, NS) or {}).get("status")
                raise AssertionError(
                    f"{exc}; Workload status: {status}; copies: {m.copies(NS, name)}"
                ) from None
            m.links[first].resume()
            await eventually(lambda: set(m.copies(NS, name)) == {other},
                             what="the old copy removed once the worker is back",
                             timeout=60)  # fmt: skip

    asyncio.run(main())


def _inactive(m: MultiStack, worker: str) -> Obj | None:
    obj = m.manager.get("multikueueclusters", worker)
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == "Active" and c["status"] == "False":
            return dict(c)
    return None


def test_a_jobset_runs_on_exactly_one_worker_and_comes_back(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    from admission.integrations.kinds.jobset import JOBSET
    from tests.unit.integrations.test_integration_jobset import completed, jobset

    js = jobset("js", [("driver", 1), ("workers", 2)], {"name": "js", "namespace": NS,
                "labels": {"kueue.x-k8s.io/queue-name": "lq"}})  # fmt: skip
    js["spec"]["managedBy"] = MANAGED_BY

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER,
                               crds=("jobsets",)) as m:  # fmt: skip
            await m.manager.user.create(JOBSET.resource, js, namespace=NS)
            wl = await eventually(
                lambda: (w := _workload_of(m, "JobSet", "js")) and is_true(w, "Admitted") and w,
                what="the JobSet's Workload admitted on the manager",
                timeout=60,
            )
            worker, name = wl["status"]["clusterName"], wl["metadata"]["name"]
            remote = await eventually(
                lambda: m.jobs(NS, "js", "jobsets").get(worker), what="the JobSet on the worker"
            )
            assert set(m.jobs(NS, "js", "jobsets")) == {worker}
            assert remote["metadata"]["labels"][PREBUILT] == name
            await eventually(lambda: reserved_cpu(m.workers[worker]) == "3", what="worker quota")
            await eventually(
                lambda: (
                    (j := m.workers[worker].get("jobsets", "js", NS)) and not j["spec"]["suspend"]
                ),
                what="the worker's JobSet started",
            )
            await m.workers[worker].user.patch(
                JOBSET.resource, "js", {"status": completed(remote)}, namespace=NS,
                subresource="status",
            )  # fmt: skip
            await eventually(
                lambda: is_true(m.manager.get("jobsets", "js", NS), "Completed"),
                what="the worker's status synced to the manager's JobSet",
                timeout=60,
            )
            await eventually(
                lambda: is_true(m.manager.get("workloads", name, NS), "Finished"),
                what="the manager's Workload finished",
            )
            await eventually(
                lambda: not m.copies(NS, name) and not m.jobs(NS, "js", "jobsets"),
                what="the remote objects collected",
                timeout=60,
            )

    asyncio.run(main())


def _workload_of(m: MultiStack, kind: str, owner: str) -> Obj | None:
    for wl in m.manager.workloads(NS):
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == kind and ref.get("name") == owner:
                return wl
    return None


def test_a_job_written_as_kueues_docs_write_it_gets_managed_by_and_is_dispatched(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    """Kueue's sample Job names only its queue: the manager's webhook sets
    ``spec.managedBy`` (Kueue's ``ApplyDefaultForManagedBy``); a queue without a
    MultiKueue check leaves it alone."""
    plain_cq = cluster_queue("plain", {"f": {"cpu": 4}})

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=[*MANAGER, plain_cq,
                                                local_queue(NS, "plain", "plain")],
                               worker_objects=WORKER) as m:  # fmt: skip
            await eventually(
                lambda: is_true(m.manager.get("admissionchecks", CHECK), "Active"),
                what="the check active",
            )
            created = await m.manager.user.create(k.JOBS, job(NS, "j", queue="lq"), namespace=NS)
            assert created["spec"]["managedBy"] == MANAGED_BY
            other = await m.manager.user.create(
                k.JOBS, job(NS, "local", queue="plain"), namespace=NS
            )
            assert "managedBy" not in other["spec"] or other["spec"]["managedBy"] in (
                None, "kubernetes.io/job-controller")  # fmt: skip
            worker, _ = await dispatched(m, "j")
            await eventually(lambda: m.jobs(NS, "j").get(worker), what="the job on the worker")

    asyncio.run(main())
