"""Leader election: two replicas, one Lease; release on shutdown hands over at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from admission.apiserver_double import running_apiserver
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.control.leader import LeaderElector
from admission.serve.service import Service
from tests.support.double_client import kube_client_config
from tests.support.kube_harness import (
    CONTROLLER_TOKEN,
    SA_USERNAME,
    SERVICE_NS,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    job,
    local_queue,
    namespace,
    service_options,
)

OBJECTS = [
    namespace("team-a"),
    namespace(SERVICE_NS),
    flavor("f"),
    cluster_queue("cq", {"f": {"cpu": 8}}),
    local_queue("team-a", "lq", "cq"),
]


def replica(
    server: Any, tmp_path: Path, name: str, *, lease: float, renew: float, retry: float
) -> Service:
    """One replica of ``serve`` (no webhooks) campaigning for the Lease."""
    opts = service_options(
        server, tmp_path / name, leader_elect=True, identity=name,
        lease_duration=lease, renew_deadline=renew, retry_period=retry,
    )  # fmt: skip
    opts.webhooks = False
    return Service(opts)


def test_one_replica_leads_and_a_released_lease_hands_over_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_apiserver(
            objects=OBJECTS, tokens={CONTROLLER_TOKEN: SA_USERNAME}
        ) as server:
            # a lease far longer than the test: only a release can hand it over
            a, b = (replica(server, tmp_path, n, lease=3600, renew=1800, retry=0.05) for n in "ab")
            ta = asyncio.create_task(a.run())
            await eventually(
                lambda: a.elector is not None and a.elector.is_leader.is_set(), what="a leads"
            )
            tb = asyncio.create_task(b.run())
            await eventually(lambda: b.ready.is_set(), what="b is ready (it serves, as a follower)")
            await eventually(
                lambda: b.elector is not None and b.elector.transitions == 0, what="b campaigns"
            )
            user = await k.KubeClient.connect(
                configuration=kube_client_config(server.url), strict=False
            )
            try:
                await user.create(
                    kr.JOBS, job("team-a", "one", queue="lq", suspend=True), namespace="team-a"
                )
                await eventually(
                    lambda: any(admitted(w) for w in server.list_objects("workloads")),
                    what="a admits",
                )
                lease = server.get_object("leases", "quartermaster-leader-election", SERVICE_NS)
                assert lease["spec"]["holderIdentity"] == "a"
                assert not b.elector.is_leader.is_set()
                assert a.controller.leading and not b.controller.leading
                # b's cache follows the API (through its watches) although it never writes
                await eventually(
                    lambda: (
                        b.controller.cache.admitted.keys() == a.controller.cache.admitted.keys()
                    ),
                    what="b's cache catches up with a's admissions",
                )

                a.stop()
                assert await ta == 0
                lease = server.get_object("leases", "quartermaster-leader-election", SERVICE_NS)
                assert lease["spec"]["holderIdentity"] in ("", "b")
                await eventually(lambda: b.elector.is_leader.is_set(), what="b takes over")
                await user.create(
                    kr.JOBS, job("team-a", "two", queue="lq", suspend=True), namespace="team-a"
                )
                await eventually(
                    lambda: sum(admitted(w) for w in server.list_objects("workloads")) == 2,
                    what="b admits",
                )
                lease = server.get_object("leases", "quartermaster-leader-election", SERVICE_NS)
                assert lease["spec"]["holderIdentity"] == "b"
                assert lease["spec"]["leaseTransitions"] == 1
            finally:
                await user.close()
                b.stop()
                await tb

    asyncio.run(main())


def test_a_lease_held_by_another_is_not_taken_before_it_expires(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_apiserver(namespaces=("default", SERVICE_NS)) as server:
            client = await k.KubeClient.connect(configuration=kube_client_config(server.url))
            now = [1000.0]
            try:
                first = LeaderElector(client, namespace=SERVICE_NS, identity="x", lease_duration=10,
                                      renew_deadline=5, retry_period=1, monotonic=lambda: now[0])  # fmt: skip
                second = LeaderElector(client, namespace=SERVICE_NS, identity="y", lease_duration=10,
                                       renew_deadline=5, retry_period=1, monotonic=lambda: now[0])  # fmt: skip
                assert await first.try_acquire_or_renew()
                assert not await second.try_acquire_or_renew()
                now[0] += 9  # not yet expired as y observed it
                assert not await second.try_acquire_or_renew()
                now[0] += 2
                assert await second.try_acquire_or_renew()  # x stopped renewing: y takes it
                assert not await first.try_acquire_or_renew()  # and x sees it lost
                lease = server.get_object("leases", "quartermaster-leader-election", SERVICE_NS)
                assert lease["spec"]["holderIdentity"] == "y"
            finally:
                await client.close()

    asyncio.run(main())


def test_health_and_metrics_endpoints(tmp_path: Path) -> None:
    from tests.support.kube_harness import stack

    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS[:1] + OBJECTS[2:]) as s:
            await s.user.create(kr.JOBS, job("team-a", "one", queue="lq"), namespace="team-a")
            await eventually(lambda: any(admitted(w) for w in s.workloads()), what="admission")
            ports = s.service.ports
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{ports['health']}/readyz") as r:
                    assert r.status == 200
                async with http.get(f"http://127.0.0.1:{ports['health']}/healthz") as r:
                    assert r.status == 200

                async def metrics() -> str:
                    async with http.get(f"http://127.0.0.1:{ports['metrics']}/metrics") as r:
                        return await r.text()

                text = await eventually(
                    lambda: _has(
                        metrics(),
                        'kueue_cluster_queue_resource_usage{cluster_queue="cq",flavor="f",resource="cpu"} 1.0',
                    ),
                    what="usage metric",
                )
            assert 'kueue_admitted_workloads_total{cluster_queue="cq"} 1.0' in text
            assert 'kueue_pending_workloads{cluster_queue="cq",status="active"} 0.0' in text
            assert 'kueue_admission_attempts_total{result="success"}' in text
            assert "kueue_admission_wait_time_seconds_bucket" in text
            assert "quartermaster_leader 1.0" in text

    asyncio.run(main())


async def _has(text_coro, needle: str) -> str | None:  # type: ignore[no-untyped-def]
    text = await text_coro
    return text if needle in text else None


def test_a_leader_whose_lease_requests_hang_stops_writing_before_a_successor_leads(
    tmp_path: Path,
) -> None:
    """A's Lease requests hang while the rest of the API works. A must stop admitting at
    its renew deadline, before B (which waits out the lease) takes over, so the two never
    write decisions at the same time. Every admission A sends, it sends on the fence's
    word (``LeaderElector.holds``) given after its turn at the rate limit: the last
    verdict before each of its writes is read, not the wall clock, which a busy machine
    stretches."""

    async def main() -> None:
        async with running_apiserver(
            objects=OBJECTS, tokens={CONTROLLER_TOKEN: SA_USERNAME}
        ) as server:
            loop = asyncio.get_running_loop()
            writes: dict[str, list[float]] = {"a": [], "b": []}
            # the last verdict of A's fence, and the verdict each of A's writes went on
            verdict = [True]
            a_verdicts: list[bool] = []

            a, b = (replica(server, tmp_path, n, lease=3.0, renew=2.0, retry=0.2) for n in "ab")
            ta = asyncio.create_task(a.run())
            await eventually(
                lambda: a.elector is not None and a.elector.is_leader.is_set(), what="a leads"
            )
            tb = asyncio.create_task(b.run())
            await eventually(lambda: b.ready.is_set(), what="b is ready")
            for name, svc in (("a", a), ("b", b)):
                counted = svc.client.on_request

                def on_request(call: str, name: str = name, counted=counted) -> None:  # type: ignore[no-untyped-def]
                    if call == "patch kueue.x-k8s.io/workloads/status":
                        writes[name].append(loop.time())
                        if name == "a":
                            a_verdicts.append(verdict[0])
                    if counted is not None:
                        counted(call)

                svc.client.on_request = on_request
            assert a.controller is not None
            fence = a.controller.ctx.fence

            def recorded_fence() -> bool:
                verdict[0] = fence()
                return verdict[0]

            a.controller.ctx.fence = recorded_fence
            user = await k.KubeClient.connect(
                configuration=kube_client_config(server.url), strict=False
            )

            try:

                async def arrive(i: int) -> None:
                    await user.create(
                        kr.JOBS, job("team-a", f"j{i}", queue="lq", cpu="100m", suspend=True),
                        namespace="team-a",
                    )  # fmt: skip

                # A leads and writes before its Lease requests hang (a busy loop must not
                # leave it nothing to have written)
                await arrive(0)
                await eventually(lambda: writes["a"], what="a admits the first job")
                # A's Lease requests hang from now on; everything else still answers
                real_get, real_replace = a.client.get, a.client.replace

                async def hang_leases(res, *args, _real, **kw):  # type: ignore[no-untyped-def]
                    if res is kr.LEASES:
                        await asyncio.sleep(3600)
                    return await _real(res, *args, **kw)

                def hung(real):  # type: ignore[no-untyped-def]
                    return lambda res, *x, **kw: hang_leases(res, *x, _real=real, **kw)

                a.client.get = hung(real_get)  # type: ignore[method-assign]
                a.client.replace = hung(real_replace)  # type: ignore[method-assign]

                # a steady stream of jobs to admit while leadership changes hands
                async def arrivals() -> None:
                    for i in range(1, 40):
                        await arrive(i)
                        await asyncio.sleep(0.15)

                feeder = asyncio.create_task(arrivals())
                await eventually(
                    lambda: b.elector.is_leader.is_set(), what="b takes over", timeout=20
                )
                took_over = loop.time()
                await feeder
                await eventually(
                    lambda: sum(admitted(w) for w in server.list_objects("workloads")) == 40,
                    what="every job is admitted (by one leader at a time)",
                    timeout=30,
                )
                assert not a.elector.holds()
                assert ta.done() or not a.controller.leading
                # A wrote only while its fence held, and its fence closed before B led
                assert writes["a"] and writes["b"]
                assert all(a_verdicts), a_verdicts
                assert max(writes["a"]) < took_over
            finally:
                await user.close()
                b.stop()
                a.stop()
                await asyncio.gather(ta, tb, return_exceptions=True)

    asyncio.run(main())


def test_cancelling_the_election_as_an_attempt_returns_stops_it() -> None:
    """The cancellation of a stopping replica's election lands in the same loop turn as
    a Lease attempt's answer. ``asyncio.wait_for`` on Python 3.11 returns that answer
    and drops the cancellation (bpo-42130): the election renewed on for good and the
    replica's shutdown never returned (a hang of the full suite under load)."""

    async def main() -> None:
        elector = LeaderElector(
            None,  # type: ignore[arg-type]
            namespace=SERVICE_NS, identity="a", lease_duration=3600, renew_deadline=1800,
            retry_period=0.01,
        )  # fmt: skip
        task: asyncio.Task[None] | None = None
        attempts = 0

        async def answer() -> bool:
            nonlocal attempts
            attempts += 1
            if attempts == 3:  # a renewal: the replica stops as its answer comes in
                assert task is not None
                asyncio.get_running_loop().call_soon(task.cancel)
            return True

        elector.try_acquire_or_renew = answer  # type: ignore[method-assign]
        task = asyncio.create_task(elector.run())
        done, _ = await asyncio.wait({task}, timeout=10)  # a guard against the hang only
        assert task in done and task.cancelled()
        assert attempts == 3

    asyncio.run(main())
