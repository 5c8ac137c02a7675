"""End to end: plain Pod gangs (pod-group-name / pod-group-total-count) through ``serve``.

Pods are created through the API double, whose mutating webhook (the real one) gates
them; the controller builds the group's Workload, the scheduler admits it and the
controller ungates the pods with the flavor's nodeSelector. Pod phases are set through
the status subresource, playing the kubelet.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from admission.kube.client import resources as k
from tests.support.kube_harness import (
    Obj,
    Stack,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    is_true,
    local_queue,
    namespace,
    priority_class,
    stack,
)

GATE = "kueue.x-k8s.io/admission"
FINALIZER = "kueue.x-k8s.io/managed"
BASE = [
    namespace("team-a"),
    flavor("a100", **{"gpu.example.com/model": "a100"}),
    cluster_queue("cq", {"a100": {"cpu": 4}}),
    local_queue("team-a", "lq", "cq"),
]


def run(coro_fn) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro_fn())


def pod(
    name: str, *, group: str, total: int, cpu: str = "1", priority_class: str | None = None
) -> Obj:
    labels = {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/pod-group-name": group}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": labels,
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": str(total)},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
            ],
        },
    }


async def create_pod(s: Stack, name: str, **kw: object) -> Obj:
    return await s.user.create(k.PODS, pod(name, **kw), namespace="team-a")  # type: ignore[arg-type]


def gated(p: Obj | None) -> bool:
    gates = ((p or {}).get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == GATE for g in gates)


def ungated(s: Stack, *names: str) -> bool:
    pods = [s.get("pods", n, "team-a") for n in names]
    return all(p is not None and not gated(p) for p in pods)


async def set_phase(s: Stack, name: str, phase: str) -> None:
    await s.user.patch(
        k.PODS, name, {"status": {"phase": phase}}, namespace="team-a", subresource="status"
    )


async def settled(s: Stack) -> None:
    ctl = s.service.controller
    assert ctl is not None
    await eventually(ctl.idle, what="the controller is idle")


def test_a_gang_waits_for_all_its_pods_then_is_admitted_and_ungated_together(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            first = await create_pod(s, "g-0", group="gang", total=2, cpu="2")
            assert gated(first)  # the webhook gated it
            assert FINALIZER in first["metadata"]["finalizers"]
            await settled(s)
            assert s.get("workloads", "gang", "team-a") is None  # 1 of 2 pods: no Workload
            assert gated(s.get("pods", "g-0", "team-a"))

            await create_pod(s, "g-1", group="gang", total=2, cpu="2")
            wl = await eventually(
                lambda: admitted(w := s.get("workloads", "gang", "team-a")) and w,
                what="the group's Workload is admitted",
            )
            assert wl["spec"]["queueName"] == "lq"
            assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("main", 2)]
            psa = wl["status"]["admission"]["podSetAssignments"][0]
            assert psa["flavors"] == {"cpu": "a100"} and psa["count"] == 2
            await eventually(lambda: ungated(s, "g-0", "g-1"), what="both pods ungated")
            for name in ("g-0", "g-1"):
                p = s.get("pods", name, "team-a")
                assert p["spec"]["nodeSelector"] == {"gpu.example.com/model": "a100"}
                assert FINALIZER in p["metadata"]["finalizers"]  # kept until the group ends
            await settled(s)
            # one write per intent: each pod is ungated by exactly one patch (a second,
            # concurrent one would fail its `test` op with a 422 on a real server)
            patches = Counter(
                r.name for r in s.server.requests if r.verb == "patch" and r.resource == "pods"
            )
            assert patches == {"g-0": 1, "g-1": 1}, patches

    run(main)


def test_a_gang_larger_than_the_quota_stays_gated_and_pending(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            for i in range(3):
                await create_pod(s, f"big-{i}", group="big", total=3, cpu="2")
            wl = await eventually(
                lambda: (
                    (w := s.get("workloads", "big", "team-a"))
                    and any(
                        c["type"] == "QuotaReserved" and c["status"] == "False"
                        for c in (w.get("status") or {}).get("conditions") or []
                    )
                    and w
                ),
                what="a pending reason on the Workload",
            )
            assert wl["spec"]["podSets"][0]["count"] == 3
            await settled(s)
            assert not admitted(s.get("workloads", "big", "team-a"))
            for i in range(3):
                p = s.get("pods", f"big-{i}", "team-a")
                assert gated(p) and not p["spec"].get("nodeSelector")

    run(main)


def test_finishing_all_pods_finishes_the_workload_and_lets_the_next_gang_in(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            for i in range(2):
                await create_pod(s, f"a-{i}", group="first", total=2, cpu="2")
            await eventually(lambda: ungated(s, "a-0", "a-1"), what="the first gang runs")
            for i in range(2):
                await create_pod(s, f"b-{i}", group="second", total=2, cpu="2")
            await eventually(
                lambda: s.get("workloads", "second", "team-a"), what="the second Workload"
            )
            await settled(s)
            assert not admitted(s.get("workloads", "second", "team-a"))
            assert gated(s.get("pods", "b-0", "team-a"))

            await set_phase(s, "a-0", "Succeeded")
            await settled(s)
            assert not is_true(s.get("workloads", "first", "team-a"), "Finished")  # 1 still runs
            await set_phase(s, "a-1", "Failed")
            wl = await eventually(
                lambda: is_true(w := s.get("workloads", "first", "team-a"), "Finished") and w,
                what="the first Workload is finished",
            )
            cond = next(c for c in wl["status"]["conditions"] if c["type"] == "Finished")
            assert cond["reason"] == "Failed"  # one pod failed
            await eventually(lambda: ungated(s, "b-0", "b-1"), what="the second gang runs")
            assert admitted(s.get("workloads", "second", "team-a"))
            await eventually(
                lambda: all(
                    FINALIZER
                    not in (s.get("pods", n, "team-a")["metadata"].get("finalizers") or [])
                    for n in ("a-0", "a-1")
                ),
                what="the finished pods' finalizers are removed",
            )
            await settled(s)
            patches = Counter(
                r.name for r in s.server.requests if r.verb == "patch" and r.resource == "pods"
            )
            # status writes are the test's own (set_phase); ours: ungate, then unfinalize
            ours = {n: patches[n] for n in ("a-0", "a-1", "b-0", "b-1")}
            assert ours == {"a-0": 2, "a-1": 2, "b-0": 1, "b-1": 1}, patches

    run(main)


def test_a_preempted_gang_loses_its_pods_and_the_quota_goes_to_the_preemptor(
    tmp_path: Path, backend: Any
) -> None:
    objects = [
        namespace("team-a"),
        flavor("a100", **{"gpu.example.com/model": "a100"}),
        cluster_queue(
            "cq", {"a100": {"cpu": 4}}, preemption={"withinClusterQueue": "LowerPriority"}
        ),
        local_queue("team-a", "lq", "cq"),
        priority_class("high", 100),
    ]

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects) as s:
            for i in range(2):
                await create_pod(s, f"low-{i}", group="low", total=2, cpu="2")
            await eventually(lambda: ungated(s, "low-0", "low-1"), what="the low gang runs")
            for i in range(2):
                await create_pod(
                    s, f"high-{i}", group="high", total=2, cpu="2", priority_class="high"
                )
            await eventually(lambda: ungated(s, "high-0", "high-1"), what="the high gang runs")
            assert s.get("pods", "low-0", "team-a") is None  # deleted on eviction
            assert s.get("pods", "low-1", "team-a") is None
            high = s.get("workloads", "high", "team-a")
            assert admitted(high) and high["spec"]["priority"] == 100
            await eventually(
                lambda: s.get("workloads", "low", "team-a") is None,
                what="the evicted group's Workload, its pods gone, is deleted",
            )

    run(main)


def test_a_deleted_pod_of_an_incomplete_gang_goes_away(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await create_pod(s, "lone-0", group="lone", total=2)
            await settled(s)
            await s.user.delete(k.PODS, "lone-0", namespace="team-a")
            await eventually(
                lambda: s.get("pods", "lone-0", "team-a") is None,
                what="the gated pod's finalizer is lifted and the pod deleted",
            )
            assert s.get("workloads", "lone", "team-a") is None

    run(main)


def test_pods_beyond_the_groups_total_count_are_never_ungated(tmp_path: Path, backend: Any) -> None:
    """Issue 13's quota escape: a group with total count 2 and more pods (created before
    or after admission) ran them all on a 2-pod charge. The extra, newest pods are
    deleted; exactly the counted ones run."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            for i in range(3):  # one too many already before admission
                await create_pod(s, f"x-{i}", group="gang", total=2, cpu="1")
            await eventually(lambda: ungated(s, "x-0", "x-1"), what="the counted pods run")
            await create_pod(s, "x-3", group="gang", total=2, cpu="1")  # and one after
            await settled(s)

            def gone(name: str) -> bool:
                p = s.get("pods", name, "team-a")
                return p is None or bool(p["metadata"].get("deletionTimestamp"))

            await eventually(lambda: gone("x-2") and gone("x-3"), what="the extra pods go")
            assert ungated(s, "x-0", "x-1")
            wl = s.get("workloads", "gang", "team-a")
            assert wl["spec"]["podSets"][0]["count"] == 2

    run(main)
