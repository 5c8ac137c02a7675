"""A tenant's ways around quota, per kind, on the double and on a real API server.

Each test runs a kind's object to admission through ``serve`` and then tries what a
namespace user (or one allowed to patch ``workloads/status``) could do to run more
than was admitted: per kind with a :class:`~tests.integration_kit.KindCase`, and for
pods (single and in groups).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.kube import client as k
from admission.kube.client import JSON_PATCH, ApiError
from tests import (
    test_integration_jobset,
    test_integration_mpijob,
    test_integration_pytorchjob,
    test_integration_raycluster,
    test_integration_rayjob,
    test_integration_trainjob,
)
from tests.integration_kit import NS, KindCase, lifecycle_objects, meta, workload_of
from tests.kube_harness import (
    Obj,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    namespace,
    stack,
)

CASES = [
    pytest.param(m.CASE, id=m.CASE.integration.kind)
    for m in (
        test_integration_jobset,
        test_integration_raycluster,
        test_integration_pytorchjob,
        test_integration_mpijob,
        test_integration_rayjob,
        test_integration_trainjob,
    )
]


async def admitted_object(s: Any, case: KindCase, name: str) -> dict[str, Any]:
    """Create ``name`` of the case's kind and wait for its Workload's admission."""
    await s.user.create(case.resource, case.make(name, case.roles, meta(name)), namespace=NS)
    return await eventually(  # type: ignore[no-any-return]
        lambda: admitted(w := workload_of(s.server, case.integration, name)) and w,
        what=f"{name} admitted",
    )


@pytest.mark.parametrize("case", CASES)
def test_a_tenant_cannot_mark_pods_of_a_running_workload_reclaimable(
    case: KindCase, tmp_path: Path, backend: Any
) -> None:
    """``status.reclaimablePods`` on a running object's Workload would let an identical
    second object be admitted on the quota the first still uses."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=lifecycle_objects(case)) as s:
            wl = await admitted_object(s, case, "first")
            first_set, count = case.roles[0]
            patch = [{"op": "add", "path": "/status/reclaimablePods",
                      "value": [{"name": first_set, "count": count}]}]  # fmt: skip
            with pytest.raises(ApiError) as caught:
                await s.user.patch(
                    k.WORKLOADS, wl["metadata"]["name"], patch, namespace=NS,
                    subresource="status", content_type=JSON_PATCH,
                )  # fmt: skip
            assert caught.value.status == 403, caught.value
            assert "can only be changed by the admission service" in caught.value.message
            stored = workload_of(s.server, case.integration, "first")
            assert stored is not None and not (stored.get("status") or {}).get("reclaimablePods")
            await s.user.create(
                case.resource, case.make("second", case.roles, meta("second")), namespace=NS
            )
            await eventually(
                lambda: workload_of(s.server, case.integration, "second"), what="second queued"
            )
            await asyncio.sleep(0.5)  # a cycle or more: the second must still wait
            assert not admitted(workload_of(s.server, case.integration, "second"))

    asyncio.run(main())


def queued_pod(name: str, *, cpu: str, group: str | None = None, total: int = 0) -> Obj:
    labels = {"kueue.x-k8s.io/queue-name": "lq"}
    annotations = {}
    if group:
        labels["kueue.x-k8s.io/pod-group-name"] = group
        annotations["kueue.x-k8s.io/pod-group-total-count"] = str(total)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels,
                     "annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]},
    }  # fmt: skip


GATE = "kueue.x-k8s.io/admission"
SMALL_QUEUE = [
    namespace("team-a"),
    flavor("f"),
    cluster_queue("cq", {"f": {"cpu": 2}}),
    local_queue("team-a", "lq", "cq"),
]


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param([queued_pod("single", cpu="4")], id="single-pod"),
        pytest.param(
            [queued_pod(f"g-{i}", cpu="2", group="g", total=2) for i in range(2)],
            id="group-member",
        ),
    ],
)
def test_a_tenant_cannot_remove_the_admission_gate_of_a_pending_pod(
    pods: list[Obj], tmp_path: Path, backend: Any
) -> None:
    """A pod without its gate runs whatever its Workload holds: only the service lifts it."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=SMALL_QUEUE) as s:
            for p in pods:
                created = await s.user.create(k.PODS, p, namespace="team-a")
                assert GATE in [g["name"] for g in created["spec"]["schedulingGates"]]
            name = pods[0]["metadata"]["name"]
            await eventually(
                lambda: any(
                    not admitted(w) and (w.get("status") or {}).get("conditions")
                    for w in s.workloads("team-a")
                ),
                what="the pending Workload",
            )
            with pytest.raises(ApiError) as caught:
                await s.user.patch(
                    k.PODS, name, [{"op": "replace", "path": "/spec/schedulingGates",
                                    "value": []}],
                    namespace="team-a", content_type=JSON_PATCH,
                )  # fmt: skip
            assert caught.value.status == 403, caught.value
            assert f"the {GATE} gate can only be removed by the admission service" in (
                caught.value.message
            )
            stored = s.get("pods", name, "team-a")
            assert stored is not None
            assert GATE in [g["name"] for g in stored["spec"]["schedulingGates"]]

    asyncio.run(main())
