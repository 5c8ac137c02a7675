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
* two node failures under ``backoffLimitCount: 1``: still requeued both times, both
  nodes avoided, and no ClusterQueue is ever over its quota;
* with progress-aware preemption a failed node that is still reachable gives the gang
  its notice window, and an opted-in pod stuck terminating on an unreachable node is
  force-failed.

Topology-aware gangs have their own module, test_e2e_node_failures_tas.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.config.load import parse_config
from admission.kube.client import resources as k
from queues.times import rfc3339_seconds
from tests.e2e._node_failures import (
    BASE,
    NS,
    QUEUES,
    add_node,
    avoided,
    avoided_in_template,
    config,
    event_with,
    evicted_for_node_failure,
    job,
    next_second,
    not_ready,
    run,
    start_pods,
    stop_pods,
)
from tests.support.kube_harness import Obj, Stack, admitted, eventually
from tests.support.kube_invariants import InvariantChecker, quotas_of


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
