"""Throttled requests are sent again after the server's ``Retry-After`` (issue 16).

kube-apiserver refuses a request its max-in-flight (or APF) seats cannot take with
``429``, ``Retry-After: 1`` and a plain-text body, *before* acting on it. client-go's
``rest.Request`` waits the header's seconds and sends the same request again (up to 10
times), each attempt through the client's rate limiter; so does ``KubeClient``. For the
service that means: a throttled admission write is retried in place, holding its
assumption, instead of being rolled back, re-read and re-decided; a throttled eviction
is retried instead of being dropped for a later cycle.

The client-level tests run on the double; the service-level ones on both backends (the
fault proxy in front of the real server answers with the same shapes as the double).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from admission.apiserver_double import ADMIN_TOKEN, running_apiserver
from admission.apiserver_double.errors import MAX_IN_FLIGHT_MESSAGE
from admission.kube import objects as kobj
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.errors import RETRY_AFTER_CAP, ApiError
from admission.kube.client.ratelimit import TokenBucket
from queues.api.conditions import is_true
from tests.support.double_client import kube_client_config
from tests.support.kube_harness import (
    Stack,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    namespace,
    stack,
    workload,
)

NS = "team-a"
STATUS_CALL = "patch kueue.x-k8s.io/workloads/status"
CQ_STATUS_CALL = "patch kueue.x-k8s.io/clusterqueues/status"


def ns(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


class CountingBucket(TokenBucket):
    """A generous bucket that counts the tokens taken."""

    def __init__(self) -> None:
        super().__init__(qps=1e6, burst=1000)
        self.taken = 0

    async def acquire(self, *, read: bool = False) -> None:
        self.taken += 1
        await super().acquire(read=read)


def recording_sleep(waits: list[float], *, real: bool = True) -> Callable[[float], Awaitable[None]]:
    """The client's Retry-After sleep, recording what it was asked to wait (and waiting
    it, unless ``real`` is False: then the wait is only recorded)."""

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(seconds if real else 0)

    return sleep


@contextlib.asynccontextmanager
async def throttled_client(
    *, real: bool = False
) -> AsyncIterator[tuple[Any, k.KubeClient, list[float]]]:
    """The double, a client of it and the Retry-After waits the client was asked for
    (waited for real only with ``real``)."""
    async with running_apiserver() as server:
        client = await k.KubeClient.connect(
            configuration=kube_client_config(server.url), strict=False
        )
        waits: list[float] = []
        client.sleep = recording_sleep(waits, real=real)
        try:
            yield server, client, waits
        finally:
            await client.close()


# -- the double answers like kube-apiserver ---------------------------------------------------


def test_a_429_fault_is_max_in_flights_answer_unless_told_otherwise() -> None:
    """kube-apiserver's max-in-flight filter: ``Retry-After: 1`` and ``http.Error``'s
    text/plain line; a ``Status`` 429 (``errors.NewTooManyRequests``) carries the header
    and ``details.retryAfterSeconds`` only for a positive delay (``ErrorNegotiated``)."""

    async def main() -> None:
        async with running_apiserver() as server, aiohttp.ClientSession() as http:
            url = f"{server.url}/api/v1/namespaces"
            auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            server.fail_next(code=429, verb="list")
            async with http.get(url, headers=auth) as resp:
                assert resp.status == 429
                assert resp.headers["Retry-After"] == "1"
                assert resp.content_type == "text/plain"
                assert resp.headers["X-Content-Type-Options"] == "nosniff"
                assert await resp.text() == MAX_IN_FLIGHT_MESSAGE + "\n"
            server.fail_next(code=429, verb="list", retry_after=3)
            async with http.get(url, headers=auth) as resp:
                body = json.loads(await resp.text())
                assert resp.status == 429 and resp.headers["Retry-After"] == "3"
                assert body["reason"] == "TooManyRequests"
                assert body["details"] == {"retryAfterSeconds": 3}
            server.fail_next(code=429, verb="list", retry_after=0)
            async with http.get(url, headers=auth) as resp:
                body = json.loads(await resp.text())
                assert resp.status == 429 and "Retry-After" not in resp.headers
                assert "details" not in body
            server.fail_next(code=503, verb="list", retry_after=2)
            async with http.get(url, headers=auth) as resp:
                assert resp.status == 503 and resp.headers["Retry-After"] == "2"
            async with http.get(url, headers=auth) as resp:
                assert resp.status == 200

    asyncio.run(main())


# -- the client -----------------------------------------------------------------------------


def test_a_throttled_request_is_sent_again_after_retry_after_each_attempt_paying_a_token() -> None:
    async def main() -> None:
        async with throttled_client(real=True) as (server, client, waits):
            bucket = client.limiter = CountingBucket()
            retried: list[tuple[str, int]] = []
            client.on_retry = lambda call, code: retried.append((call, code))
            sent: list[str] = []
            client.on_request = sent.append
            failed: list[tuple[str, int]] = []
            client.on_error = lambda call, code: failed.append((call, code))
            server.fail_next(2, code=429, verb="create", resource="namespaces")
            created = await client.create(kr.NAMESPACES, ns("a"))
            assert created["metadata"]["name"] == "a"
            assert server.get_object("namespaces", "a") is not None
            assert waits == [1.0, 1.0]  # max-in-flight's Retry-After
            assert retried == [("create core/namespaces", 429)] * 2
            assert client.retries["create core/namespaces"] == 2
            # three requests reached the server, each through the rate limit
            assert sent == ["create core/namespaces"] * 3
            assert bucket.taken == 3
            assert client.errors[429] == 2
            assert failed == [("create core/namespaces", 429)] * 2  # by call and status

    asyncio.run(main())


def test_which_answers_are_retried_and_how_long_the_client_waits() -> None:
    """client-go's ``checkWait``: 429 or any 5xx, and only with ``Retry-After``."""

    async def main() -> None:
        async with throttled_client() as (server, client, waits):
            server.fail_next(code=503, verb="get", resource="namespaces", retry_after=2)
            assert (await client.get(kr.NAMESPACES, "default"))["metadata"]["name"] == "default"
            assert waits == [2.0]
            server.fail_next(code=429, verb="get", resource="namespaces", retry_after=3)
            await client.get(kr.NAMESPACES, "default")
            assert waits == [2.0, 3.0]
            for code in (500, 429):  # no Retry-After: the caller decides
                server.fail_next(code=code, verb="get", resource="namespaces", retry_after=0)
                with pytest.raises(ApiError) as err:
                    await client.get(kr.NAMESPACES, "default")
                assert err.value.status == code and err.value.wait is None
            server.fail_next(code=409, verb="get", resource="namespaces", retry_after=1)
            with pytest.raises(ApiError) as err:  # a 4xx other than 429: never
                await client.get(kr.NAMESPACES, "default")
            assert err.value.conflict
            server.fail_next(code=429, verb="get", resource="namespaces", retry_after=3600)
            await client.get(kr.NAMESPACES, "default")
            assert waits[-1] == RETRY_AFTER_CAP
            assert len(waits) == 3

    asyncio.run(main())


def test_the_retries_are_bounded_and_the_last_429_is_raised() -> None:
    async def main() -> None:
        async with throttled_client() as (server, client, waits):
            rule = server.fail_next(k.MAX_RETRIES + 5, code=429, verb="get")
            with pytest.raises(ApiError) as err:
                await client.get(kr.NAMESPACES, "default")
            assert err.value.throttled and err.value.message == MAX_IN_FLIGHT_MESSAGE
            assert rule.fired == k.MAX_RETRIES + 1  # the first attempt and 10 retries
            assert len(waits) == k.MAX_RETRIES

    asyncio.run(main())


def test_an_explicit_timeout_bounds_all_attempts() -> None:
    """A request given its own timeout (the Lease's) does not start a retry that could
    not finish within it: client-go's request context covers every attempt."""

    async def main() -> None:
        async with throttled_client() as (server, client, waits):
            rule = server.fail_next(3, code=429, verb="get", resource="namespaces")
            with pytest.raises(ApiError) as err:
                await client.get(kr.NAMESPACES, "default", timeout=0.5)
            assert err.value.throttled and waits == [] and rule.fired == 1

    asyncio.run(main())


# -- the service ------------------------------------------------------------------------------


def objects(cpu: int = 4) -> list[dict[str, Any]]:
    return [
        namespace(NS),
        flavor("f"),
        cluster_queue(
            "cq", {"f": {"cpu": cpu}}, preemption={"withinClusterQueue": "LowerPriority"}
        ),
        local_queue(NS, "lq", "cq"),
    ]


def standalone(name: str, *, cpu: str = "4", priority: int = 0) -> dict[str, Any]:
    return workload(NS, name, queue="lq", pod_sets=[("main", 1, cpu)], priority=priority)


def written(s: Stack, kind: str, result: str) -> float:
    return s.service.metrics.api_writes.labels(kind, result)._value.get()


def retried(s: Stack, call: str, code: str = "429") -> float:
    return s.service.metrics.api_retries.labels(call, code)._value.get()


def counter(metric: Any, *labels: str) -> float:
    return metric.labels(*labels)._value.get()


def reads_of_workloads(s: Stack) -> int:
    assert s.service.client is not None
    return s.service.client.counts["get kueue.x-k8s.io/workloads"]


def wait_recorder(s: Stack) -> list[float]:
    waits: list[float] = []
    assert s.service.client is not None
    s.service.client.sleep = recording_sleep(waits)
    return waits


def cq_usage(s: Stack) -> tuple[int, str]:
    """(reservingWorkloads, the cpu total in use) of ClusterQueue cq, as the API says."""
    st = (s.get("clusterqueues", "cq") or {}).get("status") or {}
    usage = st.get("flavorsUsage") or [{}]
    res = usage[0].get("resources") or [{}]
    return int(st.get("reservingWorkloads") or 0), str(res[0].get("total") or "0")


def test_a_throttled_admission_is_retried_in_place_and_admitted_once(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects()) as s:
            waits = wait_recorder(s)
            reads = reads_of_workloads(s)
            rule = s.server.fail_next(
                2, code=429, verb="patch", resource="workloads/status", namespace=NS, name="a"
            )
            await s.user.create(kr.WORKLOADS, standalone("a", cpu="3"), namespace=NS)
            await eventually(lambda: admitted(s.get("workloads", "a", NS)), what="a admitted")
            await eventually(lambda: written(s, "admit", "ok"), what="the service saw it land")
            assert rule.fired == 2 and waits == [1.0, 1.0]
            assert retried(s, STATUS_CALL) == 2
            assert written(s, "admit", "ok") == 1
            assert written(s, "admit", "rolled-back") == 0
            assert counter(s.service.metrics.admitted_total, "cq") == 1
            assert reads_of_workloads(s) == reads  # no read back: a 429 was not applied
            wl = s.get("workloads", "a", NS)
            assert (kobj.admission_of(wl) or {}).get("clusterQueue") == "cq"
            await eventually(lambda: cq_usage(s) == (1, "3"), what="cq's status shows a's 3 cpu")

    asyncio.run(main())


def test_a_throttled_eviction_is_retried_and_the_preemptor_admitted(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects()) as s:
            await s.user.create(kr.WORKLOADS, standalone("low"), namespace=NS)
            await eventually(lambda: admitted(s.get("workloads", "low", NS)), what="low admitted")
            waits = wait_recorder(s)
            rule = s.server.fail_next(
                1, code=429, verb="patch", resource="workloads/status", namespace=NS, name="low"
            )
            await s.user.create(kr.WORKLOADS, standalone("high", priority=100), namespace=NS)
            await eventually(lambda: admitted(s.get("workloads", "high", NS)), what="high admitted")
            await eventually(
                lambda: counter(s.service.metrics.admitted_total, "cq") >= 2,
                what="the service saw high's admission land",
            )
            low = s.get("workloads", "low", NS)
            assert low is not None and not admitted(low) and is_true(low, kobj.EVICTED)
            assert rule.fired == 1 and waits == [1.0]
            assert retried(s, STATUS_CALL) == 1
            assert written(s, "evict", "ok") == 1
            assert written(s, "evict", "error") == 0
            assert counter(s.service.metrics.admitted_total, "cq") == 2  # low, then high
            await eventually(lambda: cq_usage(s) == (1, "4"), what="cq holds high alone")

    asyncio.run(main())


def test_a_throttled_queue_status_is_retried(tmp_path: Path, backend: Any) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects()) as s:
            await eventually(lambda: cq_usage(s) == (0, "0"), what="cq's first status")
            waits = wait_recorder(s)
            rule = s.server.fail_next(1, code=429, verb="patch", resource="clusterqueues/status")
            await s.user.create(kr.WORKLOADS, standalone("a", cpu="2"), namespace=NS)
            await eventually(lambda: cq_usage(s) == (1, "2"), what="cq's status shows a")
            assert rule.fired == 1 and 1.0 in waits
            assert retried(s, CQ_STATUS_CALL) == 1

    asyncio.run(main())


def test_an_admission_throttled_beyond_the_retries_rolls_back_unread_and_is_admitted_later(
    tmp_path: Path,
) -> None:
    """Past client-go's 10 retries the 429 reaches the applier: the write was not
    applied, so the assumption is rolled back without reading the Workload back (and
    without counting a refusal); the next cycle admits it, once."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects()) as s:
            waits: list[float] = []
            assert s.service.client is not None
            s.service.client.sleep = recording_sleep(waits, real=False)
            reads = reads_of_workloads(s)
            rule = s.server.fail_next(
                k.MAX_RETRIES + 1, code=429, verb="patch", resource="workloads/status", name="a"
            )
            await s.user.create(kr.WORKLOADS, standalone("a", cpu="3"), namespace=NS)
            await eventually(lambda: admitted(s.get("workloads", "a", NS)), what="a admitted")
            await eventually(lambda: written(s, "admit", "ok"), what="the service saw it land")
            assert rule.fired == k.MAX_RETRIES + 1 and len(waits) == k.MAX_RETRIES
            assert written(s, "admit", "rolled-back") == 1
            assert written(s, "admit", "ok") == 1
            assert counter(s.service.metrics.admitted_total, "cq") == 1
            assert reads_of_workloads(s) == reads
            ctrl = s.service.controller
            assert ctrl is not None and f"{NS}/a" not in ctrl.applier.failures
            await eventually(lambda: cq_usage(s) == (1, "3"), what="cq's status shows a")

    asyncio.run(main())
