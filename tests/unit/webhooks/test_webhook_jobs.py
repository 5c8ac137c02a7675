"""batch/v1 Job admission over real HTTPS (docs/semantics.md §3.3): patches asserted exactly."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from queues.model import LocalQueue, Namespace, PriorityClass
from tests.support.webhook_server import (
    ReviewClient,
    WebhookServerThread,
    decode_patch,
    make_review,
)
from webhooks.config import WebhookConfig
from webhooks.view import InMemoryView

MUTATE = "/mutate-batch-v1-job"
VALIDATE = "/validate-batch-v1-job"
Q = "kueue.x-k8s.io/queue-name"
PC = "kueue.x-k8s.io/priority-class"
MIN_PAR = "kueue.x-k8s.io/job-min-parallelism"
SYNC = "kueue.x-k8s.io/job-completions-equal-parallelism"
MAX_EXEC = "kueue.x-k8s.io/max-exec-time-seconds"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"


def view(*, with_default_wpc: bool = True) -> InMemoryView:
    return InMemoryView(
        local_queues={
            "team-a/default": LocalQueue("team-a", "default", "cq"),
            "team-a/queue-a": LocalQueue("team-a", "queue-a", "cq"),
            "kube-system/default": LocalQueue("kube-system", "default", "cq"),
        },
        workload_priority_classes={"default": PriorityClass("default", 10)}
        if with_default_wpc
        else {},
        namespaces={"team-a": Namespace("team-a"), "team-b": Namespace("team-b")},
    )


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    with WebhookServerThread(view=view(), cert_dir=tmp_path_factory.mktemp("certs")) as srv:
        c = srv.client()
        yield c
        c.close()


@pytest.fixture(scope="module")
def client_manage_all(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewClient]:
    config = WebhookConfig(manage_jobs_without_queue_name=True)
    with WebhookServerThread(
        view=view(with_default_wpc=False), config=config, cert_dir=tmp_path_factory.mktemp("certs")
    ) as srv:
        c = srv.client()
        yield c
        c.close()


def job(
    *,
    ns: str = "team-a",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j", "namespace": ns}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    body = {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}, **spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": body}


def mutate(client: ReviewClient, obj: dict[str, Any]) -> list[dict[str, Any]]:
    review = make_review("Job", obj, uid="uid-m")
    status, resp = client.post(MUTATE, review)
    assert status == 200
    assert resp["response"]["uid"] == "uid-m"
    assert resp["response"]["allowed"] is True
    return decode_patch(resp)


def validate(
    client: ReviewClient, obj: dict[str, Any], old: dict[str, Any] | None = None
) -> dict[str, Any]:
    op = "UPDATE" if old is not None else "CREATE"
    status, resp = client.post(
        VALIDATE, make_review("Job", obj, old=old, operation=op, uid="uid-v")
    )
    assert status == 200
    assert resp["response"]["uid"] == "uid-v"
    return resp["response"]


def denial(response: dict[str, Any]) -> str:
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    return response["status"]["message"]


# ---------------------------------------------------------------- mutating


def test_job_without_labels_gets_default_queue_default_priority_class_and_suspend(
    client: ReviewClient,
) -> None:
    assert mutate(client, job()) == [
        {"op": "add", "path": "/metadata/labels", "value": {Q: "default", PC: "default"}},
        {"op": "add", "path": "/spec/suspend", "value": True},
    ]


def test_job_with_queue_label_keeps_it_and_is_suspended(client: ReviewClient) -> None:
    assert mutate(client, job(labels={Q: "queue-a"})) == [
        {
            "op": "add",
            "path": "/metadata/labels/kueue.x-k8s.io~1priority-class",
            "value": "default",
        },
        {"op": "add", "path": "/spec/suspend", "value": True},
    ]


def test_running_job_with_queue_label_has_suspend_replaced(client: ReviewClient) -> None:
    assert mutate(client, job(labels={Q: "queue-a", PC: "high"}, suspend=False)) == [
        {"op": "replace", "path": "/spec/suspend", "value": True},
    ]


def test_already_suspended_labelled_job_gets_no_patch(client: ReviewClient) -> None:
    status, resp = client.post(
        MUTATE, make_review("Job", job(labels={Q: "queue-a", PC: "x"}, suspend=True))
    )
    assert status == 200
    assert resp["response"] == {"uid": resp["response"]["uid"], "allowed": True}


def test_namespace_without_default_queue_only_gets_priority_class(client: ReviewClient) -> None:
    assert mutate(client, job(ns="team-b")) == [
        {"op": "add", "path": "/metadata/labels", "value": {PC: "default"}},
    ]


def test_kube_system_is_outside_the_managed_namespaces(client: ReviewClient) -> None:
    # kube-system has a LocalQueue "default" but the default namespace selector excludes it;
    # the priority-class default has no namespace check in Kueue either.
    assert mutate(client, job(ns="kube-system")) == [
        {"op": "add", "path": "/metadata/labels", "value": {PC: "default"}},
    ]


def test_job_owned_by_a_managed_kind_is_left_alone(client: ReviewClient) -> None:
    """The controller owner is of an enabled integration (any registered kind: here
    batch/v1 Job itself), which admits the whole: no queue default, no suspend."""
    obj = job()
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": True}
    ]
    assert mutate(client, obj) == []


def test_job_owned_by_a_cronjob_is_managed(client: ReviewClient) -> None:
    obj = job(labels={Q: "queue-a", PC: "p"})
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "CronJob", "name": "cj", "uid": "1", "controller": True}
    ]
    assert mutate(client, obj) == [{"op": "add", "path": "/spec/suspend", "value": True}]


def test_job_being_deleted_is_not_suspended(client: ReviewClient) -> None:
    obj = job(labels={Q: "queue-a", PC: "p"})
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert mutate(client, obj) == []


def test_manage_jobs_without_queue_name_suspends_in_managed_namespaces(
    client_manage_all: ReviewClient,
) -> None:
    assert mutate(client_manage_all, job(ns="team-b")) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]
    assert mutate(client_manage_all, job(ns="quartermaster-system")) == []


def test_update_reviews_on_the_mutating_path_are_allowed_unchanged(client: ReviewClient) -> None:
    status, resp = client.post(MUTATE, make_review("Job", job(), old=job(), operation="UPDATE"))
    assert status == 200 and resp["response"]["allowed"] is True and "patch" not in resp["response"]


# ---------------------------------------------------------------- validating CREATE


def test_valid_job_is_allowed(client: ReviewClient) -> None:
    assert validate(client, job(labels={Q: "queue-a"}))["allowed"] is True


def test_queue_name_must_be_a_dns_subdomain(client: ReviewClient) -> None:
    assert denial(validate(client, job(labels={Q: "Team_A"}))) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Team_A": a lowercase RFC 1123 '
        "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and "
        "end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )


def test_queue_name_longer_than_253_characters_is_rejected(client: ReviewClient) -> None:
    msg = denial(validate(client, job(labels={Q: "a" * 254})))
    assert "must be no more than 253 characters" in msg


def test_prebuilt_workload_name_must_be_a_dns_subdomain(client: ReviewClient) -> None:
    msg = denial(validate(client, job(labels={PREBUILT: "Bad!"})))
    assert msg.startswith(
        'metadata.labels[kueue.x-k8s.io/prebuilt-workload-name]: Invalid value: "Bad!": '
    )


def test_max_exec_time_must_be_a_positive_integer(client: ReviewClient) -> None:
    assert denial(validate(client, job(labels={MAX_EXEC: "soon"}))) == (
        'metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "soon": '
        'strconv.Atoi: parsing "soon": invalid syntax'
    )
    assert denial(validate(client, job(labels={MAX_EXEC: "0"}))) == (
        "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: 0: should be greater than 0"
    )


def test_min_parallelism_must_be_below_the_pod_count(client: ReviewClient) -> None:
    assert denial(validate(client, job(annotations={MIN_PAR: "4"}, parallelism=4))) == (
        "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]: Invalid value: 4: should be between 0 and 3"
    )
    # completions below parallelism bound the pod count
    assert "should be between 0 and 1" in denial(
        validate(client, job(annotations={MIN_PAR: "2"}, parallelism=4, completions=2))
    )
    assert validate(client, job(annotations={MIN_PAR: "3"}, parallelism=4))["allowed"] is True


def test_min_parallelism_must_be_an_integer(client: ReviewClient) -> None:
    assert denial(validate(client, job(annotations={MIN_PAR: "x"}, parallelism=4))) == (
        'metadata.annotations[kueue.x-k8s.io/job-min-parallelism]: Invalid value: "x": '
        'strconv.Atoi: parsing "x": invalid syntax'
    )


def test_completions_equal_parallelism_needs_indexed_and_equal_counts(client: ReviewClient) -> None:
    msg = denial(validate(client, job(annotations={SYNC: "true"}, parallelism=2, completions=3)))
    assert msg == (
        '[metadata.annotations[kueue.x-k8s.io/job-completions-equal-parallelism]: Invalid value: "true": '
        "should not be enabled for NonIndexed jobs, spec.completions: Invalid value: 3: should be equal to "
        "parallelism when kueue.x-k8s.io/job-completions-equal-parallelism is annotation is true]"
    )
    ok = job(annotations={SYNC: "true"}, parallelism=2, completions=2, completionMode="Indexed")
    assert validate(client, ok)["allowed"] is True
    bad_bool = denial(validate(client, job(annotations={SYNC: "yes"})))
    assert 'strconv.ParseBool: parsing "yes": invalid syntax' in bad_bool


# ---------------------------------------------------------------- validating UPDATE


def running(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["suspend"] = False
    return out


def test_queue_name_is_immutable_while_running(client: ReviewClient) -> None:
    old = running(job(labels={Q: "queue-a"}))
    new = running(job(labels={Q: "queue-b"}))
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "queue-b": field is immutable'
    )


def test_queue_name_may_change_while_suspended(client: ReviewClient) -> None:
    old = job(labels={Q: "queue-a"}, suspend=True)
    new = job(labels={Q: "queue-b"}, suspend=True)
    assert validate(client, new, old)["allowed"] is True


def test_queue_name_cannot_be_removed_where_a_default_queue_exists(client: ReviewClient) -> None:
    old = job(labels={Q: "queue-a"}, suspend=True)
    new = job(labels={}, suspend=True)
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "": '
        "queue-name must not be empty in namespace with default queue"
    )
    # team-b has no default LocalQueue: removal allowed while suspended
    assert validate(
        client,
        job(ns="team-b", labels={}, suspend=True),
        job(ns="team-b", labels={Q: "q"}, suspend=True),
    )["allowed"]


def test_priority_class_cannot_be_added_to_a_running_job(client: ReviewClient) -> None:
    old = running(job(labels={Q: "queue-a"}))
    new = running(job(labels={Q: "queue-a", PC: "high"}))
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "high": '
        "WorkloadPriorityClass cannot be added to a non-suspended workload"
    )
    suspended_old = job(labels={Q: "queue-a"}, suspend=True)
    suspended_new = job(labels={Q: "queue-a", PC: "high"}, suspend=True)
    assert validate(client, suspended_new, suspended_old)["allowed"] is True


def test_priority_class_cannot_be_changed_on_a_running_job(client: ReviewClient) -> None:
    old = running(job(labels={Q: "queue-a", PC: "low"}))
    new = running(job(labels={Q: "queue-a", PC: "high"}))
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "high": field is immutable'
    )
    suspended_old = job(labels={Q: "queue-a", PC: "low"}, suspend=True)
    suspended_new = job(labels={Q: "queue-a", PC: "high"}, suspend=True)
    assert validate(client, suspended_new, suspended_old)["allowed"] is True


def test_priority_class_cannot_be_removed(client: ReviewClient) -> None:
    old = job(labels={Q: "queue-a", PC: "high"}, suspend=True)
    new = job(labels={Q: "queue-a"}, suspend=True)
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "": '
        "WorkloadPriorityClass cannot be removed from a workload"
    )


def test_max_exec_time_is_immutable_unless_suspended_before_and_after(client: ReviewClient) -> None:
    old = job(labels={MAX_EXEC: "10"}, suspend=True)
    new = running(job(labels={MAX_EXEC: "20"}))
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "20": field is immutable'
    )
    assert validate(client, job(labels={MAX_EXEC: "20"}, suspend=True), old)["allowed"] is True


def test_prebuilt_workload_is_immutable_while_running(client: ReviewClient) -> None:
    old = running(job(labels={PREBUILT: "wl-a"}))
    new = running(job(labels={PREBUILT: "wl-b"}))
    assert denial(validate(client, new, old)) == (
        'metadata.labels[kueue.x-k8s.io/prebuilt-workload-name]: Invalid value: "wl-b": field is immutable'
    )


def test_parallelism_is_frozen_on_a_running_partially_admitted_job(client: ReviewClient) -> None:
    old = running(job(annotations={MIN_PAR: "1"}, parallelism=4))
    new = running(job(annotations={MIN_PAR: "1"}, parallelism=3))
    assert denial(validate(client, new, old)) == (
        "spec.parallelism: Forbidden: cannot change when partial admission is enabled and the job is not suspended"
    )


def test_completions_equal_parallelism_annotation_is_immutable_while_running(
    client: ReviewClient,
) -> None:
    old = running(job(parallelism=2, completions=2, completionMode="Indexed"))
    new = running(
        job(annotations={SYNC: "true"}, parallelism=2, completions=2, completionMode="Indexed")
    )
    assert denial(validate(client, new, old)) == (
        "metadata.annotations[kueue.x-k8s.io/job-completions-equal-parallelism]: "
        "Forbidden: field is immutable while the job is not suspended"
    )


def test_several_violations_are_reported_together(client: ReviewClient) -> None:
    msg = denial(validate(client, job(labels={Q: "UPPER", MAX_EXEC: "-1"})))
    assert msg.startswith("[metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value:")
    assert msg.endswith(
        "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: -1: should be greater than 0]"
    )


# ---------------------------------------------------------------- topology annotations


def _tas_job(annotations: dict[str, str], parallelism: int = 4) -> dict[str, Any]:
    obj = job(parallelism=parallelism)
    obj["spec"]["template"]["metadata"] = {"annotations": annotations}
    return obj


def test_job_with_two_topology_annotations_is_denied_with_kueues_message(
    client: ReviewClient,
) -> None:
    obj = _tas_job(
        {
            "kueue.x-k8s.io/podset-required-topology": "rack",
            "kueue.x-k8s.io/podset-preferred-topology": "block",
        }
    )
    assert (
        "spec.template.metadata.annotations: Invalid value: must not contain more than one "
        "topology annotation" in denial(validate(client, obj))
    )


def test_job_slice_larger_than_its_pods_is_denied_on_create_and_update(
    client: ReviewClient,
) -> None:
    obj = _tas_job(
        {
            "kueue.x-k8s.io/podset-slice-required-topology": "rack",
            "kueue.x-k8s.io/podset-slice-size": "8",
        }
    )
    msg = 'podset-slice-size]: Invalid value: "8": must not be greater than pod set count 4'
    assert msg in denial(validate(client, obj))
    assert msg in denial(validate(client, obj, old=obj))
    ok = _tas_job({"kueue.x-k8s.io/podset-required-topology": "rack"})
    assert validate(client, ok)["allowed"] is True
