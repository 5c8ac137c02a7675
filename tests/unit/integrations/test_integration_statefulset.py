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

from admission.drivers.loader import load_documents
from admission.integrations.kinds.statefulset import STATEFULSET
from admission.kube import objects as kobj
from admission.kube.client import resources as k
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import Resource
from queues.model import Admission, Workload
from tests.support.integration_kit import (
    NS,
    PC,
    KindCase,
    Q,
    gang_scenario,
    lifecycle_objects,
    meta,
    pod_template,
    review,
    webhook_view,
)
from tests.support.kube_harness import admitted, eventually, is_true, stack

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


def _queued(name: str = "web", replicas: int = 2, **labels: Any) -> dict:
    sts = statefulset(name, [("main", replicas)], meta(name, **labels))
    return jsonpatch.apply_patch(sts, review(STATEFULSET, sts, mutating=True)[1])


def _update(old: dict, change: Any, *, workload: str | None = None) -> tuple[bool, str]:
    """Validate the update ``change`` makes to ``old``; ``workload``: the set's Workload
    in the webhook's view, "admitted" or "pending" (None: there is none)."""
    new = copy.deepcopy(old)
    change(new)
    view = webhook_view()
    if workload is not None:
        wl = Workload(namespace=NS, name=STATEFULSET.workload_name(old), queue_name="lq",
                      pod_sets=[])  # fmt: skip
        if workload == "admitted":
            wl.admission = Admission(cluster_queue="cq", pod_set_assignments=[])
        view.workloads[wl.key] = wl
    allowed, _, message = review(STATEFULSET, new, mutating=False, operation="UPDATE", old=old,
                                 view=view)  # fmt: skip
    return allowed, message


def _set(path: str, value: Any) -> Any:
    def change(obj: dict) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    return change


def test_a_queued_statefulset_is_resized_only_while_its_workload_holds_no_quota() -> None:
    old = _queued()
    assert _update(old, _set("spec.replicas", 5)) == (True, "")  # no Workload yet
    assert _update(old, _set("spec.replicas", 5), workload="pending")[0]
    allowed, message = _update(old, _set("spec.replicas", 5), workload="admitted")
    assert not allowed and "spec.replicas: Invalid value: 5: field is immutable" in message
    # to and from zero as Kueue allows, even while admitted
    assert _update(old, _set("spec.replicas", 0), workload="admitted")[0]
    zero = copy.deepcopy(old)
    zero["spec"]["replicas"] = 0
    allowed, message = _update(zero, lambda o: (_set("spec.replicas", 3)(o),
                                                _set("status.replicas", 1)(o)))  # fmt: skip
    assert not allowed and "spec.replicas: Forbidden: scaling down is still in progress" in message
    allowed, message = _update(zero, _set("spec.replicas", 3), workload="pending")
    assert not allowed and "workload from previous scale-down is still being deleted" in message
    assert _update(zero, _set("spec.replicas", 3))[0]
    # a set that names no queue is not held to any of it
    plain = statefulset("p", [("main", 2)], meta("p", queue=None))
    assert _update(plain, _set("spec.replicas", 7), workload="admitted")[0]


def test_a_queued_statefulsets_pod_shape_and_pod_group_are_immutable() -> None:
    old = _queued()
    allowed, message = _update(old, lambda o: o["spec"]["template"]["spec"]["containers"][0][
        "resources"]["requests"].update(cpu="2"))  # fmt: skip
    assert not allowed
    assert ('spec.template.spec.containers[0].resources.requests: Invalid value: {"cpu":"2"}: '
            "field is immutable") in message  # fmt: skip
    assert _update(old, lambda o: o["spec"]["template"]["spec"]["containers"][0].update(
        image="busybox:2"))[0]  # fmt: skip
    allowed, message = _update(old, lambda o: o["spec"]["template"]["metadata"]["labels"].update(
        {GROUP: "other"}))  # fmt: skip
    assert not allowed and f"spec.template.metadata.labels[{GROUP}]" in message


def test_the_queue_and_priority_class_of_a_statefulset_follow_kueues_update_rules() -> None:
    old = _queued(priority_class=None)
    assert _update(old, lambda o: o["metadata"]["labels"].update({Q: "other"}))[0]  # none ready
    ready = copy.deepcopy(old)
    ready["status"] = {"readyReplicas": 1}
    allowed, message = _update(ready, lambda o: o["metadata"]["labels"].update({Q: "other"}))
    assert (
        not allowed
        and f'metadata.labels[{Q}]: Invalid value: "other": field is immutable' in message
    )
    allowed, message = _update(old, lambda o: o["metadata"]["labels"].pop(Q))
    assert not allowed and "field is immutable" in message  # never to no queue at all
    allowed, message = _update(ready, lambda o: o["metadata"]["labels"].update({PC: "high"}))
    assert not allowed and "cannot be added to a non-suspended workload" in message
    assert _update(old, lambda o: o["metadata"]["labels"].update({PC: "high"}))[0]
    with_pc = _queued(priority_class="low")
    with_pc["status"] = {"readyReplicas": 1}
    allowed, message = _update(with_pc, lambda o: o["metadata"]["labels"].pop(PC))
    assert not allowed and "cannot be removed from a workload" in message
    assert _update(with_pc, lambda o: o["metadata"]["labels"].update({PC: "high"}))[0]


def test_the_mutating_webhook_on_update_leaves_a_queued_template_and_marks_a_newly_queued_one() -> (
    None
):
    old = _queued()
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 4
    new["metadata"]["labels"][Q] = "other"
    allowed, patch, _ = review(STATEFULSET, new, mutating=True, operation="UPDATE", old=old)
    assert allowed and patch == []  # no rollout: the Workload follows the set itself
    plain = statefulset("p", [("main", 2)], meta("p", queue=None))
    queued = copy.deepcopy(plain)
    queued["metadata"]["labels"][Q] = "lq"
    allowed, patch, _ = review(STATEFULSET, queued, mutating=True, operation="UPDATE", old=plain)
    labels = jsonpatch.apply_patch(queued, patch)["spec"]["template"]["metadata"]["labels"]
    assert allowed and labels[GROUP] == STATEFULSET.workload_name(queued) and labels[Q] == "lq"


def test_plan_admits_a_statefulset_only_when_all_its_replicas_fit(tmp_path: Path) -> None:
    gang_scenario(CASE, tmp_path)


def test_plan_reads_a_statefulset_scaled_to_zero_as_running_nothing() -> None:
    idle = statefulset("idle", [("main", 0)], meta("idle"))
    inputs = load_documents([("f.yaml", 0, idle)])
    assert inputs.workloads == [] and not inputs.warnings


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
                return not groups.pods(f"{NS}/{group}") and (w is None or not kobj.has_quota(w))

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


async def _scale(s: Any, name: str, replicas: int) -> dict:
    """Resize the set (through the webhooks) and, on the double, play its controller."""
    sts = await s.user.patch(STS, name, {"spec": {"replicas": replicas}}, namespace=NS)
    if not _controller_runs(s):
        for p in _pods_of(s, name):
            if int(p["metadata"]["name"].rsplit("-", 1)[1]) >= replicas:
                await s.user.delete(k.PODS, p["metadata"]["name"], namespace=NS)
        await _play_controller(s, sts)
    return dict(sts)


def test_a_pending_statefulset_is_resized_and_its_workload_follows(
    tmp_path: Path, backend: Any
) -> None:
    """3 replicas do not fit 2 cpu: the set waits; scaled to 2 while pending, its Workload
    follows and is admitted; while admitted it cannot be resized, but can be scaled to
    zero, which ends its Workload."""
    objects = lifecycle_objects(CASE)  # fa: 2 cpu

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            web = await s.user.create(
                STS, statefulset("web", [("main", 3)], meta("web")), namespace=NS
            )
            group = web["spec"]["template"]["metadata"]["labels"][GROUP]
            await _play_controller(s, web)
            wl = await eventually(lambda: (w := s.get("workloads", group, NS)) and not admitted(w)
                                  and is_true(w, "QuotaReserved") is False and w,
                                  what="web pending")  # fmt: skip
            assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 3)]
            uid = wl["metadata"]["uid"]

            await _scale(s, "web", 2)
            wl = await eventually(lambda: admitted(w := s.get("workloads", group, NS)) and w,
                                  what="the resized set admitted")  # fmt: skip
            assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 2)]
            assert wl["metadata"]["uid"] == uid  # the same Workload, resized in place
            await eventually(lambda: _ungated_on(s, "web", 2, "fa"), what="web's 2 pods ungated")

            try:
                await s.user.patch(STS, "web", {"spec": {"replicas": 3}}, namespace=NS)
            except ApiError as err:
                assert "spec.replicas: Invalid value: 3: field is immutable" in str(err)
            else:
                raise AssertionError("an admitted set was resized")

            await _scale(s, "web", 0)
            await eventually(lambda: s.get("workloads", group, NS) is None,
                             what="scaled to zero, its Workload ends with its pods")  # fmt: skip

    asyncio.run(main())
