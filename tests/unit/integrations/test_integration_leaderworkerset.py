"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): each group (a leader and its workers) a
serving gang of pods, admitted only when the whole group fits.

The tests play the LWS controller on both backends (they create the pods of each group,
labelled with the set's name and group index). The CRD served to both backends is
``tests/support/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml``.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import jsonpatch

from admission.integrations.kinds.leaderworkerset import (
    GROUP_INDEX_LABEL,
    LEADERWORKERSET,
    NAME_LABEL,
)
from admission.kube.client import resources as k
from admission.kube.client.resources import resource_of
from tests.support.integration_kit import (
    NS,
    KindCase,
    Q,
    lifecycle_objects,
    meta,
    pod_template,
    review,
)
from tests.support.kube_harness import admitted, eventually, stack

LWS = resource_of(LEADERWORKERSET)
GROUP = "kueue.x-k8s.io/pod-group-name"


def lws(name: str, replicas: int, size: int, metadata: dict[str, Any]) -> dict:
    leader = pod_template()
    leader["spec"]["containers"][0]["name"] = "leader"
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": metadata,
        "spec": {"replicas": replicas,
                 "leaderWorkerTemplate": {"size": size, "leaderTemplate": leader,
                                          "workerTemplate": pod_template()}},
    }  # fmt: skip


def test_the_webhook_marks_both_templates_and_the_pod_webhook_names_each_group() -> None:
    obj = lws("infer", 2, 4, meta("infer", priority_class="low"))
    allowed, patch, _ = review(LEADERWORKERSET, obj, mutating=True)
    assert allowed
    lwt = jsonpatch.apply_patch(obj, patch)["spec"]["leaderWorkerTemplate"]
    for t in ("leaderTemplate", "workerTemplate"):
        m = lwt[t]["metadata"]
        assert m["labels"][Q] == "lq" and m["labels"]["kueue.x-k8s.io/priority-class"] == "low"
        assert m["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "4"
        assert m["annotations"]["kueue.x-k8s.io/pod-group-serving"] == "true"
    # the podSet each template's pods are in, named as Kueue names them
    assert lwt["leaderTemplate"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "leader"
    assert lwt["workerTemplate"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
    solo = lws("solo", 1, 3, meta("solo"))
    del solo["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    solo_lwt = jsonpatch.apply_patch(solo, review(LEADERWORKERSET, solo, mutating=True)[1])[
        "spec"]["leaderWorkerTemplate"]  # fmt: skip
    assert solo_lwt["workerTemplate"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
    assert [(r.name, r.count) for r in LEADERWORKERSET.roles(solo)] == [("main", 3)]
    pod = {"metadata": {"labels": {NAME_LABEL: "infer", GROUP_INDEX_LABEL: "1"}}}
    name = LEADERWORKERSET.pod_group_of(pod)
    assert name is not None and name.startswith("leaderworkerset-infer-1-")
    assert LEADERWORKERSET.pod_group_of({"metadata": {"labels": {NAME_LABEL: "infer"}}}) is None
    assert [(r.name, r.count) for r in LEADERWORKERSET.roles(obj)] == [("leader", 1), ("worker", 3)]


def test_the_group_size_of_a_queued_set_is_immutable() -> None:
    old = lws("infer", 2, 4, meta("infer"))
    new = copy.deepcopy(old)
    new["spec"]["leaderWorkerTemplate"]["size"] = 8
    allowed, _, message = review(LEADERWORKERSET, new, mutating=False, operation="UPDATE", old=old)
    assert not allowed and "spec.leaderWorkerTemplate.size: Invalid value: 8" in message
    more = copy.deepcopy(old)
    more["spec"]["replicas"] = 3  # more groups: each its own Workload
    assert review(LEADERWORKERSET, more, mutating=False, operation="UPDATE", old=old)[0]


def test_a_queued_sets_templates_keep_their_pod_shape_and_follow_its_queue() -> None:
    old = lws("infer", 2, 4, meta("infer"))
    old = jsonpatch.apply_patch(old, review(LEADERWORKERSET, old, mutating=True)[1])
    new = copy.deepcopy(old)
    new["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"][
        "requests"]["cpu"] = "4"  # fmt: skip
    allowed, _, message = review(LEADERWORKERSET, new, mutating=False, operation="UPDATE", old=old)
    assert not allowed and (
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources.requests: "
        'Invalid value: {"cpu":"4"}: field is immutable') in message  # fmt: skip
    solo = copy.deepcopy(old)
    del solo["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    allowed, _, message = review(LEADERWORKERSET, solo, mutating=False, operation="UPDATE", old=old)
    assert (
        not allowed and "spec.leaderWorkerTemplate.leaderTemplate: Invalid value: null" in message
    )
    moved = copy.deepcopy(old)
    moved["metadata"]["labels"][Q] = "other"
    assert review(LEADERWORKERSET, moved, mutating=False, operation="UPDATE", old=old)[0]
    allowed, patch, _ = review(LEADERWORKERSET, moved, mutating=True, operation="UPDATE", old=old)
    lwt = jsonpatch.apply_patch(moved, patch)["spec"]["leaderWorkerTemplate"]
    assert allowed and {lwt[t]["metadata"]["labels"][Q] for t in ("leaderTemplate",
                                                                  "workerTemplate")} == {"other"}  # fmt: skip
    ready = copy.deepcopy(old)
    ready["status"] = {"readyReplicas": 1}
    moved["status"] = ready["status"]
    allowed, _, message = review(LEADERWORKERSET, moved, mutating=False, operation="UPDATE",
                                 old=ready)  # fmt: skip
    assert not allowed and "field is immutable" in message


async def _play_controller(s: Any, obj: dict, group: int) -> list[dict]:
    """The LWS controller's pods of one group: the leader, then its workers (as created:
    what the mutating webhook made of them)."""
    name, lwt = obj["metadata"]["name"], obj["spec"]["leaderWorkerTemplate"]
    created = []
    for i in range(lwt["size"]):
        tmpl = copy.deepcopy(lwt["leaderTemplate" if i == 0 else "workerTemplate"])
        pod_name = f"{name}-{group}" if i == 0 else f"{name}-{group}-{i}"
        labels = {**tmpl["metadata"]["labels"], NAME_LABEL: name, GROUP_INDEX_LABEL: str(group)}
        created.append(await s.user.create(k.PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": NS, "labels": labels,
                         "annotations": dict(tmpl["metadata"].get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                              "kind": "LeaderWorkerSet", "name": name,
                                              "uid": obj["metadata"]["uid"], "controller": True}]},
            "spec": tmpl["spec"],
        }, namespace=NS))  # fmt: skip
    return created


def _group_pods(s: Any, group: int) -> list[dict]:
    return [p for p in s.server.list_objects("pods", NS)
            if (p["metadata"].get("labels") or {}).get(GROUP_INDEX_LABEL) == str(group)]  # fmt: skip


def test_each_group_is_admitted_only_when_its_leader_and_workers_fit(
    tmp_path: Path, backend: Any
) -> None:
    objects = lifecycle_objects(KindCase(LEADERWORKERSET, lws, [("main", 3)], None))  # fa: 3 cpu

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects, crds=("leaderworkersets",)
        ) as s:
            obj = await s.user.create(LWS, lws("infer", 2, 2, meta("infer")), namespace=NS)
            # every pod is gated as it is created (the first group may be admitted, and
            # its gates lifted, before the second group's pods exist)
            pods = [p for g in (0, 1) for p in await _play_controller(s, obj, g)]
            groups = {p["metadata"]["labels"][GROUP] for p in pods}
            assert len(groups) == 2 and all(p["spec"].get("schedulingGates") for p in pods)
            # 3 cpu: one group of 2 fits, the second (2 more) waits whole
            await eventually(
                lambda: sum(admitted(s.get("workloads", g, NS)) for g in groups) == 1,
                what="one group admitted",
            )
            (first,) = [g for g in groups if admitted(s.get("workloads", g, NS))]
            (second,) = groups - {first}
            wl = s.get("workloads", first, NS)
            # Kueue's podSet names, though leader and worker are alike here
            assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [
                ("leader", 1),
                ("worker", 1),
            ]
            await eventually(
                lambda: all(
                    not p["spec"].get("schedulingGates")
                    for p in s.server.list_objects("pods", NS)
                    if p["metadata"]["labels"][GROUP] == first
                ),
                what="the admitted group's leader and worker ungated",
            )
            await asyncio.sleep(0.5)
            assert all(p["spec"].get("schedulingGates") for p in s.server.list_objects("pods", NS)
                       if p["metadata"]["labels"][GROUP] == second)  # fmt: skip
            cq = s.get("clusterqueues", "cq")
            assert cq is not None
            rg = copy.deepcopy(cq["spec"]["resourceGroups"])
            rg[0]["flavors"][0]["resources"][0]["nominalQuota"] = "4"
            await s.user.patch(k.CLUSTER_QUEUES, "cq", {"spec": {"resourceGroups": rg}})
            await eventually(lambda: admitted(s.get("workloads", second, NS)),
                             what="the second group admitted once it fits whole")  # fmt: skip

    asyncio.run(main())


def test_a_groups_workload_is_kept_while_the_set_runs_the_group_and_goes_when_scaled_away(
    tmp_path: Path, backend: Any
) -> None:
    """Each group's Workload is owned by the set: a group whose pods are all deleted (a
    restart) keeps its Workload, and its quota, for the pods that replace it; a group
    removed by scaling down goes with its last pod."""
    objects = lifecycle_objects(KindCase(LEADERWORKERSET, lws, [("main", 4)], None))

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects, crds=("leaderworkersets",)
        ) as s:
            obj = await s.user.create(LWS, lws("infer", 2, 2, meta("infer")), namespace=NS)
            for g in (0, 1):
                await _play_controller(s, obj, g)
            names = {g: _group_pods(s, g)[0]["metadata"]["labels"][GROUP] for g in (0, 1)}
            for g, name in names.items():
                wl = await eventually(lambda n=name: admitted(w := s.get("workloads", n, NS)) and w,
                                      what=f"group {g} admitted")  # fmt: skip
                refs = wl["metadata"]["ownerReferences"]
                assert [(r["kind"], r["uid"], r.get("controller")) for r in refs] == [
                    ("LeaderWorkerSet", obj["metadata"]["uid"], None)
                ]
            groups = s.service.controller.podgroups

            async def delete_pods(g: int) -> None:
                for p in _group_pods(s, g):
                    await s.user.delete(k.PODS, p["metadata"]["name"], namespace=NS)
                await eventually(lambda: not _group_pods(s, g) and not groups.pods(f"{NS}/{names[g]}"),
                                 what=f"group {g}'s pods gone")  # fmt: skip
                await groups.reconcile(f"{NS}/{names[g]}")

            await delete_pods(0)
            kept = s.get("workloads", names[0], NS)
            assert kept is not None and admitted(kept), "a restarted group keeps its Workload"

            await s.user.patch(LWS, "infer", {"spec": {"replicas": 1}}, namespace=NS)
            await delete_pods(1)
            await eventually(lambda: s.get("workloads", names[1], NS) is None,
                             what="the scaled-away group's Workload deleted")  # fmt: skip

            await _play_controller(s, obj, 0)  # the replacements start on the kept admission
            await eventually(lambda: all(not p["spec"].get("schedulingGates")
                                         for p in _group_pods(s, 0)) and len(_group_pods(s, 0)) == 2,
                             what="group 0's new pods ungated")  # fmt: skip
            assert s.get("workloads", names[0], NS)["metadata"]["uid"] == kept["metadata"]["uid"]

    asyncio.run(main())


# ---------------------------------------------------------------- keeps_group


def _looped(integ: Any, owner: dict, group: str) -> bool:
    """The answer by hashing every group name of the set (what keeps_group reads off
    the name instead)."""
    n = owner["spec"]["replicas"]
    return any(group == integ.group_name(owner["metadata"]["name"], i) for i in range(n))


def test_keeps_group_reads_the_index_off_the_name_and_agrees_with_every_name() -> None:
    integ = LEADERWORKERSET
    for name in ("web", "a", "x" * 63, "w" * 229, "y" * 232, "z" * 231):
        for replicas in (1, 3, 12):
            owner = {"metadata": {"name": name}, "spec": {"replicas": replicas}}
            groups = [integ.group_name(name, i) for i in range(replicas + 3)]
            groups += [integ.group_name("other", 0), integ.group_name(name, "01"), "", "x"]
            groups += [g[:-1] + "0" for g in groups if g]  # the right index, a wrong hash
            for g in groups:
                assert integ.keeps_group(owner, g) == _looped(integ, owner, g), (name, g)


def test_keeps_group_of_a_huge_set_hashes_one_name(monkeypatch: Any) -> None:
    integ = LEADERWORKERSET
    owner = {"metadata": {"name": "web"}, "spec": {"replicas": 1_000_000}}
    kept, beyond = integ.group_name("web", 999_999), integ.group_name("web", 1_000_000)
    made: list[object] = []
    plain = type(integ).group_name

    def counted(self: Any, name: str, index: int | str) -> str:
        made.append(index)
        return plain(self, name, index)

    monkeypatch.setattr(type(integ), "group_name", counted)
    assert integ.keeps_group(owner, kept)
    assert not integ.keeps_group(owner, beyond)
    assert not integ.keeps_group(owner, "leaderworkerset-web-zz-12345")
    assert len(made) == 1  # the one index within replicas, checked against its name
