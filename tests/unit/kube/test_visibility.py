"""Kueue's visibility API: pending positions exactly as the scheduler's queues hold them.

The service runs against the API-server double with its aggregation layer (front-proxy
PKI, ``extension-apiserver-authentication``, APIService routing, TokenReview and
SubjectAccessReview decided by RBAC over the shipped roles), and every request goes
through the double as ``kubectl get --raw`` would.
"""

from __future__ import annotations

import asyncio
import random
import ssl
from pathlib import Path
from typing import Any

import aiohttp

from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from tests.support.kube_harness import (
    SERVICE_NS,
    Stack,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    namespace,
    stack,
    workload,
)

BASE = "/apis/visibility.kueue.x-k8s.io/v1beta1"
OBJECTS = [
    namespace("team-a"),
    namespace("team-b"),
    flavor("f"),
    cluster_queue("cq", {"f": {"cpu": 0}}),
    local_queue("team-a", "lq-a", "cq"),
    local_queue("team-a", "lq-c", "cq"),
    local_queue("team-b", "lq-b", "cq"),
]
ALICE = "alice-token"  # a member of team-a, granted the LocalQueue viewer role there


def add_alice(server: Any) -> None:
    server.add_user(ALICE, "alice", ["team-a"])
    server.put_object(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "team-a-pending", "namespace": "team-a"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "quartermaster-pending-workloads-lq-viewer",
            },
            "subjects": [{"kind": "Group", "name": "team-a"}],
        }
    )


async def get_raw(s: Stack, path: str, *, token: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session:
        async with session.get(s.server.url + path, headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)


def expected_order(objs: list[dict[str, Any]]) -> list[str]:
    """Kueue's queue order from the API objects: priority, creation time, UID."""
    return [
        o["metadata"]["name"]
        for o in sorted(
            objs,
            key=lambda o: (
                -o["spec"].get("priority", 0),
                o["metadata"]["creationTimestamp"],
                o["metadata"]["uid"],
            ),
        )
    ]


def test_positions_follow_the_engine_order_after_a_burst_and_admission_takes_the_head(
    tmp_path: Path,
) -> None:
    rng = random.Random(17)
    lqs = [("team-a", "lq-a"), ("team-a", "lq-c"), ("team-b", "lq-b")]

    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS, visibility=True) as s:
            burst = []
            for i in range(24):
                ns, lq = lqs[rng.randrange(3)]
                wl = workload(ns, f"w{i:02d}", queue=lq, pod_sets=[("main", 1, "1")],
                              priority=rng.choice([0, 10, 100]))  # fmt: skip
                burst.append(s.user.create(kr.WORKLOADS, wl, namespace=ns))
            await asyncio.gather(*burst)

            async def all_pending() -> list[dict[str, Any]] | None:
                status, body = await get_raw(s, f"{BASE}/clusterqueues/cq/pendingworkloads")
                assert status == 200, body
                return body["items"] if len(body["items"]) == 24 else None

            items = await eventually(all_pending, what="24 pending workloads")
            objs = s.workloads()
            assert [it["metadata"]["name"] for it in items] == expected_order(objs)
            assert [it["positionInClusterQueue"] for it in items] == list(range(24))
            seen: dict[str, int] = {}
            for it in items:
                lq = f"{it['metadata']['namespace']}/{it['localQueueName']}"
                assert it["positionInLocalQueue"] == seen.get(lq, 0)
                seen[lq] = seen.get(lq, 0) + 1
                obj = next(o for o in objs if o["metadata"]["name"] == it["metadata"]["name"])
                assert it["priority"] == obj["spec"]["priority"]
                assert it["metadata"]["creationTimestamp"] == obj["metadata"]["creationTimestamp"]

            # The LocalQueue view: the same workloads, in the same order, re-numbered.
            status, body = await get_raw(
                s, f"{BASE}/namespaces/team-a/localqueues/lq-a/pendingworkloads"
            )
            assert status == 200
            in_lq = [it for it in items if it["localQueueName"] == "lq-a"]
            assert [i["metadata"]["name"] for i in body["items"]] == [
                i["metadata"]["name"] for i in in_lq
            ]
            assert [i["positionInClusterQueue"] for i in body["items"]] == [
                i["positionInClusterQueue"] for i in in_lq
            ]
            assert [i["positionInLocalQueue"] for i in body["items"]] == list(range(len(in_lq)))

            # Quota for five: the scheduler admits exactly the first five positions.
            await s.user.patch(
                kr.CLUSTER_QUEUES,
                "cq",
                [{"op": "replace",
                  "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
                  "value": "5"}],
                content_type=k.JSON_PATCH,
            )  # fmt: skip
            head = {it["metadata"]["name"] for it in items[:5]}
            await eventually(
                lambda: {w["metadata"]["name"] for w in s.workloads() if admitted(w)} == head,
                what="the first five positions admitted",
            )
            status, body = await get_raw(s, f"{BASE}/clusterqueues/cq/pendingworkloads")
            assert [it["metadata"]["name"] for it in body["items"]] == [
                it["metadata"]["name"] for it in items[5:]
            ]
            assert [it["positionInClusterQueue"] for it in body["items"]] == list(range(19))

            # offset/limit page through the same order
            status, body = await get_raw(
                s, f"{BASE}/clusterqueues/cq/pendingworkloads?offset=3&limit=4"
            )
            assert [it["positionInClusterQueue"] for it in body["items"]] == [3, 4, 5, 6]
            status, body = await get_raw(
                s, f"{BASE}/namespaces/team-a/localqueues/lq-a/pendingworkloads?offset=1&limit=1"
            )
            assert len(body["items"]) <= 1
            if body["items"]:
                assert body["items"][0]["positionInLocalQueue"] == 1

    asyncio.run(main())


def test_errors_are_kubernetes_statuses(tmp_path: Path) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS, visibility=True) as s:
            status, body = await get_raw(s, f"{BASE}/clusterqueues/nope/pendingworkloads")
            assert (status, body["reason"], body["message"]) == (
                404,
                "NotFound",
                'clusterqueue.visibility.kueue.x-k8s.io "nope" not found',
            )
            status, body = await get_raw(
                s, f"{BASE}/namespaces/team-a/localqueues/nope/pendingworkloads"
            )
            assert (status, body["details"]["kind"]) == (404, "localqueue")
            status, body = await get_raw(s, f"{BASE}/clusterqueues/cq/pendingworkloads?offset=abc")
            assert (status, body["reason"]) == (400, "BadRequest")
            assert "offset" in body["message"]
            status, body = await get_raw(s, BASE)
            assert status == 200
            assert {r["name"] for r in body["resources"]} >= {
                "clusterqueues/pendingworkloads",
                "localqueues/pendingworkloads",
            }
            status, body = await get_raw(s, f"{BASE}/clusterqueues/cq/pendingworkloads")
            assert (status, body["kind"], body["items"]) == (200, "PendingWorkloadsSummary", [])

    asyncio.run(main())


def test_a_namespace_viewer_sees_only_its_namespaces_local_queues(tmp_path: Path) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS, visibility=True, before_start=add_alice) as s:
            status, body = await get_raw(
                s, f"{BASE}/namespaces/team-a/localqueues/lq-a/pendingworkloads", token=ALICE
            )
            assert status == 200, body
            status, body = await get_raw(
                s, f"{BASE}/namespaces/team-b/localqueues/lq-b/pendingworkloads", token=ALICE
            )
            assert status == 403
            assert body["message"].startswith(
                'localqueues.visibility.kueue.x-k8s.io "lq-b" is forbidden: User "alice" '
                'cannot get resource "localqueues/pendingworkloads" in API group '
                '"visibility.kueue.x-k8s.io" in the namespace "team-b"'
            )
            status, body = await get_raw(
                s, f"{BASE}/clusterqueues/cq/pendingworkloads", token=ALICE
            )
            assert status == 403 and "at the cluster scope" in body["message"]

    asyncio.run(main())


def test_the_server_trusts_identity_headers_only_from_the_front_proxy(tmp_path: Path) -> None:
    """Reached directly (not through the aggregator), a forged ``X-Remote-User`` is
    ignored: no front-proxy certificate, no identity; a certificate from another CA is
    refused in the TLS handshake."""
    from admission.apiserver_double.certs import make_client_cert
    from webhooks.server.certs import read_cert_dir

    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS, visibility=True) as s:
            port = s.service.ports["visibility"]
            url = f"https://127.0.0.1:{port}{BASE}/clusterqueues/cq/pendingworkloads"
            ca = read_cert_dir(s.cert_dir).ca_cert_pem.decode()
            ctx = ssl.create_default_context(cadata=ca)
            ctx.check_hostname = False
            forged = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}
            async with aiohttp.ClientSession() as session:
                async with session.get(url, ssl=ctx, headers=forged) as resp:
                    assert resp.status == 401
                async with session.get(
                    url, ssl=ctx, headers={"Authorization": "Bearer not-a-token"}
                ) as resp:
                    assert resp.status == 401
                async with session.get(
                    url, ssl=ctx, headers={"Authorization": "Bearer double-admin-token"}
                ) as resp:
                    assert resp.status == 200  # a bearer token, reviewed by TokenReview
                rogue = make_client_cert("front-proxy-client", ca_name="rogue-ca")
                cert_dir = tmp_path / "rogue"
                rogue.write(cert_dir)
                bad = ssl.create_default_context(cadata=ca)
                bad.check_hostname = False
                bad.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
                try:
                    async with session.get(url, ssl=bad, headers=forged) as resp:
                        assert resp.status == 401
                except (aiohttp.ClientError, ssl.SSLError):
                    pass  # refused in the handshake: just as good
            assert s.service.visibility.auth.stats["token_reviews"] >= 1
            assert SERVICE_NS

    asyncio.run(main())
