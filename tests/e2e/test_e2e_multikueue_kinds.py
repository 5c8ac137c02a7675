"""MultiKueue for the job kinds beyond Job and JobSet: TrainJob, PyTorchJob, MPIJob,
RayJob and RayCluster, each written as a Kueue user writes it (a queue label, no
``managedBy``), plain pods, StatefulSets and LeaderWorkerSets, dispatched by a manager to
one of two workers, on the double and on real control planes when
``KUBEBUILDER_ASSETS`` is set.

No operator runs these kinds on a worker, so the test plays it there: it writes the
worker's job status, which MultiKueue copies back to the manager's job (and, on the
double, it plays the StatefulSet and LeaderWorkerSet controllers: it makes their pods).
The kind's CRDs are installed by this test only (``crds``).
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


# -- the serving kinds: the object itself is copied, its pods stay gated on the manager ------

ORIGIN = "kueue.x-k8s.io/multikueue-origin"
ORIGIN_UID = "kueue.x-k8s.io/multikueue-origin-uid"


def check_message(wl: Obj | None) -> str:
    entries = ((wl or {}).get("status") or {}).get("admissionChecks") or []
    return " ".join(str(e.get("message") or "") for e in entries)


def _pods(s: Any, prefix: str) -> list[Obj]:
    return [p for p in s.server.list_objects("pods", NS)
            if p["metadata"]["name"].startswith(f"{prefix}-")
            and not p["metadata"].get("deletionTimestamp")]  # fmt: skip


def _gated(p: Obj) -> bool:
    return bool(p["spec"].get("schedulingGates"))


def test_a_statefulset_is_copied_to_one_worker_and_its_managers_pods_stay_gated(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    """Kueue's StatefulSet adapter: the set itself is created on the worker that admitted
    its Workload (labelled with the Workload and the manager, annotated with the
    manager's UID), its pods run there on the manager's Workload copy, the manager's
    pods stay gated, no status comes back; scaling the manager's set to zero removes the
    worker's objects, scaling it up dispatches it again, deleting it removes them."""
    from admission.integrations.kinds.statefulset import STATEFULSET
    from tests.unit.integrations.test_integration_statefulset import (
        STS,
        _play_controller,
        _scale,
        statefulset,
    )

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER) as m:  # fmt: skip
            await eventually(
                lambda: is_true(m.manager.get("admissionchecks", "sample-multikueue"), "Active"),
                what="the check active",
            )
            web = await m.manager.user.create(
                STS, statefulset("web", [("main", 2)], meta("web")), namespace=NS
            )
            await _play_controller(m.manager, web)
            wl_name = STATEFULSET.workload_name(web)
            wl = await eventually(
                lambda: is_true(w := m.manager.get("workloads", wl_name, NS), "Admitted") and w,
                what="the StatefulSet's Workload admitted on the manager",
                timeout=60,
            )
            worker = wl["status"]["clusterName"]
            remote = await eventually(
                lambda: m.jobs(NS, "web", "statefulsets").get(worker),
                what="the StatefulSet created on the worker",
            )
            assert set(m.jobs(NS, "web", "statefulsets")) == {worker}
            assert remote["metadata"]["labels"][PREBUILT] == wl_name
            assert remote["metadata"]["labels"][ORIGIN]
            assert remote["metadata"]["annotations"][ORIGIN_UID] == web["metadata"]["uid"]
            assert remote["spec"]["template"] == web["spec"]["template"]
            await eventually(lambda: set(m.copies(NS, wl_name)) == {worker},
                             what="the other Workload copies removed")  # fmt: skip
            await _play_controller(m.workers[worker], remote)
            await eventually(
                lambda: (
                    len(ps := _pods(m.workers[worker], "web")) == 2
                    and not any(_gated(p) for p in ps)
                ),
                what="the worker's pods ungated",
            )
            # they run on the manager's Workload copy: the worker made none of its own
            theirs = m.workers[worker].workloads(NS)
            assert [w["metadata"]["name"] for w in theirs] == [wl_name]
            assert ORIGIN in theirs[0]["metadata"]["labels"]
            assert all(_gated(p) for p in _pods(m.manager, "web"))  # never run on the manager
            ready = {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2}
            await m.workers[worker].user.patch(
                STS, "web", {"status": ready}, namespace=NS, subresource="status"
            )
            await asyncio.sleep(1.0)  # the copy's event reconciles the Workload: no sync
            local = m.manager.get("statefulsets", "web", NS)
            assert (local or {}).get("status", {}).get("readyReplicas") != 2
            # scaled to zero, its Workload ends with its pods and the worker's objects go
            await _scale(m.manager, "web", 0)
            await eventually(
                lambda: m.manager.get("workloads", wl_name, NS) is None
                and not m.copies(NS, wl_name) and not m.jobs(NS, "web", "statefulsets")
                and not m.manager.server.list_objects("pods", NS),
                what="scaled to zero: the Workload and the worker's objects removed",
                timeout=60,
            )  # fmt: skip
            # scaled up again, a new Workload is dispatched; deleting the set removes its copy
            await _scale(m.manager, "web", 2)
            again = await eventually(
                lambda: is_true(w := m.manager.get("workloads", wl_name, NS), "Admitted") and w,
                what="the set's new Workload admitted on the manager",
                timeout=60,
            )
            assert again["metadata"]["uid"] != wl["metadata"]["uid"]
            worker = again["status"]["clusterName"]
            await eventually(lambda: set(m.jobs(NS, "web", "statefulsets")) == {worker},
                             what="the set copied again")  # fmt: skip
            await m.manager.user.delete(STS, "web", namespace=NS)
            await eventually(
                lambda: not m.copies(NS, wl_name) and not m.jobs(NS, "web", "statefulsets"),
                what="the remote objects collected",
                timeout=60,
            )

    asyncio.run(main())


def test_a_leaderworkersets_groups_all_run_on_the_worker_of_its_one_copy(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    """Kueue's LeaderWorkerSet adapter: one Workload per group, the first group's
    dispatched first and the others to the worker that admitted it, one copy of the set
    there (annotated with the manager's UID, not labelled with a Workload), its groups'
    pods running on the manager's Workload copies, the manager's pods gated."""
    from admission.integrations.kinds.leaderworkerset import LEADERWORKERSET
    from tests.unit.integrations.test_integration_leaderworkerset import (
        LWS,
        _play_controller,
        lws,
    )

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER,
                               crds=("leaderworkersets",)) as m:  # fmt: skip
            await eventually(
                lambda: is_true(m.manager.get("admissionchecks", "sample-multikueue"), "Active"),
                what="the check active",
            )
            obj = await m.manager.user.create(LWS, lws("infer", 2, 2, meta("infer")), namespace=NS)
            names = [LEADERWORKERSET.group_name("infer", g) for g in (0, 1)]
            await _play_controller(m.manager, obj, 0)
            # the first group's Workload alone is not dispatched: it waits for the second's
            await eventually(
                lambda: (
                    "waiting for the Workloads of all 2 groups of LeaderWorkerSet"
                    in check_message(m.manager.get("workloads", names[0], NS))
                ),
                what="the first group waiting for the second",
                timeout=60,
            )
            assert not m.copies(NS, names[0])
            await _play_controller(m.manager, obj, 1)

            def admitted_both() -> list[Obj] | None:
                wls = [m.manager.get("workloads", n, NS) for n in names]
                return wls if all(is_true(w, "Admitted") for w in wls) else None  # type: ignore[return-value]

            wls = await eventually(admitted_both, what="both groups admitted on the manager",
                                   timeout=60)  # fmt: skip
            workers = {w["status"]["clusterName"] for w in wls}
            assert len(workers) == 1, workers
            (worker,) = workers
            remote = await eventually(
                lambda: m.jobs(NS, "infer", "leaderworkersets").get(worker),
                what="the LeaderWorkerSet created on the worker",
            )
            assert set(m.jobs(NS, "infer", "leaderworkersets")) == {worker}
            assert PREBUILT not in remote["metadata"]["labels"]
            assert remote["metadata"]["labels"][ORIGIN]
            assert remote["metadata"]["annotations"][ORIGIN_UID] == obj["metadata"]["uid"]
            for g in (0, 1):  # at once, as its controller: the second group's copy may come later
                await _play_controller(m.workers[worker], remote, g)
            await eventually(
                lambda: (
                    len(ps := _pods(m.workers[worker], "infer")) == 4
                    and not any(_gated(p) for p in ps)
                ),
                what="the worker's pods of both groups ungated",
            )
            for n in names:
                await eventually(lambda n=n: set(m.copies(NS, n)) == {worker},
                                 what=f"{n}'s copies on {worker} only")  # fmt: skip
            # both groups run on the manager's copies: the worker made no Workload of its own
            theirs = m.workers[worker].workloads(NS)
            assert sorted(w["metadata"]["name"] for w in theirs) == sorted(names)
            assert all(ORIGIN in w["metadata"]["labels"] for w in theirs)
            assert all(_gated(p) for p in _pods(m.manager, "infer"))
            await m.manager.user.delete(LWS, "infer", namespace=NS)
            await eventually(
                lambda: (
                    not any(m.copies(NS, n) for n in names)
                    and not m.jobs(NS, "infer", "leaderworkersets")
                ),
                what="the remote objects collected",
                timeout=60,
            )

    asyncio.run(main())


def test_a_waiting_group_follows_on_its_siblings_events_not_on_a_poll(
    tmp_path: Path, backend: Any, real_workers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kueue's ``enqueueComponentWorkloads``: with the safety-net look-again an hour away,
    the second group (made first) is woken by the first group's events: its Workload
    created, then its ``status.clusterName`` set once a worker has room for it."""
    from admission.integrations.kinds.leaderworkerset import LEADERWORKERSET
    from admission.kube.multikueue import components
    from tests.e2e.test_e2e_multikueue_dispatchers import set_quota
    from tests.unit.integrations.test_integration_leaderworkerset import (
        LWS,
        _play_controller,
        lws,
    )

    monkeypatch.setattr(components, "WAIT", 3600.0)

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER,
                               crds=("leaderworkersets",)) as m:  # fmt: skip
            for w in m.workers:
                await set_quota(m, w, 0)  # no worker admits the first group yet
            await eventually(
                lambda: is_true(m.manager.get("admissionchecks", "sample-multikueue"), "Active"),
                what="the check active",
            )
            obj = await m.manager.user.create(LWS, lws("infer", 2, 2, meta("infer")), namespace=NS)
            first, second = (LEADERWORKERSET.group_name("infer", g) for g in (0, 1))

            def message(name: str) -> str:
                return check_message(m.manager.get("workloads", name, NS))

            await _play_controller(m.manager, obj, 1)
            await eventually(
                lambda: "waiting for the Workloads of all 2 groups" in message(second),
                what="the second group waiting for the first's Workload", timeout=60,
            )  # fmt: skip
            await _play_controller(m.manager, obj, 0)
            await eventually(
                lambda: "waiting for the first group" in message(second),
                what="the second group woken by the first's Workload", timeout=60,
            )  # fmt: skip
            # not dispatched: no worker named (under load it may have no status at all yet)
            first_status = (m.manager.get("workloads", first, NS) or {}).get("status") or {}
            assert not first_status.get("clusterName")
            for w in m.workers:
                await set_quota(m, w, 4)

            def admitted_both() -> list[Obj] | None:
                wls = [m.manager.get("workloads", n, NS) for n in (first, second)]
                return wls if all(is_true(w, "Admitted") for w in wls) else None  # type: ignore[return-value]

            wls = await eventually(admitted_both, what="the second group following the first",
                                   timeout=60)  # fmt: skip
            assert len({w["status"]["clusterName"] for w in wls}) == 1, wls

    asyncio.run(main())


def test_a_workers_copied_leaderworkerset_waits_for_the_managers_workload_copies(
    tmp_path: Path, backend: Any
) -> None:
    """On a worker, the pods of a set a manager copied there (label
    ``multikueue-origin``) never get a Workload of their own, as Kueue's reconcilers make
    none for such a set: they wait at the gate for the manager's copy of their group's
    Workload, then take it (an owner reference to the worker's set) and run on it. A set
    of the worker's own gets its Workload as usual."""
    from admission.integrations.kinds.leaderworkerset import LEADERWORKERSET
    from admission.kube.client import resources as k
    from tests.support.kube_harness import stack
    from tests.unit.integrations.test_integration_leaderworkerset import (
        LWS,
        _play_controller,
        lws,
    )

    copied_meta = meta("copied")
    copied_meta["labels"][ORIGIN] = "mgr"
    copied_meta["annotations"] = {ORIGIN_UID: "managers-uid"}
    copied_wl, own_wl = (LEADERWORKERSET.group_name(n, 0) for n in ("copied", "own"))

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=WORKER,
                         crds=("leaderworkersets",)) as s:  # fmt: skip
            copied = await s.user.create(LWS, lws("copied", 1, 2, copied_meta), namespace=NS)
            own = await s.user.create(LWS, lws("own", 1, 2, meta("own")), namespace=NS)
            await _play_controller(s, copied, 0)
            await _play_controller(s, own, 0)
            made = await eventually(lambda: s.get("workloads", own_wl, NS),
                                    what="the worker's own set's Workload")  # fmt: skip
            await asyncio.sleep(0.5)  # the copied set's group was reconciled meanwhile
            assert s.get("workloads", copied_wl, NS) is None
            assert all(_gated(p) for p in _pods(s, "copied"))
            # the manager's copy of the group's Workload (the same pods, so the same spec)
            body = {"apiVersion": made["apiVersion"], "kind": "Workload",
                    "metadata": {"name": copied_wl, "namespace": NS, "labels": {ORIGIN: "mgr"},
                                 "annotations": {"kueue.x-k8s.io/is-group-workload": "true"}},
                    "spec": made["spec"]}  # fmt: skip
            await s.user.create(k.WORKLOADS, body, namespace=NS)
            await eventually(
                lambda: len(ps := _pods(s, "copied")) == 2 and not any(_gated(p) for p in ps),
                what="the copied set's pods run on the manager's Workload copy",
            )
            refs = s.get("workloads", copied_wl, NS)["metadata"].get("ownerReferences") or []
            assert [(r["kind"], r["name"], r["uid"]) for r in refs] == [
                ("LeaderWorkerSet", "copied", copied["metadata"]["uid"])]  # fmt: skip

    asyncio.run(main())


def test_a_workers_own_statefulset_of_the_same_name_is_never_deleted(
    tmp_path: Path, backend: Any, real_workers: Any
) -> None:
    """Removing the remote objects deletes only the copies this manager made (label
    ``multikueue-origin``; Kueue's ``DeleteRemoteObjectIfOwned``): a worker's own
    StatefulSet that happens to have the manager's set's name stays."""
    from admission.integrations.kinds.statefulset import STATEFULSET
    from tests.unit.integrations.test_integration_statefulset import (
        STS,
        _play_controller,
        statefulset,
    )

    async def main() -> None:
        async with multi_stack(tmp_path, backend=backend, real_workers=real_workers,
                               manager_objects=MANAGER, worker_objects=WORKER) as m:  # fmt: skip
            for s in m.workers.values():  # the workers' own, not queued
                await s.user.create(STS, statefulset("web", [("main", 1)], meta("web", queue=None)),
                                    namespace=NS)  # fmt: skip
            await eventually(
                lambda: is_true(m.manager.get("admissionchecks", "sample-multikueue"), "Active"),
                what="the check active",
            )
            web = await m.manager.user.create(
                STS, statefulset("web", [("main", 2)], meta("web")), namespace=NS
            )
            await _play_controller(m.manager, web)
            wl_name = STATEFULSET.workload_name(web)
            await eventually(
                lambda: is_true(m.manager.get("workloads", wl_name, NS), "Admitted"),
                what="the StatefulSet's Workload admitted on the manager",
                timeout=60,
            )
            await m.manager.user.delete(STS, "web", namespace=NS)
            await eventually(lambda: not m.copies(NS, wl_name), what="the Workload copies removed",
                             timeout=60)  # fmt: skip
            await asyncio.sleep(0.5)  # the removal is done: the workers' sets are still there
            theirs = m.jobs(NS, "web", "statefulsets")
            assert set(theirs) == set(WORKERS)
            assert all(ORIGIN not in (s["metadata"].get("labels") or {}) for s in theirs.values())

    asyncio.run(main())
