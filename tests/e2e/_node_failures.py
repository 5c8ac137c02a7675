"""What the node-failure end-to-end tests share: Nodes driven through the API, pods bound by hand.

No kubelet runs: the tests create the Nodes and drive their Ready condition and taints
through the API, play the scheduler by binding each pod through ``pods/binding`` (on
the double, by setting ``spec.nodeName``) and mark it Running through ``pods/status``.
On the real server the Job controller creates and deletes the Jobs' pods; on the
double the tests create them from the started Job's template.
The helpers here do that (add a Node, make it NotReady, bind and start a Job's pods,
stop them after an eviction) and read what the tests check: eviction conditions, the
nodes a workload avoids, the Events written.
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
from tests.e2e.test_e2e_topology import BLOCK, GPU, HOST
from tests.support.kube_harness import (
    SERVICE_NS,
    Obj,
    Stack,
    cluster_queue,
    eventually,
    local_queue,
    namespace,
    stack,
)

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
