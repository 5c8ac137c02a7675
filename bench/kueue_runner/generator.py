"""The generator of Kueue's runner (``runner/generator/generator.go``).

It creates the ResourceFlavor ``rf`` and, concurrently for every queue, its
ClusterQueue (``{class}-{set}-{i}-{cohort}``, labelled with its class), a Namespace and
a LocalQueue of the same name, then one task per workloads set that, ``count`` times
for each template, *sleeps* ``creationIntervalMs`` and then creates the Workload
(``{class}-{set}-{si}-{i}``, labels ``…-running-ms`` and ``…-class``, one podSet
``main`` requesting the cpu) -- so the creation drifts by the create latency, exactly
like ``<-time.After(delay)`` followed by a synchronous ``c.Create``.  The labels are
named here, as in Kueue's generator package, and read by the controller and recorder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .api import KUEUE, Api

RUNNING_TIME_LABEL = "kueue.x-k8s.io/performance-scheduler-running-ms"
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"
CLEANUP_LABEL = "kueue.x-k8s.io/performance-scheduler-cleanup"
FLAVOR = "rf"
Obj = dict[str, Any]


def queue_objects(config: Obj) -> list[tuple[list[Obj], list[tuple[str, Obj]]]]:
    """Per queue: [ClusterQueue, Namespace, LocalQueue] and its workloads sets."""
    out = []
    for cset in config.get("cohorts") or []:
        for ci in range(int(cset.get("count", 1))):
            cohort = f"{cset['className']}-{ci}"
            for qsi, qs in enumerate(cset.get("queuesSets") or []):
                for qi in range(int(qs.get("count", 1))):
                    name = f"{qs['className']}-{qsi}-{qi}-{cohort}"
                    quota: Obj = {"name": "cpu", "nominalQuota": str(qs["nominalQuota"])}
                    if qs.get("borrowingLimit") not in (None, ""):
                        quota["borrowingLimit"] = str(qs["borrowingLimit"])
                    cq = {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "ClusterQueue",
                        "metadata": {"name": name, "labels": {
                            CLASS_LABEL: qs["className"], CLEANUP_LABEL: "true"}},
                        "spec": {
                            "cohortName": cohort,
                            "namespaceSelector": {},
                            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                                {"name": FLAVOR, "resources": [quota]}]}],
                            "preemption": {
                                "reclaimWithinCohort": qs.get("reclaimWithinCohort", "Never"),
                                "withinClusterQueue": qs.get("withinClusterQueue", "Never"),
                            },
                        },
                    }  # fmt: skip
                    ns = {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": name, "labels": {CLEANUP_LABEL: "true"}}}  # fmt: skip
                    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                          "metadata": {"name": name, "namespace": name},
                          "spec": {"clusterQueue": name}}  # fmt: skip
                    sets = [(name, ws) for ws in qs.get("workloadsSets") or []]
                    out.append(([cq, ns, lq], sets))
    return out


def workload_body(name: str, ns: str, wlt: Obj) -> Obj:
    """``MakeWorkload(name, ns).Queue(lq).Label(...).Priority(p).Request(cpu, r)``."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns, "labels": {
            RUNNING_TIME_LABEL: str(wlt["runtimeMs"]), CLASS_LABEL: wlt["className"]}},
        "spec": {
            "queueName": ns,
            "priority": int(wlt.get("priority", 0)),
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "pause",
                                "resources": {"requests": {"cpu": str(wlt["request"])}}}],
            }}}],
        },
    }  # fmt: skip


async def generate(api: Api, config: Obj, on_created: Callable[[], None] | None = None) -> None:
    await api.create(f"{KUEUE}/resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR, "labels": {CLEANUP_LABEL: "true"}}})  # fmt: skip

    async def one_queue(objs: list[Obj], sets: list[tuple[str, Obj]]) -> None:
        cq, ns, lq = objs
        await api.create(f"{KUEUE}/clusterqueues", cq)
        await api.create("/api/v1/namespaces", ns)
        await api.create(f"{KUEUE}/namespaces/{lq['metadata']['namespace']}/localqueues", lq)
        await asyncio.gather(*(one_set(queue, si, ws) for si, (queue, ws) in enumerate(sets)))

    async def one_set(queue: str, set_idx: int, ws: Obj) -> None:
        delay = int(ws.get("creationIntervalMs", 0)) / 1000
        path = f"{KUEUE}/namespaces/{queue}/workloads"
        for si in range(int(ws.get("count", 1))):
            for i, wlt in enumerate(ws.get("workloads") or []):
                await asyncio.sleep(delay)  # <-time.After(delay), then a synchronous Create
                await api.create(path, workload_body(f"{wlt['className']}-{set_idx}-{si}-{i}",
                                                     queue, wlt))  # fmt: skip
                if on_created is not None:
                    on_created()

    await asyncio.gather(*(one_queue(objs, sets) for objs, sets in queue_objects(config)))
