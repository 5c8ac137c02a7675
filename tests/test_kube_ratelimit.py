"""The client-side rate limit: clientConnection.qps/burst, with decisions first."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.config import ConfigError, parse_config
from admission.kube import client as k
from admission.kube.ratelimit import TokenBucket, low_priority
from tests.kube_harness import (
    admitted,
    cluster_queue,
    eventually,
    flavor,
    job,
    local_queue,
    namespace,
    stack,
)


def test_a_burst_beyond_the_bucket_is_spread_at_qps() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        bucket = TokenBucket(qps=50, burst=5)
        t0 = loop.time()
        stamps: list[float] = []

        async def one() -> None:
            await bucket.acquire()
            stamps.append(loop.time() - t0)

        await asyncio.gather(*(one() for _ in range(15)))
        # never more grants by time t than burst + qps * t (the bucket's invariant)
        for i, t in enumerate(sorted(stamps), start=1):
            assert i <= 5 + 50 * t + 1, (i, t)
        assert len(stamps) == 15

    asyncio.run(main())


def test_waiting_decisions_go_before_waiting_status_writes() -> None:
    async def main() -> None:
        bucket = TokenBucket(qps=20, burst=1)
        await bucket.acquire()  # the bucket is empty now
        order: list[str] = []

        async def low(i: int) -> None:
            with low_priority():
                await bucket.acquire()
            order.append(f"low{i}")

        async def high(i: int) -> None:
            await bucket.acquire()
            order.append(f"high{i}")

        tasks = [asyncio.create_task(low(i)) for i in range(3)]
        await asyncio.sleep(0)  # the low ones queue first
        tasks += [asyncio.create_task(high(i)) for i in range(2)]
        await asyncio.gather(*tasks)
        assert order == ["high0", "high1", "low0", "low1", "low2"]

    asyncio.run(main())


def test_a_cancelled_waiter_leaves_the_queue() -> None:
    async def main() -> None:
        bucket = TokenBucket(qps=10, burst=1)
        await bucket.acquire()
        waiter = asyncio.create_task(bucket.acquire())
        await asyncio.sleep(0)
        assert bucket.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert bucket.waiting == 0
        await asyncio.wait_for(bucket.acquire(), timeout=5)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"qps": 0}, "clientConnection.qps"),
        ({"burst": 0}, "clientConnection.burst"),
        ({"qsp": 5}, "clientConnection.qsp"),
    ],  # fmt: skip
)
def test_a_bad_client_connection_is_refused_naming_the_field(section: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_config({"clientConnection": section})


def test_kueues_defaults_apply_when_unset() -> None:
    conn = parse_config({}).doc.clientConnection
    assert (conn.qps, conn.burst) == (50.0, 100)


def test_the_service_keeps_to_its_budget(tmp_path: Path, backend: Any) -> None:
    objects = [
        namespace("team-a"),
        flavor("f"),
        cluster_queue("cq", {"f": {"cpu": 100}}),
        local_queue("team-a", "lq", "cq"),
    ]
    config = parse_config({"clientConnection": {"qps": 20, "burst": 10}})

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects, config=config) as s:
            loop = asyncio.get_running_loop()
            stamps: list[float] = []
            counted = s.service.client.on_request

            def on_request(call: str) -> None:
                if call not in s.service.client.own_budget:  # Events have their own bucket
                    stamps.append(loop.time())
                if counted is not None:
                    counted(call)

            s.service.client.on_request = on_request
            for i in range(12):
                await s.user.create(
                    k.JOBS, job("team-a", f"j{i}", queue="lq", cpu="1"), namespace="team-a"
                )
            await eventually(
                lambda: sum(admitted(w) for w in s.workloads("team-a")) == 12,
                what="all admitted",
                timeout=60,
            )
            t0 = stamps[0]
            # the limiter is in front of the request counter: at most burst + qps * t
            for i, t in enumerate(stamps, start=1):
                assert i <= 10 + 20 * (t - t0) + 1, (i, t - t0)
            waited = s.service.metrics.rate_limit_wait
            assert waited.labels("high")._sum.get() > 0  # some requests did wait

    asyncio.run(main())
