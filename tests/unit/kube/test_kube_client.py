"""The raw client and the informers against the API-server double."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.apiserver_double import running_apiserver
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.errors import ApiError, UndeclaredCall
from admission.kube.client.resources import API_CALLS
from admission.kube.watch.informer import Backoff, Informer
from tests.support.double_client import kube_client_config

ROOT = Path(__file__).resolve().parents[3]


def ns(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def run(coro_fn) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro_fn())


def test_every_declared_api_call_is_granted_by_the_rbac_manifest() -> None:
    rules: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all((ROOT / "manifests/base/rbac.yaml").read_text()):
        if doc and doc.get("kind") in ("ClusterRole", "Role"):
            rules += doc.get("rules") or []

    def granted(call: kr.ApiCall) -> bool:
        res = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
        return any(
            call.group in r.get("apiGroups", [])
            and res in r.get("resources", [])
            and call.verb in r.get("verbs", [])
            for r in rules
        )

    assert sorted(str(c) for c in API_CALLS if not granted(c)) == []


def test_the_rbac_manifest_grants_nothing_the_adapter_does_not_use() -> None:
    declared = {
        (c.group, f"{c.resource}/{c.subresource}" if c.subresource else c.resource, c.verb)
        for c in API_CALLS
    }
    extra = []
    for doc in yaml.safe_load_all((ROOT / "manifests/base/rbac.yaml").read_text()):
        if doc and doc.get("kind") in ("ClusterRole", "Role"):
            for rule in doc.get("rules") or []:
                for group in rule.get("apiGroups", []):
                    for res in rule.get("resources", []):
                        for verb in rule.get("verbs", []):
                            assert "*" not in (group, res, verb), rule
                            if (group, res, verb) not in declared:
                                extra.append(f"{verb} {group or 'core'}/{res}")
    assert extra == []


def test_an_undeclared_call_is_refused_before_it_is_sent() -> None:
    async def main() -> None:
        async with running_apiserver() as server:
            client = await k.KubeClient.connect(configuration=kube_client_config(server.url))
            try:
                with pytest.raises(UndeclaredCall, match="create core/namespaces"):
                    await client.create(kr.NAMESPACES, ns("x"))
                assert server.request_count(verb="create") == 0
            finally:
                await client.close()

    run(main)


def test_patches_keep_their_content_type_and_errors_are_typed() -> None:
    async def main() -> None:
        async with running_apiserver() as server:
            client = await k.KubeClient.connect(
                configuration=kube_client_config(server.url), strict=False
            )
            try:
                job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default"},
                       "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}],
                                                      "restartPolicy": "Never"}}}}  # fmt: skip
                await client.create(kr.JOBS, job, namespace="default")
                await client.patch(kr.JOBS, "j", [{"op": "add", "path": "/spec/suspend", "value": True}],
                                   namespace="default", content_type=k.JSON_PATCH)  # fmt: skip
                new = await client.patch(
                    kr.JOBS, "j", {"spec": {"parallelism": 2}}, namespace="default"
                )
                assert new["spec"]["suspend"] is True and new["spec"]["parallelism"] == 2
                types = [r.content_type for r in server.requests if r.verb == "patch"]
                assert types == [k.JSON_PATCH, k.MERGE_PATCH]  # never rewritten to strategic merge
                with pytest.raises(ValueError, match="JSON patch"):
                    await client.patch(
                        kr.JOBS, "j", {"spec": {}}, namespace="default", content_type=k.JSON_PATCH
                    )
                with pytest.raises(ApiError) as err:
                    await client.get(kr.JOBS, "missing", namespace="default")
                assert err.value.not_found and err.value.reason == "NotFound"
                stale = {"metadata": {"resourceVersion": "1"}, "spec": {"parallelism": 3}}
                with pytest.raises(ApiError) as err:
                    await client.patch(kr.JOBS, "j", stale, namespace="default")
                assert err.value.conflict
                server.fail_next(1, code=500)
                with pytest.raises(ApiError) as err:
                    await client.get(kr.JOBS, "j", namespace="default")
                assert err.value.status == 500 and err.value.retryable
                with pytest.raises(ApiError) as err:
                    await client.patch(kr.JOBS, "j", [{"op": "test", "path": "/spec/parallelism", "value": 9}],
                                       namespace="default", content_type=k.JSON_PATCH)  # fmt: skip
                assert err.value.status == 422 and not err.value.retryable
            finally:
                await client.close()

    run(main)


def test_backoff_is_exponential_capped_and_deterministic_with_a_seed() -> None:
    a = Backoff(base=0.1, cap=1.0, rng=random.Random(3))
    b = Backoff(base=0.1, cap=1.0, rng=random.Random(3))
    da = [a.next() for _ in range(8)]
    assert da == [b.next() for _ in range(8)]
    for n, d in enumerate(da):
        full = min(1.0, 0.1 * 2**n)
        assert full / 2 <= d <= full
    a.reset()
    assert a.next() <= 0.1


def test_informer_lists_watches_and_relists_after_a_410_reporting_missed_deletions() -> None:
    async def main() -> None:
        async with running_apiserver(watch_window=3, bookmark_interval=0.05) as server:
            client = await k.KubeClient.connect(
                configuration=kube_client_config(server.url), strict=False
            )
            events: list[tuple[str, str]] = []
            inf = Informer(client, kr.NAMESPACES, handler=lambda t, key, new, old: events.append((t, key)),
                           rng=random.Random(1), backoff_base=0.01)  # fmt: skip
            task = asyncio.create_task(inf.run())
            try:
                await asyncio.wait_for(inf.synced.wait(), 10)
                assert ("ADDED", "default") in events
                server.put_object(ns("seen"))
                await _until(lambda: "seen" in inf.store)
                # disconnect, change more than the window holds, expire it, reconnect
                server.pause()
                server.drop_watches(abrupt=True)
                server.delete_object("namespaces", "seen")
                for i in range(5):
                    server.put_object(ns(f"n{i}"))
                server.compact()
                server.resume()
                await _until(lambda: "n4" in inf.store and "seen" not in inf.store)
                assert ("DELETED", "seen") in events
                assert inf.stats.relists_on_410 >= 1
                # bookmarks move the resourceVersion along
                rv = inf.resource_version
                server.put_object(
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "ResourceFlavor",
                        "metadata": {"name": "f"},
                    }
                )
                await _until(lambda: int(inf.resource_version) > int(rv))
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()

    run(main)


def test_informer_retries_failed_lists_and_watches_with_backoff() -> None:
    async def main() -> None:
        async with running_apiserver() as server:
            client = await k.KubeClient.connect(
                configuration=kube_client_config(server.url), strict=False
            )
            server.fail_next(3, code=500, verb="list")
            server.fail_next(2, code=429, verb="watch", retry_after=0)
            inf = Informer(client, kr.NAMESPACES, rng=random.Random(2), backoff_base=0.01)
            task = asyncio.create_task(inf.run())
            try:
                await asyncio.wait_for(inf.synced.wait(), 10)
                assert inf.stats.errors >= 3
                server.put_object(ns("later"))
                await _until(lambda: "later" in inf.store)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()

    run(main)


async def _until(check, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        assert loop.time() < end, "condition never held"
        await asyncio.sleep(0.01)
