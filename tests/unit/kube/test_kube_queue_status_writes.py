"""Write economy of queue statuses: unchanged statuses are not rewritten, significant ones go first.

A ClusterQueue status that changed back while it waited, or did not change, is not
written; while decisions wait for the budget only significant changes (a whole queue
going idle or busy) go out, queues going idle are written first when nothing is decided,
and a status pass keeps several writes waiting for the budget at once.

The writes are counted and held back as in test_kube_write_economy.py
(tests/support/write_economy.py).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from admission.kube.client import resources as kr
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
from tests.support.write_economy import (
    NS,
    create,
    objects,
    options,
    service_writes,
    shut,
    standalone,
)


def test_a_queue_status_that_changed_back_while_it_waited_is_not_written(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects(cpu=1)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await eventually(
                lambda: ((s.get("clusterqueues", "cq") or {}).get("status") or {}).get(
                    "conditions"
                ),
                what="the first ClusterQueue status",
            )
            await eventually(
                lambda: ((s.get("localqueues", "lq", NS) or {}).get("status") or {}).get(
                    "conditions"
                ),
                what="the first LocalQueue status",
            )
            gate = shut(s)
            await create(s, standalone("w", cpu="2"))  # pendingWorkloads 0 -> 1 ...
            await eventually(
                lambda: f"{NS}/w" in ctrl.cache.workloads and gate.waiting >= 2,
                what="status writes wait for their turn",
            )
            await s.user.delete(kr.WORKLOADS, "w", namespace=NS)  # ... and back to 0
            await eventually(lambda: f"{NS}/w" not in ctrl.cache.workloads, what="w gone")
            await asyncio.sleep(ctrl.options.status_interval * 2)
            mark = len(s.server.requests)
            gate.open()
            await asyncio.sleep(ctrl.options.status_interval * 3)
            assert service_writes(s, "clusterqueues/status", "cq", since=mark) == 0
            assert service_writes(s, "localqueues/status", "lq", since=mark) == 0
            cq = s.get("clusterqueues", "cq") or {}
            assert cq["status"]["pendingWorkloads"] == 0

    asyncio.run(main())


def test_unchanged_queue_statuses_are_not_rewritten(tmp_path: Path) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=objects()) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await create(s, standalone("w"))
            await eventually(lambda: admitted(s.get("workloads", "w", NS)), what="w admitted")
            await eventually(
                lambda: (
                    ((s.get("clusterqueues", "cq") or {}).get("status") or {}).get(
                        "admittedWorkloads"
                    )
                    == 1
                ),
                what="the ClusterQueue status counts it",
            )
            await eventually(
                lambda: (
                    ((s.get("localqueues", "lq", NS) or {}).get("status") or {}).get(
                        "admittedWorkloads"
                    )
                    == 1
                ),
                what="the LocalQueue status counts it",
            )
            await asyncio.sleep(ctrl.options.status_interval * 2)
            mark = len(s.server.requests)
            await asyncio.sleep(ctrl.options.status_interval * 5)  # five refreshes
            assert service_writes(s, "clusterqueues/status", "cq", since=mark) == 0
            assert service_writes(s, "localqueues/status", "lq", since=mark) == 0

    asyncio.run(main())


def cq_status(s: Stack) -> dict[str, Any]:
    return dict((s.get("clusterqueues", "cq") or {}).get("status") or {})


def test_a_significant_queue_status_change_goes_out_while_decisions_wait(
    tmp_path: Path,
) -> None:
    """While an admission waits for the budget, status passes run only every
    ``BUSY_PASS_EVERY`` intervals; a queue that became non-empty is written at the first
    of them, with no low-priority share at all (due pending reasons spend the share the
    moment it is earned: a significant change that needed it would wait for as long as
    the budget stays saturated, and the queue would look idle all that time)."""
    from admission.kube.client.ratelimit import LOW
    from admission.kube.reconcilers.queue_status import BUSY_PASS_EVERY

    async def main() -> None:
        async with stack(tmp_path, objects=objects(), controller=options(low_share=0.0)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            interval = ctrl.options.status_interval
            await eventually(lambda: cq_status(s).get("conditions"), what="the first status")
            gate = shut(s)
            await create(s, standalone("w"))  # reservingWorkloads 0 -> 1: significant
            await eventually(lambda: gate.decisions_waiting, what="the admission waits")

            def status_waiting() -> bool:
                return any(p == LOW for p, _, _ in gate._waiters)

            await asyncio.sleep(interval * (BUSY_PASS_EVERY - 1) / 2)
            assert not status_waiting()  # passes are put off while the admission waits
            await eventually(status_waiting, what="the busy pass writes it", timeout=interval * 30)
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "w", NS)), what="w admitted")
            await eventually(
                lambda: cq_status(s).get("admittedWorkloads") == 1,
                what="the status catches up",
            )

    asyncio.run(main())


def test_only_whole_queue_transitions_between_idle_and_busy_are_significant() -> None:
    """A queue that keeps reserving quota while its pending count flips 0 -> 1 -> 0 (an
    arrival admitted a cycle later) holds work throughout: those flips wait for the
    low-priority share like any count. Idle <-> holding work, either way, and the
    Active condition are significant."""
    from admission.kube.reconcilers.queue_status import significant

    idle = {"pendingWorkloads": 0, "reservingWorkloads": 0}
    running = {"pendingWorkloads": 0, "reservingWorkloads": 3}
    running_and_waiting = {"pendingWorkloads": 1, "reservingWorkloads": 3}
    waiting = {"pendingWorkloads": 2, "reservingWorkloads": 0}
    assert not significant(running, running_and_waiting)
    assert not significant(running_and_waiting, running)
    assert not significant(waiting, running)  # work moved from pending to reserving
    assert significant(idle, waiting) and significant(idle, running)
    assert significant(running, idle) and significant(waiting, idle)
    active = [{"type": "Active", "status": "True"}]
    assert significant({**running, "conditions": []}, {**running, "conditions": active})


def test_other_queue_status_changes_wait_while_decisions_are_written(tmp_path: Path) -> None:
    """A count that only moved (1 -> 2 reserving) is written while an admission waits
    for the budget only with the low-priority share (none here); once nothing is being
    decided it is written within ``status_interval``."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects(cpu=8), controller=options(low_share=0.0)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            interval = ctrl.options.status_interval
            await create(s, standalone("a"))
            await eventually(lambda: cq_status(s).get("admittedWorkloads") == 1, what="a counted")
            gate = shut(s)
            await create(s, standalone("b"))  # fits: its admission waits at the gate
            await eventually(lambda: gate.decisions_waiting, what="b's admission waits")
            mark = len(s.server.requests)
            await asyncio.sleep(interval * 12)  # two busy passes at least
            assert gate.waiting == 1  # b's admission alone: no status write queued
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "b", NS)), what="b admitted")
            await eventually(
                lambda: cq_status(s).get("admittedWorkloads") == 2, what="the status catches up"
            )
            assert service_writes(s, "clusterqueues/status", "cq", since=mark) == 1

    asyncio.run(main())


def test_when_nothing_is_decided_clusterqueues_going_idle_are_written_first() -> None:
    """At the end of a run every queue goes idle at once (Kueue's large-scale harness:
    1,000 ClusterQueues and 1,000 LocalQueues) and tooling waits for the ClusterQueues
    to say so: significant changes go first, ClusterQueues before LocalQueues, the other
    changes after them, each group in its round-robin order."""
    from admission.kube.reconcilers.queue_status import StatusWriter

    busy = {"pendingWorkloads": 0, "reservingWorkloads": 2}
    busier = {"pendingWorkloads": 0, "reservingWorkloads": 3}
    idle = {"pendingWorkloads": 0, "reservingWorkloads": 0}
    writer = StatusWriter(None, fair_sharing=False)  # type: ignore[arg-type]
    writer.written = {("cq", "a"): busy, ("cq", "b"): busy, ("lq", "ns/a"): busy,
                      ("lq", "ns/x"): busy}  # fmt: skip
    want = {("cq", "a"): idle, ("cq", "b"): busier, ("cq", "new"): busy,
            ("lq", "ns/a"): idle, ("lq", "ns/x"): busier}  # fmt: skip
    todo = list(want)  # desired()'s order: ClusterQueues, then LocalQueues
    writer._offset = 3  # where the last pass's budget ran out
    assert writer._when_idle(todo, want) == [
        ("cq", "a"), ("cq", "new"),  # idle now; a first status
        ("lq", "ns/a"),
        ("lq", "ns/x"), ("cq", "b"),  # counts only: in the rotation's order
    ]  # fmt: skip


def test_a_status_pass_has_several_writes_waiting_for_the_budget_at_once(tmp_path: Path) -> None:
    """One write at a time, a pass is bound by the API's latency, not by the budget:
    up to ``STATUS_WRITERS`` of its writes wait for their turn at once (never more).

    The passes are held until every queue's change is in the cache and due: a pass
    waits for its writes, so one that ran while the workloads were still arriving (a
    loaded machine spreads them out) would sit at the shut budget with the few
    changes it saw, and no later pass would run."""
    from admission.kube.client.ratelimit import LOW
    from admission.kube.reconcilers.queue_status import FIGURES_EVERY, STATUS_WRITERS

    queues = [f"cq{i}" for i in range(STATUS_WRITERS + 2)]
    objs = [namespace(NS), flavor("f")]
    for q in queues:
        objs += [cluster_queue(q, {"f": {"cpu": 4}}), local_queue(NS, q, q)]

    async def main() -> None:
        async with stack(tmp_path, objects=objs, controller=options(low_share=0.0)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            status = ctrl.status

            def all_written() -> bool:
                want = status.desired()
                return len(want) == 2 * len(queues) and all(
                    status.written.get(k) == v for k, v in want.items()
                )

            await eventually(all_written, what="the first statuses")
            every_change_due = asyncio.Event()
            plain_refresh = status.refresh

            async def refresh_once_every_change_is_due() -> None:
                await every_change_due.wait()
                await plain_refresh()

            status.refresh = refresh_once_every_change_is_due  # type: ignore[method-assign]
            gate = shut(s)
            for q in queues:  # each queue goes from idle to holding work: significant
                await create(s, workload(NS, q, queue=q, pod_sets=[("main", 1, "1")]))

            async def every_queue_holds_work() -> bool:
                await ctrl.cache_ready()  # (no cycle reads the cache meanwhile)
                want = status.desired()
                return all(
                    want[("cq", q)].get("pendingWorkloads")
                    or want[("cq", q)].get("reservingWorkloads")
                    for q in queues
                )

            await eventually(every_queue_holds_work, what="every queue's change is in the cache")
            spacing = FIGURES_EVERY * ctrl.options.status_interval  # (a busy queue's wait)
            last_write = max(status.written_at.values())
            await eventually(
                lambda: time.monotonic() - last_write >= spacing, what="every change due"
            )
            every_change_due.set()

            def status_waiting() -> int:
                return sum(1 for p, _, f in gate._waiters if p == LOW and not f.done())

            await eventually(
                lambda: status_waiting() >= STATUS_WRITERS, what="the pass's writes wait"
            )
            assert status_waiting() == STATUS_WRITERS
            gate.open()

            def reserving(q: str) -> int:
                return int(((s.get("clusterqueues", q) or {}).get("status") or {}).get(
                    "reservingWorkloads") or 0)  # fmt: skip

            for q in queues:
                await eventually(lambda q=q: reserving(q) == 1, what=f"{q}'s status shows it")

    asyncio.run(main())
