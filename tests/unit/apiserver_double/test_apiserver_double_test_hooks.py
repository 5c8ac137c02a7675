"""The API-server double's test hooks: fault injection, request recording, pause, threads, HTTPS.

Tests elsewhere make the double fail requests, count what the controller sent, hold
requests, serve synchronous tests from a thread and serve HTTPS with a generated CA;
these tests check that each hook does what those tests rely on.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from admission.apiserver_double import start_apiserver
from tests.support.double_client import kube_client_config

from ._support import KUEUE, MERGE, V, cluster, job, run, status_body, workload


def test_fault_injection_fails_the_next_matching_requests() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            batch = client.BatchV1Api(api)
            await batch.create_namespaced_job("default", job("j"))
            server.fail_next(2, code=500, verb="get", resource="jobs")
            for _ in range(2):
                with pytest.raises(ApiException) as err:
                    await batch.read_namespaced_job("j", "default")
                assert (
                    err.value.status == 500 and status_body(err.value)["reason"] == "InternalError"
                )
            assert (await batch.read_namespaced_job("j", "default")).metadata.name == "j"
            server.fail_next(code=429, verb="create", retry_after=3)
            with pytest.raises(ApiException) as err:
                await batch.create_namespaced_job("default", job("k"))
            assert err.value.status == 429 and err.value.headers["Retry-After"] == "3"
            server.fail_next(code=409, resource="jobs/status")
            with pytest.raises(ApiException) as err:
                await batch.patch_namespaced_job_status(
                    "j", "default", {"status": {"active": 1}}, _content_type=MERGE
                )
            assert err.value.status == 409
            await batch.patch_namespaced_job_status(
                "j", "default", {"status": {"active": 1}}, _content_type=MERGE
            )

    run(scenario)


def test_request_recording_counts_verbs_resources_and_content_types() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w")
            )
            await co.patch_namespaced_custom_object_status(
                KUEUE, V, "default", "workloads", "w", {"status": {}}, _content_type=MERGE
            )
            await co.list_cluster_custom_object(KUEUE, V, "workloads", label_selector="a=b")
            assert server.request_count(verb="create", resource="workloads") == 1
            assert server.request_count(resource="workloads") == 3
            assert server.request_count(resource="workloads/status") == 1
            listing = [r for r in server.requests if r.verb == "list"][0]
            assert (
                listing.query == {"labelSelector": "a=b"}
                and listing.path == f"/apis/{KUEUE}/{V}/workloads"
            )
            patch = [r for r in server.requests if r.verb == "patch"][0]
            assert (patch.content_type, patch.status, patch.name, patch.namespace) == (
                MERGE,
                200,
                "w",
                "default",
            )
            server.clear_requests()
            assert server.request_count() == 0

    run(scenario)


def test_pause_holds_requests_until_resume() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            core = client.CoreV1Api(api)
            server.pause()
            pending = asyncio.ensure_future(core.read_namespace("default"))
            while server.request_count(verb="get", resource="namespaces") == 0:
                await asyncio.sleep(0.01)
            assert not pending.done()
            server.resume()
            assert (await pending).metadata.name == "default"

    run(scenario)


def test_threaded_handle_serves_sync_tests_and_marshals_hooks() -> None:
    with start_apiserver(objects=[workload("seeded")]) as api:
        assert api.url.startswith("http://127.0.0.1:")
        seeded = api.get_object("workloads", "seeded", "default")
        assert seeded is not None and seeded["metadata"]["uid"]
        api.fail_next(code=503, verb="list")

        async def list_namespaces() -> int:
            async with client.ApiClient(kube_client_config(api.url, ca_pem=api.ca_pem)) as c:
                with pytest.raises(ApiException) as err:
                    await client.CoreV1Api(c).list_namespace()
                assert err.value.status == 503
                return len((await client.CoreV1Api(c).list_namespace()).items)

        assert asyncio.run(list_namespaces()) == 4
        assert api.request_count(verb="list", resource="namespaces") == 2
        assert [o["metadata"]["name"] for o in api.list_objects("namespaces")] == [
            "default", "kube-node-lease", "kube-public", "kube-system",
        ]  # fmt: skip


def test_https_serving_with_generated_ca() -> None:
    with start_apiserver(tls=True) as api:
        assert api.url.startswith("https://") and api.ca_pem

        async def version() -> str:
            async with client.ApiClient(kube_client_config(api.url, ca_pem=api.ca_pem)) as c:
                return (await client.VersionApi(c).get_code()).git_version

        assert asyncio.run(version()).startswith("v1.32")
