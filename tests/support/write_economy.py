"""Counting and holding back the service's writes: a shut rate limit, one queue, write counters.

The write-economy tests (tests/unit/kube/, tests/e2e/) check that the service sends
only the writes a decision needs. They run the stack with one LocalQueue over a
ClusterQueue of a few CPUs, create standalone Workloads, shut the client's rate limit
(:class:`Gate`) so that a write waits while the test changes the world, and count the
patches the API server received from the service.
"""

from __future__ import annotations

from typing import Any

from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.ratelimit import TokenBucket
from admission.kube.control.context import ControllerOptions
from tests.support.kube_harness import (
    SA_USERNAME,
    SERVICE_NS,
    Stack,
    cluster_queue,
    flavor,
    local_queue,
    namespace,
    workload,
)

NS = "team-a"


class Gate(TokenBucket):
    """The client's rate limit, shut: every request waits, in priority order, until
    :meth:`open` (then it lets everything through)."""

    def __init__(self) -> None:
        super().__init__(qps=1e-9, burst=1000)
        self._tokens = 0.0

    def open(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._refill()
        self.qps = 1e9
        self._release()


def objects(cpu: int = 4) -> list[dict[str, Any]]:
    return [
        namespace(NS),
        flavor("f"),
        cluster_queue(
            "cq", {"f": {"cpu": cpu}}, preemption={"withinClusterQueue": "LowerPriority"}
        ),
        local_queue(NS, "lq", "cq"),
    ]


def options(**kw: Any) -> ControllerOptions:
    """The harness's fast controller options, with ``kw`` changed."""
    opts = ControllerOptions(status_interval=0.2, tick=0.05, pending_delay=0.02, schedule_batch=0.0)
    opts.excluded_namespaces = ("kube-system", SERVICE_NS)
    for name, value in kw.items():
        setattr(opts, name, value)
    return opts


def standalone(name: str, *, cpu: str = "4", priority: int = 0) -> dict[str, Any]:
    return workload(NS, name, queue="lq", pod_sets=[("main", 1, cpu)], priority=priority)


def service_writes(s: Stack, resource: str, name: str, *, since: int = 0) -> int:
    """Patches the service sent to ``resource`` (e.g. ``workloads/status``) of ``name``."""
    return sum(
        1
        for r in s.server.requests[since:]
        if r.verb == "patch"
        and r.resource == resource
        and r.name == name
        and r.user in (SA_USERNAME, "")
    )


def writes_of_kind(s: Stack, kind: str) -> float:
    return sum(
        s.service.metrics.api_writes.labels(kind, result)._value.get() for result in ("ok", "error")
    )


def shut(s: Stack) -> Gate:
    gate = Gate()
    assert s.service.client is not None
    s.service.client.limiter = gate
    return gate


async def create(s: Stack, obj: dict[str, Any]) -> None:
    await s.user.create(kr.WORKLOADS, obj, namespace=NS)


async def mark_finished(s: Stack, name: str) -> None:
    """What Kueue's runner (or a Job's end) does: Finished=True on the Workload."""
    patch = [{"op": "add", "path": "/status/conditions/-", "value": {
        "type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}}]  # fmt: skip
    await s.user.patch(
        kr.WORKLOADS, name, patch, namespace=NS, subresource="status", content_type=k.JSON_PATCH
    )
