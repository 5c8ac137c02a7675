"""What the API-server double's client tests share: a running double with a real client, object builders.

The tests of tests/unit/apiserver_double/ drive the double with the official
``kubernetes.aio`` client over loopback; this module starts the double beside such a
client (``cluster``), builds the Job and Workload bodies they send, and holds the
admission-webhook configurations and answers the webhook tests register, so each test
module states only what it checks.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from admission.apiserver_double import ADMIN_TOKEN, ApiServer, running_apiserver
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


Review = dict[str, Any]


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
