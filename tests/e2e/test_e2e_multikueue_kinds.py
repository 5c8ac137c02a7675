"""MultiKueue for the job kinds beyond Job and JobSet: TrainJob, PyTorchJob, MPIJob,
RayJob and RayCluster, each written as a Kueue user writes it (a queue label, no
``managedBy``), and plain pods, dispatched by a manager to one of two workers, on the
double and on real control planes when ``KUBEBUILDER_ASSETS`` is set.

No operator runs these kinds on a worker, so the test plays it there: it writes the
worker's job status, which MultiKueue copies back to the manager's job. The kind's CRDs
are installed by this test only (``crds``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_e2e_multikueue import MANAGED_BY, MANAGER, NS, PREBUILT, WORKER
from tests.support.integration_kit import KindCase, Roles, meta
from tests.support.kube_harness import Obj, eventually, is_true
from tests.support.multicluster import WORKERS, MultiStack, multi_stack, real_workers_or_none
from tests.unit.integrations import (
    test_integration_mpijob,
    test_integration_pytorchjob,
    test_integration_raycluster,
    test_integration_rayjob,
    test_integration_trainjob,
)


@dataclass(frozen=True)
class Kind:
    case: KindCase
    roles: Roles  # small: the gang fits a worker's 4 cpus
    crds: tuple[str, ...]
    managed_by: tuple[str, ...]  # where the webhook writes managedBy
    #: the operator's status on the worker while the job runs
    running: Obj = field(default_factory=lambda: {
        "conditions": [{"type": "Running", "status": "True", "reason": "Running",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]})  # fmt: skip

    @property
    def plural(self) -> str:
        return self.case.resource.plural

    @property
    def kind(self) -> str:
        return self.case.resource.kind


SPEC_MB, RUN_POLICY_MB = ("spec", "managedBy"), ("spec", "runPolicy", "managedBy")
KINDS = {
    "trainjob": Kind(test_integration_trainjob.CASE, [("dataset-initializer", 1), ("node", 1)],
                     ("trainjobs", "clustertrainingruntimes", "trainingruntimes"), SPEC_MB),
    "pytorchjob": Kind(test_integration_pytorchjob.CASE, [("master", 1), ("worker", 1)],
                       ("pytorchjobs",), RUN_POLICY_MB),
    "mpijob": Kind(test_integration_mpijob.CASE, [("launcher", 1), ("worker", 1)],
                   ("mpijobs",), RUN_POLICY_MB),
    "rayjob": Kind(test_integration_rayjob.CASE, [("head", 1), ("workers", 1), ("submitter", 1)],
                   ("rayjobs", "rayclusters"), SPEC_MB,
                   running={"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}),
    "raycluster": Kind(test_integration_raycluster.CASE, [("head", 1), ("workers", 1)],
                       ("rayclusters",), SPEC_MB, running={"state": "ready"}),
}  # fmt: skip


@pytest.fixture(scope="module")
def real_workers() -> Iterator[Any]:
    yield from real_workers_or_none()


def at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def workload_of(m: MultiStack, kind: str, owner: str) -> Obj | None:
    for wl in m.manager.workloads(NS):
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == kind and ref.get("name") == owner:
                return wl
    return None


def synced(local: Obj | None, status: Obj) -> bool:
    """The manager's job carries the worker's status (``status`` a subset of it)."""
    have = (local or {}).get("status") or {}
    return all(have.get(k) == v for k, v in status.items())


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_job_of_each_kind_runs_on_exactly_one_worker_and_comes_back(
    tmp_path: Path, backend: Any, real_workers: Any, name: str
) -> None:
    kind = KINDS[name]
    case = kind.case
    obj = case.make("j", kind.roles, meta("j"))

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=[*MANAGER, *case.extra_objects],
                               worker_objects=[*WORKER, *case.extra_objects],
                               crds=kind.crds) as m:  # fmt: skip
            await eventually(
                lambda: is_true(m.manager.get("admissionchecks", "sample-multikueue"), "Active"),
                what="the check active",
            )
            created = await m.manager.user.create(case.resource, obj, namespace=NS)
            assert at(created, kind.managed_by) == MANAGED_BY  # the webhook's default
            wl = await eventually(
                lambda: (w := workload_of(m, kind.kind, "j")) and is_true(w, "Admitted") and w,
                what=f"the {kind.kind}'s Workload admitted on the manager",
                timeout=60,
            )
            worker, wl_name = wl["status"]["clusterName"], wl["metadata"]["name"]
            assert worker in WORKERS
            remote = await eventually(
                lambda: m.jobs(NS, "j", kind.plural).get(worker),
                what=f"the {kind.kind} created on the worker",
            )
            assert set(m.jobs(NS, "j", kind.plural)) == {worker}
            assert remote["metadata"]["labels"][PREBUILT] == wl_name
            assert at(remote, kind.managed_by) is None
            await eventually(lambda: set(m.copies(NS, wl_name)) == {worker},
                             what="the other Workload copies removed")  # fmt: skip
            started: Callable[[], bool] = lambda: (  # noqa: E731
                (r := m.workers[worker].get(kind.plural, "j", NS)) is not None
                and not case.integration.is_suspended(r)
            )
            await eventually(started, what=f"the worker's {kind.kind} started")
            # the operator on the worker reports it running: the manager's job shows it
            await m.workers[worker].user.patch(
                case.resource, "j", {"status": kind.running}, namespace=NS, subresource="status"
            )
            await eventually(
                lambda: synced(m.manager.get(kind.plural, "j", NS), kind.running),
                what="the running status synced to the manager's job",
                timeout=60,
            )
            if case.finished_status is None:  # a RayCluster serves until deleted
                await m.manager.user.delete(case.resource, "j", namespace=NS)
            else:
                done = case.finished_status(remote)
                await m.workers[worker].user.patch(
                    case.resource, "j", {"status": done}, namespace=NS, subresource="status"
                )
                local = await eventually(
                    lambda: (j := m.manager.get(kind.plural, "j", NS)) and synced(j, done) and j,
                    what="the finished status synced to the manager's job",
                    timeout=60,
                )
                assert at(local, kind.managed_by) == MANAGED_BY
                await eventually(
                    lambda: is_true(m.manager.get("workloads", wl_name, NS), "Finished"),
                    what="the manager's Workload finished",
                )
            await eventually(
                lambda: not m.copies(NS, wl_name) and not m.jobs(NS, "j", kind.plural),
                what="the remote objects collected",
                timeout=60,
            )

    asyncio.run(main())


@pytest.mark.parametrize("shape", ["group", "single"])
def test_pods_run_on_exactly_one_worker_while_the_managers_stay_gated(
    tmp_path: Path, backend: Any, real_workers: Any, shape: str
) -> None:
    """Pods have no ``managedBy``: the manager's stay behind the admission gate, the
    worker's copies run, and each pod's status comes back (Kueue's pod adapter). A
    pod group of two, and a single managed pod (a Deployment's pods are such)."""
    from admission.kube.client import resources as k
    from tests.e2e.test_e2e_podgroups import gated, pod

    names = ("g-0", "g-1") if shape == "group" else ("s",)

    def make(name: str) -> Obj:
        obj = pod(name, group="g", total=len(names))
        if shape == "single":
            del obj["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
            del obj["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"]
        return obj

    async def set_phase(s: Any, name: str, phase: str) -> None:
        await s.user.patch(k.PODS, name, {"status": {"phase": phase}}, namespace=NS,
                           subresource="status")  # fmt: skip

    def pods_on(s: Any) -> list[Obj]:
        return [p for n in names if (p := s.get("pods", n, NS)) is not None]

    def workload(m: MultiStack) -> Obj | None:
        return m.manager.get("workloads", "g", NS) if shape == "group" else workload_of(
            m, "Pod", "s")  # fmt: skip

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER) as m:  # fmt: skip
            for n in names:
                await m.manager.user.create(k.PODS, make(n), namespace=NS)
            wl = await eventually(
                lambda: is_true(w := workload(m), "Admitted") and w,
                what="the pods' Workload admitted on the manager",
                timeout=60,
            )
            worker, wl_name = wl["status"]["clusterName"], wl["metadata"]["name"]
            other = next(w for w in WORKERS if w != worker)
            remote = await eventually(
                lambda: len(got := pods_on(m.workers[worker])) == len(names) and got,
                what="the pods created on the worker",
            )
            assert not pods_on(m.workers[other])
            assert {p["metadata"]["labels"][PREBUILT] for p in remote} == {wl_name}
            await eventually(
                lambda: not any(gated(p) for p in pods_on(m.workers[worker])),
                what="the worker's pods ungated",
            )
            assert all(gated(p) for p in pods_on(m.manager))  # never run on the manager
            for n in names:
                await set_phase(m.workers[worker], n, "Running")
            await eventually(
                lambda: all(p["status"].get("phase") == "Running" for p in pods_on(m.manager)),
                what="the running status synced to the manager's pods",
                timeout=60,
            )
            assert all(gated(p) for p in pods_on(m.manager))
            for n in names:
                await set_phase(m.workers[worker], n, "Succeeded")
            await eventually(
                lambda: is_true(m.manager.get("workloads", wl_name, NS), "Finished"),
                what="the manager's Workload finished",
                timeout=60,
            )
            assert all(p["status"].get("phase") == "Succeeded" for p in pods_on(m.manager))
            await eventually(
                lambda: not m.copies(NS, wl_name) and not pods_on(m.workers[worker]),
                what="the remote objects collected",
                timeout=60,
            )

    asyncio.run(main())
