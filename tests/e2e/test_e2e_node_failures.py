"""End to end: node failures through ``serve``, on the API double and on a real
kube-apiserver with kube-controller-manager (the ``backend`` fixture).

No kubelet runs: the tests create the Nodes and drive their Ready condition and taints
through the API, play the scheduler by binding each pod through ``pods/binding`` (on
the double, by setting ``spec.nodeName``) and mark it Running through ``pods/status``.
On the real server the Job controller creates and deletes the Jobs' pods; on the
double the tests create them from the started Job's template.

* a gang whose node goes NotReady is evicted (``NodeFailures``), remembers the node and
  is re-admitted with the node excluded from its pods;
* an untolerated taint counts as a failure; a tolerated one does not;
* a TAS gang's failed node is replaced by a spare in its block without an eviction
  (its pod on the failed node is failed, the new one goes to the spare); with no spare
  and ``failFast: false`` it keeps running with ``status.unhealthyNodes`` until one
  frees up;
* two node failures under ``backoffLimitCount: 1``: still requeued both times, both
  nodes avoided, and no ClusterQueue is ever over its quota.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from admission.config.load import parse_config
from admission.kube.client import resources as k
from admission.serve.options import controller_options
from queues.node_health import AvoidedNodes
from queues.times import rfc3339_seconds
from tests.e2e.test_e2e_topology import BLOCK, GPU, HOST, gates, job_pods, tas_job
from tests.support.kube_harness import (
    SERVICE_NS,
    Obj,
    Stack,
    admitted,
    cluster_queue,
    eventually,
    is_true,
    local_queue,
    namespace,
    stack,
)
from tests.support.kube_invariants import InvariantChecker, quotas_of

NS = "team-a"
QUEUES = [cluster_queue("cq", {"gpu": {GPU: 8}})]
BASE = [
    namespace(NS),
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "gpu"},
        "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": HOST}]},
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "gpu"},
        "spec": {"nodeLabels": {"pool": "gpu"}},
    },
    *QUEUES,
    local_queue(NS, "lq", "cq"),
]
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
READY = {"type": "Ready", "status": "True"}


async def next_second() -> None:
    """Wait into the next whole second, so a Job created now has a later
    ``creationTimestamp`` (whole seconds) than one created before the call."""
    await asyncio.sleep(1.05 - time.time() % 1.0)


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def config(**node_failures: Any) -> Any:
    doc: Obj = {"nodeFailures": {"notReadyDelay": "1s", **node_failures}}
    return parse_config(doc)


def run(tmp_path: Path, backend: Any, objects: list[Obj], cfg: Any) -> Any:
    """The stack with this configuration's controller options (node failures and
    waitForPodsReady), ticking as fast as the harness's default."""
    opts = controller_options(cfg, SERVICE_NS)
    opts.status_interval, opts.tick, opts.pending_delay, opts.schedule_batch = 0.2, 0.05, 0.02, 0.0
    return stack(tmp_path, backend=backend, objects=objects, config=cfg, controller=opts)


async def add_node(s: Stack, name: str, block: str = "b0") -> None:
    """A Node made Ready as a kubelet and the node lifecycle controller would."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": "gpu", BLOCK: block, HOST: name}},
        "spec": {},
    }
    await s.user.create(k.NODES, node)
    status = {"allocatable": {"cpu": "32", GPU: "4", "pods": "110"}, "conditions": [READY]}
    await s.user.patch(k.NODES, name, {"status": status}, subresource="status")
    await s.user.patch(k.NODES, name, {"spec": {"taints": None}})


async def not_ready(s: Stack, name: str) -> None:
    cond = {"type": "Ready", "status": "Unknown", "lastTransitionTime": now_rfc3339()}
    await s.user.patch(k.NODES, name, {"status": {"conditions": [cond]}}, subresource="status")


def job(name: str, pods: int, *, tolerations: list[Obj] | None = None) -> Obj:
    spec: Obj = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {GPU: "4"}, "limits": {GPU: "4"}},
            }
        ],
    }
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"parallelism": pods, "completions": pods, "template": {"spec": spec}},
    }


async def bind(s: Stack, backend: Any, name: str, node: str) -> None:
    """Bind the pod to ``node`` as the scheduler does, and mark it Running and Ready."""
    if backend == "double":
        pod = s.get("pods", name, NS)
        assert pod is not None
        pod["spec"]["nodeName"] = node
        s.server.put_object(pod)
    else:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        backend.view.request("POST", f"/api/v1/namespaces/{NS}/pods/{name}/binding", body)
    status = {"phase": "Running", "conditions": [READY]}
    await s.user.patch(k.PODS, name, {"status": status}, namespace=NS, subresource="status")


_round: dict[str, int] = {}


async def start_pods(s: Stack, backend: Any, name: str, nodes: list[str]) -> list[str]:
    """The started Job's live pods, bound one per node and Running. On the double the
    test plays the Job controller: it creates them from the Job's current template."""
    await eventually(
        lambda: (j := s.get("jobs", name, NS)) and j["spec"].get("suspend") is False,
        what=f"{name} is started",
    )
    if backend == "double":
        live = s.get("jobs", name, NS)
        assert live is not None
        tmpl = live["spec"]["template"]
        n = _round[name] = _round.get(name, 0) + 1
        names = []
        for i in range(len(nodes)):
            meta = tmpl.get("metadata") or {}
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-r{n}-{i}",
                    "namespace": NS,
                    "labels": {**(meta.get("labels") or {}), "job-name": name},
                    "annotations": dict(meta.get("annotations") or {}),
                    "ownerReferences": [
                        {"apiVersion": "batch/v1", "kind": "Job", "name": name,
                         "uid": live["metadata"]["uid"], "controller": True}
                    ],
                },
                "spec": tmpl["spec"],
            }  # fmt: skip
            await s.user.create(k.PODS, pod, namespace=NS)
            names.append(pod["metadata"]["name"])
    else:

        async def created() -> list[str] | None:
            got = await s.user.list(k.PODS, namespace=NS, label_selector=f"job-name={name}")
            live = sorted(
                p["metadata"]["name"]
                for p in got["items"]
                if not p["metadata"].get("deletionTimestamp")
                and not p["spec"].get("nodeName")
                and p["status"].get("phase") == "Pending"
            )
            return live if len(live) >= len(nodes) else None

        names = list(await eventually(created, what=f"the Job controller creates {name}'s pods"))
    for pod_name, node in zip(names, nodes, strict=False):
        await bind(s, backend, pod_name, node)
    return names


async def stop_pods(s: Stack, backend: Any, name: str) -> None:
    """After an eviction the Job is suspended and its pods deleted (on the double the
    test plays the Job controller). The kubelets of the healthy nodes confirm their pods'
    deletion (the test force-deletes them there, on the real server); a pod on a
    NotReady node stays terminating, as on a cluster."""
    await eventually(
        lambda: (j := s.get("jobs", name, NS)) and j["spec"].get("suspend") is True,
        what=f"{name} is suspended",
    )
    got = await s.user.list(k.PODS, namespace=NS, label_selector=f"job-name={name}")
    if backend == "double":
        for p in got["items"]:
            await s.user.delete(k.PODS, p["metadata"]["name"], namespace=NS)
        return

    async def deleting() -> list[Obj] | None:
        got = await s.user.list(k.PODS, namespace=NS, label_selector=f"job-name={name}")
        live = [p for p in got["items"] if p["status"].get("phase") not in ("Failed", "Succeeded")]
        return got["items"] if all(p["metadata"].get("deletionTimestamp") for p in live) else None

    for p in await eventually(deleting, what=f"{name}'s pods are being deleted"):
        node = s.get("nodes", p["spec"].get("nodeName") or "-")
        ready = node is not None and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node["status"].get("conditions") or []
        )
        if node is None or ready:  # pod GC, or the node's kubelet, finishes the deletion
            path = f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}"
            try:
                backend.view.request("DELETE", path, {"gracePeriodSeconds": 0})
            except Exception as err:  # noqa: BLE001 - gone already
                if getattr(err, "status", None) != 404:
                    raise


def evicted_for_node_failure(s: Stack, name: str) -> Obj | None:
    w = s.workload_of_job(NS, name)
    for c in ((w or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == "Evicted" and c["status"] == "True" and c["reason"] == "NodeFailures":
            return c
    return None


def avoided(s: Stack, name: str) -> tuple[str, ...]:
    wl = s.workload_of_job(NS, name) or {}
    return AvoidedNodes.of(wl["metadata"].get("annotations")).active(time.time())


def avoided_in_template(s: Stack, name: str) -> list[str]:
    j = s.get("jobs", name, NS) or {}
    aff = (j["spec"]["template"]["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    terms = (aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    out: set[str] = set()
    for t in terms:
        for e in t.get("matchExpressions") or []:
            if e["key"] == HOST and e["operator"] == "NotIn":
                out |= set(e["values"])
    return sorted(out)


async def event_with(s: Stack, reason: str, text: str) -> bool:
    events = await s.user.list(k.EVENTS, namespace=NS)
    return any(e.get("reason") == reason and text in e.get("message", "") for e in events["items"])


def test_a_gang_on_a_not_ready_node_is_evicted_and_readmitted_avoiding_it(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with run(tmp_path, backend, BASE, config()) as s:
            checker = InvariantChecker(quotas_of(QUEUES)).install(s.server)
            for n in ("n0", "n1", "n2"):
                await add_node(s, n)
            await s.user.create(k.JOBS, job("train", 2), namespace=NS)
            await eventually(
                lambda: admitted(s.workload_of_job(NS, "train")), what="train is admitted"
            )
            await start_pods(s, backend, "train", ["n0", "n1"])
            await asyncio.sleep(1.5)
            assert evicted_for_node_failure(s, "train") is None  # healthy nodes: no action

            await not_ready(s, "n0")
            cond = await eventually(
                lambda: evicted_for_node_failure(s, "train"), what="train evicted", timeout=30
            )
            assert cond["message"] == (
                "Workload was evicted as there was no replacement for a failed node: n0"
            )
            assert await eventually(lambda: avoided(s, "train"), what="n0 remembered") == ("n0",)
            assert await eventually(
                lambda: event_with(s, "AvoidingNodes", "Avoiding node(s) n0 until"),
                what="an AvoidingNodes Event",
            )
            await stop_pods(s, backend, "train")

            wl = await eventually(
                lambda: admitted(w := s.workload_of_job(NS, "train")) and w,
                what="train re-admitted",
                timeout=30,
            )
            assert (wl["status"].get("requeueState") or {}).get("count") is None  # no backoff
            await eventually(
                lambda: avoided_in_template(s, "train") == ["n0"],
                what="the restarted Job's pods exclude n0",
            )
            await start_pods(s, backend, "train", ["n1", "n2"])
            await asyncio.sleep(1.5)
            assert admitted(s.workload_of_job(NS, "train"))  # n0 hosts nothing of it now
            assert checker.violations == []

    asyncio.run(main())


def evictions(s: Stack, cause: str) -> float:
    metric = s.service.controller.ctx.metrics.node_failure_evictions_total  # type: ignore[union-attr]
    return float(metric.labels("cq", cause)._value.get())


async def taint(s: Stack, node: str, *taints: Obj) -> None:
    await s.user.patch(k.NODES, node, {"spec": {"taints": list(taints) or None}})


def test_an_untolerated_taint_is_a_node_failure_and_a_tolerated_one_is_not(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with run(tmp_path, backend, BASE, config()) as s:
            for n in ("n0", "n1"):
                await add_node(s, n)
            tolerated = [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]
            await s.user.create(k.JOBS, job("train", 2, tolerations=tolerated), namespace=NS)
            await eventually(
                lambda: admitted(s.workload_of_job(NS, "train")), what="train is admitted"
            )
            await start_pods(s, backend, "train", ["n0", "n1"])
            await taint(s, "n1", {"key": "maintenance", "effect": "NoSchedule"})
            await asyncio.sleep(1.5)
            assert evicted_for_node_failure(s, "train") is None  # its pods tolerate it

            # a GPU health monitor marks n1 bad
            await taint(
                s,
                "n1",
                {"key": "maintenance", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu-health", "value": "bad", "effect": "NoExecute"},
            )
            cond = await eventually(
                lambda: evicted_for_node_failure(s, "train"), what="train evicted", timeout=30
            )
            assert cond["message"].endswith("no replacement for a failed node: n1")
            # counted once the eviction write returns, which the user may see first
            await eventually(lambda: evictions(s, "NodeTainted") == 1, what="the eviction counted")
            assert await eventually(lambda: avoided(s, "train"), what="n1 remembered") == ("n1",)

    asyncio.run(main())


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


def test_two_node_failures_under_a_backoff_limit_of_one_still_requeue_and_avoid_both(
    tmp_path: Path, backend: Any
) -> None:
    """Infrastructure failures are not the job's: two evictions for node failures under
    ``waitForPodsReady.requeuingStrategy.backoffLimitCount: 1`` neither count nor back
    off; the workload is requeued both times, avoids both nodes, and no ClusterQueue
    holds more than its quota at any point."""

    async def main() -> None:
        cfg = parse_config({
            "nodeFailures": {"notReadyDelay": "1s"},
            "waitForPodsReady": {"enable": True, "timeout": "10m",
                                 "requeuingStrategy": {"backoffLimitCount": 1}},
        })  # fmt: skip
        async with run(tmp_path, backend, BASE, cfg) as s:
            checker = InvariantChecker(quotas_of(QUEUES)).install(s.server)
            for n in ("n0", "n1", "n2", "n3"):
                await add_node(s, n)
            await s.user.create(k.JOBS, job("train", 2), namespace=NS)
            # a second Job waits behind it for the same quota, created in a later second:
            # creationTimestamp has whole seconds, and equal ones are ordered by UID
            await next_second()
            await s.user.create(k.JOBS, job("later", 2), namespace=NS)
            await eventually(lambda: admitted(s.workload_of_job(NS, "train")), what="admitted")
            assert not admitted(s.workload_of_job(NS, "later"))

            rounds = [("n0", ["n0", "n1"], not_ready), ("n2", ["n1", "n2"], delete_node)]
            for i, (bad, nodes, fail) in enumerate(rounds):
                await start_pods(s, backend, "train", nodes)
                await fail(s, bad)
                await eventually(
                    lambda: evicted_for_node_failure(s, "train"), what=f"eviction {i + 1}"
                )
                await stop_pods(s, backend, "train")
                wl = await eventually(
                    lambda: admitted(w := s.workload_of_job(NS, "train")) and w,
                    what=f"re-admission {i + 1}",
                    timeout=30,
                )
                assert wl["spec"].get("active", True) is True
                assert not (wl["status"].get("requeueState") or {}).get("count")
                assert not admitted(s.workload_of_job(NS, "later"))  # it kept its place
            assert avoided(s, "train") == ("n0", "n2")
            await eventually(
                lambda: avoided_in_template(s, "train") == ["n0", "n2"],
                what="the Job's pods exclude both nodes",
            )
            await start_pods(s, backend, "train", ["n1", "n3"])
            assert checker.violations == []

    asyncio.run(main())


async def delete_node(s: Stack, name: str) -> None:
    await s.user.delete(k.NODES, name)


def test_with_progress_aware_preemption_a_reachable_failed_node_gives_the_notice_window(
    tmp_path: Path, backend: Any
) -> None:
    """A taint leaves the node reachable: the gang gets its ClusterQueue's notice window
    (the eviction deadline on the Workload, as for a preemption victim) and is evicted for
    the node failure when it passes."""

    async def main() -> None:
        cfg = parse_config(
            {
                "nodeFailures": {"notReadyDelay": "1s"},
                "progressAwarePreemption": {"noticeWindow": "3s"},
            }
        )
        async with run(tmp_path, backend, BASE, cfg) as s:
            for n in ("n0", "n1"):
                await add_node(s, n)
            await s.user.create(k.JOBS, job("train", 2), namespace=NS)
            await eventually(
                lambda: admitted(s.workload_of_job(NS, "train")), what="train is admitted"
            )
            await start_pods(s, backend, "train", ["n0", "n1"])
            await taint(
                s, "n1", {"key": "nvidia.com/gpu-health", "value": "bad", "effect": "NoSchedule"}
            )

            def deadline() -> str | None:
                w = s.workload_of_job(NS, "train") or {}
                return (w["metadata"].get("annotations") or {}).get(
                    "quartermaster.io/eviction-deadline"
                )

            at = await eventually(deadline, what="the eviction deadline is announced")
            assert evicted_for_node_failure(s, "train") is None  # it runs on until then
            cond = await eventually(
                lambda: evicted_for_node_failure(s, "train"), what="evicted at the deadline"
            )
            assert rfc3339_seconds(cond["lastTransitionTime"]) >= rfc3339_seconds(at) - 1
            assert cond["message"].endswith("no replacement for a failed node: n1")

    asyncio.run(main())


def test_an_opted_in_pod_stuck_terminating_on_an_unreachable_node_is_force_failed(
    tmp_path: Path, backend: Any
) -> None:
    """Kueue's FailureRecoveryPolicy: the evicted Job's pod on the dead node stays
    Terminating (no kubelet confirms); it opted in with ``safe-to-forcefully-delete``, so
    after its grace it is failed and deleted, with Kueue's Event; the Job, which kept its
    place in the queue, is admitted again."""

    async def main() -> None:
        cfg = config(forcefulTerminationGracePeriod="1s")
        async with run(tmp_path, backend, BASE, cfg) as s:
            await add_node(s, "n0")
            opted = job("train", 2)
            opted["spec"]["template"]["metadata"] = {
                "annotations": {"kueue.x-k8s.io/safe-to-forcefully-delete": "true"}
            }
            # the API server sets deletionTimestamp to the deletion time plus this grace
            opted["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
            await s.user.create(k.JOBS, opted, namespace=NS)
            await eventually(lambda: admitted(s.workload_of_job(NS, "train")), what="admitted")
            await next_second()  # a later creationTimestamp than train's (whole seconds)
            await s.user.create(k.JOBS, job("next", 2), namespace=NS)
            names = await start_pods(s, backend, "train", ["n0", "n0"])

            # the node lifecycle controller's view of a dead kubelet
            await taint(s, "n0", {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})
            await not_ready(s, "n0")
            await eventually(lambda: evicted_for_node_failure(s, "train"), what="evicted")
            await stop_pods(s, backend, "train")

            async def forced() -> bool:
                events = await s.user.list(k.EVENTS, namespace=NS)
                return all(s.get("pods", n, NS) is None for n in names) and any(
                    e.get("reason") == "KueueForcefullyDeleted"
                    and "due to unreachable node `n0`" in e.get("message", "")
                    for e in events["items"]
                )

            await eventually(forced, what="the stuck pods force-failed and deleted", timeout=30)
            # the evicted Job kept its place: it is admitted again, ahead of the next one
            await eventually(
                lambda: admitted(s.workload_of_job(NS, "train")), what="train re-admitted"
            )
            assert not admitted(s.workload_of_job(NS, "next"))

    asyncio.run(main())
