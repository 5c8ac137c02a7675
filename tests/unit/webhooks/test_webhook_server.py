"""The AdmissionReview envelope, robustness, health and metrics of the real HTTPS server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.webhook_server import ReviewClient, WebhookServerThread, make_review, sample_view
from webhooks import codec
from webhooks.config import WebhookConfig
from webhooks.handlers import job as jobs
from webhooks.review import HandlerContext
from webhooks.server.app import MAX_BODY_BYTES, all_webhooks, process_review
from webhooks.server.health import WebhookState

MUTATE = "/mutate-batch-v1-job"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServerThread]:
    with WebhookServerThread(view=sample_view(), cert_dir=tmp_path_factory.mktemp("certs")) as srv:
        yield srv


@pytest.fixture()
def client(server: WebhookServerThread) -> Iterator[ReviewClient]:
    c = server.client()
    yield c
    c.close()


def job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team-a"},
        "spec": {},
    }


def with_request(**changes: Any) -> dict[str, Any]:
    review = make_review("Job", job())
    for key, value in changes.items():
        if value is None:
            review["request"].pop(key, None)
        else:
            review["request"][key] = value
    return review


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "malformed JSON: "),
        (b"\xff\xfe\x00", "malformed JSON: "),
        (b"[1, 2]", "the body must be a JSON object (an AdmissionReview)"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed JSON: "),
        (
            json.dumps(
                {**make_review("Job", job()), "apiVersion": "admission.k8s.io/v1beta1"}
            ).encode(),
            "unsupported apiVersion 'admission.k8s.io/v1beta1', expected admission.k8s.io/v1",
        ),
        (
            json.dumps({**make_review("Job", job()), "kind": "Review"}).encode(),
            "unexpected kind 'Review', expected AdmissionReview",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "missing request",
        ),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"}
            ).encode(),
            "request must be an object",
        ),
        (json.dumps(with_request(uid=None)).encode(), "request.uid must be a non-empty string"),
        (
            json.dumps(
                with_request(kind={"group": "batch", "version": "v1", "kind": "CronJob"})
            ).encode(),
            "unexpected kind batch/v1/CronJob for /mutate-batch-v1-job, expected batch/v1/Job",
        ),
        (
            json.dumps(with_request(kind=None)).encode(),
            "request.kind must be an object {group, version, kind}",
        ),
        (
            json.dumps(with_request(operation="PATCH")).encode(),
            "request.operation must be one of CONNECT, CREATE, DELETE, UPDATE",
        ),
        (json.dumps(with_request(object=None)).encode(), "request.object is required for CREATE"),
        (json.dumps(with_request(object=[1])).encode(), "request.object must be an object"),
        (
            json.dumps(with_request(operation="UPDATE")).encode(),
            "request.oldObject is required for UPDATE",
        ),
        (json.dumps(with_request(namespace=7)).encode(), "request.namespace must be a string"),
    ],
)
def test_unusable_reviews_get_400_with_a_one_line_reason(
    client: ReviewClient, body: bytes, reason: str
) -> None:
    status, text = client.post(MUTATE, body)
    assert status == 400
    assert text.startswith(reason)
    assert text.count("\n") == 1 and text.endswith("\n")


def test_body_over_3_mib_is_refused_with_413_and_the_connection_closed(
    server: WebhookServerThread, client: ReviewClient
) -> None:
    from tests.unit.webhooks.test_webhook_hardening import raw_exchange

    # announced too large: answered before the body is sent, then closed (not drained)
    head = (
        f"POST {MUTATE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    ).encode()
    answer, closed = raw_exchange(server, head + b"{")
    assert answer.startswith(b"HTTP/1.1 413")
    assert closed
    # chunked, growing past the limit while read: 413 as well, then closed
    review = make_review("Job", job())
    review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * MAX_BODY_BYTES}
    body = json.dumps(review).encode()
    chunked = f"POST {MUTATE} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    chunked += f"{len(body):x}\r\n".encode() + body + b"\r\n"
    answer, closed = raw_exchange(server, chunked)
    assert answer.startswith(b"HTTP/1.1 413")
    assert closed
    # and the server keeps serving
    status, resp = client.post(MUTATE, make_review("Job", job()))
    assert status == 200 and resp["response"]["allowed"] is True


def test_unknown_path_is_404_and_get_on_a_webhook_is_405(client: ReviewClient) -> None:
    assert client.post("/mutate-apps-v1-daemonset", make_review("Job", job()))[0] == 404
    assert client.get(MUTATE)[0] == 405


def test_delete_is_allowed_without_calling_the_handler(client: ReviewClient) -> None:
    review = make_review("Job", None, old=job(), operation="DELETE", uid="del-1")
    status, resp = client.post("/validate-batch-v1-job", review)
    assert status == 200
    assert resp == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "del-1", "allowed": True},
    }


def test_malformed_object_is_denied_naming_the_field(client: ReviewClient) -> None:
    obj = job()
    obj["metadata"]["labels"] = ["not", "a", "map"]
    status, resp = client.post(MUTATE, make_review("Job", obj, uid="bad-1"))
    assert status == 200
    assert resp["response"] == {
        "uid": "bad-1",
        "allowed": False,
        "status": {
            "code": 400,
            "reason": "BadRequest",
            "message": "Job 'j': metadata.labels: must be a map of strings",
        },
    }


def test_handler_exception_becomes_a_logged_denial(
    client: ReviewClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(cls: type, obj: Any) -> Any:
        raise RuntimeError("handler bug")

    monkeypatch.setattr(jobs.JobFields, "of", classmethod(boom))
    with caplog.at_level(logging.ERROR, logger="quartermaster.webhooks"):
        status, resp = client.post(MUTATE, make_review("Job", job(), uid="boom-1"))
    assert status == 200
    assert resp["response"] == {
        "uid": "boom-1",
        "allowed": False,
        "status": {
            "code": 500,
            "reason": "InternalError",
            "message": "internal error in webhook /mutate-batch-v1-job: RuntimeError: handler bug",
        },
    }
    assert any("webhook /mutate-batch-v1-job failed" in r.getMessage() for r in caplog.records)


def test_health_and_metrics(client: ReviewClient) -> None:
    assert client.get("/healthz") == (200, "ok\n")
    assert client.get("/readyz") == (200, "ok\n")
    client.post(
        "/validate-batch-v1-job",
        make_review(
            "Job",
            {**job(), "metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "BAD"}}},
        ),
    )
    client.post(MUTATE, b"{")
    status, text = client.get("/metrics")
    assert status == 200
    assert (
        'controller_runtime_webhook_requests_total{code="200",webhook="/validate-batch-v1-job"}'
        in text
    )
    assert (
        'controller_runtime_webhook_requests_total{code="400",webhook="/mutate-batch-v1-job"}'
        in text
    )
    assert (
        'controller_runtime_webhook_latency_seconds_bucket{le="0.005",webhook="/mutate-batch-v1-job"}'
        in text
    )
    assert 'quartermaster_webhook_denials_total{webhook="/validate-batch-v1-job"} 1.0' in text


def test_readyz_waits_for_the_model(tmp_path: Any) -> None:
    state = WebhookState(model_synced=False)
    with WebhookServerThread(view=sample_view(), cert_dir=tmp_path, state=state) as srv:
        c = srv.client()
        assert c.get("/readyz") == (503, "not ready: waiting for model\n")
        assert c.get("/healthz")[0] == 200
        state.model_synced = True
        assert c.get("/readyz") == (200, "ok\n")
        c.close()


def test_every_kueue_path_is_served() -> None:
    """Kueue's paths: two per job integration of the registry, then the queue objects'."""
    from admission.integrations.registry import INTEGRATIONS

    paths = {spec.path for spec in all_webhooks()}
    assert {"/mutate-batch-v1-job", "/validate-batch-v1-job", "/mutate--v1-pod",
            "/validate--v1-pod"} <= paths  # fmt: skip
    assert paths == {
        *(p for i in INTEGRATIONS for p in i.webhook_paths()),
        "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue",
        "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor",
        "/mutate-kueue-x-k8s-io-v1beta2-workload",
        "/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
        "/validate-kueue-x-k8s-io-v1beta2-cohort",
        "/validate-kueue-x-k8s-io-v1beta2-resourceflavor",
        "/validate-kueue-x-k8s-io-v1beta2-workload",
        "/validate-kueue-x-k8s-io-v1beta2-localqueue",
        "/validate-kueue-x-k8s-io-v1beta2-topology",
        "/validate-kueue-x-k8s-io-v1beta2-workloadpriorityclass",
    }


def test_stdlib_json_fallback_handles_lone_surrogates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without orjson, json.loads accepts lone surrogates; the 400 reason must still encode."""
    monkeypatch.setattr(codec, "_json_loads", json.loads)
    spec = next(s for s in all_webhooks() if s.path == MUTATE)
    ctx = HandlerContext(view=sample_view(), config=WebhookConfig())
    body = json.dumps(
        with_request(kind={"group": "batch", "version": "v1", "kind": "\ud800"})
    ).encode()
    status, payload, verdict = process_review(body, spec, ctx)
    assert status == 400 and verdict is None
    assert payload.startswith(b"unexpected kind batch/v1/\\ud800 for /mutate-batch-v1-job")
    status, payload, verdict = process_review(
        json.dumps(make_review("Job", job())).encode(), spec, ctx
    )
    assert status == 200 and verdict is not None and verdict.allowed


def test_a_workload_create_is_decided_without_reading_its_owners(tmp_path: Any) -> None:
    """A Workload's owner is its job: the Workload webhook decides a CREATE as it comes,
    while a pod's CREATE with the same controller owner has its owners read first."""
    from admission.integrations.ownership import OwnerRef

    reads: list[OwnerRef] = []

    async def source(ref: OwnerRef) -> dict[str, Any] | None:
        reads.append(ref)
        return None

    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u1", "controller": True}
    meta = {"name": "w", "namespace": "team-a", "ownerReferences": [owner]}
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
                "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {
                    "spec": {"containers": [{"name": "c"}]}}}]}}  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": "p"},
           "spec": {"containers": [{"name": "c"}]}}  # fmt: skip
    with WebhookServerThread(view=sample_view(), cert_dir=tmp_path, owners=source) as srv:
        c = srv.client()
        try:
            status, review = c.post("/mutate-kueue-x-k8s-io-v1beta2-workload",
                                    make_review("Workload", workload))  # fmt: skip
            assert status == 200 and review["response"]["allowed"], review
            assert reads == []
            status, review = c.post("/mutate--v1-pod", make_review("Pod", pod))
            assert status == 200, review
            assert reads == [OwnerRef("batch/v1", "Job", "team-a", "j", "u1")]
        finally:
            c.close()
