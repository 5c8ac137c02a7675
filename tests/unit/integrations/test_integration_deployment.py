"""Deployment (apps/v1): each replica a single-pod Workload, admitted one by one.

The webhook marks the pod template; each pod is gated, gets its own Workload
(``pod-<name>-<hash>``, owned by the pod) and is ungated with its flavor when admitted;
preempted pods are deleted and replaced by the ReplicaSet. The tests play the
Deployment and ReplicaSet controllers on the double; the real server runs its own.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import jsonpatch

from admission.drivers.loader import load_documents
from admission.integrations.kinds.deployment import DEPLOYMENT
from admission.integrations.kinds.pod import single_pod_workload_name
from admission.kube.client import resources as k
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import Resource
from tests.support.integration_kit import (
    NS,
    KindCase,
    Q,
    lifecycle_objects,
    meta,
    pod_template,
    review,
)
from tests.support.kube_harness import eventually, is_true, stack

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")


def deployment(name: str, replicas: int, metadata: dict[str, Any]) -> dict:
    tmpl = pod_template()
    tmpl["spec"]["restartPolicy"] = "Always"
    tmpl["metadata"] = {"labels": {"app": name}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": tmpl},
    }  # fmt: skip


def test_the_webhook_marks_the_template_so_every_pod_is_gated() -> None:
    dep = deployment("web", 3, meta("web", priority_class="low"))
    allowed, patch, _ = review(DEPLOYMENT, dep, mutating=True)
    assert allowed
    tmpl = jsonpatch.apply_patch(dep, patch)["spec"]["template"]["metadata"]
    assert tmpl["labels"] == {"app": "web", Q: "lq", "kueue.x-k8s.io/managed": "true",
                              "kueue.x-k8s.io/priority-class": "low"}  # fmt: skip
    assert tmpl["annotations"] == {"kueue.x-k8s.io/pod-suspending-parent": "deployment"}
    assert review(DEPLOYMENT, deployment("p", 1, meta("p", queue=None)), mutating=True)[1] == []


def test_the_queue_of_a_deployment_with_ready_replicas_is_immutable() -> None:
    old = deployment("web", 2, meta("web"))
    old["status"] = {"readyReplicas": 1}
    new = copy.deepcopy(old)
    new["metadata"]["labels"][Q] = "other"
    allowed, _, message = review(DEPLOYMENT, new, mutating=False, operation="UPDATE", old=old)
    assert not allowed and "field is immutable" in message
    old["status"] = new["status"] = {"readyReplicas": 0}
    assert review(DEPLOYMENT, new, mutating=False, operation="UPDATE", old=old)[0]


def test_an_update_carries_the_queue_and_priority_class_into_the_template() -> None:
    """Kueue's Deployment Default runs on updates: the pods made next name the new queue."""
    old = deployment("web", 2, meta("web"))
    old = jsonpatch.apply_patch(old, review(DEPLOYMENT, old, mutating=True)[1])
    new = copy.deepcopy(old)
    new["metadata"]["labels"].update({Q: "other", "kueue.x-k8s.io/priority-class": "high"})
    allowed, patch, _ = review(DEPLOYMENT, new, mutating=True, operation="UPDATE", old=old)
    labels = jsonpatch.apply_patch(new, patch)["spec"]["template"]["metadata"]["labels"]
    assert allowed and labels[Q] == "other" and labels["kueue.x-k8s.io/priority-class"] == "high"
    assert review(DEPLOYMENT, old, mutating=True, operation="UPDATE", old=old)[1] == []
    # the priority class, once set, is never removed; none is added to a serving one
    ready = copy.deepcopy(new)
    ready["status"] = {"readyReplicas": 2}
    gone = copy.deepcopy(ready)
    del gone["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
    allowed, _, message = review(DEPLOYMENT, gone, mutating=False, operation="UPDATE", old=ready)
    assert not allowed and "WorkloadPriorityClass cannot be removed from a workload" in message
    bare = copy.deepcopy(old)
    bare["status"] = {"readyReplicas": 1}
    added = copy.deepcopy(bare)
    added["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    allowed, _, message = review(DEPLOYMENT, added, mutating=False, operation="UPDATE", old=bare)
    assert not allowed and "cannot be added to a non-suspended workload" in message
    changed = copy.deepcopy(ready)
    changed["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "low"
    assert review(DEPLOYMENT, changed, mutating=False, operation="UPDATE", old=ready)[0]


def test_plan_builds_one_single_pod_workload_per_replica() -> None:
    """As serve, whose pods each get a Workload (tests/scenarios/kinds/ has the table)."""
    dep = deployment("web", 3, meta("web", uid="uid-web"))
    inputs = load_documents([("f.yaml", 0, dep)])
    assert [(w.name, [(p.name, p.count) for p in w.pod_sets]) for w in inputs.workloads] == [
        (f"pod-web-{i}-{h}", [("main", 1)]) for i, h in enumerate(("684c8", "79f3d", "ed9fb"))
    ]
    assert {w.queue_name for w in inputs.workloads} == {"lq"}
    assert len({w.uid for w in inputs.workloads}) == 3 and not inputs.warnings
    none = deployment("idle", 0, meta("idle"))
    assert load_documents([("f.yaml", 0, none)]).workloads == []


# ---------------------------------------------------------------------------- serve


def _controllers_run(s: Any) -> bool:
    return bool(getattr(getattr(s.server, "cluster", None), "controller_manager", None))


async def _play_controllers(s: Any, dep: dict, *, generation: int = 0) -> None:
    """The Deployment and ReplicaSet controllers: one ReplicaSet, pods up to replicas."""
    if _controllers_run(s):
        return
    name = dep["metadata"]["name"]
    rs_name = f"{name}-rs"
    rs = s.get("replicasets", rs_name, NS)
    tmpl = copy.deepcopy(dep["spec"]["template"])
    if rs is None:
        rs = await s.user.create(REPLICA_SETS, {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "namespace": NS,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                              "name": name, "uid": dep["metadata"]["uid"],
                                              "controller": True}]},
            "spec": {"replicas": dep["spec"]["replicas"], "selector": dep["spec"]["selector"],
                     "template": tmpl},
        }, namespace=NS)  # fmt: skip
    live = _pods_of(s, name)
    for i in range(dep["spec"]["replicas"] - len(live)):
        await s.user.create(k.PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{rs_name}-{generation}{i}", "namespace": NS,
                         "labels": dict(tmpl["metadata"]["labels"]),
                         "annotations": dict(tmpl["metadata"].get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": rs_name, "uid": rs["metadata"]["uid"],
                                              "controller": True}]},
            "spec": copy.deepcopy(tmpl["spec"]),
        }, namespace=NS)  # fmt: skip


def _pods_of(s: Any, name: str) -> list[dict]:
    return [p for p in s.server.list_objects("pods", NS)
            if p["metadata"]["name"].startswith(f"{name}-")
            and not p["metadata"].get("deletionTimestamp")]  # fmt: skip


def _running(s: Any, name: str) -> list[dict]:
    return [p for p in _pods_of(s, name) if not p["spec"].get("schedulingGates")]


def test_a_deployments_replicas_are_admitted_one_by_one_and_replaced_when_preempted(
    tmp_path: Path, backend: Any
) -> None:
    objects = lifecycle_objects(KindCase(DEPLOYMENT, deployment, [("main", 2)], None))

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            # 3 replicas on quota for 2: two run, one waits (no gang)
            web = await s.user.create(DEPLOYMENTS, deployment("web", 3, meta("web", priority_class="low")),
                                      namespace=NS)  # fmt: skip
            await _play_controllers(s, web)
            await eventually(lambda: len(_pods_of(s, "web")) == 3, what="web's 3 pods")
            await eventually(lambda: len(_running(s, "web")) == 2, what="2 of web's pods ungated")
            for p in _running(s, "web"):
                assert p["spec"]["nodeSelector"] == {"pool": "fa"}
                wl = s.get("workloads", single_pod_workload_name(p), NS)
                assert wl is not None and wl["spec"]["podSets"][0]["count"] == 1
                assert wl["metadata"]["ownerReferences"][0]["kind"] == "Pod"
            await asyncio.sleep(0.5)
            assert len(_running(s, "web")) == 2

            api = await s.user.create(DEPLOYMENTS, deployment("api", 1, meta("api", priority_class="high")),
                                      namespace=NS)  # fmt: skip
            await _play_controllers(s, api)
            await eventually(
                lambda: len(_running(s, "api")) == 1, what="api's pod preempts one of web's"
            )
            await eventually(
                lambda: len(_running(s, "web")) == 1, what="one of web's pods preempted"
            )
            await _play_controllers(s, web, generation=1)  # the ReplicaSet replaces it
            await eventually(lambda: len(_pods_of(s, "web")) == 3, what="web back at 3 pods")
            await asyncio.sleep(0.5)
            assert len(_running(s, "web")) == 1

            await s.user.delete(DEPLOYMENTS, "api", namespace=NS)
            if not _controllers_run(s) and s.get("replicasets", "api-rs", NS) is not None:
                try:  # (the garbage collector may have been first)
                    await s.user.delete(REPLICA_SETS, "api-rs", namespace=NS)
                except ApiError as err:
                    assert err.not_found
            for p in _pods_of(s, "api"):
                try:
                    await s.user.delete(k.PODS, p["metadata"]["name"], namespace=NS)
                except ApiError as err:
                    assert err.not_found
            await eventually(lambda: len(_running(s, "web")) == 2, what="web's freed pod admitted")
            finished = [w for w in s.workloads(NS) if is_true(w, "Finished")]
            assert all(w["metadata"]["ownerReferences"][0]["kind"] == "Pod" for w in finished)

    asyncio.run(main())
