"""StatefulSet (apps/v1): a serving pod group, admitted through its pods.

The webhook writes the pod group into the template; the pods are gated, grouped, admitted
whole, ungated with their flavor, deleted on preemption and recreated (gated) by the
StatefulSet controller — played by the tests on the double, the real one with a
kube-controller-manager. apps/v1 StatefulSets are built into both backends.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import jsonpatch

from admission.integrations.statefulset import STATEFULSET
from admission.kube import client as k
from admission.kube import objects as o
from admission.kube.client import ApiError, Resource
from tests.integration_kit import (
    NS,
    KindCase,
    Q,
    gang_scenario,
    lifecycle_objects,
    meta,
    pod_template,
    review,
)
from tests.kube_harness import admitted, eventually, is_true, stack

STS = Resource("apps", "v1", "statefulsets", "StatefulSet")
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"


def statefulset(name: str, roles: list[tuple[str, int]], metadata: dict[str, Any]) -> dict:
    ((_, replicas),) = roles
    tmpl = pod_template()
    tmpl["spec"]["restartPolicy"] = "Always"
    tmpl["metadata"] = {"labels": {"app": name}}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata,
        "spec": {"replicas": replicas, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": name}}, "serviceName": name,
                 "template": tmpl},
    }  # fmt: skip


CASE = KindCase(STATEFULSET, statefulset, [("main", 2)], None)


def test_the_webhook_writes_the_serving_pod_group_into_the_template() -> None:
    sts = statefulset("web", [("main", 3)], meta("web", priority_class=None))
    allowed, patch, _ = review(STATEFULSET, sts, mutating=True)
    assert allowed
    mutated = jsonpatch.apply_patch(sts, patch)
    labels = mutated["spec"]["template"]["metadata"]["labels"]
    annotations = mutated["spec"]["template"]["metadata"]["annotations"]
    assert labels["app"] == "web"  # the template's own labels kept
    assert labels[GROUP] == STATEFULSET.workload_name(sts) and labels[GROUP].startswith(
        "statefulset-web-"
    )
    assert labels[Q] == "lq" and labels["kueue.x-k8s.io/managed"] == "true"
    assert annotations[TOTAL] == "3"
    assert annotations["kueue.x-k8s.io/pod-group-serving"] == "true"
    assert annotations["kueue.x-k8s.io/pod-group-fast-admission"] == "true"
    assert annotations["kueue.x-k8s.io/pod-suspending-parent"] == "statefulset"
    # the name does not depend on the UID the object does not have yet
    assert (
        STATEFULSET.workload_name({**sts, "metadata": {**sts["metadata"], "uid": "x"}})
        == labels[GROUP]
    )
    assert review(STATEFULSET, statefulset("p", [("main", 1)], meta("p", queue=None)),
                  mutating=True)[1] == []  # fmt: skip


def test_a_queued_statefulsets_replicas_and_pod_group_are_immutable() -> None:
    sts = statefulset("web", [("main", 2)], meta("web"))
    old = jsonpatch.apply_patch(sts, review(STATEFULSET, sts, mutating=True)[1])
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 5
    allowed, _, message = review(STATEFULSET, new, mutating=False, operation="UPDATE", old=old)
    assert not allowed and "spec.replicas: Invalid value: 5: field is immutable" in message
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    assert review(STATEFULSET, new, mutating=False, operation="UPDATE", old=old)[0]


def test_plan_admits_a_statefulset_only_when_all_its_replicas_fit(tmp_path: Path) -> None:
    gang_scenario(CASE, tmp_path)


# ---------------------------------------------------------------------------- serve


def _controller_runs(s: Any) -> bool:
    return bool(getattr(getattr(s.server, "cluster", None), "controller_manager", None))


async def _play_controller(s: Any, sts: dict) -> None:
    """The StatefulSet controller: each missing ordinal's pod from the template."""
    if _controller_runs(s):
        return
    name = sts["metadata"]["name"]
    existing = {p["metadata"]["name"] for p in s.server.list_objects("pods", NS)}
    for i in range(sts["spec"]["replicas"]):
        pod_name = f"{name}-{i}"
        if pod_name in existing:
            continue
        tmpl = sts["spec"]["template"]
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": pod_name, "namespace": NS,
                "labels": {**tmpl["metadata"]["labels"], "apps.kubernetes.io/pod-index": str(i),
                           "statefulset.kubernetes.io/pod-name": pod_name},
                "annotations": dict(tmpl["metadata"].get("annotations") or {}),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                                     "uid": sts["metadata"]["uid"], "controller": True,
                                     "blockOwnerDeletion": True}],
            },
            "spec": copy.deepcopy(tmpl["spec"]),
        }  # fmt: skip
        await s.user.create(k.PODS, pod, namespace=NS)


def _pods_of(s: Any, name: str) -> list[dict]:
    return [
        p for p in s.server.list_objects("pods", NS)
        if p["metadata"]["name"].startswith(f"{name}-") and not p["metadata"].get("deletionTimestamp")
    ]  # fmt: skip


def _ungated_on(s: Any, name: str, n: int, flavor: str) -> bool:
    pods = _pods_of(s, name)
    return len(pods) == n and all(
        not p["spec"].get("schedulingGates") and p["spec"].get("nodeSelector") == {"pool": flavor}
        for p in pods
    )


def _all_gated(s: Any, name: str, n: int) -> bool:
    pods = _pods_of(s, name)
    return len(pods) == n and all(p["spec"].get("schedulingGates") for p in pods)


def test_a_statefulset_is_admitted_whole_preempted_recreated_gated_and_readmitted(
    tmp_path: Path, backend: Any
) -> None:
    objects = [
        o for o in lifecycle_objects(KindCase(STATEFULSET, statefulset, [("main", 2)], None))
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            web = await s.user.create(
                STS,
                statefulset("web", [("main", 2)], meta("web", priority_class="low")),
                namespace=NS,
            )
            group = web["spec"]["template"]["metadata"]["labels"][GROUP]
            await _play_controller(s, web)
            wl = await eventually(lambda: admitted(w := s.get("workloads", group, NS)) and w,
                                  what="the StatefulSet's group admitted")  # fmt: skip
            assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 2)]
            await eventually(
                lambda: _ungated_on(s, "web", 2, "fa"), what="web's pods ungated on fa"
            )

            api = await s.user.create(
                STS,
                statefulset("api", [("main", 2)], meta("api", priority_class="high")),
                namespace=NS,
            )
            api_group = api["spec"]["template"]["metadata"]["labels"][GROUP]
            await _play_controller(s, api)
            await eventually(lambda: is_true(s.get("workloads", group, NS), "Preempted"),
                             what="web preempted")  # fmt: skip
            if not _controller_runs(s):
                await eventually(
                    lambda: not [p for p in s.server.list_objects("pods", NS)
                                 if p["metadata"]["name"].startswith("web-")],
                    what="web's running pods deleted (their finalizer lifted)",
                )  # fmt: skip
            await _play_controller(s, web)  # the StatefulSet recreates them, gated
            await eventually(lambda: _all_gated(s, "web", 2), what="web's new pods gated")
            await eventually(
                lambda: _ungated_on(s, "api", 2, "fa"), what="api admitted and ungated"
            )
            low = s.get("workloads", group, NS)
            assert not admitted(low) and low is not None and not is_true(low, "Finished")

            await s.user.delete(STS, "api", namespace=NS)
            for p in _pods_of(s, "api"):
                try:
                    await s.user.delete(k.PODS, p["metadata"]["name"], namespace=NS)
                except ApiError as err:
                    assert err.not_found
            await eventually(
                lambda: (w := s.get("workloads", api_group, NS)) is None or is_true(w, "Finished"),
                what="api's Workload ends with its pods",
            )
            await eventually(lambda: _ungated_on(s, "web", 2, "fa"), what="web admitted again")

    asyncio.run(main())


def _owned_by(wl: dict | None, sts: dict) -> bool:
    refs = (wl or {}).get("metadata", {}).get("ownerReferences") or []
    return any(
        r.get("kind") == "StatefulSet" and r.get("uid") == sts["metadata"]["uid"]
        and not r.get("controller")
        for r in refs
    )  # fmt: skip


def test_a_preempted_statefulsets_workload_outlives_its_deleted_pods(tmp_path: Path) -> None:
    """Between the deletion of a preempted set's pods and their recreation, its Workload
    is kept (owned by the StatefulSet): a reconcile of the group in exactly that state
    (no pods, no quota) is run, and the Workload is still there afterwards. On the
    double only: a real StatefulSet controller recreates the pods at once."""
    objects = lifecycle_objects(CASE)

    async def main() -> None:
        async with stack(tmp_path, objects=objects) as s:
            web = await s.user.create(
                STS, statefulset("web", [("main", 2)], meta("web", priority_class="low")),
                namespace=NS,
            )  # fmt: skip
            group = web["spec"]["template"]["metadata"]["labels"][GROUP]
            await _play_controller(s, web)
            await eventually(lambda: admitted(s.get("workloads", group, NS)), what="web admitted")

            api = await s.user.create(
                STS, statefulset("api", [("main", 2)], meta("api", priority_class="high")),
                namespace=NS,
            )  # fmt: skip
            await _play_controller(s, api)
            await eventually(lambda: not [p for p in s.server.list_objects("pods", NS)
                                          if p["metadata"]["name"].startswith("web-")],
                             what="web's pods gone (deleted, their finalizer lifted)")  # fmt: skip
            groups = s.service.controller.podgroups
            seen = s.service.controller.ctx.writer

            def settled() -> bool:
                w = seen.workload(f"{NS}/{group}")
                return not groups.pods(f"{NS}/{group}") and (w is None or not o.has_quota(w))

            await eventually(settled, what="serve sees web without pods and quota")
            await groups.reconcile(f"{NS}/{group}")
            kept = s.get("workloads", group, NS)
            assert kept is not None, "the Workload was deleted"
            assert not admitted(kept) and is_true(kept, "Preempted")
            assert _owned_by(kept, web)
            assert kept["metadata"]["annotations"]["kueue.x-k8s.io/job-owner-name"] == "web"
            assert (kept["metadata"]["annotations"]["kueue.x-k8s.io/job-owner-gvk"]
                    == "apps/v1, Kind=StatefulSet")  # fmt: skip

            await _play_controller(s, web)  # recreated: the same Workload waits for quota
            await eventually(lambda: _all_gated(s, "web", 2), what="web's new pods gated")
            assert s.get("workloads", group, NS)["metadata"]["uid"] == kept["metadata"]["uid"]

            await s.user.delete(STS, "api", namespace=NS)  # the garbage collector's turn
            await eventually(lambda: _ungated_on(s, "web", 2, "fa"), what="web admitted again")
            readmitted = s.get("workloads", group, NS)
            assert (
                readmitted is not None and readmitted["metadata"]["uid"] == kept["metadata"]["uid"]
            )

            await s.user.delete(STS, "web", namespace=NS)
            await eventually(lambda: s.get("workloads", group, NS) is None,
                             what="web's Workload goes with the StatefulSet")  # fmt: skip

    asyncio.run(main())


def test_a_serving_groups_workload_made_without_its_owner_is_adopted(tmp_path: Path) -> None:
    """A Workload an older version made for a StatefulSet's group (no owner reference)
    gets the StatefulSet as owner, as Kueue's StatefulSet reconciler sets it."""
    objects = lifecycle_objects(CASE)

    async def main() -> None:
        async with stack(tmp_path, objects=objects) as s:
            web = await s.user.create(
                STS, statefulset("web", [("main", 2)], meta("web")), namespace=NS
            )
            group = web["spec"]["template"]["metadata"]["labels"][GROUP]
            tmpl = web["spec"]["template"]
            old = {
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": group, "namespace": NS,
                             "annotations": {"kueue.x-k8s.io/is-group-workload": "true"}},
                "spec": {"queueName": "lq", "podSets": [
                    {"name": "main", "count": 2, "template": {"spec": tmpl["spec"]}}]},
            }  # fmt: skip
            await s.user.create(k.WORKLOADS, old, namespace=NS)
            await _play_controller(s, web)
            wl = await eventually(lambda: _owned_by(w := s.get("workloads", group, NS), web) and w,
                                  what="the Workload adopted by its StatefulSet")  # fmt: skip
            assert wl["metadata"]["annotations"]["kueue.x-k8s.io/job-owner-name"] == "web"
            await eventually(lambda: _ungated_on(s, "web", 2, "fa"), what="web admitted")

    asyncio.run(main())
