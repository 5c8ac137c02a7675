"""The install's webhook configurations follow Kueue and can never lock a cluster out.

Every entry uses Kueue's path for its kind, skips kube-system and the service's own
namespace (a webhook that is down must not block the pods that would bring it back), and
the selectors together validate every update of a queued or managed pod and every pod
resize outside the system namespaces, so no change escapes the admission rules.
"""

from __future__ import annotations

import pytest

from admission.integrations.registry import INTEGRATIONS
from tests.support.install_manifests import NAMESPACE, _base_objects, _one, _selector_matches

# (webhook name) -> (path, resources, operations); Kueue's paths (semantics §3.1): two
# per job integration of the registry, then the queue objects'.
# Kueue's markers: the pod owners' defaulters run on updates too (verbs=create;update)
MUTATED_ON_UPDATE = {"statefulsets", "deployments", "leaderworkersets"}


MUTATING = {
    **{
        f"m{i.kind.lower()}.kb.io": (
            i.webhook_paths()[0],
            [i.resource.plural],
            ["CREATE", "UPDATE"] if i.resource.plural in MUTATED_ON_UPDATE else ["CREATE"],
        )
        for i in INTEGRATIONS
    },
    "mclusterqueue.kb.io": (
        "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
        ["clusterqueues"],
        ["CREATE"],
    ),
    "mresourceflavor.kb.io": (
        "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor",
        ["resourceflavors"],
        ["CREATE"],
    ),
    "mworkload.kb.io": ("/mutate-kueue-x-k8s-io-v1beta2-workload", ["workloads"], ["CREATE"]),
}


VALIDATING = {
    **{
        f"v{i.kind.lower()}.kb.io": (
            i.webhook_paths()[1],
            [i.resource.plural],
            ["CREATE", "UPDATE"],
        )
        for i in INTEGRATIONS
    },
    # updates of the pods the service gated that carry no queue-name label
    "vmanagedpod.kb.io": ("/validate--v1-pod", ["pods"], ["UPDATE"]),
    # every in-place resize: a pod that runs on quota may not grow (any kind's pods)
    **{
        f"v{i.kind.lower()}{sub}.kb.io": (
            i.webhook_paths()[1],
            [f"{i.resource.plural}/{sub}"],
            ["UPDATE"],
        )
        for i in INTEGRATIONS
        for sub in i.guarded_subresources
    },
    "vclusterqueue.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
        ["clusterqueues"],
        ["CREATE", "UPDATE"],
    ),
    "vcohort.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-cohort",
        ["cohorts"],
        ["CREATE", "UPDATE"],
    ),
    "vresourceflavor.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-resourceflavor",
        ["resourceflavors"],
        ["CREATE", "UPDATE"],
    ),
    "vworkload.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-workload",
        ["workloads", "workloads/status"],
        ["CREATE", "UPDATE"],
    ),
    "vlocalqueue.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-localqueue",
        ["localqueues"],
        ["CREATE", "UPDATE"],
    ),
    "vtopology.kb.io": (
        "/validate-kueue-x-k8s-io-v1beta2-topology",
        ["topologies"],
        ["CREATE", "UPDATE"],
    ),
}


NAMESPACED_RESOURCES = {"workloads", "localqueues", *(i.resource.plural for i in INTEGRATIONS)}


OBJECT_SELECTORS = {i.resource.plural: i.webhook_object_selector for i in INTEGRATIONS}


_QUEUE_NAME = {"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}


POD_SELECTORS = {
    "mpod.kb.io": {"matchExpressions": [_QUEUE_NAME]},
    "vpod.kb.io": {"matchExpressions": [_QUEUE_NAME]},
    "vmanagedpod.kb.io": {
        "matchExpressions": [
            {"key": "kueue.x-k8s.io/managed", "operator": "Exists"},
            {"key": "kueue.x-k8s.io/queue-name", "operator": "DoesNotExist"},
        ]
    },
}


def test_webhooks_use_kueue_paths_and_never_lock_out_system_namespaces() -> None:
    objs = _base_objects()
    for kind, expected in (
        ("MutatingWebhookConfiguration", MUTATING),
        ("ValidatingWebhookConfiguration", VALIDATING),
    ):
        hooks = {h["name"]: h for h in _one(objs, kind)["webhooks"]}
        assert set(hooks) == set(expected), kind
        for name, (path, resources, operations) in expected.items():
            hook = hooks[name]
            assert hook["admissionReviewVersions"] == ["v1"], name
            assert hook["sideEffects"] == "None", name
            assert hook["timeoutSeconds"] == 10, name
            assert hook["failurePolicy"] == "Fail", name
            assert hook["matchPolicy"] == "Equivalent", name
            if resources == ["pods"]:  # never every pod in the cluster
                assert hook["objectSelector"] == POD_SELECTORS[name], name
            elif "/" in resources[0]:  # a guarded subresource: every object's writes of it
                assert "objectSelector" not in hook, name
            elif OBJECT_SELECTORS.get(resources[0]) is not None:
                assert hook["objectSelector"] == OBJECT_SELECTORS[resources[0]], name
            else:
                assert "objectSelector" not in hook, name
            assert hook["clientConfig"]["service"] == {
                "name": "quartermaster-webhook-service",
                "namespace": NAMESPACE,
                "path": path,
                "port": 443,
            }
            (rule,) = hook["rules"]
            assert rule["resources"] == resources, name
            assert rule["operations"] == operations, name
            if resources[0].partition("/")[0] in NAMESPACED_RESOURCES:
                selector = hook["namespaceSelector"]
                for ns in ("kube-system", NAMESPACE):
                    labels = {"kubernetes.io/metadata.name": ns}
                    assert not _selector_matches(selector, labels), (name, ns)
                assert _selector_matches(selector, {"kubernetes.io/metadata.name": "team-a"})


@pytest.mark.parametrize("old", ["", "queue", "managed", "both"])
@pytest.mark.parametrize("new", ["", "queue", "managed", "both"])
def test_every_update_of_a_queued_or_managed_pod_is_validated(old: str, new: str) -> None:
    """An apiserver calls an entry when its objectSelector matches the old object or the
    new one: a pod update is validated when either names a queue or carries the managed
    label the service gives every pod it gates (once, unless it changes those labels),
    and never otherwise."""
    sets = {
        "": {},
        "queue": {"kueue.x-k8s.io/queue-name": "lq"},
        "managed": {"kueue.x-k8s.io/managed": "true"},
        "both": {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/managed": "true"},
    }
    hooks = _one(_base_objects(), "ValidatingWebhookConfiguration")["webhooks"]
    called = [
        h["name"]
        for h in hooks
        if h["rules"][0]["resources"] == ["pods"]
        and "UPDATE" in h["rules"][0]["operations"]
        and any(_selector_matches(h["objectSelector"], sets[s]) for s in (old, new))
    ]
    assert bool(called) == bool(old or new), called
    if old == new:  # an update that keeps the labels costs one call
        assert len(called) <= 1, called


def test_every_pod_resize_outside_the_system_namespaces_is_validated() -> None:
    """``pods/resize`` grows a running pod in place: the entry that sees it selects no
    labels (a Job's or a JobSet's pods name no queue, yet run on its quota)."""
    hooks = _one(_base_objects(), "ValidatingWebhookConfiguration")["webhooks"]
    (hook,) = [h for h in hooks if "pods/resize" in h["rules"][0]["resources"]]
    assert hook["clientConfig"]["service"]["path"] == "/validate--v1-pod"
    assert hook["rules"][0]["operations"] == ["UPDATE"]
    assert "objectSelector" not in hook
    assert _selector_matches(hook["namespaceSelector"], {"kubernetes.io/metadata.name": "team-a"})
