"""The API-server double's watches behave like kube-apiserver's: replay, bookmarks, 410, selectors.

The controller's informers resume watches from a resourceVersion, expect bookmarks and a
410 Gone for an expired version, and follow objects in and out of a label selector; these
tests drive each of those with the real ``kubernetes.aio`` watch, and check that the
double can end open streams on demand.
"""

from __future__ import annotations

import aiohttp
import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.watch import Watch

from ._support import KUEUE, MERGE, V, cluster, job, run, workload


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
