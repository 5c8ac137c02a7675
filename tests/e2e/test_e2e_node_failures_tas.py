"""End to end: node failures of topology-aware (TAS) gangs, on the API double and on a real
kube-apiserver with kube-controller-manager (the ``backend`` fixture).

A TAS gang's failed node is replaced by a spare in its block without an eviction (its
pod on the failed node is failed, the new one goes to the spare); with no spare and
``failFast: false`` it keeps running with ``status.unhealthyNodes`` until one frees up.
The Nodes, pods and helpers are those of test_e2e_node_failures.py (tests/e2e/_node_failures.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube.client import resources as k
from tests.e2e._node_failures import BASE, NS, add_node, bind, config, event_with, not_ready, run
from tests.e2e.test_e2e_topology import GPU, HOST, gates, job_pods, tas_job
from tests.support.kube_harness import (
    Obj,
    Stack,
    admitted,
    cluster_queue,
    eventually,
    is_true,
    local_queue,
)

TAS_BASE = [
    *BASE[:2],
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "tas"},
        "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "gpu"},
    },
    cluster_queue("cq", {"tas": {GPU: 100}}),
    local_queue(NS, "lq", "cq"),
]


def hosts_of(wl: Obj) -> list[str]:
    from queues.api.topology_assignment import from_v1beta2

    ta = from_v1beta2(wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"])
    return [v[-1] for v, n in ta.domains for _ in range(n)]


async def start_tas_job(s: Stack, backend: Any, name: str) -> tuple[Obj, dict[str, str]]:
    """A 2-pod TAS Job requiring one block: admitted, its pods ungated onto their hosts,
    bound there and Running. Returns its Workload and pod name -> host."""
    tjob = tas_job(name, pods=2)
    await s.user.create(k.JOBS, tjob, namespace=NS)
    wl = await eventually(
        lambda: admitted(w := s.workload_of_job(NS, name)) and w, what=f"{name} admitted"
    )
    await eventually(
        lambda: (j := s.get("jobs", name, NS)) and j["spec"]["suspend"] is False,
        what=f"{name} is started",
    )
    names = await job_pods(s, backend, tjob, indexes=[0, 1])

    def ungated() -> dict[str, str] | None:
        got = {n: s.get("pods", n, NS) for n in names}
        if not all(p is not None and not gates(p) for p in got.values()):
            return None
        return {n: p["spec"]["nodeSelector"][HOST] for n, p in got.items() if p is not None}

    placed = await eventually(ungated, what=f"{name}'s pods ungated")
    for pod_name, host in placed.items():
        await bind(s, backend, pod_name, host)
    return wl, placed


def test_a_tas_gang_swaps_its_failed_node_for_a_spare_in_its_block(
    tmp_path: Path, backend: Any
) -> None:
    """Kueue's hot swap: the failed host's pod moves to the block's spare host without an
    eviction; the pod left on the failed node is failed (TerminatedByKueue) so the Job
    replaces it, and the new pod is ungated onto the spare."""

    async def main() -> None:
        async with run(tmp_path, backend, TAS_BASE, config()) as s:
            for n in ("b1-h0", "b1-h1", "b1-h2"):
                await add_node(s, n, "b1")
            wl, placed = await start_tas_job(s, backend, "swap")
            before = hosts_of(wl)
            spare = ({"b1-h0", "b1-h1", "b1-h2"} - set(before)).pop()
            failed = before[0]
            on_failed = next(p for p, h in placed.items() if h == failed)

            await not_ready(s, failed)

            def replaced() -> Obj | None:
                w = s.workload_of_job(NS, "swap")
                return w if w and admitted(w) and failed not in hosts_of(w) else None

            wl = await eventually(replaced, what=f"{failed} replaced", timeout=30)
            assert sorted(hosts_of(wl)) == sorted([before[1], spare])
            assert not is_true(wl, "Evicted")
            assert not wl["status"].get("unhealthyNodes")
            assert await eventually(
                lambda: event_with(s, "NodeReplaced", f"Replaced failed node {failed}"),
                what="a NodeReplaced Event",
            )

            def failed_pod() -> Obj | None:
                p = s.get("pods", on_failed, NS)
                return p if p is None or p["status"].get("phase") == "Failed" else None

            pod = await eventually(failed_pod, what="the pod on the failed node is failed")
            if pod is not None:
                cond = next(
                    c for c in pod["status"]["conditions"] if c["type"] == "TerminatedByKueue"
                )
                assert cond["reason"] == "UnschedulableOnAssignedNode"
            index = int(placed_index(pod, on_failed))
            if backend == "double":  # the Job controller replaces the failed pod
                old = s.get("pods", on_failed, NS)
                assert old is not None
                new = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        **{k_: old["metadata"][k_] for k_ in ("labels", "ownerReferences")},
                        "name": f"swap-{index}-again",
                        "namespace": NS,
                        "annotations": (s.get("jobs", "swap", NS) or {})["spec"]["template"][
                            "metadata"
                        ]["annotations"]
                        | {"batch.kubernetes.io/job-completion-index": str(index)},
                    },
                    "spec": (s.get("jobs", "swap", NS) or {})["spec"]["template"]["spec"],
                }
                await s.user.create(k.PODS, new, namespace=NS)

            async def new_pod_host() -> str | None:
                got = await s.user.list(k.PODS, namespace=NS, label_selector="job-name=swap")
                for p in got["items"]:
                    if p["metadata"]["name"] in placed or p["status"].get("phase") == "Failed":
                        continue
                    if not gates(p):
                        return str(p["spec"]["nodeSelector"][HOST])
                return None

            assert await eventually(new_pod_host, what="the new pod is ungated") == spare

    asyncio.run(main())


def placed_index(pod: Obj | None, name: str) -> str:
    """The completion index of a Job pod (from its label, or the double's pod name)."""
    if pod is not None:
        return str(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
    return name.rsplit("-x", 1)[-1]


def test_without_a_spare_a_tas_gang_waits_with_unhealthy_nodes_until_one_frees_up(
    tmp_path: Path, backend: Any
) -> None:
    """``failFast: false``: no host is free in the block, so the workload keeps running
    with ``status.unhealthyNodes`` naming the failed node (Kueue's field) and no pod is
    ungated onto it; a new host in the block becomes the replacement."""

    async def main() -> None:
        cfg = config(failFast=False)
        async with run(tmp_path, backend, TAS_BASE, cfg) as s:
            for n in ("b1-h0", "b1-h1"):
                await add_node(s, n, "b1")
            wl, _ = await start_tas_job(s, backend, "wait")
            failed = hosts_of(wl)[0]
            await not_ready(s, failed)

            def listed() -> Any:
                w = s.workload_of_job(NS, "wait") or {}
                return (w.get("status") or {}).get("unhealthyNodes")

            assert await eventually(listed, what="unhealthyNodes written") == [{"name": failed}]
            await asyncio.sleep(1.5)
            w = s.workload_of_job(NS, "wait")
            assert admitted(w) and not is_true(w, "Evicted"), w["status"]

            await add_node(s, "b1-h2", "b1")

            def replaced() -> Obj | None:
                w = s.workload_of_job(NS, "wait")
                return w if w and "b1-h2" in hosts_of(w) and not listed() else None

            wl = await eventually(replaced, what="b1-h2 replaces the failed node", timeout=30)
            assert failed not in hosts_of(wl) and admitted(wl)

    asyncio.run(main())
