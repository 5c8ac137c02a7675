"""MultiKueue's rules for StatefulSet and LeaderWorkerSet (Kueue's
statefulset/statefulset_multikueue_adapter.go, leaderworkerset/leaderworkerset_multikueue_adapter.go
and the multi-workload rules of admissionchecks/multikueue/workload.go): which adapter a
serving group's Workload gets, what the worker's copy is, that nothing comes back and
nothing finishes, which Workloads a copy's events name, and how the groups of one
LeaderWorkerSet share one worker."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from admission.integrations.kinds.leaderworkerset import LEADERWORKERSET
from admission.integrations.kinds.statefulset import STATEFULSET
from admission.kube.multikueue.components import RETRY, WAIT, ComponentNomination
from admission.kube.multikueue.dispatch import Group
from admission.kube.multikueue.pods import POD_GROUPS, adapter_for, owner_kind, owner_name
from admission.kube.multikueue.serving import (
    LEADERWORKERSET_ADAPTER,
    STATEFULSET_ADAPTER,
    copied_set,
    serving_owner,
    workload_keys,
)
from tests.support.integration_kit import meta
from tests.unit.integrations.test_integration_leaderworkerset import lws
from tests.unit.integrations.test_integration_statefulset import statefulset

PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
ORIGIN = "kueue.x-k8s.io/multikueue-origin"
ORIGIN_UID = "kueue.x-k8s.io/multikueue-origin-uid"
GROUP_ANNOTATION = {"kueue.x-k8s.io/is-group-workload": "true"}
STS_GVK = "apps/v1, Kind=StatefulSet"
LWS_GVK = "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet"


def sts(replicas: int = 2) -> dict:
    obj = statefulset("web", [("main", replicas)], meta("web", uid="sts-uid"))
    obj["metadata"].update(annotations={"team": "a"}, resourceVersion="9")
    obj["status"] = {"replicas": replicas, "readyReplicas": 0}
    return obj


def leader_worker_set(replicas: Any = 2) -> dict:
    obj = lws("infer", 2, 2, meta("infer", uid="lws-uid"))
    obj["spec"]["replicas"] = replicas
    return obj


def group_workload(name: str, owner: dict, *, annotated: bool = True, **status: Any) -> dict:
    """A serving group's Workload as the pod-group reconciler makes it (owned, not
    controlled, by the object); ``annotated=False``: as the informer keeps it."""
    m, kind, api = owner["metadata"], owner["kind"], owner["apiVersion"]
    annotations = dict(GROUP_ANNOTATION)
    if annotated:
        annotations.update({"kueue.x-k8s.io/job-owner-gvk": f"{api}, Kind={kind}",
                            "kueue.x-k8s.io/job-owner-name": m["name"]})  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": m["namespace"], "annotations": annotations,
                     "ownerReferences": [{"apiVersion": api, "kind": kind, "name": m["name"],
                                          "uid": m["uid"]}]},
        "status": status,
    }  # fmt: skip


# -- which adapter ------------------------------------------------------------------------


@pytest.mark.parametrize("annotated", [True, False])
def test_a_serving_groups_workload_gets_its_owners_adapter_not_the_pods(annotated: bool) -> None:
    """Kueue's ``wlReconciler.adapter``: the owner annotations first; the informer's
    slim Workload has only the owner reference, which says the same."""
    wl = group_workload("statefulset-web-x", sts(), annotated=annotated)
    assert adapter_for(wl) is STATEFULSET_ADAPTER
    assert (owner_kind(wl), owner_name(wl)) == ("StatefulSet", "web")
    wl = group_workload("leaderworkerset-infer-0-x", leader_worker_set(), annotated=annotated)
    assert adapter_for(wl) is LEADERWORKERSET_ADAPTER
    assert (owner_kind(wl), owner_name(wl)) == ("LeaderWorkerSet", "infer")
    plain = {"metadata": {"name": "g", "annotations": dict(GROUP_ANNOTATION)}}
    assert adapter_for(plain) is POD_GROUPS and owner_name(plain) == ""


def test_the_owner_annotations_a_group_gets_name_the_adapter_multikueue_finds() -> None:
    """Kueue's ``GroupVersionKind.String()`` is spelled once (``Resource.gvk``): the
    annotations the pod-group reconciler writes on a group's Workload are the ones
    MultiKueue reads its owner's kind from."""
    assert (STATEFULSET.resource.gvk, LEADERWORKERSET.resource.gvk) == (STS_GVK, LWS_GVK)
    for integ, adapter, owner in ((STATEFULSET, STATEFULSET_ADAPTER, sts()),
                                  (LEADERWORKERSET, LEADERWORKERSET_ADAPTER, leader_worker_set())):  # fmt: skip
        _, annotations = integ.owner_metadata(owner)
        assert annotations["kueue.x-k8s.io/job-owner-gvk"] == integ.resource.gvk
        wl = {"metadata": {"annotations": annotations}}
        assert serving_owner(wl) == (adapter, owner["metadata"]["name"])


def test_a_serving_kind_is_always_multikueues() -> None:
    """No managedBy: Kueue's ``IsJobManagedByKueue`` is true for both kinds."""
    assert STATEFULSET_ADAPTER.unmanaged_reason(sts()) == ""
    assert LEADERWORKERSET_ADAPTER.unmanaged_reason(leader_worker_set()) == ""


# -- the copy, the status, finished ---------------------------------------------------------


def test_a_statefulsets_copy_is_the_set_labelled_with_its_workload_and_the_managers_uid() -> None:
    local = sts()
    before = copy.deepcopy(local)
    remote = STATEFULSET_ADAPTER.remote_copy(local, "statefulset-web-x", "mgr")
    assert local == before
    assert remote == {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": local["metadata"]["namespace"],
                     "labels": {**local["metadata"]["labels"], PREBUILT: "statefulset-web-x",
                                ORIGIN: "mgr"},
                     "annotations": {"team": "a", ORIGIN_UID: "sts-uid"}},
        "spec": local["spec"],
    }  # fmt: skip
    assert remote["spec"] is not local["spec"]


def test_a_leaderworkersets_copy_names_no_workload() -> None:
    """One copy for all its groups' Workloads: no prebuilt-workload-name."""
    local = leader_worker_set()
    remote = LEADERWORKERSET_ADAPTER.remote_copy(local, "leaderworkerset-infer-1-x", "mgr")
    assert remote["metadata"]["labels"] == {**local["metadata"]["labels"], ORIGIN: "mgr"}
    assert remote["metadata"]["annotations"] == {ORIGIN_UID: "lws-uid"}
    assert remote["spec"] == local["spec"] and remote["kind"] == "LeaderWorkerSet"


@pytest.mark.parametrize("adapter", [STATEFULSET_ADAPTER, LEADERWORKERSET_ADAPTER])
def test_nothing_comes_back_and_nothing_finishes(adapter: Any) -> None:
    """The manager's own controller writes the status; serving kinds never finish."""
    local = sts() if adapter is STATEFULSET_ADAPTER else leader_worker_set()
    remote = copy.deepcopy(local)
    remote["status"] = {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2}
    assert adapter.status_to_copy(local, remote) is None
    assert not adapter.finished(remote)


# -- which Workloads a worker's copy names --------------------------------------------------


def test_a_copys_events_name_the_managers_workloads() -> None:
    """Kueue's ``WorkloadKeysFor``: a StatefulSet's label; a LeaderWorkerSet's copy names
    the manager's set, whose groups the manager knows."""
    remote = STATEFULSET_ADAPTER.remote_copy(sts(), "statefulset-web-x", "mgr")
    assert workload_keys("StatefulSet", remote) == ["team-a/statefulset-web-x"]
    assert copied_set("StatefulSet", remote) is None
    remote = LEADERWORKERSET_ADAPTER.remote_copy(leader_worker_set(3), "w", "mgr")
    assert (workload_keys("LeaderWorkerSet", remote), copied_set("LeaderWorkerSet", remote)) == (
        [], "team-a/infer")  # fmt: skip
    assert copied_set("LeaderWorkerSet", leader_worker_set()) is None  # not a manager's copy
    job = {"metadata": {"namespace": "ns", "labels": {PREBUILT: "wl"}}}
    assert workload_keys("Job", job) == ["ns/wl"]


@pytest.mark.parametrize("replicas", [-1, "2", 1_000_001])
def test_a_leaderworkerset_with_bad_replicas_is_named_with_its_field(replicas: Any) -> None:
    obj = leader_worker_set(replicas)
    with pytest.raises(ValueError, match=r"leaderworkerset team-a/infer: spec.replicas: must be"):
        LEADERWORKERSET_ADAPTER.workload_names(obj)
    assert copied_set("LeaderWorkerSet", {**obj, "metadata": {
        **obj["metadata"], "labels": {ORIGIN: "mgr"}}}) == "team-a/infer"  # fmt: skip


# -- the groups of one LeaderWorkerSet share one worker ------------------------------------


class Recorder:
    def __init__(self, owner: dict | None, workloads: dict[str, dict]) -> None:
        self.owner = owner
        self.workloads = workloads
        self.inner_calls: list[str] = []
        self.patches: list[dict] = []

    async def inner(self, group: Group) -> Any:
        self.inner_calls.append(group.name)
        return ["worker1", "worker2"], None, ()

    async def patch(self, group: Group, status: dict) -> dict:
        self.patches.append(status)
        return {"status": status}

    def nomination(self) -> ComponentNomination:
        return ComponentNomination(self.inner, workload=self.workloads.get, patch=self.patch)


NAMES = [LEADERWORKERSET.group_name("infer", i) for i in range(2)]


def _group(wl: dict, owner: dict | None) -> Group:
    """The group as the manager's reconcile hands it over: with the set it read."""
    return Group(key=f"team-a/{wl['metadata']['name']}", local=wl, check="mk",
                 state={"state": "Pending"}, workers=["worker1", "worker2"],
                 remotes={"worker1": object(), "worker2": object()},  # type: ignore[dict-item]
                 job=owner)  # fmt: skip


def _run(rec: Recorder, wl: dict) -> Any:
    return asyncio.run(rec.nomination()(_group(wl, rec.owner)))


def test_no_group_is_nominated_before_every_groups_workload_exists() -> None:
    owner = leader_worker_set()
    first = group_workload(NAMES[0], owner, annotated=False)
    rec = Recorder(owner, {f"team-a/{NAMES[0]}": first})
    names, after, reasons = _run(rec, first)
    assert names is None and after == WAIT and not rec.inner_calls
    assert reasons == ("waiting for the Workloads of all 2 groups of LeaderWorkerSet "
                       "team-a/infer: 1 exist",)  # fmt: skip


def test_only_the_first_group_goes_to_the_dispatcher_and_the_others_follow_its_worker() -> None:
    owner = leader_worker_set()
    wls = {f"team-a/{n}": group_workload(n, owner) for n in NAMES}
    rec = Recorder(owner, wls)
    second = wls[f"team-a/{NAMES[1]}"]
    names, after, reasons = _run(rec, second)
    assert (names, after) == (None, WAIT) and not rec.inner_calls
    assert reasons == ("waiting for the first group of LeaderWorkerSet team-a/infer to be "
                       "admitted on a worker",)  # fmt: skip
    assert _run(rec, wls[f"team-a/{NAMES[0]}"])[0] == ["worker1", "worker2"]
    assert rec.inner_calls == [NAMES[0]]
    wls[f"team-a/{NAMES[0]}"]["status"] = {"clusterName": "worker2"}
    assert _run(rec, second) == (["worker2"], None, ())
    assert rec.patches == [{"nominatedClusterNames": ["worker2"]}]
    second["status"] = {"nominatedClusterNames": ["worker2"]}
    assert _run(rec, second) == (["worker2"], None, ())
    assert len(rec.patches) == 1  # already nominated there: nothing written
    assert rec.inner_calls == [NAMES[0]]


def test_a_waiting_group_is_woken_by_its_siblings_events_and_kept_only_while_it_waits() -> None:
    """Kueue's ``enqueueComponentWorkloads``: a group that waits is reconciled again when
    another group of its set appears or its ``status.clusterName`` moves; nothing is kept
    once it is nominated or its Workload is gone."""
    owner = leader_worker_set()
    first_key, second_key = (f"team-a/{n}" for n in NAMES)
    wls = {f"team-a/{n}": group_workload(n, owner) for n in NAMES}
    first, second = wls[first_key], wls[second_key]
    nom = Recorder(owner, wls).nomination()
    assert nom.waiting_siblings(first_key, first, None) == set()  # nobody waits yet
    assert asyncio.run(nom(_group(second, owner)))[:2] == (None, WAIT)
    moved = copy.deepcopy(first)
    moved["status"] = {"clusterName": "worker2"}
    assert nom.waiting_siblings(first_key, first, None) == {second_key}  # created
    assert nom.waiting_siblings(first_key, moved, first) == {second_key}  # admitted there
    assert nom.waiting_siblings(first_key, moved, copy.deepcopy(moved)) == set()  # no news
    assert nom.waiting_siblings(second_key, second, None) == set()  # its own: not a sibling
    stranger = leader_worker_set()
    stranger["metadata"]["uid"] = "other-uid"
    assert nom.waiting_siblings("team-a/x", group_workload(NAMES[0], stranger), None) == set()
    wls[first_key] = moved
    assert asyncio.run(nom(_group(second, owner)))[:2] == (["worker2"], None)
    assert nom.waiting_siblings(first_key, moved, first) == set()  # nominated: forgotten
    del wls[first_key]
    assert asyncio.run(nom(_group(second, owner)))[0] is None  # waits again, until it is gone
    nom.forget(second_key)
    assert nom.waiting_siblings(first_key, first, None) == set()
    assert (nom._waiting, nom._owner_of) == ({}, {})


def test_a_group_waits_while_the_worker_of_the_others_is_not_connected() -> None:
    owner = leader_worker_set()
    wls = {f"team-a/{n}": group_workload(n, owner) for n in NAMES}
    wls[f"team-a/{NAMES[0]}"]["status"] = {"clusterName": "worker3"}
    rec = Recorder(owner, wls)
    names, after, reasons = _run(rec, wls[f"team-a/{NAMES[1]}"])
    assert (names, after, rec.patches) == (None, WAIT, [])
    assert reasons == ('the worker "worker3" that runs the other groups of LeaderWorkerSet '
                       "team-a/infer is not connected",)  # fmt: skip


def test_a_workload_of_another_set_of_the_same_name_is_not_a_group() -> None:
    """Groups are the Workloads owned by the set (its UID), as Kueue lists them."""
    owner = leader_worker_set()
    older = leader_worker_set()
    older["metadata"]["uid"] = "old-uid"
    wls = {f"team-a/{NAMES[0]}": group_workload(NAMES[0], owner),
           f"team-a/{NAMES[1]}": group_workload(NAMES[1], older)}  # fmt: skip
    names, _, reasons = _run(Recorder(owner, wls), wls[f"team-a/{NAMES[0]}"])
    assert names is None and reasons[0].endswith("1 exist")


def test_bad_replicas_are_named_nothing_is_nominated_and_it_is_read_again_on_backoff() -> None:
    owner = leader_worker_set(-1)
    wl = group_workload(NAMES[0], owner)
    rec = Recorder(owner, {})
    nom = rec.nomination()
    names, after, reasons = asyncio.run(nom(_group(wl, owner)))
    assert (names, after, rec.inner_calls, rec.patches) == (None, RETRY, [], [])
    assert reasons == ("leaderworkerset team-a/infer: spec.replicas: must be an integer "
                       "between 0 and 2147483647, got -1",)  # fmt: skip
    assert asyncio.run(nom(_group(wl, owner)))[1] == 2 * RETRY  # again: the backoff grows
    nom.forget(f"team-a/{NAMES[0]}")  # its Workload gone: nothing is kept
    assert (len(nom.retry), nom._waiting, nom._owner_of) == (0, {}, {})


def test_a_statefulset_and_a_set_that_is_gone_take_their_own_ways() -> None:
    """A StatefulSet's one Workload goes to the dispatcher; a group whose set is gone
    (or was made again under the same name) waits."""
    rec = Recorder(None, {})
    sts_wl = group_workload(STATEFULSET.workload_name(sts()), sts())
    assert _run(rec, sts_wl)[0] == ["worker1", "worker2"]
    names, after, reasons = _run(rec, group_workload(NAMES[0], leader_worker_set()))
    assert (names, after, reasons) == (
        None,
        WAIT,
        ("waiting for its LeaderWorkerSet team-a/infer",),
    )


def test_a_worker_takes_a_statefulset_copy_naming_its_own_group_and_refuses_other_names() -> None:
    """Kueue's StatefulSet webhook does not refuse the copy's ``prebuilt-workload-name``;
    here a StatefulSet may carry one only as a manager's copy naming its own group."""
    from tests.support.integration_kit import review

    local = sts()
    copied = STATEFULSET_ADAPTER.remote_copy(local, STATEFULSET.workload_name(local), "mgr")
    assert review(STATEFULSET, copied, mutating=False)[0]
    elsewhere = copy.deepcopy(copied)
    elsewhere["metadata"]["labels"][PREBUILT] = "another-workload"
    allowed, _, message = review(STATEFULSET, elsewhere, mutating=False)
    assert not allowed and "prebuilt-workload-name" in message and "Is not supported" in message
    users = copy.deepcopy(copied)
    del users["metadata"]["labels"][ORIGIN]
    assert not review(STATEFULSET, users, mutating=False)[0]


def test_a_workers_copy_of_a_huge_set_wakes_the_managers_groups_without_a_name_per_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy's labels and ``spec.replicas`` are the worker's to write (a million
    replicas would be a million Workload names, each a hash): an event of a
    LeaderWorkerSet's copy wakes the groups of that set this manager dispatched, found
    by the set, and nothing else."""
    from types import SimpleNamespace

    from admission.integrations.kinds.leaderworkerset import LeaderWorkerSetIntegration
    from admission.kube.multikueue.manager import MultiKueue

    owner = leader_worker_set()
    ours = {f"team-a/{n}": group_workload(n, owner, annotated=False) for n in NAMES}
    other = leader_worker_set()
    other["metadata"].update(name="other", uid="other-uid")
    theirs = group_workload(LEADERWORKERSET.group_name("other", 0), other)
    mk = MultiKueue.__new__(MultiKueue)
    mk._known, mk._groups, mk._set_of, mk._dirty = set(), {}, {}, {}
    for key, wl in [*ours.items(), ("team-a/other-0", theirs)]:
        mk._know(key, wl)
    mk.settings = SimpleNamespace(origin="mgr")  # type: ignore[assignment]
    mk.probe_interval, mk.clock = 1.0, lambda: 0.0
    names: list[str] = []
    group_name = LeaderWorkerSetIntegration.group_name

    def counted(self: Any, name: str, index: int | str) -> str:
        names.append(name)
        assert len(names) <= len(NAMES), "a Workload name made per replica"
        return group_name(self, name, index)

    monkeypatch.setattr(LeaderWorkerSetIntegration, "group_name", counted)
    copy_ = LEADERWORKERSET_ADAPTER.remote_copy(leader_worker_set(1_000_000), "w", "mgr")

    async def main() -> None:
        mk._wake = asyncio.Event()
        remote = mk._make_remote("worker1", SimpleNamespace())  # type: ignore[arg-type]
        informer = remote.job_informer(LEADERWORKERSET.resource)  # as the worker's copies come
        for task in remote._tasks:
            task.cancel()
        assert informer.handler is not None
        informer.handler("MODIFIED", "team-a/infer", copy_, None)
        assert set(mk._dirty) == set(ours)
        mk._dirty.clear()
        mk._unknow(f"team-a/{NAMES[0]}")  # no longer MultiKueue's: not woken
        informer.handler("MODIFIED", "team-a/infer", copy_, None)
        assert set(mk._dirty) == {f"team-a/{NAMES[1]}"}

    asyncio.run(main())
    assert names == []


# -- one read of the set per reconcile -----------------------------------------------------


class FakeWorker:
    """A connected worker as the dispatch sees it: its Workload copies and job copies
    (the informers', listed), and the creates sent to it."""

    def __init__(self) -> None:
        self.connected, self.lost_since = True, None
        self.copies: dict[str, dict] = {}
        self.sent: list[tuple[str, str]] = []  # the creates: (plural, name)
        self.client = self

    def workload(self, key: str) -> dict | None:
        return self.copies.get(key)

    def job(self, resource: Any, key: str) -> tuple[bool, dict | None]:
        return True, None

    async def create(self, resource: Any, body: dict, *, namespace: str) -> dict:
        self.sent.append((resource.plural, body["metadata"]["name"]))
        return body

    def created(self, key: str, copy_: dict) -> None:
        pass


NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}


def pending_groups(owner: dict) -> dict[str, dict]:
    """Both groups' Workloads, holding quota, their MultiKueue check Pending."""
    return {
        f"team-a/{n}": group_workload(n, owner, admission={"clusterQueue": "cq"},
                                      conditions=[{"type": "QuotaReserved", "status": "True"}],
                                      admissionChecks=[{"name": "mk", "state": "Pending"}],
                                      nominatedClusterNames=["worker1"])
        for n in NAMES
    }  # fmt: skip


def manager(
    client: Any, wls: dict[str, dict], clock: Callable[[], float]
) -> tuple[Any, FakeWorker]:
    """A MultiKueue manager on ``client`` (the API double) whose Workloads are ``wls``,
    with one connected worker (:class:`FakeWorker`), on the clock ``clock``."""
    from types import SimpleNamespace

    from admission.config.multikueue import MultiKueueSettings
    from admission.kube.multikueue.manager import MultiKueue
    from queues.api.labels import MULTIKUEUE_CONTROLLER

    async def full(key: str) -> dict | None:
        return wls.get(key)

    check = {"spec": {"controllerName": MULTIKUEUE_CONTROLLER,
                      "parameters": {"kind": "MultiKueueConfig", "name": "cfg"}}}  # fmt: skip
    ctx = SimpleNamespace(
        client=client, clock=clock, record_event=lambda *a: None,
        writer=SimpleNamespace(workload=wls.get, remember=lambda *a: None),
        informers={"admissionchecks": SimpleNamespace(store={"mk": check}),
                   "workloads": SimpleNamespace(full=full)},
    )  # fmt: skip
    mk = MultiKueue(ctx, MultiKueueSettings(), namespace="kueue-system",  # type: ignore[arg-type]
                    leading=lambda: True)  # fmt: skip
    mk.config_informer = SimpleNamespace(store={"cfg": {"spec": {"clusters": ["worker1"]}}})  # type: ignore[assignment]
    worker = FakeWorker()
    mk.clusters.remote = lambda _name: worker  # type: ignore[method-assign,assignment,return-value]
    mk.dispatch.admit_with = lambda *a: None
    return mk, worker


def test_a_reconcile_reads_a_set_the_manager_does_not_watch_once() -> None:
    """A LeaderWorkerSet is not watched on the manager: each reconcile of a group's
    Workload reads the set from the API once, and both the nomination (are all groups
    there?) and the copy to the worker use that read."""
    from admission.apiserver_double import running_apiserver
    from admission.kube.client.rest import KubeClient
    from tests.support.double_client import kube_client_config

    admitted = {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}

    async def main() -> None:
        async with running_apiserver(objects=[NS, leader_worker_set()]) as server:
            client = await KubeClient.connect(configuration=kube_client_config(server.url))
            try:
                owner = await client.get(LEADERWORKERSET.resource, "infer", namespace="team-a")
                mk, worker = manager(client, pending_groups(owner), lambda: 0.0)

                async def gets_of(key: str) -> int:
                    before = server.request_count(verb="get", resource="leaderworkersets")
                    await mk._reconcile(key)
                    return server.request_count(verb="get", resource="leaderworkersets") - before

                first, second = (f"team-a/{n}" for n in NAMES)
                # the first group: all groups are there, it is nominated, its copy made
                assert await gets_of(first) == 1
                assert worker.sent == [("workloads", NAMES[0])]
                # the second: it waits for the first to be admitted on a worker
                assert await gets_of(second) == 1
                assert "waiting for the first group" in mk.reasons[second][0]
                # the first admitted on the worker: the set is copied there
                worker.copies[first] = {"status": {"conditions": [admitted]}}
                assert await gets_of(first) == 1
                assert worker.sent[1:] == [("leaderworkersets", "infer")]
            finally:
                await client.close()

    asyncio.run(main())


# -- a set that cannot be read: looked at again on backoff -----------------------------------


def _looks_again_after(mk: Any, key: str, now: list[float]) -> float:
    """The seconds after which the manager looks at ``key`` again: it is not marked a
    moment before, and is marked then."""
    start, at = now[0], mk._later[key]
    now[0] = at - 0.01
    mk._mark_due()
    assert key not in mk._dirty, "looked at again before its backoff"
    now[0] = at
    mk._mark_due()
    assert key in mk._dirty, "not looked at again after its backoff"
    mk._dirty.clear()
    return at - start


def test_a_set_whose_get_fails_is_read_again_on_a_growing_capped_backoff_reset_once_read() -> None:
    """The GET of a group's set refused (RBAC, a failing API server): nothing is
    dispatched, the check's message names the set, and the Workload is looked at again
    after RETRY seconds, doubling up to WAIT (the sets are not watched: no event would
    bring it back). A reconcile that reads the set dispatches it and resets the backoff;
    nothing is kept once its Workload is gone."""
    from admission.apiserver_double import running_apiserver
    from admission.kube.client.rest import KubeClient
    from tests.support.double_client import kube_client_config

    async def main() -> None:
        async with running_apiserver(objects=[NS, leader_worker_set()]) as server:
            client = await KubeClient.connect(configuration=kube_client_config(server.url))
            try:
                owner = await client.get(LEADERWORKERSET.resource, "infer", namespace="team-a")
                wls = pending_groups(owner)
                now = [1000.0]
                mk, worker = manager(client, wls, lambda: now[0])
                first = f"team-a/{NAMES[0]}"
                server.fail_next(10, code=403, verb="get", resource="leaderworkersets")
                waits = []
                for _ in range(10):
                    await mk._reconcile(first)
                    waits.append(_looks_again_after(mk, first, now))
                assert waits[0] == RETRY  # a few seconds, then doubled, then capped
                assert all(b == min(2 * a, WAIT) for a, b in itertools.pairwise(waits))
                assert waits[-2:] == [WAIT, WAIT]
                assert worker.sent == []  # nothing dispatched
                (reason,) = mk.reasons[first]
                assert reason.startswith("cannot read its LeaderWorkerSet team-a/infer: ")
                assert "403" in reason
                await mk._reconcile(first)  # read: dispatched, and the backoff reset
                assert worker.sent == [("workloads", NAMES[0])]
                assert len(mk.retry) == 0
                server.fail_next(1, code=403, verb="get", resource="leaderworkersets")
                worker.copies.clear()
                await mk._reconcile(first)
                assert _looks_again_after(mk, first, now) == RETRY  # from the start again
                del wls[first]
                await mk._reconcile(first)  # its Workload is gone: nothing is kept
                assert len(mk.retry) == 0 and mk.components._waiting == {}
            finally:
                await client.close()

    asyncio.run(main())


def test_a_set_with_bad_replicas_is_read_again_on_backoff_until_it_is_edited() -> None:
    """A malformed ``spec.replicas`` names the set and its field, and is read again on
    the growing backoff, since its edit makes no event the manager hears; once edited,
    the group is dispatched and nothing of its backoff is kept."""
    from admission.apiserver_double import running_apiserver
    from admission.kube.client.rest import KubeClient
    from tests.support.double_client import kube_client_config

    async def main() -> None:
        async with running_apiserver(objects=[NS, leader_worker_set()]) as server:
            client = await KubeClient.connect(configuration=kube_client_config(server.url))
            user = await KubeClient.connect(  # edits the set, as its owner would
                configuration=kube_client_config(server.url), strict=False
            )
            try:
                owner = await client.get(LEADERWORKERSET.resource, "infer", namespace="team-a")
                now = [0.0]
                mk, worker = manager(client, pending_groups(owner), lambda: now[0])
                first = f"team-a/{NAMES[0]}"
                await user.patch(LEADERWORKERSET.resource, "infer",
                                   {"spec": {"replicas": 1_000_001}}, namespace="team-a")  # fmt: skip
                waits = []
                for _ in range(3):
                    await mk._reconcile(first)
                    waits.append(_looks_again_after(mk, first, now))
                assert waits == [RETRY, 2 * RETRY, 4 * RETRY]
                assert mk.reasons[first] == ("leaderworkerset team-a/infer: spec.replicas: "
                                             "must be <= 1000000, got 1000001",)  # fmt: skip
                assert worker.sent == []
                await user.patch(LEADERWORKERSET.resource, "infer",
                                   {"spec": {"replicas": 2}}, namespace="team-a")  # fmt: skip
                await mk._reconcile(first)
                assert worker.sent == [("workloads", NAMES[0])]
                assert len(mk.retry) == 0 and mk.components._waiting == {}
            finally:
                await client.close()
                await user.close()

    asyncio.run(main())
