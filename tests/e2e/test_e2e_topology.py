"""End to end: topology-aware admission through ``serve``, on the API double and on a
real kube-apiserver (the ``backend`` fixture).

Nodes are plain objects on both backends (no kubelet runs): the tests create them, set
their status through ``nodes/status`` and lift the not-ready taint the API server puts
on every new Node. A pod group asks for one block with
``kueue.x-k8s.io/podset-required-topology``: the real webhook gates its pods with both
the admission and the topology gate; the service learns Nodes and bound pods from its
informers, admits the group only when one block holds it, writes the v1beta2
topologyAssignment, and ungates each pod with its host's node selector. A group no
block can hold stays pending with the numbers; a failed node evicts the workload placed
on it. A Job and a JobSet get the topology gate on their started templates, and each of
their pods is ungated onto the host of its rank (completion index, Job index).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube.client import resources as k
from queues.api.topology_assignment import from_v1beta2
from tests.support.kube_harness import (
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

BLOCK = "cloud.provider.com/topology-block"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
BASE = [
    namespace("team-a"),
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "gpu"},
        "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": HOST}]},
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "tas"},
        "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "gpu"},
    },
    cluster_queue("cq", {"tas": {GPU: 100}}),
    local_queue("team-a", "lq", "cq"),
]
# block b0: 2 hosts, block b1: 3 hosts, 4 GPUs each
NODES = [("b0-h0", "b0"), ("b0-h1", "b0"), ("b1-h0", "b1"), ("b1-h1", "b1"), ("b1-h2", "b1")]


def node(name: str, block: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": "gpu", BLOCK: block, HOST: name}},
        "spec": {},
    }


NODE_STATUS = {
    "status": {
        "allocatable": {"cpu": "32", GPU: "4", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
}


def pod(name: str, *, group: str, total: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/pod-group-name": group},
            "annotations": {
                "kueue.x-k8s.io/pod-group-total-count": str(total),
                "kueue.x-k8s.io/podset-required-topology": BLOCK,
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {GPU: "4"}, "limits": {GPU: "4"}},
                }
            ],
        },
    }


def gates(p: Obj | None) -> set[str]:
    return {g.get("name") for g in ((p or {}).get("spec") or {}).get("schedulingGates") or []}


async def add_nodes(s: Stack) -> None:
    """Create the Nodes and make them Ready as a kubelet and the node lifecycle
    controller would (none runs): status through ``nodes/status``, then the
    ``node.kubernetes.io/not-ready`` taint the API server puts on every new Node lifted."""
    for name, block in NODES:
        created = await s.user.create(k.NODES, node(name, block))
        assert [t["key"] for t in created["spec"]["taints"]] == ["node.kubernetes.io/not-ready"]
        await s.user.patch(k.NODES, name, NODE_STATUS, subresource="status")
        await s.user.patch(k.NODES, name, {"spec": {"taints": None}})


async def gang(s: Stack, group: str, size: int) -> None:
    for i in range(size):
        created = await s.user.create(
            k.PODS, pod(f"{group}-{i}", group=group, total=size), namespace="team-a"
        )
        assert gates(created) == {ADMISSION_GATE, TOPOLOGY_GATE}  # the webhook gated it twice


def test_a_gang_requiring_one_block_is_admitted_there_and_its_pods_get_their_hosts(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await add_nodes(s)
            await gang(s, "train", 3)
            wl = await eventually(
                lambda: admitted(w := s.get("workloads", "train", "team-a")) and w,
                what="the gang is admitted",
            )
            psa = wl["status"]["admission"]["podSetAssignments"][0]
            ta = from_v1beta2(psa["topologyAssignment"])
            assert ta.levels == (HOST,)
            assert dict(ta.domains) == {("b1-h0",): 1, ("b1-h1",): 1, ("b1-h2",): 1}

            def pods_ungated() -> list[Obj] | None:
                ps = [s.get("pods", f"train-{i}", "team-a") for i in range(3)]
                return ps if all(p is not None and not gates(p) for p in ps) else None

            pods = await eventually(pods_ungated, what="every pod ungated")
            selectors = sorted(p["spec"]["nodeSelector"][HOST] for p in pods)
            assert selectors == ["b1-h0", "b1-h1", "b1-h2"]  # one host each, all in block b1
            assert all(p["spec"]["nodeSelector"]["pool"] == "gpu" for p in pods)

            # Another 3-pod gang: quota has room, no block has (b0 holds 2 pods).
            await gang(s, "big", 3)

            def pending_message() -> str | None:
                w = s.get("workloads", "big", "team-a")
                for c in ((w or {}).get("status") or {}).get("conditions") or []:
                    if c["type"] == "QuotaReserved" and c["status"] == "False" and c["message"]:
                        return str(c["message"])
                return None

            msg = await eventually(pending_message, what="the second gang is pending")
            assert "allows to fit only 2 out of 3 pod(s)" in msg
            assert (
                f"no {BLOCK} domain has 12 free {GPU} for 3 pod(s); the largest, b0, has 8" in msg
            )
            assert all(gates(s.get("pods", f"big-{i}", "team-a")) for i in range(3))

            # Node failure: a host of the admitted gang goes away.
            await s.user.delete(k.NODES, "b1-h1")
            evicted = await eventually(
                lambda: is_true(w := s.get("workloads", "train", "team-a"), "Evicted") and w,
                what="the gang on the failed node is evicted",
            )
            cond = next(c for c in evicted["status"]["conditions"] if c["type"] == "Evicted")
            assert cond["reason"] == "NodeFailures"
            assert "no replacement for a failed node: b1-h1" in cond["message"]

    asyncio.run(main())


def test_a_not_ready_node_is_not_capacity(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await add_nodes(s)
            down = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
            await s.user.patch(k.NODES, "b1-h2", down, subresource="status")
            await gang(s, "train", 3)

            def reason() -> Any:
                w = s.get("workloads", "train", "team-a")
                for c in ((w or {}).get("status") or {}).get("conditions") or []:
                    if c["type"] == "QuotaReserved" and c["status"] == "False" and c["message"]:
                        return c
                return None

            cond = await eventually(reason, what="the gang is pending")
            assert cond["reason"] == "TopologyPlacementFailed"
            assert "allows to fit only 2 out of 3 pod(s)" in cond["message"]

    asyncio.run(main())


def test_a_jobset_requiring_one_block_is_admitted_into_one_block(
    tmp_path: Path, backend: Any
) -> None:
    """The JobSet integration carries the template's annotation into its podSet's
    topologyRequest (with Kueue's JobSet ranks: completion index within a Job, Job index
    across the replicatedJob); its 3 one-pod Jobs are placed in the one block that holds
    them, and each pod is ungated onto the host of its rank (Job index × 1 + completion
    index). The pods are created by the test as the JobSet and Job controllers would,
    from the started template: the double runs neither controller."""
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 3,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "template": {
                                "metadata": {
                                    "annotations": {
                                        "kueue.x-k8s.io/podset-required-topology": BLOCK
                                    }
                                },
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {
                                            "name": "main",
                                            "image": "busybox",
                                            "resources": {
                                                "requests": {GPU: "4"},
                                                "limits": {GPU: "4"},
                                            },
                                        }
                                    ],
                                },
                            },
                        }
                    },
                }
            ]
        },
    }

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE, crds=("jobsets",)) as s:
            await add_nodes(s)
            from admission.integrations.kinds.jobset import JOBSET
            from admission.kube.client.resources import resource_of

            await s.user.create(resource_of(JOBSET), jobset, namespace="team-a")

            def admitted_wl() -> Obj | None:
                for w in s.workloads("team-a"):
                    if admitted(w):
                        return w
                return None

            wl = await eventually(admitted_wl, what="the JobSet's Workload is admitted")
            ps = wl["spec"]["podSets"][0]
            assert ps["topologyRequest"]["required"] == BLOCK
            assert (
                ps["topologyRequest"]["podIndexLabel"] == "batch.kubernetes.io/job-completion-index"
            )
            assert ps["topologyRequest"]["subGroupIndexLabel"] == "jobset.sigs.k8s.io/job-index"
            assert ps["topologyRequest"]["subGroupCount"] == 3
            ta = from_v1beta2(
                wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
            )
            assert dict(ta.domains) == {("b1-h0",): 1, ("b1-h1",): 1, ("b1-h2",): 1}
            ranks = [v[-1] for v, n in ta.domains for _ in range(n)]

            def started() -> Obj | None:
                js = s.get("jobsets", "train", "team-a")
                return js if js and js["spec"].get("suspend") is False else None

            live = await eventually(started, what="the JobSet is started")
            tmpl = live["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
            assert {"name": TOPOLOGY_GATE} in tmpl["spec"]["schedulingGates"]
            for job_index in (2, 0, 1):  # one pod per Job, created out of order
                meta = tmpl.get("metadata") or {}
                labels = {
                    **(meta.get("labels") or {}),
                    "jobset.sigs.k8s.io/job-index": str(job_index),
                    COMPLETION_INDEX: "0",
                }
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"train-workers-{job_index}-0",
                        "namespace": "team-a",
                        "labels": labels,
                        "annotations": dict(meta.get("annotations") or {}),
                    },
                    "spec": tmpl["spec"],
                }
                await s.user.create(k.PODS, pod, namespace="team-a")

            def all_ungated() -> list[Obj] | None:
                got = [s.get("pods", f"train-workers-{j}-0", "team-a") for j in range(3)]
                return got if all(p is not None and not gates(p) for p in got) else None

            pods = await eventually(all_ungated, what="every pod of the JobSet ungated")
            assert [p["spec"]["nodeSelector"][HOST] for p in pods] == ranks

    asyncio.run(main())


# -- job kinds: their templates carry the gate, their pods are ungated one by one -------------

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def tas_job(name: str, *, pods: int, level: str = BLOCK) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": level}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {GPU: "4"}, "limits": {GPU: "4"}},
                        }
                    ],
                },
            },
        },
    }


async def job_pods(s: Stack, backend: Any, job: Obj, *, indexes: list[int]) -> list[str]:
    """The started Job's pods: the real Job controller creates them; on the double the
    test plays it, creating each pod from the Job's current template with its
    completion index (label and annotation) and the Job as controller owner."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    if backend != "double":

        async def created() -> list[str] | None:
            got = await s.user.list(k.PODS, namespace=ns, label_selector=f"job-name={name}")
            names = sorted(p["metadata"]["name"] for p in got["items"])
            return names if len(names) >= len(indexes) else None

        return list(await eventually(created, what=f"the Job controller creates {name}'s pods"))
    live = s.get("jobs", name, ns)
    assert live is not None and live["spec"].get("suspend") is False
    tmpl = live["spec"]["template"]
    out = []
    for i in indexes:
        meta = tmpl.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{i}-x{i}",
                "namespace": ns,
                "labels": {**(meta.get("labels") or {}), COMPLETION_INDEX: str(i),
                           "job-name": name},
                "annotations": {**(meta.get("annotations") or {}), COMPLETION_INDEX: str(i)},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": name,
                        "uid": live["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": tmpl["spec"],
        }  # fmt: skip
        await s.user.create(k.PODS, pod, namespace=ns)
        out.append(pod["metadata"]["name"])
    return out


def pod_index(p: Obj) -> int:
    return int(p["metadata"]["labels"][COMPLETION_INDEX])


def test_a_job_requiring_one_block_has_each_pod_ungated_onto_its_ranks_host(
    tmp_path: Path, backend: Any
) -> None:
    """Kueue's topology ungater for a batch/v1 Job: the started template carries the
    ``kueue.x-k8s.io/topology`` gate and the Workload annotation; each pod is ungated
    with the node selector of the domain its completion index (rank) falls in, so the
    kube-scheduler can only put the Job inside the block placement chose."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await add_nodes(s)
            job = tas_job("train", pods=3)
            await s.user.create(k.JOBS, job, namespace="team-a")
            wl = await eventually(
                lambda: admitted(w := s.workload_of_job("team-a", "train")) and w,
                what="the Job's Workload is admitted",
            )
            ps = wl["spec"]["podSets"][0]
            assert ps["topologyRequest"]["podIndexLabel"] == COMPLETION_INDEX
            ta = from_v1beta2(
                wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
            )
            ranks = [v[-1] for v, n in ta.domains for _ in range(n)]
            assert ranks == ["b1-h0", "b1-h1", "b1-h2"]

            def started() -> Obj | None:
                j = s.get("jobs", "train", "team-a")
                return j if j and j["spec"].get("suspend") is False else None

            live = await eventually(started, what="the Job is started")
            tmpl = live["spec"]["template"]
            assert {"name": TOPOLOGY_GATE} in tmpl["spec"]["schedulingGates"]
            assert (
                tmpl["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == wl["metadata"]["name"]
            )
            assert tmpl["spec"]["nodeSelector"] == {"pool": "gpu"}  # the flavor's, not a host

            names = await job_pods(s, backend, job, indexes=[2, 0, 1])

            def all_ungated() -> list[Obj] | None:
                ps = [s.get("pods", n, "team-a") for n in names]
                return ps if all(p is not None and not gates(p) for p in ps) else None

            pods = await eventually(all_ungated, what="every pod of the Job ungated")
            for p in pods:
                # the assignment is per host (Kueue keeps only the lowest level)
                assert p["spec"]["nodeSelector"] == {"pool": "gpu", HOST: ranks[pod_index(p)]}
            assert len(pods) == 3

    asyncio.run(main())


def test_a_failed_node_is_replaced_inside_its_block_else_the_workload_is_evicted(
    tmp_path: Path, backend: Any
) -> None:
    """Kueue's node replacement: a Job in block b1 (3 hosts, 2 used) loses a host; its
    pod there moves to b1's free host (the assignment is rewritten, an Event says so,
    the replacement pod is ungated onto the new host) and the Job keeps running. A Job
    filling block b0 loses a host: no room in b0, so it is evicted (NodeFailures)."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=BASE) as s:
            await add_nodes(s)

            async def admit(name: str) -> tuple[Obj, list[str]]:
                job = tas_job(name, pods=2)
                await s.user.create(k.JOBS, job, namespace="team-a")
                wl = await eventually(
                    lambda: admitted(w := s.workload_of_job("team-a", name)) and w,
                    what=f"{name} is admitted",
                )
                await eventually(
                    lambda: (j := s.get("jobs", name, "team-a")) and j["spec"]["suspend"] is False,
                    what=f"{name} is started",
                )
                return wl, await job_pods(s, backend, job, indexes=[0, 1])

            def hosts_of(wl: Obj) -> list[str]:
                ta = from_v1beta2(
                    wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
                )
                return [v[-1] for v, n in ta.domains for _ in range(n)]

            wl_a, _ = await admit("fills-b0")
            assert hosts_of(wl_a) == ["b0-h0", "b0-h1"]  # best fit: the block it fills
            wl_b, pods_b = await admit("in-b1")
            before = hosts_of(wl_b)
            assert before == ["b1-h0", "b1-h1"]

            def ungated(names: list[str]) -> list[Obj] | None:
                got = [s.get("pods", n, "team-a") for n in names]
                return got if all(p is not None and not gates(p) for p in got) else None

            placed = await eventually(lambda: ungated(pods_b), what="in-b1's pods ungated")
            on_failed = next(p for p in placed if p["spec"]["nodeSelector"][HOST] == "b1-h0")

            await s.user.delete(k.NODES, "b1-h0")

            def replaced() -> Obj | None:
                w = s.workload_of_job("team-a", "in-b1")
                return w if w and admitted(w) and hosts_of(w) == ["b1-h1", "b1-h2"] else None

            wl_b = await eventually(replaced, what="b1-h0 replaced by b1-h2 in the assignment")
            assert not is_true(wl_b, "Evicted")

            async def replaced_event() -> bool:
                events = await s.user.list(k.EVENTS, namespace="team-a")
                return any(
                    e.get("reason") == "NodeReplaced"
                    and "Replaced failed node b1-h0 in the topology assignment with b1-h2"
                    in e.get("message", "")
                    for e in events["items"]
                )

            await eventually(replaced_event, what="a NodeReplaced Event")
            # the pod that was on the failed node goes (pod GC would delete it) and the
            # Job controller creates another with the same index
            await s.user.delete(k.PODS, on_failed["metadata"]["name"], namespace="team-a")
            index = str(pod_index(on_failed))
            if backend == "double":
                await job_pods(s, backend, tas_job("in-b1", pods=2), indexes=[int(index)])

            async def new_pod_host() -> str | None:
                got = await s.user.list(
                    k.PODS,
                    namespace="team-a",
                    label_selector=f"job-name=in-b1,{COMPLETION_INDEX}={index}",
                )
                for p in got["items"]:
                    if (
                        p["metadata"]["name"] != on_failed["metadata"]["name"]
                        or backend == "double"
                    ):
                        if not gates(p) and not p["metadata"].get("deletionTimestamp"):
                            return str(p["spec"]["nodeSelector"][HOST])
                return None

            assert await eventually(new_pod_host, what="the new pod is ungated") == "b1-h2"

            await s.user.delete(k.NODES, "b0-h0")
            evicted = await eventually(
                lambda: is_true(w := s.workload_of_job("team-a", "fills-b0"), "Evicted") and w,
                what="the Job with no room left in its block is evicted",
            )
            cond = next(c for c in evicted["status"]["conditions"] if c["type"] == "Evicted")
            assert cond["reason"] == "NodeFailures"
            assert "no replacement for a failed node: b0-h0" in cond["message"]

    asyncio.run(main())
