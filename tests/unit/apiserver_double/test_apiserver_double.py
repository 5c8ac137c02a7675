"""The API-server test double behaves like kube-apiserver for the real clients.

Everything here drives the double with the official ``kubernetes.aio`` client (and
``kubectl`` when installed) over loopback, so the protocol details the controller
depends on -- 201 on create, resourceVersion semantics, patch content types, the status
subresource, watch resume/bookmarks/410, finalizers, webhooks -- are pinned down.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.watch import Watch

from admission.apiserver_double import (
    ADMIN_TOKEN,
    ApiServer,
    ServingCert,
    load_webhook_configurations,
    make_serving_cert,
    running_apiserver,
    start_apiserver,
)
from tests.support.double_client import kube_client_config

KUEUE = "kueue.x-k8s.io"
V = "v1beta2"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"


def job(
    name: str, *, labels: dict[str, str] | None = None, namespace: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "suspend": False,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "main", "image": "busybox"},
                        {"name": "side", "image": "envoy"},
                    ],
                    "restartPolicy": "Never",
                }
            },
        },
    }


def workload(
    name: str, *, queue: str = "team-a", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE}/{V}",
        "kind": "Workload",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
                }
            ],
        },
    }


@asynccontextmanager
async def cluster(
    *, token: str | None = ADMIN_TOKEN, **server_kwargs: Any
) -> AsyncIterator[tuple[ApiServer, client.ApiClient]]:
    """The double on this loop plus a real kubernetes.aio ApiClient pointed at it."""
    async with running_apiserver(**server_kwargs) as server:
        async with client.ApiClient(kube_client_config(server.url, token=token)) as api:
            yield server, api


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def until_gone(server: ApiServer, resource: str, name: str, ns: str | None) -> None:
    """The asynchronous controllers (garbage collector, ...) finish a deletion."""
    for _ in range(200):
        if server.get_object(resource, name, ns) is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{resource} {name} was never deleted")


def status_body(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


# -- CRUD ----------------------------------------------------------------------------------


def test_job_crud_returns_typed_objects_and_201_on_create() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            batch = client.BatchV1Api(api)
            created = await batch.create_namespaced_job("default", job("j1", labels={"app": "x"}))
            assert created is not None, "v37 returns None unless the server answers 201"
            assert created.metadata.uid and created.metadata.creation_timestamp
            assert created.metadata.namespace == "default" and created.metadata.generation == 1
            fetched = await batch.read_namespaced_job("j1", "default")
            assert fetched.metadata.resource_version == created.metadata.resource_version
            fetched.spec.parallelism = 3
            replaced = await batch.replace_namespaced_job("j1", "default", fetched)
            assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
            assert replaced.metadata.generation == 2
            deleting = await batch.delete_namespaced_job("j1", "default")
            # batch/v1 Jobs default to Orphan: the garbage collector finishes the deletion
            assert deleting["metadata"]["finalizers"] == ["orphan"]
            await until_gone(server, "jobs", "j1", "default")
            with pytest.raises(ApiException) as err:
                await batch.read_namespaced_job("j1", "default")
            assert err.value.status == 404
            assert status_body(err.value)["message"] == 'jobs.batch "j1" not found'

    run(scenario)


def test_custom_objects_crud_cluster_and_namespaced_and_unserved_v1beta1_is_404() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            cq = {
                "apiVersion": f"{KUEUE}/{V}",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
                "spec": {"cohortName": "all"},
            }
            created = await co.create_cluster_custom_object(KUEUE, V, "clusterqueues", cq)
            assert created["metadata"]["resourceVersion"] and "namespace" not in created["metadata"]
            wl = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w1")
            )
            assert wl["metadata"]["namespace"] == "default"
            # the CRDs declare v1beta1 with served: false
            with pytest.raises(ApiException) as err:
                await co.get_namespaced_custom_object(
                    KUEUE, "v1beta1", "default", "workloads", "w1"
                )
            assert err.value.status == 404
            listed = await co.list_cluster_custom_object(KUEUE, V, "workloads")
            assert [i["metadata"]["name"] for i in listed["items"]] == ["w1"]
            assert listed["metadata"]["resourceVersion"] == str(server.resource_version)
            deleted = await co.delete_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w1"
            )
            assert deleted["kind"] == "Status" and deleted["status"] == "Success"
            assert server.get_object("workloads", "w1", "default") is None

    run(scenario)


def test_create_duplicate_is_409_already_exists_and_missing_namespace_is_404() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            batch = client.BatchV1Api(api)
            await batch.create_namespaced_job("default", job("dup"))
            with pytest.raises(ApiException) as err:
                await batch.create_namespaced_job("default", job("dup"))
            assert err.value.status == 409 and status_body(err.value)["reason"] == "AlreadyExists"
            with pytest.raises(ApiException) as err:
                await batch.create_namespaced_job("nowhere", job("x"))
            assert err.value.status == 404
            assert status_body(err.value)["message"] == 'namespaces "nowhere" not found'

    run(scenario)


def test_generate_name_and_invalid_names_and_labels() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            body = workload("")
            body["metadata"] = {"generateName": "wl-"}
            created = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", body
            )
            assert (
                created["metadata"]["name"].startswith("wl-")
                and len(created["metadata"]["name"]) == 8
            )
            with pytest.raises(ApiException) as err:
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", workload("Bad_Name")
                )
            assert err.value.status == 422 and "metadata.name" in status_body(err.value)["message"]
            bad_label = workload("ok", labels={"team": "not valid!"})
            with pytest.raises(ApiException) as err:
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", bad_label
                )
            assert err.value.status == 422 and status_body(err.value)["reason"] == "Invalid"

    run(scenario)


# -- selectors and lists -------------------------------------------------------------------


def test_label_and_field_selectors_filter_lists() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            for name, labels in [
                ("a", {"tier": "gold", "gpu": ""}),
                ("b", {"tier": "silver"}),
                ("c", {}),
            ]:
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", workload(name, labels=labels)
                )

            async def names(**kw: str) -> list[str]:
                result = await co.list_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", **kw
                )
                return [i["metadata"]["name"] for i in result["items"]]

            assert await names(label_selector="tier=gold") == ["a"]
            assert await names(label_selector="tier==silver") == ["b"]
            assert await names(label_selector="tier!=gold") == ["b", "c"]
            assert await names(label_selector="tier in (gold, silver)") == ["a", "b"]
            assert await names(label_selector="tier notin (gold)") == ["b", "c"]
            assert await names(label_selector="gpu") == ["a"]
            assert await names(label_selector="!tier") == ["c"]
            assert await names(label_selector="tier,!gpu") == ["b"]
            assert await names(field_selector="metadata.name=b") == ["b"]
            assert await names(field_selector="metadata.name!=b,metadata.namespace=default") == [
                "a",
                "c",
            ]
            with pytest.raises(ApiException) as err:
                await names(field_selector="spec.queueName=x")
            assert err.value.status == 400

    run(scenario)


def test_list_pagination_with_limit_and_continue() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            core = client.CoreV1Api(api)
            for i in range(5):
                await core.create_namespaced_config_map(
                    "default", {"metadata": {"name": f"cm{i}"}, "data": {"i": str(i)}}
                )
            first = await core.list_namespaced_config_map("default", limit=2)
            assert [c.metadata.name for c in first.items] == ["cm0", "cm1"]
            assert first.metadata.remaining_item_count == 3
            rest = await core.list_namespaced_config_map(
                "default", limit=10, _continue=first.metadata.var_continue
            )
            assert [c.metadata.name for c in rest.items] == ["cm2", "cm3", "cm4"]
            assert rest.metadata.var_continue is None

    run(scenario)


# -- patches, status subresource, optimistic concurrency -----------------------------------


def test_three_patch_types_with_explicit_content_type() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            batch = client.BatchV1Api(api)
            core = client.CoreV1Api(api)
            await batch.create_namespaced_job("default", job("p"))
            await batch.patch_namespaced_job(
                "p",
                "default",
                {"metadata": {"labels": {"a": "1"}}, "spec": {"parallelism": 2}},
                _content_type=MERGE,
            )
            # list semantics on a Pod: SMP merges containers by name and unions finalizers;
            # a merge patch replaces the list
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "finalizers": ["x/a"]},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "busybox"},
                        {"name": "side", "image": "envoy"},
                    ]
                },
            }
            await core.create_namespaced_pod("default", pod)
            smp = {
                "metadata": {"finalizers": ["x/b"]},
                "spec": {"containers": [{"name": "side", "image": "envoy:2"}]},
            }
            await core.patch_namespaced_pod("p", "default", smp, _content_type=SMP)
            stored = server.get_object("pods", "p", "default")
            assert stored is not None
            containers = stored["spec"]["containers"]
            assert [(c["name"], c["image"]) for c in containers] == [
                ("main", "busybox"),
                ("side", "envoy:2"),
            ]
            assert stored["metadata"]["finalizers"] == ["x/a", "x/b"]
            merge_replaces = {"metadata": {"finalizers": ["x/c"]}}
            await core.patch_namespaced_pod("p", "default", merge_replaces, _content_type=MERGE)
            stored = server.get_object("pods", "p", "default")
            assert stored is not None and stored["metadata"]["finalizers"] == ["x/c"]
            ops = [
                {"op": "test", "path": "/spec/parallelism", "value": 2},
                {"op": "replace", "path": "/spec/suspend", "value": True},
            ]
            patched = await batch.patch_namespaced_job(
                "p", "default", ops, _content_type=JSON_PATCH
            )
            assert patched.spec.suspend is True and patched.metadata.labels == {"a": "1"}
            failing = [{"op": "test", "path": "/spec/parallelism", "value": 99}]
            with pytest.raises(ApiException) as err:
                await batch.patch_namespaced_job("p", "default", failing, _content_type=JSON_PATCH)
            assert err.value.status == 422
            content_types = [r.content_type for r in server.requests if r.verb == "patch"]
            assert content_types == [MERGE, SMP, MERGE, JSON_PATCH, JSON_PATCH]

    run(scenario)


def test_strategic_merge_patch_is_refused_for_custom_resources_like_upstream() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w")
            )
            with pytest.raises(ApiException) as err:
                await co.patch_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", "w", {"spec": {}}, _content_type=SMP
                )
            assert err.value.status == 415

    run(scenario)


def test_status_subresource_changes_only_status_and_keeps_generation() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            body = workload("w")
            body["status"] = {"conditions": [{"type": "Admitted", "status": "True"}]}
            created = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", body
            )
            assert "status" not in created, "status is dropped on create when the kind has /status"
            patch = {
                "spec": {"queueName": "sneaky"},
                "status": {"admission": {"clusterQueue": "cq"}},
            }
            after = await co.patch_namespaced_custom_object_status(
                KUEUE, V, "default", "workloads", "w", patch, _content_type=MERGE
            )
            assert after["status"] == {"admission": {"clusterQueue": "cq"}}
            assert after["spec"]["queueName"] == "team-a" and after["metadata"]["generation"] == 1
            main = {"spec": {"queueName": "team-b"}, "status": {"admission": None}}
            after = await co.patch_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w", main, _content_type=MERGE
            )
            assert after["spec"]["queueName"] == "team-b" and after["metadata"]["generation"] == 2
            assert after["status"] == {"admission": {"clusterQueue": "cq"}}, (
                "main resource ignores status"
            )
            # the CRD declares no selectableFields: only metadata.name/namespace select
            with pytest.raises(ApiException) as err:
                await co.list_namespaced_custom_object(
                    KUEUE,
                    V,
                    "default",
                    "workloads",
                    field_selector="status.admission.clusterQueue=cq",
                )
            assert err.value.status == 400
            assert "field label not supported" in status_body(err.value)["message"]
            labels_only = await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "w",
                {"metadata": {"labels": {"x": "y"}}},
                _content_type=MERGE,
            )
            assert labels_only["metadata"]["generation"] == 2, (
                "metadata changes do not bump generation"
            )
            rv = server.resource_version
            await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "w",
                {"metadata": {"labels": {"x": "y"}}},
                _content_type=MERGE,
            )
            assert server.resource_version == rv, "a no-op patch writes nothing"

    run(scenario)


def test_stale_resource_version_is_409_conflict_for_put_and_patch() -> None:
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            created = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w")
            )
            stale_rv = created["metadata"]["resourceVersion"]
            await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "w",
                {"spec": {"queueName": "b"}},
                _content_type=MERGE,
            )
            with pytest.raises(ApiException) as err:
                await co.replace_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", "w", created
                )
            assert err.value.status == 409
            body = status_body(err.value)
            assert (
                body["reason"] == "Conflict"
                and body["kind"] == "Status"
                and body["status"] == "Failure"
            )
            assert "the object has been modified" in body["message"]
            pinned = {
                "metadata": {"resourceVersion": stale_rv},
                "status": {"admission": {"clusterQueue": "cq"}},
            }
            with pytest.raises(ApiException) as err:
                await co.patch_namespaced_custom_object_status(
                    KUEUE, V, "default", "workloads", "w", pinned, _content_type=MERGE
                )
            assert err.value.status == 409
            current = await co.get_namespaced_custom_object(KUEUE, V, "default", "workloads", "w")
            pinned["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            ok = await co.patch_namespaced_custom_object_status(
                KUEUE, V, "default", "workloads", "w", pinned, _content_type=MERGE
            )
            assert ok["status"]["admission"]["clusterQueue"] == "cq"

    run(scenario)


# -- watches -------------------------------------------------------------------------------


def test_watch_replays_from_resource_version_then_sends_bookmarks() -> None:
    async def scenario() -> None:
        async with cluster(bookmark_interval=0.05) as (server, api):
            co = client.CustomObjectsApi(api)
            listing = await co.list_namespaced_custom_object(KUEUE, V, "default", "workloads")
            await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("a")
            )
            await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("b")
            )
            await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "a",
                {"spec": {"queueName": "x"}},
                _content_type=MERGE,
            )
            seen: list[tuple[str, str]] = []
            async with Watch() as w:
                async for event in w.stream(
                    co.list_namespaced_custom_object, KUEUE, V, "default", "workloads",
                    resource_version=listing["metadata"]["resourceVersion"], allow_watch_bookmarks=True,
                    timeout_seconds=60,
                ):  # fmt: skip
                    seen.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
                    if event["type"] == "BOOKMARK":
                        break
                assert w.resource_version == str(server.resource_version)
            assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("BOOKMARK", "")]

    run(scenario)


def test_watch_sends_a_bookmark_before_closing_at_timeout() -> None:
    async def scenario() -> None:
        # upstream: 2 s before the timeout; lowered here to keep the test short
        async with cluster(bookmark_interval=3600, bookmark_before_timeout=0.5) as (_, api):
            batch = client.BatchV1Api(api)
            await batch.create_namespaced_job("default", job("j"))
            types = []
            async with Watch() as w:
                async for event in w.stream(
                    batch.list_namespaced_job,
                    "default",
                    allow_watch_bookmarks=True,
                    timeout_seconds=1,
                ):
                    types.append(event["type"])
            assert types == ["ADDED", "BOOKMARK"]

    run(scenario)


def test_watch_from_an_expired_resource_version_gets_410() -> None:
    async def scenario() -> None:
        async with cluster(watch_window=2) as (server, api):
            co = client.CustomObjectsApi(api)
            start = server.resource_version
            for name in ("a", "b", "c"):
                await co.create_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", workload(name)
                )
            with pytest.raises(ApiException) as err:
                async with Watch() as w:
                    async for _ in w.stream(co.list_namespaced_custom_object, KUEUE, V, "default", "workloads",
                                            resource_version=str(start), timeout_seconds=5):  # fmt: skip
                        pass
            assert err.value.status == 410 and "Expired" in str(err.value.reason)
            current = str(server.resource_version)
            server.compact()
            with pytest.raises(ApiException) as err:
                async with Watch() as w:
                    async for _ in w.stream(co.list_namespaced_custom_object, KUEUE, V, "default", "workloads",
                                            resource_version=str(int(current) - 1), timeout_seconds=5):  # fmt: skip
                        pass
            assert err.value.status == 410

    run(scenario)


def test_watch_without_resource_version_starts_with_current_state_and_tracks_selector_transitions() -> (
    None
):
    async def scenario() -> None:
        async with cluster() as (_, api):
            co = client.CustomObjectsApi(api)
            await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("in", labels={"q": "a"})
            )
            await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("out", labels={"q": "b"})
            )
            seen: list[tuple[str, str]] = []
            async with Watch() as w:
                async for event in w.stream(co.list_namespaced_custom_object, KUEUE, V, "default", "workloads",
                                            label_selector="q=a", timeout_seconds=30):  # fmt: skip
                    seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
                    if len(seen) == 1:
                        relabel = {"metadata": {"labels": {"q": "b"}}}
                        await co.patch_namespaced_custom_object(
                            KUEUE, V, "default", "workloads", "in", relabel, _content_type=MERGE
                        )
                        await co.patch_namespaced_custom_object(
                            KUEUE,
                            V,
                            "default",
                            "workloads",
                            "out",
                            {"metadata": {"labels": {"q": "a"}}},
                            _content_type=MERGE,
                        )
                    if len(seen) == 3:
                        break
            assert seen == [("ADDED", "in"), ("DELETED", "in"), ("ADDED", "out")]

    run(scenario)


def test_drop_watches_ends_open_streams() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            batch = client.BatchV1Api(api)
            await batch.create_namespaced_job("default", job("j"))
            seen = []
            async with Watch() as w:
                async for event in w.stream(
                    batch.list_namespaced_job, "default", timeout_seconds=60
                ):
                    seen.append(event["type"])
                    assert server.drop_watches() == 1
            assert seen == ["ADDED"]
            async with Watch() as w:
                with pytest.raises(aiohttp.ClientPayloadError):
                    async for _ in w.stream(
                        batch.list_namespaced_job, "default", timeout_seconds=60
                    ):
                        server.drop_watches(abrupt=True)

    run(scenario)


# -- deletion ------------------------------------------------------------------------------


def test_finalizers_delay_deletion_until_removed() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            body = workload("w")
            body["metadata"]["finalizers"] = ["kueue.x-k8s.io/resource-in-use"]
            await co.create_namespaced_custom_object(KUEUE, V, "default", "workloads", body)
            deleted = await co.delete_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w"
            )
            assert deleted["metadata"]["deletionTimestamp"], "pending deletion returns the object"
            still = await co.get_namespaced_custom_object(KUEUE, V, "default", "workloads", "w")
            assert still["metadata"]["deletionTimestamp"] and still["metadata"]["finalizers"]
            with pytest.raises(ApiException) as err:
                more = {"metadata": {"finalizers": ["kueue.x-k8s.io/resource-in-use", "new"]}}
                await co.patch_namespaced_custom_object(
                    KUEUE, V, "default", "workloads", "w", more, _content_type=MERGE
                )
            assert err.value.status == 422
            await co.patch_namespaced_custom_object(
                KUEUE,
                V,
                "default",
                "workloads",
                "w",
                {"metadata": {"finalizers": None}},
                _content_type=MERGE,
            )
            assert server.get_object("workloads", "w", "default") is None

    run(scenario)


def test_background_deletion_collects_owned_dependents() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            batch = client.BatchV1Api(api)
            owner = await batch.create_namespaced_job("default", job("j"))
            body = workload("job-j")
            body["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "j",
                    "uid": owner.metadata.uid,
                    "controller": True,
                }
            ]
            co = client.CustomObjectsApi(api)
            await co.create_namespaced_custom_object(KUEUE, V, "default", "workloads", body)
            await batch.delete_namespaced_job("j", "default", propagation_policy="Background")
            assert server.get_object("jobs", "j", "default") is None  # the owner goes at once
            await until_gone(server, "workloads", "job-j", "default")  # dependents after

    run(scenario)


# -- test hooks ------------------------------------------------------------------------------


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


# -- admission webhooks --------------------------------------------------------------------

Review = dict[str, Any]


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


def webhook_configurations(ca_bundle: str) -> list[dict[str, Any]]:
    not_system = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    service = {"namespace": "hooks", "name": "wh"}
    common = {
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Fail",
        "namespaceSelector": not_system,
    }
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "test-mutating"},
            "webhooks": [{
                "name": "mjob.test.io", **common,
                "clientConfig": {"service": {**service, "path": "/mutate-job"}, "caBundle": ca_bundle},
                "rules": [{"operations": ["CREATE"], "apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"]}],
            }],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "test-validating"},
            "webhooks": [{
                "name": "vjob.test.io", **common,
                "clientConfig": {"service": {**service, "path": "/validate"}, "caBundle": ca_bundle},
                "rules": [
                    {"operations": ["CREATE", "UPDATE"], "apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"]},
                    {"operations": ["UPDATE"], "apiGroups": [KUEUE], "apiVersions": [V], "resources": ["workloads/status"]},
                ],
            }],
        },
    ]  # fmt: skip


def decide(path: str, request: Review) -> dict[str, Any]:
    if path == "/mutate-job":
        ops = [
            {"op": "add", "path": "/metadata/labels/mutated", "value": "yes"},
            {"op": "replace", "path": "/spec/suspend", "value": True},
        ]
        return {
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
            "warnings": ["job suspended by test webhook"],
        }
    if request["name"].startswith("bad"):
        return {
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": "bad name"},
        }
    return {"allowed": True}


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


# -- kubectl -------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_create_get_and_patch_against_the_double(tmp_path: Path) -> None:
    manifest = tmp_path / "objects.yaml"
    manifest.write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: sample, labels: {kueue.x-k8s.io/queue-name: q}}\n"
        "spec: {template: {spec: {containers: [{name: c, image: busybox}], restartPolicy: Never}}}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\n"
        "spec: {cohortName: all}\n"
    )
    with start_apiserver() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")

        def kubectl(*args: str) -> str:
            cmd = [
                "kubectl",
                f"--kubeconfig={kubeconfig}",
                f"--cache-dir={tmp_path / 'cache'}",
                *args,
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, f"{' '.join(args)} failed: {done.stderr}"
            return done.stdout

        assert "job.batch/sample created" in kubectl(
            "create", "--validate=false", "-f", str(manifest)
        )
        assert "sample" in kubectl("get", "jobs")
        listed = json.loads(kubectl("get", "clusterqueues", "-o", "json"))
        assert [i["metadata"]["name"] for i in listed["items"]] == ["cq"]
        kubectl(
            "patch", "clusterqueue", "cq", "--type=merge", "-p", '{"spec":{"cohortName":"other"}}'
        )
        kubectl("patch", "job", "sample", "-p", '{"spec":{"suspend":true}}')
        cq = api.get_object("clusterqueues", "cq")
        sample = api.get_object("jobs", "sample", "default")
        assert cq is not None and cq["spec"]["cohortName"] == "other"
        assert sample is not None and sample["spec"]["suspend"] is True
        # short names come from the CRD (kwl), not an invented "wl"
        assert kubectl("get", "kwl", "-A") == ""
        with pytest.raises(AssertionError, match='resource type "wl"'):
            kubectl("get", "wl", "-A")


# -- pieces that the client tests above do not reach ----------------------------------------


def test_strategic_merge_directives_and_primitive_list_merge() -> None:
    from admission.apiserver_double.patches import strategic_merge_patch

    target = {
        "metadata": {"finalizers": ["a"]},
        "spec": {
            "containers": [{"name": "x", "image": "1"}, {"name": "y", "image": "2"}],
            "tolerations": [{"key": "k"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    patch = {
        "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
        "spec": {
            "containers": [{"name": "y", "$patch": "delete"}, {"name": "z", "image": "3"}],
            "tolerations": [{"key": "only"}],
            "$setElementOrder/containers": [{"name": "x"}, {"name": "z"}],
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ]
        },
    }
    result = strategic_merge_patch(target, patch)
    assert result["metadata"]["finalizers"] == ["b"]
    assert result["spec"]["containers"] == [
        {"name": "x", "image": "1"},
        {"name": "z", "image": "3"},
    ]
    assert result["spec"]["tolerations"] == [{"key": "only"}], (
        "lists without a merge key are replaced"
    )
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "Admitted", "status": "True"},
    ]
    assert target["spec"]["containers"][1]["name"] == "y", "the target is not modified"


def test_label_selector_parser_rejects_garbage_with_400() -> None:
    from admission.apiserver_double.errors import ApiError
    from admission.apiserver_double.selectors import label_selector_from_dict, parse_label_selector

    with pytest.raises(ApiError) as err:
        parse_label_selector("a in b")
    assert err.value.code == 400
    selector = label_selector_from_dict(
        {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]},
        where="test",
    )
    assert selector.matches({"a": "1"}) and not selector.matches({"a": "1", "b": "x"})
    with pytest.raises(ValueError, match=r"test.matchExpressions\[0\]"):
        label_selector_from_dict(
            {"matchExpressions": [{"key": "b", "operator": "Near"}]}, where="test"
        )


def test_dry_run_and_server_side_apply() -> None:
    async def scenario() -> None:
        async with cluster() as (server, api):
            co = client.CustomObjectsApi(api)
            preview = await co.create_namespaced_custom_object(
                KUEUE, V, "default", "workloads", workload("w"), dry_run="All"
            )
            assert (
                preview["metadata"]["name"] == "w"
                and server.get_object("workloads", "w", "default") is None
            )
            applied = workload("w")
            created = await co.patch_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w", applied, field_manager="test",
                _content_type="application/apply-patch+yaml",
            )  # fmt: skip
            assert created is None, "apply that creates answers 201, which v37's patch maps to None"
            assert server.get_object("workloads", "w", "default") is not None
            applied["spec"]["queueName"] = "team-b"
            updated = await co.patch_namespaced_custom_object(
                KUEUE, V, "default", "workloads", "w", applied, field_manager="test",
                _content_type="application/apply-patch+yaml",
            )  # fmt: skip
            assert (
                updated["spec"]["queueName"] == "team-b" and updated["metadata"]["generation"] == 2
            )
            with pytest.raises(ApiException) as err:
                await co.patch_namespaced_custom_object(
                    KUEUE,
                    V,
                    "default",
                    "workloads",
                    "w",
                    applied,
                    _content_type="application/apply-patch+yaml",
                )
            assert err.value.status == 422, "apply needs a fieldManager"

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
