"""``pods/resize`` of a pod that runs on quota: what counts as growing, and whose pods.

The pod validating webhook decides resizes (``request.subResource: resize``): for a pod
the service holds quota for — managed by the pod webhook, or admitted through a managed
ancestor (a Job's pod) — no container's request (its limit standing in) or limit may
grow; lowering is allowed, and other pods are not its business.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admission.integrations.registry import ALL
from webhooks.config import WebhookConfig
from webhooks.handlers.pods import validate_pod
from webhooks.handlers.resize import growth
from webhooks.review import AdmissionRequest, HandlerContext
from webhooks.view import InMemoryView

Obj = dict[str, Any]


def pod(resources: Obj | None = None, *, labels: dict[str, str] | None = None, **extra: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": labels or {}, **extra},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "resources": resources or {"requests": {"cpu": "1"}}}
            ]
        },
    }


def resized(old: Obj, resources: Obj, *, where: str = "containers") -> Obj:
    new = copy.deepcopy(old)
    if where == "pod":
        new["spec"]["resources"] = resources
    else:
        new["spec"].setdefault(where, [{"name": "c", "image": "i"}])[0]["resources"] = resources
    return new


def decide(new: Obj, old: Obj, *, sub: str = "resize", ns: str = "team-a") -> tuple[bool, str]:
    req = AdmissionRequest(
        uid="u", operation="UPDATE", group="", version="v1", kind="Pod", namespace=ns,
        name="p", object=new, old_object=old, username="alice", sub_resource=sub,
    )  # fmt: skip
    ctx = HandlerContext(view=InMemoryView(), config=WebhookConfig(frameworks=ALL))
    verdict = validate_pod(req, ctx)
    return verdict.allowed, verdict.message


@pytest.mark.parametrize(
    ("before", "after", "fields"),
    [
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1000m"}}, []),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "500m"}}, []),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "2"}}, ["requests[cpu]"]),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1", "memory": "1Gi"}},
         ["requests[memory]"]),
        # a limit stands in for a missing request: what the Workload counts
        ({"limits": {"cpu": "1"}}, {"limits": {"cpu": "4"}}, ["limits[cpu]", "limits[cpu]"]),
        ({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
         {"requests": {"cpu": "1"}, "limits": {"cpu": "3"}}, ["limits[cpu]"]),
        ({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}, {"requests": {"cpu": "1"}},
         ["limits[cpu]"]),  # unbounded
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}, []),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "lots"}}, ["requests[cpu]"]),
    ],
)  # fmt: skip
def test_what_growing_means(before: Obj, after: Obj, fields: list[str]) -> None:
    old = pod(before)
    grown = [f for f, _, _ in growth(resized(old, after), old)]
    assert grown == [f"spec.containers[0].resources.{f}" for f in fields]


def test_init_containers_sidecars_and_pod_level_resources_count_too() -> None:
    old = pod()
    old["spec"]["initContainers"] = [{"name": "s", "image": "i", "restartPolicy": "Always",
                                      "resources": {"requests": {"cpu": "1"}}}]  # fmt: skip
    new = resized(old, {"requests": {"cpu": "3"}}, where="initContainers")
    assert [f for f, _, _ in growth(new, old)] == ["spec.initContainers[0].resources.requests[cpu]"]
    old["spec"]["resources"] = {"requests": {"cpu": "2"}}
    new = resized(old, {"requests": {"cpu": "3"}}, where="pod")
    assert [f for f, _, _ in growth(new, old)] == ["spec.resources.requests[cpu]"]


# fmt: off
HELD = {
    "queue-name": {"labels": {"kueue.x-k8s.io/queue-name": "lq"}},
    "managed": {"labels": {"kueue.x-k8s.io/managed": "true"}},
    "group": {"labels": {"kueue.x-k8s.io/pod-group-name": "g"}},
    "finalizer": {"finalizers": ["kueue.x-k8s.io/managed"]},
    "job-pod": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                     "uid": "j-uid", "controller": True}]},
}
# fmt: on


@pytest.mark.parametrize("held", list(HELD))
def test_a_pod_on_quota_is_refused_growth_with_a_field_error_naming_it(held: str) -> None:
    extra = dict(HELD[held])
    old = pod(labels=extra.pop("labels", None), **extra)
    allowed, message = decide(resized(old, {"requests": {"cpu": "2"}}), old)
    assert not allowed
    assert message.startswith(
        "spec.containers[0].resources.requests[cpu]: Forbidden: pod team-a/p runs on the "
        "quota its Workload was admitted with: a resize may lower its requests and limits, "
        'not raise them (was "1", asked "2")'
    ), message
    assert decide(resized(old, {"requests": {"cpu": "100m"}}), old)[0]


def test_other_pods_resize_freely_and_plain_updates_are_not_resizes() -> None:
    old = pod()
    assert decide(resized(old, {"requests": {"cpu": "8"}}), old)[0]
    # a queue name in a namespace the service does not manage: the pod was never held
    system = pod(labels={"kueue.x-k8s.io/queue-name": "lq"})
    system["metadata"]["namespace"] = "kube-system"
    assert decide(resized(system, {"requests": {"cpu": "8"}}), system, ns="kube-system")[0]
    queued = pod(labels={"kueue.x-k8s.io/queue-name": "lq"})
    # a plain update: the pod rules (the API server refuses resource changes there)
    assert decide(resized(queued, {"requests": {"cpu": "8"}}), queued, sub="")[0]
