"""The double serves a custom resource only while its CRD is installed, as kube-apiserver.

Started from a plain cluster (only ``manifests/crd/``), a JobSet list or watch answers
404 and discovery does not name the group; creating the JobSet CRD serves the resource
(and the CRD reads ``Established``); deleting it removes every JobSet with a DELETED
event, ends the watch, and the resource answers 404 again.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from admission.apiserver_double import ADMIN_TOKEN
from admission.apiserver_double.selectors import parse_field_selector, parse_label_selector
from tests.support.kube_harness import operator_crds
from tests.unit.apiserver_double.test_apiserver_double_protocol import call, session

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
CONFIG_MAPS = "/api/v1/namespaces/default/configmaps"
Obj = dict[str, Any]


def jobset_crd() -> Obj:
    """A copy: the loaded CRDs are shared by every double of the process."""
    (crd,) = operator_crds(["jobsets"])
    return crd


def jobset(name: str) -> Obj:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": []},
    }


def test_a_plain_double_serves_only_the_projects_crds() -> None:
    async def scenario() -> None:
        async with session(third_party_crds=False) as (server, http):
            status, crds = await call(server, http, "GET", CRDS)
            assert status == 200
            names = {c["metadata"]["name"] for c in crds["items"]}
            assert "workloads.kueue.x-k8s.io" in names
            assert not any(n.endswith("jobset.x-k8s.io") for n in names)
            assert (await call(server, http, "GET", JOBSETS))[0] == 404
            assert (await call(server, http, "GET", JOBSETS + "?watch=true"))[0] == 404
            status, groups = await call(server, http, "GET", "/apis")
            assert "jobset.x-k8s.io" not in {g["name"] for g in groups["groups"]}

    asyncio.run(scenario())


def test_the_default_double_lists_every_crd_it_serves() -> None:
    async def scenario() -> None:
        async with session() as (server, http):
            status, crds = await call(server, http, "GET", CRDS)
            names = {c["metadata"]["name"] for c in crds["items"]}
            assert "jobsets.jobset.x-k8s.io" in names
            assert (await call(server, http, "GET", JOBSETS))[0] == 200

    asyncio.run(scenario())


def test_installing_and_deleting_a_crd_serves_and_unserves_its_resource() -> None:
    async def scenario() -> None:
        async with session(third_party_crds=False) as (server, http):
            status, created = await call(server, http, "POST", CRDS, jobset_crd())
            assert status == 201, created
            conditions = {c["type"]: c["status"] for c in created["status"]["conditions"]}
            assert conditions["Established"] == "True"
            status, _ = await call(server, http, "POST", JOBSETS, jobset("a"))
            assert status == 201
            status, groups = await call(server, http, "GET", "/apis")
            assert "jobset.x-k8s.io" in {g["name"] for g in groups["groups"]}
            status, listed = await call(server, http, "GET", JOBSETS)
            events: list[str] = []
            url = f"{server.url}{JOBSETS}?watch=true&resourceVersion={listed['metadata']['resourceVersion']}"
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with http.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=60)
            ) as resp:
                assert resp.status == 200
                status, _ = await call(server, http, "DELETE", f"{CRDS}/jobsets.jobset.x-k8s.io")
                assert status == 200
                async for line in resp.content:  # ends when the server closes the watch
                    event = json.loads(line)
                    events.append(f"{event['type']} {event['object']['metadata']['name']}")
            assert events == ["DELETED a"]
            assert (await call(server, http, "GET", JOBSETS))[0] == 404
            assert (await call(server, http, "GET", JOBSETS + "?watch=true"))[0] == 404

    asyncio.run(scenario())


def test_a_crd_the_real_server_refuses_is_refused_and_serves_nothing() -> None:
    async def scenario() -> None:
        async with session(third_party_crds=False) as (server, http):
            bad = jobset_crd()
            bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] = {
                "type": "object",
                "description": "not allowed here",
            }
            status, body = await call(server, http, "POST", CRDS, bad)
            assert status == 422, body
            assert "metadata" in body["message"]
            assert (await call(server, http, "GET", JOBSETS))[0] == 404

    asyncio.run(scenario())


def test_a_watch_that_ends_after_its_crd_is_deleted_closes_without_error() -> None:
    """The CRD delete ends the watch and forgets its type; the watch handler then
    unregisters its watcher, which must be a no-op (kube-apiserver never fails there)."""

    async def scenario() -> None:
        async with session(third_party_crds=False) as (server, http):
            status, created = await call(server, http, "POST", CRDS, jobset_crd())
            assert status == 201, created
            rt = server.registry.resolve("jobsets")
            watcher = server.store.watch(
                rt,
                namespace="default",
                labels=parse_label_selector(None),
                fields=parse_field_selector(None, supported=()),
                since=None,
            )
            status, _ = await call(server, http, "DELETE", f"{CRDS}/jobsets.jobset.x-k8s.io")
            assert status == 200
            server.store.unwatch(watcher)  # the handler's cleanup, after the type is gone
            assert watcher not in server.store.watchers()

    asyncio.run(scenario())


def test_a_resource_served_from_a_later_crd_is_deleted_in_the_foreground() -> None:
    """The garbage collector knows kinds installed after it started: a JobSet deleted
    with ``Foreground`` takes its dependents with it and is then removed."""

    async def scenario() -> None:
        async with session(third_party_crds=False) as (server, http):
            assert (await call(server, http, "POST", CRDS, jobset_crd()))[0] == 201
            _, owner = await call(server, http, "POST", JOBSETS, jobset("a"))
            ref = {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "name": "a",
                "uid": owner["metadata"]["uid"],
                "blockOwnerDeletion": True,
            }
            dependent = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c", "ownerReferences": [ref]},
            }
            assert (await call(server, http, "POST", CONFIG_MAPS, dependent))[0] == 201
            status, body = await call(
                server, http, "DELETE", f"{JOBSETS}/a", {"propagationPolicy": "Foreground"}
            )
            assert status == 200 and body["metadata"]["finalizers"] == ["foregroundDeletion"]
            for _ in range(200):
                gone = (await call(server, http, "GET", f"{JOBSETS}/a"))[0] == 404
                if gone:
                    break
                await asyncio.sleep(0.05)
            assert gone, "the JobSet outlived its foreground deletion"
            assert (await call(server, http, "GET", f"{CONFIG_MAPS}/c"))[0] == 404

    asyncio.run(scenario())
