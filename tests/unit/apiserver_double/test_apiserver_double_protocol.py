"""Protocol details where the double now answers as kube-apiserver 1.32 (issue 11).

D19: a JSON patch that does not apply is 422 with upstream's generic message;
D20: requests without credentials are ``system:anonymous`` (403 under RBAC), unknown
tokens 401; D23: watch bookmarks once a minute and 2 s before the timeout, and
``timeoutSeconds`` honoured as asked.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from admission.apiserver_double import ADMIN_TOKEN, ApiServer, running_apiserver, start_apiserver
from admission.apiserver_double.watch import WatchOptions, next_bookmark

JOBS = "/apis/batch/v1/namespaces/default/jobs"
CQS = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
Obj = dict[str, Any]


@asynccontextmanager
async def session(**kwargs: Any) -> AsyncIterator[tuple[ApiServer, aiohttp.ClientSession]]:
    async with running_apiserver(**kwargs) as server:
        connector = aiohttp.TCPConnector(ssl=False)
        async with aiohttp.ClientSession(connector=connector) as http:
            yield server, http


async def call(
    server: ApiServer,
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = ADMIN_TOKEN,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body)
    async with http.request(method, server.url + path, data=data, headers=headers) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if text.startswith("{") else text


def job(name: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            },
        },
    }


# -- D19 ----------------------------------------------------------------------------------


def test_failed_json_patch_test_is_a_generic_422() -> None:
    async def scenario() -> None:
        async with session() as (server, http):
            await call(server, http, "POST", JOBS, job("j"))
            ops = [
                {"op": "replace", "path": "/spec/parallelism", "value": 2},
                {"op": "test", "path": "/spec/parallelism", "value": 99},
            ]
            status, out = await call(
                server, http, "PATCH", f"{JOBS}/j", ops, content_type="application/json-patch+json"
            )
            assert status == 422
            assert out["reason"] == "Invalid"
            assert (
                out["message"] == "the server rejected our request due to an error in our request"
            )
            assert out["details"] == {
                "causes": [{"message": "testing value /spec/parallelism failed: test failed"}]
            }
            stored = server.get_object("jobs", "j", "default")
            assert stored is not None and stored["spec"]["parallelism"] == 1  # nothing applied

    asyncio.run(scenario())


# -- D20 ----------------------------------------------------------------------------------


def test_anonymous_requests_are_forbidden_and_unknown_tokens_unauthorized() -> None:
    async def scenario() -> None:
        async with session(tls=True) as (server, http):
            assert server.url.startswith("https://")
            status, out = await call(server, http, "GET", f"{JOBS}/j", token=None)
            assert status == 403 and out["reason"] == "Forbidden"
            assert out["message"] == (
                'jobs.batch "j" is forbidden: User "system:anonymous" cannot get resource '
                '"jobs" in API group "batch" in the namespace "default"'
            )
            assert out["details"] == {"name": "j", "group": "batch", "kind": "jobs"}
            status, out = await call(server, http, "POST", CQS, {}, token=None)
            assert status == 403 and out["message"] == (
                'clusterqueues.kueue.x-k8s.io is forbidden: User "system:anonymous" cannot '
                'create resource "clusterqueues" in API group "kueue.x-k8s.io"'
            )
            status, out = await call(server, http, "GET", "/api/v1/namespaces", token=None)
            assert status == 403 and 'in API group ""' in out["message"]
            status, out = await call(server, http, "GET", "/apis", token=None)
            assert status == 403 and out["message"] == (
                'forbidden: User "system:anonymous" cannot get path "/apis"'
            )
            status, _ = await call(server, http, "GET", "/version", token=None)
            assert status == 200  # system:public-info-viewer
            status, _ = await call(server, http, "GET", "/readyz", token=None)
            assert status == 200
            status, out = await call(server, http, "GET", f"{JOBS}", token="nobody-knows-me")
            assert status == 401 and out["reason"] == "Unauthorized"
            assert out["message"] == "Unauthorized"
            status, _ = await call(server, http, "GET", f"{JOBS}")
            assert status == 200  # the admin token
            anonymous = [r for r in server.requests if r.path == f"{JOBS}/j"]
            assert anonymous and anonymous[0].user == "system:anonymous"
            assert anonymous[0].status == 403

    asyncio.run(scenario())


@pytest.mark.parametrize(("mode", "expected"), [("refuse", 403), ("admin", 200), ("auto", 200)])
def test_anonymous_mode_over_plain_http(mode: str, expected: int) -> None:
    """kubectl sends no bearer token over plain HTTP, so over HTTP "auto" treats a
    request without credentials as the admin; "refuse" is the real server's answer."""

    async def scenario() -> None:
        async with session(anonymous=mode) as (server, http):
            assert server.url.startswith("http://")
            status, _ = await call(server, http, "GET", JOBS, token=None)
            assert status == expected

    asyncio.run(scenario())


def test_anonymous_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="anonymous"):
        ApiServer(anonymous="everyone")


# -- D23 ----------------------------------------------------------------------------------


def test_bookmark_schedule_follows_the_watch_cache() -> None:
    upstream = WatchOptions(version="v1", timeout=1800, bookmarks=True, bookmark_interval=60)
    assert ApiServer().bookmark_interval == 60.0
    assert ApiServer().bookmark_before_timeout == 2.0
    assert next_bookmark(0.0, 1800.0, upstream) == 60.0  # once a minute
    assert next_bookmark(1750.0, 1800.0, upstream) == 1798.0  # 2 s before the timeout
    assert next_bookmark(0.0, 1.0, upstream) is None  # a 1 s watch gets none


def watch_events(server: ApiServer, timeout: float) -> Any:
    async def run() -> tuple[list[str], float]:
        connector = aiohttp.TCPConnector()
        async with aiohttp.ClientSession(connector=connector) as http:
            query = f"?watch=true&allowWatchBookmarks=true&timeoutSeconds={timeout:g}"
            start = time.monotonic()
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with http.get(server.url + JOBS + query, headers=headers) as resp:
                types = [json.loads(line)["type"] async for line in resp.content if line.strip()]
            return types, time.monotonic() - start

    return run()


def test_a_short_watch_gets_no_bookmark_and_timeout_seconds_is_honoured() -> None:
    async def scenario() -> None:
        fast = {"bookmark_interval": 0.3, "bookmark_before_timeout": 0.1}
        async with running_apiserver(max_watch_seconds=0.2, **fast) as server:
            server.put_object(job("j"))
            # 1 s asked, longer than the server's default of 0.2 s: honoured; bookmarks
            # at 0.3 s and 0.6 s, then the pre-timeout one at 0.9 s, then none
            types, took = await watch_events(server, 1)
            assert took >= 0.9
            assert types == ["ADDED", "BOOKMARK", "BOOKMARK", "BOOKMARK"]
        async with running_apiserver(bookmark_interval=0.3) as server:
            server.put_object(job("j"))
            types, _ = await watch_events(server, 1)
            # upstream: a watch shorter than the 2 s pre-timeout margin gets no bookmark
            assert types == ["ADDED"]

    asyncio.run(scenario())


# -- D12, D13, D14: deletions finished by the controllers ------------------------------------

PODS = "/api/v1/namespaces/default/pods"


def owned_pod(name: str, owner: Obj | None = None, **spec: Any) -> Obj:
    meta: Obj = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
             "uid": owner["metadata"]["uid"], "controller": True}
        ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
    }


async def eventually(check: Any, what: str) -> None:
    for _ in range(300):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def test_job_delete_defaults_to_orphan_with_a_warning_and_the_gc_finishes_it() -> None:
    async def scenario() -> None:
        async with session() as (server, http):
            _, owner = await call(server, http, "POST", JOBS, job("j"))
            await call(server, http, "POST", PODS, owned_pod("p", owner))
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with http.delete(f"{server.url}{JOBS}/j", headers=headers) as resp:
                assert resp.status == 200
                warnings = resp.headers.getall("Warning", [])
                body = await resp.json()
            assert warnings == [
                '299 - "child pods are preserved by default when jobs are deleted; set '
                "propagationPolicy=Background to remove them or set propagationPolicy=Orphan "
                'to suppress this warning"'
            ]
            assert body["metadata"]["finalizers"] == ["orphan"]
            assert body["metadata"]["deletionTimestamp"]
            await eventually(lambda: server.get_object("jobs", "j", "default") is None, "Job gone")
            pod = server.get_object("pods", "p", "default")
            assert pod is not None and "ownerReferences" not in pod["metadata"]  # orphaned

    asyncio.run(scenario())


def test_foreground_deletion_waits_for_the_dependents() -> None:
    async def scenario() -> None:
        async with session() as (server, http):
            _, owner = await call(server, http, "POST", JOBS, job("j"))
            blocker = owned_pod("p", owner)
            blocker["metadata"]["finalizers"] = ["example.com/hold"]
            await call(server, http, "POST", PODS, blocker)
            status, body = await call(
                server, http, "DELETE", f"{JOBS}/j", {"propagationPolicy": "Foreground"}
            )
            assert status == 200 and body["metadata"]["finalizers"] == ["foregroundDeletion"]
            await eventually(
                lambda: (
                    (server.get_object("pods", "p", "default") or {})
                    .get("metadata", {})
                    .get("deletionTimestamp")
                ),
                "the dependent is being deleted",
            )
            await asyncio.sleep(0.1)
            assert server.get_object("jobs", "j", "default") is not None  # waits for the pod
            release = {"metadata": {"finalizers": None}}
            await call(server, http, "PATCH", f"{PODS}/p", release,
                       content_type="application/merge-patch+json")  # fmt: skip
            await eventually(
                lambda: server.get_object("jobs", "j", "default") is None, "owner gone"
            )

    asyncio.run(scenario())


def test_namespace_is_terminating_until_emptied() -> None:
    async def scenario() -> None:
        async with session() as (server, http):
            ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
            await call(server, http, "POST", "/api/v1/namespaces", ns)
            held = owned_pod("p")
            held["metadata"]["finalizers"] = ["example.com/hold"]
            await call(server, http, "POST", "/api/v1/namespaces/team/pods", held)
            status, body = await call(server, http, "DELETE", "/api/v1/namespaces/team")
            assert status == 200
            assert body["status"]["phase"] == "Terminating"
            assert body["spec"]["finalizers"] == ["kubernetes"]
            status, out = await call(
                server, http, "POST", "/apis/batch/v1/namespaces/team/jobs", job("late")
            )
            assert status == 403 and out["message"] == (
                'jobs.batch "late" is forbidden: unable to create new content in namespace '
                "team because it is being terminated"
            )
            await asyncio.sleep(0.1)
            assert server.get_object("namespaces", "team") is not None  # the pod holds it
            await call(server, http, "PATCH", "/api/v1/namespaces/team/pods/p",
                       {"metadata": {"finalizers": None}},
                       content_type="application/merge-patch+json")  # fmt: skip
            await eventually(lambda: server.get_object("namespaces", "team") is None, "ns gone")

    asyncio.run(scenario())


def test_bound_pod_is_deleted_gracefully_and_removed_once_the_kubelet_confirms() -> None:
    async def scenario() -> None:
        async with session() as (server, http):
            await call(server, http, "POST", PODS, owned_pod("bound", nodeName="node-1"))
            await call(server, http, "POST", PODS, owned_pod("unbound"))
            status, body = await call(server, http, "DELETE", f"{PODS}/bound")
            assert status == 200
            assert body["metadata"]["deletionTimestamp"]
            assert body["metadata"]["deletionGracePeriodSeconds"] == 30
            assert server.get_object("pods", "bound", "default") is not None
            await eventually(
                lambda: server.get_object("pods", "bound", "default") is None, "kubelet confirmed"
            )
            await call(server, http, "DELETE", f"{PODS}/unbound")
            assert server.get_object("pods", "unbound", "default") is None  # at once

    asyncio.run(scenario())


# -- a long-running double ----------------------------------------------------------------


@pytest.mark.parametrize("record", [True, False])
def test_without_recording_only_the_counts_are_kept(record: bool) -> None:
    """``record_requests=False`` (the demo, benchmarks) keeps no request and no
    AdmissionReview, so memory does not grow with the requests served."""
    hook = {
        "name": "vjob.test.io",
        "clientConfig": {"url": "https://127.0.0.1:9/validate"},  # nothing listens
        "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["jobs"]}],
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }  # fmt: skip
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "v"},
        "webhooks": [hook],
    }

    async def scenario() -> None:
        async with session(record_requests=record, webhook_configurations=[config]) as (
            server,
            http,
        ):
            status, _ = await call(server, http, "POST", JOBS, job("j"))
            assert status == 201, "failurePolicy Ignore: the unreachable webhook is skipped"
            assert server.request_count(verb="create", resource="jobs") == 1
            assert len(server.webhook_calls) == (1 if record else 0)
            assert len([r for r in server.requests if r.verb == "create"]) == (1 if record else 0)

    asyncio.run(scenario())


# -- D11: kubectl's writes validate on the server -------------------------------------------

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")
def test_kubectl_validates_on_the_server_without_validate_false(tmp_path: Path) -> None:
    """kubectl's default ``--validate=strict`` finds, in the OpenAPI v3 documents, that
    every kind's PATCH takes ``fieldValidation``, so it sends ``fieldValidation=Strict``
    and the double refuses an unknown field; nothing needs ``--validate=false``."""
    good = job("made-by-kubectl")
    bad = job("with-a-typo")
    bad["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}  # fmt: skip
    for name, obj in (("good", good), ("bad", bad), ("queue", queue)):
        (tmp_path / f"{name}.json").write_text(json.dumps(obj))

    with start_apiserver(tls=True) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")

        def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
            cmd = [KUBECTL, f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'c'}", *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

        created = kubectl("create", "-f", str(tmp_path / "good.json"))
        assert created.returncode == 0, created.stderr
        applied = kubectl("apply", "-f", str(tmp_path / "queue.json"))
        assert applied.returncode == 0, applied.stderr
        refused = kubectl("create", "-f", str(tmp_path / "bad.json"))
        assert refused.returncode == 1
        assert 'strict decoding error: unknown field "spec.template.spec.restartPolicyy"' in (
            refused.stderr
        )
        assert api.get_object("jobs", "made-by-kubectl", "default") is not None
        assert api.get_object("localqueues", "lq", "default") is not None
        assert api.get_object("jobs", "with-a-typo", "default") is None
        creates = [r for r in api.requests if r.verb == "create"]
        assert creates and all(r.query.get("fieldValidation") == "Strict" for r in creates)
