"""The client-side rate limit: clientConnection.qps/burst, with decisions first."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.config.load import parse_config
from admission.config.schema import ConfigError
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.ratelimit import TokenBucket, low_priority
from tests.support.kube_harness import (
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


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_low_priority_request_is_never_starved_by_decisions() -> None:
    """Decisions go first, but a status write that has waited ``low_max_wait`` takes
    the next token even while decisions keep arriving (the budget stays spent)."""

    async def main() -> None:
        clock = FakeClock()
        bucket = TokenBucket(qps=1e9, burst=1, clock=clock, low_max_wait=5.0)
        await bucket.acquire()
        bucket.qps = 1e-9  # no token comes until the test hands one out
        order: list[str] = []

        async def one(name: str, low: bool) -> None:
            if low:
                with low_priority():
                    await bucket.acquire()
            else:
                await bucket.acquire()
            order.append(name)

        def grant() -> None:
            bucket._tokens = 1.0
            bucket._release()

        tasks = [asyncio.create_task(one("status", True))]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(one(f"d{i}", False)) for i in range(3)]
        await asyncio.sleep(0)
        grant()
        await asyncio.sleep(0)
        assert order == ["d0"]  # the status write has waited less than low_max_wait
        clock.now = 5.0
        grant()
        await asyncio.sleep(0)
        assert order == ["d0", "status"]  # it has waited long enough: it goes next
        grant()
        grant()
        await asyncio.gather(*tasks)
        assert order == ["d0", "status", "d1", "d2"]

    asyncio.run(main())


def test_room_for_decisions_waits_until_the_queue_drains_below_the_limit() -> None:
    """The scheduler's back-pressure: with ``limit`` decisions waiting for tokens it
    waits; once one is sent it goes on."""

    async def main() -> None:
        bucket = TokenBucket(qps=1e9, burst=1)
        await bucket.acquire()
        bucket.qps = 1e-9
        waiting = [asyncio.create_task(bucket.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        assert bucket.decisions_queued() == 3
        room = asyncio.create_task(bucket.room_for_decisions(3))
        await asyncio.sleep(0.01)
        assert not room.done()
        await bucket.room_for_decisions(4)  # below this limit already: no wait
        bucket._tokens = 1.0
        bucket._release()
        await asyncio.wait_for(room, 1.0)
        assert bucket.decisions_queued() == 2
        for t in waiting:
            t.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert bucket.decisions_queued() == 0

    asyncio.run(main())


def test_low_priority_writes_earn_a_share_of_the_decisions_requests() -> None:
    """Every high-priority request earns ``share`` of one for low-priority writes
    (queue statuses, pending reasons); low-priority requests and Events earn nothing."""
    from admission.kube.client.ratelimit import ShareCredit

    async def main() -> None:
        client = k.KubeClient(None, strict=False)  # type: ignore[arg-type]
        client.own_budget = frozenset({"create core/events"})
        client.share = ShareCredit(0.25, cap=2.0)
        for _ in range(3):
            await client._admit("patch kueue.x-k8s.io/workloads/status")
        assert not client.share.take()  # 0.75 earned
        await client._admit("create core/events")
        with low_priority():
            await client._admit("patch kueue.x-k8s.io/clusterqueues/status")
        assert not client.share.take()  # still 0.75
        await client._admit("patch kueue.x-k8s.io/workloads/status")
        assert client.share.take()  # one earned, one spent
        assert not client.share.take()
        for _ in range(20):
            await client._admit("patch kueue.x-k8s.io/workloads/status")
        assert client.share.take() and client.share.take() and not client.share.take()  # cap

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
    ],
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
                    kr.JOBS, job("team-a", f"j{i}", queue="lq", cpu="1"), namespace="team-a"
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
