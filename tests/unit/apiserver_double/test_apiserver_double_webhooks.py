"""The API-server double calls admission webhooks like kube-apiserver: over HTTPS, with failure policies.

Quartermaster's own webhooks are reached through the double in most tests, so the double
must call them as the real server does: AdmissionReview over HTTPS to the configured
service, mutating patches applied before validation, TLS verified against the caBundle,
``failurePolicy`` honoured when a webhook is down, and DELETE operations sent to
validating webhooks.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from admission.apiserver_double import (
    ServingCert,
    load_webhook_configurations,
    make_serving_cert,
    running_apiserver,
)
from tests.support.double_client import kube_client_config

from ._support import (
    KUEUE,
    MERGE,
    Review,
    V,
    cluster,
    decide,
    job,
    run,
    status_body,
    webhook_configurations,
    workload,
)


@asynccontextmanager
async def webhook_server(
    cert: ServingCert, decide: Callable[[str, Review], dict[str, Any]]
) -> AsyncIterator[tuple[str, list[tuple[str, Review]]]]:
    """A tiny HTTPS AdmissionReview server; ``decide(path, request)`` builds the response."""
    received: list[tuple[str, Review]] = []

    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        received.append((request.path, review["request"]))
        response = {"uid": review["request"]["uid"], **decide(request.path, review["request"])}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    app = web.Application()
    app.router.add_post("/{path:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=cert.server_ssl_context())
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"https://127.0.0.1:{port}", received
    finally:
        await runner.cleanup()


def test_webhooks_are_called_over_https_like_kube_apiserver() -> None:
    async def scenario() -> None:
        cert = make_serving_cert(["wh.hooks.svc"])
        async with webhook_server(cert, decide) as (url, received):
            async with cluster(
                webhook_configurations=webhook_configurations(cert.ca_bundle),
                service_routes={"hooks/wh": url},
                tokens={"tok-alice": ("alice", ["team-a"])},
                token="tok-alice",
            ) as (server, api):
                batch = client.BatchV1Api(api)
                resp = await batch.create_namespaced_job_with_http_info("default", job("good"))
                assert resp.status_code == 201
                assert (
                    resp.data.metadata.labels == {"mutated": "yes"}
                    and resp.data.spec.suspend is True
                )
                assert resp.headers["Warning"] == '299 - "job suspended by test webhook"'
                mutate_req = next(r for p, r in received if p == "/mutate-job")
                assert mutate_req["operation"] == "CREATE" and mutate_req["namespace"] == "default"
                assert mutate_req["kind"] == {"group": "batch", "version": "v1", "kind": "Job"}
                assert mutate_req["resource"] == {
                    "group": "batch",
                    "version": "v1",
                    "resource": "jobs",
                }
                assert mutate_req["userInfo"] == {"username": "alice", "groups": ["team-a"]}
                assert (
                    mutate_req["object"]["metadata"]["name"] == "good"
                    and mutate_req["oldObject"] is None
                )
                assert (
                    mutate_req["options"]["kind"] == "CreateOptions"
                    and mutate_req["dryRun"] is False
                )
                validate_req = next(r for p, r in received if p == "/validate")
                assert validate_req["object"]["metadata"]["labels"] == {"mutated": "yes"}, (
                    "validation sees the mutated object"
                )

                with pytest.raises(ApiException) as err:
                    await batch.create_namespaced_job("default", job("bad-one"))
                assert err.value.status == 403
                assert (
                    status_body(err.value)["message"]
                    == 'admission webhook "vjob.test.io" denied the request: bad name'
                )
                assert server.get_object("jobs", "bad-one", "default") is None

                received.clear()
                system = await batch.create_namespaced_job("kube-system", job("bad-but-system"))
                assert received == [] and system.metadata.labels == {}, (
                    "namespaceSelector excludes kube-system"
                )

                co = client.CustomObjectsApi(api)
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", workload("w")
                )
                await co.patch_namespaced_custom_object_status(
                    KUEUE,
                    V,
                    "default",
                    "workloads",
                    "w",
                    {"status": {"conditions": []}},
                    _content_type=MERGE,
                )
                status_req = received[-1][1]
                assert (status_req["subResource"], status_req["operation"]) == ("status", "UPDATE")
                assert (
                    status_req["oldObject"]["metadata"]["name"] == "w"
                    and status_req["kind"]["kind"] == "Workload"
                )

    run(scenario)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_webhook_failure_policy_and_tls_verification(tmp_path: Path) -> None:
    manifest = tmp_path / "webhooks.yaml"
    manifest.write_text(yaml.safe_dump_all(webhook_configurations("")))

    async def scenario() -> None:
        cert, other_ca = make_serving_cert(["wh.hooks.svc"]), make_serving_cert(["wh.hooks.svc"])
        async with webhook_server(cert, decide) as (url, _):
            # loaded from a manifest, with a CA that did not sign the webhook's certificate
            configs = load_webhook_configurations(manifest, ca_bundle=other_ca.ca_bundle)
            assert [c["kind"] for c in configs] == [
                "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration",
            ]
            async with running_apiserver(
                webhook_configurations=configs, service_routes={"hooks/wh": url}
            ) as server:
                async with client.ApiClient(kube_client_config(server.url)) as api:
                    batch = client.BatchV1Api(api)
                    with pytest.raises(ApiException) as err:
                        await batch.create_namespaced_job("default", job("j"))
                    assert err.value.status == 500
                    assert (
                        'failed calling webhook "mjob.test.io"' in status_body(err.value)["message"]
                    )
                    for config in server.list_objects(
                        "mutatingwebhookconfigurations"
                    ) + server.list_objects("validatingwebhookconfigurations"):
                        config["webhooks"][0]["failurePolicy"] = "Ignore"
                        config["webhooks"][0]["clientConfig"] = {
                            "url": f"https://127.0.0.1:{_closed_port()}/x"
                        }
                        server.put_object(config)
                    created = await batch.create_namespaced_job("default", job("j"))
                    assert created.metadata.labels == {}, (
                        "ignored failures let the write through unmutated"
                    )

    run(scenario)


def test_delete_operations_reach_validating_webhooks() -> None:
    def deny_deletes(path: str, request: Review) -> dict[str, Any]:
        if request["operation"] == "DELETE":
            return {
                "allowed": False,
                "status": {"message": f"{request['oldObject']['metadata']['name']} is protected"},
            }
        return {"allowed": True}

    async def scenario() -> None:
        cert = make_serving_cert(["wh.hooks.svc"])
        async with webhook_server(cert, deny_deletes) as (url, received):
            config = webhook_configurations(cert.ca_bundle)[1]
            config["webhooks"][0]["rules"] = [
                {
                    "operations": ["DELETE"],
                    "apiGroups": [KUEUE],
                    "apiVersions": ["*"],
                    "resources": ["*"],
                    "scope": "Namespaced",
                }
            ]
            async with cluster(
                webhook_configurations=[config], service_routes={"hooks/wh": url}
            ) as (server, api):
                co = client.CustomObjectsApi(api)
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", workload("w")
                )
                cq = {
                    "apiVersion": f"{KUEUE}/{V}",
                    "kind": "ClusterQueue",
                    "metadata": {"name": "cq"},
                    "spec": {},
                }
                await co.create_cluster_custom_object(KUEUE, V, "clusterqueues", cq)
                with pytest.raises(ApiException) as err:
                    await co.delete_namespaced_custom_object(KUEUE, V, "default", "workloads", "w")
                assert err.value.status == 400, "a denial without a code is a 400"
                assert (
                    status_body(err.value)["message"]
                    == 'admission webhook "vjob.test.io" denied the request: w is protected'
                )
                await co.delete_cluster_custom_object(KUEUE, V, "clusterqueues", "cq")
                assert [r["name"] for _, r in received] == ["w"], (
                    "scope: Namespaced skips cluster-scoped kinds"
                )
                assert [c["request"]["name"] for c in server.webhook_calls] == ["w"]
                assert server.get_object("workloads", "w", "default") is not None

    run(scenario)
