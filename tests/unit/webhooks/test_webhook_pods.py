"""Plain Pod and pod-group admission over real HTTPS (docs/semantics.md §3.4)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from queues.model import LocalQueue, Namespace
from tests.support.webhook_server import (
    ReviewClient,
    WebhookServerThread,
    decode_patch,
    make_review,
)
from webhooks.handlers.pods import role_hash
from webhooks.view import InMemoryView

MUTATE = "/mutate--v1-pod"
VALIDATE = "/validate--v1-pod"
Q = "kueue.x-k8s.io/queue-name"
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
MANAGED = "kueue.x-k8s.io/managed"
GATE = {"name": "kueue.x-k8s.io/admission"}
ROLE = "kueue.x-k8s.io/role-hash"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    view = InMemoryView(
        local_queues={"team-a/default": LocalQueue("team-a", "default", "cq")},
        namespaces={"team-a": Namespace("team-a")},
    )
    with WebhookServerThread(view=view, cert_dir=tmp_path_factory.mktemp("certs")) as srv:
        c = srv.client()
        yield c
        c.close()


def pod(
    *,
    ns: str = "team-a",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gated: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": ns}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]
    }
    if gated:
        spec["schedulingGates"] = [GATE]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def mutate(client: ReviewClient, obj: dict[str, Any]) -> list[dict[str, Any]]:
    status, resp = client.post(MUTATE, make_review("Pod", obj))
    assert status == 200 and resp["response"]["allowed"] is True
    return decode_patch(resp)


def validate(
    client: ReviewClient, obj: dict[str, Any], old: dict[str, Any] | None = None
) -> dict[str, Any]:
    op = "UPDATE" if old is not None else "CREATE"
    status, resp = client.post(VALIDATE, make_review("Pod", obj, old=old, operation=op))
    assert status == 200
    return resp["response"]


def denial(response: dict[str, Any]) -> str:
    assert response["allowed"] is False and response["status"]["code"] == 403
    return response["status"]["message"]


def test_pod_in_namespace_with_default_queue_is_gated_labelled_and_finalized(
    client: ReviewClient,
) -> None:
    obj = pod()
    expected_hash = role_hash(obj)
    assert mutate(client, obj) == [
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {ROLE: expected_hash},
        },
        {"op": "add", "path": "/metadata/finalizers", "value": ["kueue.x-k8s.io/managed"]},
        {"op": "add", "path": "/metadata/labels", "value": {Q: "default", MANAGED: "true"}},
        {"op": "add", "path": "/spec/schedulingGates", "value": [GATE]},
    ]


def test_pod_group_member_keeps_existing_gates_and_finalizers(client: ReviewClient) -> None:
    obj = pod(labels={Q: "default", GROUP: "g1"}, annotations={TOTAL: "3"})
    obj["metadata"]["finalizers"] = ["other/finalizer"]
    obj["spec"]["schedulingGates"] = [{"name": "other-gate"}]
    patch = mutate(client, obj)
    assert patch == [
        {
            "op": "add",
            "path": "/metadata/annotations/kueue.x-k8s.io~1role-hash",
            "value": role_hash(obj),
        },
        {"op": "add", "path": "/metadata/finalizers/1", "value": "kueue.x-k8s.io/managed"},
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1managed", "value": "true"},
        {"op": "add", "path": "/spec/schedulingGates/1", "value": GATE},
    ]


def test_role_hash_ignores_kueue_labels_and_differs_by_resources() -> None:
    a = pod(labels={"app": "x"})
    b = pod(labels={"app": "x", Q: "q", MANAGED: "true"})
    c = copy.deepcopy(a)
    c["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    assert role_hash(a) == role_hash(b)
    assert role_hash(a) != role_hash(c)
    assert len(role_hash(a)) == 8


def test_pod_without_queue_in_namespace_without_default_queue_is_untouched(
    client: ReviewClient,
) -> None:
    assert mutate(client, pod(ns="team-b")) == []


def test_pod_owned_by_a_job_is_left_to_the_job_integration(client: ReviewClient) -> None:
    obj = pod(labels={Q: "default"})
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": True}
    ]
    assert mutate(client, obj) == []


def test_pod_in_excluded_namespace_is_untouched(client: ReviewClient) -> None:
    assert mutate(client, pod(ns="kube-system", labels={Q: "default"})) == []


def test_pod_suspended_by_its_parent_is_gated_and_labelled_managed(client: ReviewClient) -> None:
    """Every pod the service gates carries the managed label (Kueue's webhook leaves a
    parent's pods without it): the pod validation's registration selects by it."""
    obj = pod(ns="kube-system", annotations={"kueue.x-k8s.io/pod-suspending-parent": "deployment"})
    ops = {(op["op"], op["path"]) for op in mutate(client, obj)}
    assert ops == {
        ("add", "/metadata/labels"),
        ("add", "/metadata/annotations/kueue.x-k8s.io~1role-hash"),
        ("add", "/metadata/finalizers"),
        ("add", "/spec/schedulingGates"),
    }


def test_valid_group_pod_is_allowed(client: ReviewClient) -> None:
    assert validate(client, pod(labels={GROUP: "g1"}, annotations={TOTAL: "2"}))["allowed"] is True


def test_managed_label_value_must_be_true(client: ReviewClient) -> None:
    assert denial(validate(client, pod(labels={MANAGED: "yes"}))) == (
        "metadata.labels[kueue.x-k8s.io/managed]: Forbidden: managed label value can only be 'true'"
    )


def test_group_name_and_total_count_go_together(client: ReviewClient) -> None:
    both = (
        "both the 'kueue.x-k8s.io/pod-group-total-count' annotation and the "
        "'kueue.x-k8s.io/pod-group-name' label should be set"
    )
    assert denial(validate(client, pod(labels={GROUP: "g1"}))) == (
        f"metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: {both}"
    )
    assert denial(validate(client, pod(annotations={TOTAL: "2"}))) == (
        f"metadata.labels[kueue.x-k8s.io/pod-group-name]: Required value: {both}"
    )


def test_group_total_count_must_be_a_positive_integer(client: ReviewClient) -> None:
    assert denial(validate(client, pod(labels={GROUP: "g1"}, annotations={TOTAL: "0"}))) == (
        'metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "0": incorrect annotation '
        "value 'kueue.x-k8s.io/pod-group-total-count=0': group total count should be greater than zero"
    )
    assert "strconv.Atoi" in denial(
        validate(client, pod(labels={GROUP: "g1"}, annotations={TOTAL: "two"}))
    )


def test_group_name_must_be_a_dns_subdomain(client: ReviewClient) -> None:
    msg = denial(validate(client, pod(labels={GROUP: "Group_1"}, annotations={TOTAL: "2"})))
    assert msg.startswith(
        'metadata.labels[kueue.x-k8s.io/pod-group-name]: Invalid value: "Group_1": a lowercase'
    )


def test_prebuilt_workload_must_equal_the_group(client: ReviewClient) -> None:
    obj = pod(
        labels={GROUP: "g1", "kueue.x-k8s.io/prebuilt-workload-name": "g2"},
        annotations={TOTAL: "2"},
    )
    assert denial(validate(client, obj)) == (
        'metadata.labels[kueue.x-k8s.io/prebuilt-workload-name]: Invalid value: "g2": '
        "prebuilt workload and pod group should be equal"
    )


def test_group_name_is_immutable(client: ReviewClient) -> None:
    old = pod(labels={GROUP: "g1"}, annotations={TOTAL: "2"}, gated=True)
    new = pod(labels={GROUP: "g2"}, annotations={TOTAL: "2"}, gated=True)
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/pod-group-name]: Invalid value: "g2": field is immutable'
    )


def test_unretriable_group_cannot_become_retriable(client: ReviewClient) -> None:
    ann = {TOTAL: "2", "kueue.x-k8s.io/retriable-in-group": "false"}
    old = pod(labels={GROUP: "g1"}, annotations=ann, gated=True)
    new = pod(labels={GROUP: "g1"}, annotations={TOTAL: "2"}, gated=True)
    assert denial(validate(client, new, old)) == (
        "metadata.annotations[kueue.x-k8s.io/retriable-in-group]: Forbidden: "
        "unretriable pod group can't be converted to retriable"
    )


def test_queue_name_is_immutable_once_the_gate_is_lifted(client: ReviewClient) -> None:
    old = pod(labels={Q: "default"}, gated=False)
    new = pod(labels={Q: "other"}, gated=False)
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable'
    )
    assert validate(
        client, pod(labels={Q: "other"}, gated=True), pod(labels={Q: "default"}, gated=True)
    )["allowed"]


def test_managed_label_on_a_pod_with_managed_owner_warns(client: ReviewClient) -> None:
    obj = pod(labels={MANAGED: "true"})
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": True}
    ]
    response = validate(client, obj)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "pod owner is managed by kueue, label 'kueue.x-k8s.io/managed=true' might lead to unexpected behaviour"
    ]


SERVICE_USER = "system:serviceaccount:quartermaster-system:quartermaster"
TOPOLOGY_GATE = {"name": "kueue.x-k8s.io/topology"}


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({Q: "default", MANAGED: "true"}, id="single-pod"),
        pytest.param({Q: "default", MANAGED: "true", GROUP: "g"}, id="group-member"),
    ],
)
@pytest.mark.parametrize("gate", [GATE, TOPOLOGY_GATE], ids=["admission", "topology"])
def test_only_the_service_may_remove_its_scheduling_gates(
    client: ReviewClient, labels: dict[str, str], gate: dict[str, str]
) -> None:
    annotations = {TOTAL: "2"} if GROUP in labels else None
    old = pod(labels=labels, annotations=annotations, gated=True)
    old["spec"]["schedulingGates"] = [gate, {"name": "example.com/other"}]
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    review = make_review("Pod", new, old=old, operation="UPDATE", username="alice")
    status, resp = client.post(VALIDATE, review)
    assert status == 200
    assert denial(resp["response"]) == (
        f"spec.schedulingGates: Forbidden: the {gate['name']} gate can only be removed by "
        f'the admission service ({SERVICE_USER}), not by "alice"'
    )
    review = make_review("Pod", new, old=old, operation="UPDATE", username=SERVICE_USER)
    assert client.post(VALIDATE, review)[1]["response"]["allowed"] is True
    others = copy.deepcopy(old)  # another controller's gate is not the service's to guard
    others["spec"]["schedulingGates"] = [gate]
    review = make_review("Pod", others, old=old, operation="UPDATE", username="alice")
    assert client.post(VALIDATE, review)[1]["response"]["allowed"] is True


@pytest.mark.parametrize("gates", [[GATE], [TOPOLOGY_GATE]], ids=["admission", "topology"])
def test_only_the_service_may_take_the_managed_label_off_a_gated_pod(
    client: ReviewClient, gates: list[dict[str, str]]
) -> None:
    """Without a queue-name label the managed label is what routes a pod's updates to
    this webhook: dropping it would let the next patch lift the gate unseen."""
    old = pod(labels={MANAGED: "true"}, gated=True)
    old["spec"]["schedulingGates"] = gates
    new = copy.deepcopy(old)
    del new["metadata"]["labels"][MANAGED]
    review = make_review("Pod", new, old=old, operation="UPDATE", username="alice")
    assert denial(client.post(VALIDATE, review)[1]["response"]) == (
        f"metadata.labels[{MANAGED}]: Forbidden: the label can only be removed from a pod "
        f"behind the {gates[0]['name']} gate by the admission service ({SERVICE_USER}), "
        'not by "alice"'
    )
    review = make_review("Pod", new, old=old, operation="UPDATE", username=SERVICE_USER)
    assert client.post(VALIDATE, review)[1]["response"]["allowed"] is True
    running = copy.deepcopy(old)  # once the service has lifted its gates the label is free
    running["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    unlabelled = copy.deepcopy(running)
    del unlabelled["metadata"]["labels"][MANAGED]
    review = make_review("Pod", unlabelled, old=running, operation="UPDATE", username="alice")
    assert client.post(VALIDATE, review)[1]["response"]["allowed"] is True
