"""Write economy: the service sends only the writes a decision needs (issue 16, item 2).

Each test removes one write and checks both halves: the write does not happen, and the
state the API ends in is still right. Writes are counted from the requests the API
server received from the service (the double records them; on the real server, the
fault proxy in front of the service does). Where a write must wait for its turn at the
client's rate limit, the test shuts that limit (:class:`Gate`) and changes the world
while the write waits: a write decided before the wait would be stale.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.engine.queue_manager import PendingStatus
from admission.kube import objects as kobj
from admission.kube.client import resources as kr
from admission.kube.client import rest as k
from admission.kube.client.ratelimit import TokenBucket
from admission.kube.control.context import ControllerOptions
from admission.kube.control.workloads import finish_eviction
from queues.api.conditions import condition, is_true
from tests.support.kube_harness import (
    SA_USERNAME,
    SERVICE_NS,
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


async def pending_reason_waiting(s: Stack, name: str) -> Gate:
    """Shut the budget, create a Workload that does not fit (2 cpu), and return once its
    pending reason was taken from the queue and waits for its turn."""
    ctrl = s.service.controller
    assert ctrl is not None
    key = f"{NS}/{name}"
    gate = shut(s)
    await create(s, standalone(name, cpu="2"))
    await eventually(lambda: key in ctrl.applier.pending, what="its pending reason is noted")
    await eventually(
        lambda: key not in ctrl.applier.pending and gate.waiting,
        what="its pending reason waits for its turn",
    )
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


def test_evicting_a_standalone_workload_is_one_write(tmp_path: Path, backend: Any) -> None:
    """Nothing runs on a standalone Workload's admission, so the eviction clears it in
    the same write (Kueue's runner needs a second one; Job-owned workloads still wait
    for their Job to stop). The victim's later pending reason is held back here (a long
    ``pending_delay``): it is a write of its own, not part of the eviction."""

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects(), controller=options(pending_delay=60)
        ) as s:
            await create(s, standalone("low"))
            await eventually(lambda: admitted(s.get("workloads", "low", NS)), what="low admitted")
            mark = len(s.server.requests)
            await create(s, standalone("high", priority=100))
            await eventually(lambda: admitted(s.get("workloads", "high", NS)), what="high admitted")
            low = s.get("workloads", "low", NS)
            assert low is not None and not admitted(low)
            assert not (low.get("status") or {}).get("admission")
            assert is_true(low, kobj.EVICTED) and is_true(low, kobj.PREEMPTED)
            assert (condition(low, kobj.QUOTA_RESERVED) or {}).get("status") == "False"
            assert service_writes(s, "workloads/status", "low", since=mark) == 1
            assert writes_of_kind(s, "clear-admission") == 0
            assert writes_of_kind(s, "evict") == 1

    asyncio.run(main())


def test_no_eviction_is_written_for_a_victim_that_finished_while_it_waited(
    tmp_path: Path, backend: Any
) -> None:
    """The preemption is decided, its write waits for the rate limit, the victim
    finishes meanwhile: the write is dropped (its token refunded) and the preemptor is
    admitted on the quota the finish released."""

    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects()) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await create(s, standalone("low"))
            await eventually(lambda: admitted(s.get("workloads", "low", NS)), what="low admitted")
            gate = shut(s)
            await create(s, standalone("high", priority=100))
            await eventually(
                lambda: ctrl.stats["preempted"] >= 1 and gate.waiting >= 1,
                what="the eviction of low waits for its turn",
            )
            await mark_finished(s, "low")
            await eventually(
                lambda: kobj.is_finished(ctrl.writer.workload(f"{NS}/low")),
                what="the service saw low finish",
            )
            mark = len(s.server.requests)
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "high", NS)), what="high admitted")
            low = s.get("workloads", "low", NS)
            assert low is not None and kobj.is_finished(low)
            assert condition(low, kobj.EVICTED) is None
            assert service_writes(s, "workloads/status", "low", since=mark) == 0
            assert writes_of_kind(s, "evict") == 0

    asyncio.run(main())


def test_a_finished_workload_keeps_its_admission(tmp_path: Path) -> None:
    """Completing an eviction of a workload that finished meanwhile writes nothing: a
    finished Workload keeps its admission (Kueue never clears it)."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects()) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await create(s, standalone("w"))
            await eventually(lambda: admitted(s.get("workloads", "w", NS)), what="w admitted")
            await mark_finished(s, "w")
            key = f"{NS}/w"
            await eventually(
                lambda: kobj.is_finished(ctrl.writer.workload(key)),
                what="the service saw it finish",
            )
            mark = len(s.server.requests)
            await finish_eviction(ctrl.ctx, key)
            assert service_writes(s, "workloads/status", "w", since=mark) == 0
            w = s.get("workloads", "w", NS)
            assert w is not None and (w.get("status") or {}).get("admission")

    asyncio.run(main())


def test_no_pending_reason_is_written_for_a_workload_admitted_while_it_waited(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(tmp_path, backend=backend, objects=objects(cpu=1)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            key = f"{NS}/w"
            gate = await pending_reason_waiting(s, "w")
            cq = s.get("clusterqueues", "cq")
            assert cq is not None
            cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "4"
            await s.user.replace(kr.CLUSTER_QUEUES, "cq", cq)
            await eventually(lambda: key in ctrl.cache.admitted, what="the admission is decided")
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "w", NS)), what="w admitted")
            await eventually(lambda: not ctrl.applier.tasks, what="writes settled")
            assert service_writes(s, "workloads/status", "w") == 1  # the admission only
            assert writes_of_kind(s, "pending") == 0

    asyncio.run(main())


def test_a_newer_pending_reason_replaces_the_one_waiting(tmp_path: Path) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=objects(cpu=1)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            key = f"{NS}/w"
            gate = await pending_reason_waiting(s, "w")
            ctrl.applier.note_pending(key, PendingStatus("Newer", "the newest reason"))
            gate.open()
            await eventually(
                lambda: (
                    (condition(s.get("workloads", "w", NS) or {}, kobj.QUOTA_RESERVED) or {}).get(
                        "reason"
                    )
                    == "Newer"
                ),
                what="the newer reason written",
            )
            # the API stored the condition before the service read the answer and
            # counted the write: wait for the count, not for a time
            await eventually(
                lambda: writes_of_kind(s, "pending") >= 1, what="the pending write counted"
            )
            assert writes_of_kind(s, "pending") == 1
            assert service_writes(s, "workloads/status", "w") == 1

    asyncio.run(main())


def test_a_head_re_evaluated_every_cycle_still_gets_its_reason(tmp_path: Path) -> None:
    """The hold before a reason is written counts from when the reason appeared: a
    head that fails every few milliseconds (a busy cluster) is not postponed forever."""

    async def main() -> None:
        async with stack(
            tmp_path, objects=objects(cpu=1), controller=options(pending_delay=0.3)
        ) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            key = f"{NS}/w"
            await create(s, standalone("w", cpu="2"))
            await eventually(lambda: key in ctrl.cache.workloads, what="w queued")
            written_during_the_churn = False
            for i in range(150):  # 1.5 s of cycles, each with new numbers in the message
                ctrl.applier.note_pending(key, PendingStatus("Pending", f"short by {i}"))
                await asyncio.sleep(0.01)
                w = s.get("workloads", "w", NS) or {}
                if (condition(w, kobj.QUOTA_RESERVED) or {}).get("status") == "False":
                    written_during_the_churn = True
                    break
            assert written_during_the_churn
            # the API stored the condition before the service read the answer and
            # counted the write: wait for the count, not for a time
            await eventually(
                lambda: writes_of_kind(s, "pending") == 1, what="the pending write counted"
            )

    asyncio.run(main())


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


def test_events_do_not_spend_the_decisions_budget(tmp_path: Path) -> None:
    """client-go gives the event recorder its own client and rate limit: an Event is
    sent while every decision waits for the shut budget."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects()) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            shut(s)
            before = s.server.request_count(verb="create", resource="events")
            ns = s.get("namespaces", NS)
            assert ns is not None
            ctrl.ctx.record_event(ns, "Normal", "Test", "sent outside the decisions' budget")
            await eventually(
                lambda: s.server.request_count(verb="create", resource="events") > before,
                what="the Event was sent",
            )

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


def test_pending_reasons_yield_to_waiting_decisions_for_a_bounded_time(tmp_path: Path) -> None:
    """A due pending reason waits while an admission waits for the budget (the head may
    be admitted meanwhile), but no longer than ``pending_max_hold``."""
    cqs = [
        *objects(cpu=4),
        cluster_queue("small", {"f": {"cpu": 1}}),
        local_queue(NS, "lq2", "small"),
    ]

    async def main() -> None:
        # no back-pressure here: the next cycle must run while "fits" waits at the gate
        opts = options(pending_max_hold=1.5, decision_lead=0.0, low_share=0.0)
        async with stack(tmp_path, objects=cqs, controller=opts) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            gate = shut(s)
            await create(s, standalone("fits"))  # its admission waits for the budget
            await eventually(lambda: gate.decisions_waiting, what="the admission waits")
            big = workload(NS, "big", queue="lq2", pod_sets=[("main", 1, "2")])
            await create(s, big)  # never fits: its reason is due after pending_delay
            await eventually(lambda: f"{NS}/big" in ctrl.applier.pending, what="reason noted")

            def reason_waiting() -> bool:
                # taken from the pending queue: it waits for its turn at the budget (a
                # queue status pass may be waiting there too: that one is not counted)
                return f"{NS}/big" not in ctrl.applier.pending

            await asyncio.sleep(0.5)
            assert not reason_waiting()  # held back while the admission waits
            await eventually(reason_waiting, what="the reason goes after pending_max_hold")
            gate.open()
            await eventually(
                lambda: (
                    (condition(s.get("workloads", "big", NS) or {}, kobj.QUOTA_RESERVED) or {}).get(
                        "status"
                    )
                    == "False"
                ),
                what="the reason is written",
            )

    asyncio.run(main())


def test_cycles_decide_no_further_ahead_than_the_budget_can_write(tmp_path: Path) -> None:
    """Back-pressure: an admission holds quota from the moment it is decided, so while
    more decisions wait for the budget than it sends in ``decision_lead`` seconds no
    further cycle runs (here: one waits, at a shut budget); once they are sent the
    rest is admitted."""

    async def main() -> None:
        async with stack(tmp_path, objects=objects(cpu=8)) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            gate = shut(s)
            for i in range(4):
                await create(s, standalone(f"w{i}", cpu="2"))
            await eventually(
                lambda: len(ctrl.cache.admitted) == 1 and gate.decisions_waiting,
                what="the first admission is decided and waits",
            )
            await eventually(
                lambda: sum(len(q) for q in ctrl.cache.queues.values()) == 3,
                what="the rest is queued",
            )
            cycles = ctrl.stats["cycles"]
            await asyncio.sleep(0.5)
            assert len(ctrl.cache.admitted) == 1  # one decided; three wait undecided
            assert ctrl.stats["cycles"] == cycles
            gate.open()
            for i in range(4):
                await eventually(
                    lambda i=i: admitted(s.get("workloads", f"w{i}", NS)), what=f"w{i} admitted"
                )

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
    up to ``STATUS_WRITERS`` of its writes wait for their turn at once (never more)."""
    from admission.kube.client.ratelimit import LOW
    from admission.kube.reconcilers.queue_status import STATUS_WRITERS

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
            gate = shut(s)
            for q in queues:  # each queue goes from idle to holding work: significant
                await create(s, workload(NS, q, queue=q, pod_sets=[("main", 1, "1")]))

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
