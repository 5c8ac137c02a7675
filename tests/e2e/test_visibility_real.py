"""The visibility API through the real kube-apiserver's aggregation layer (issue 17).

``stack(backend=real, visibility=True)`` registers the shipped APIServices with a real
kube-apiserver running with a front-proxy PKI and ``--enable-aggregator-routing``; the
service injects its CA into them (no ``insecureSkipTLSVerify``). Requests then go the
way a user's do: the real ``kubectl get --raw`` → kube-apiserver (authentication) →
aggregator (front-proxy client certificate, ``X-Remote-User``) → the service, which
authorizes each caller with a SubjectAccessReview against the real RBAC.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from admission.kube.client import resources as k
from tests.support.kube_harness import eventually, stack, workload
from tests.unit.kube.test_visibility import BASE, OBJECTS, expected_order

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
V1BETA2 = "/apis/visibility.kueue.x-k8s.io/v1beta2"


def kubectl_raw(kubeconfig: Path, path: str) -> tuple[int, Any]:
    res = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", path],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if res.returncode == 0:
        return 0, json.loads(res.stdout)
    return res.returncode, res.stderr


def alice_can_view_team_a(view: Any) -> None:
    """Bind the shipped LocalQueue viewer role to alice in team-a (kept across resets)."""
    if view.get_object("rolebindings", "alice-pending", "team-a") is not None:
        return
    view.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "alice-pending", "namespace": "team-a"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "quartermaster-pending-workloads-lq-viewer",
            },
            "subjects": [
                {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        }
    )


def test_kubectl_get_raw_through_the_real_aggregator(tmp_path: Path, real_cluster: Any) -> None:
    from tests.support.realserver.controlplane import USER_TOKEN

    admin = real_cluster.cp.kubeconfig()
    alice = real_cluster.cp.kubeconfig(USER_TOKEN, name="alice")

    async def main() -> None:
        async with stack(
            tmp_path,
            backend=real_cluster,
            objects=OBJECTS,
            visibility=True,
            before_start=lambda b: alice_can_view_team_a(b.view),
        ) as s:
            names = [("team-a", "lq-a", "a1", 10), ("team-b", "lq-b", "b1", 100),
                     ("team-a", "lq-c", "c1", 0), ("team-a", "lq-a", "a2", 0)]  # fmt: skip
            for ns, lq, name, prio in names:
                wl = workload(ns, name, queue=lq, pod_sets=[("main", 1, "1")], priority=prio)
                await s.user.create(k.WORKLOADS, wl, namespace=ns)

            def all_pending() -> Any:
                code, body = kubectl_raw(admin, f"{V1BETA2}/clusterqueues/cq/pendingworkloads")
                assert code == 0, body
                return body["items"] if len(body["items"]) == len(names) else None

            items = await eventually(
                lambda: asyncio.to_thread(all_pending), what="4 pending workloads"
            )
            assert [it["metadata"]["name"] for it in items] == expected_order(s.workloads())
            assert [it["positionInClusterQueue"] for it in items] == [0, 1, 2, 3]
            code, body = await asyncio.to_thread(
                kubectl_raw, admin, f"{BASE}/clusterqueues/cq/pendingworkloads"
            )
            assert code == 0 and body["kind"] == "PendingWorkloadsSummary"  # v1beta1 too

            # a namespace viewer (the shipped role, bound in team-a only) through kubectl
            code, body = await asyncio.to_thread(
                kubectl_raw, alice, f"{V1BETA2}/namespaces/team-a/localqueues/lq-a/pendingworkloads"
            )
            assert code == 0, body
            assert [it["metadata"]["name"] for it in body["items"]] == ["a1", "a2"]
            code, err = await asyncio.to_thread(
                kubectl_raw, alice, f"{V1BETA2}/namespaces/team-b/localqueues/lq-b/pendingworkloads"
            )
            assert code != 0 and "Forbidden" in err and "team-b" in err, err
            code, err = await asyncio.to_thread(
                kubectl_raw, alice, f"{V1BETA2}/clusterqueues/cq/pendingworkloads"
            )
            assert code != 0 and "Forbidden" in err, err

    asyncio.run(main())
