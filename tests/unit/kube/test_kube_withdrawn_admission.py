"""A victim whose own admission was never sent is not admitted and then evicted.

A cycle assumes its admissions at once; their writes then wait for the client's rate
limit. A later cycle may choose one of them as a preemption victim (Kueue's candidate
order puts the most recently admitted first). Writing that admission and then its
eviction would cost two requests, and a third when the victim is admitted again,
for an admission nobody ever saw: the waiting admission is withdrawn instead. The
budget is shut (:class:`Gate`) so the admission is still waiting when the preemptor
comes; requests are counted from what the API server received from the service.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube import objects as kobj
from queues.api.conditions import condition
from tests.support.kube_harness import admitted, eventually, stack
from tests.support.write_economy import (
    NS,
    create,
    objects,
    options,
    service_writes,
    shut,
    standalone,
    writes_of_kind,
)


def test_a_victim_whose_admission_still_waits_is_withdrawn_not_evicted(
    tmp_path: Path, backend: Any
) -> None:
    """``low`` is decided but its write waits; ``high`` (same queue, higher priority,
    the whole quota) preempts it. Nothing is ever written for ``low``: no admission, no
    eviction; its quota is released when its turn comes and ``high`` is admitted; then
    ``low`` waits in the queue as a pending workload (its pending reason is held back
    here by a long ``pending_delay``: a write of its own, not part of the preemption)."""

    async def main() -> None:
        opts = options(pending_delay=60, decision_lead=0.0)  # no back-pressure: 2 cycles
        async with stack(tmp_path, backend=backend, objects=objects(), controller=opts) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            gate = shut(s)
            low, high = f"{NS}/low", f"{NS}/high"
            await create(s, standalone("low"))
            await eventually(
                lambda: low in ctrl.cache.admitted and gate.decisions_waiting,
                what="the admission of low is decided and waits for its turn",
            )
            await create(s, standalone("high", priority=100))
            await eventually(
                lambda: ctrl.stats["preempted"] >= 1, what="high's cycle chose low as its victim"
            )
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "high", NS)), what="high admitted")
            await eventually(lambda: not ctrl.applier.tasks, what="writes settled")
            wl = s.get("workloads", "low", NS)
            assert wl is not None and not admitted(wl)
            assert condition(wl, kobj.EVICTED) is None
            assert service_writes(s, "workloads/status", "low") == 0
            assert writes_of_kind(s, "evict") == 0
            withdrawn = ctrl.ctx.metrics.api_writes.labels("admit", "withdrawn")._value.get()
            assert withdrawn == 1
            assert low not in ctrl.cache.admitted and high in ctrl.cache.admitted
            assert any(w.key == low for q in ctrl.cache.queues.values() for w in q.workloads())

    asyncio.run(main())


def test_an_admission_a_newcomer_would_preempt_at_once_is_not_written(
    tmp_path: Path, backend: Any
) -> None:
    """``low``'s admission waits for the budget, and no cycle runs meanwhile (the
    back-pressure of the default ``decision_lead``); ``high`` arrives in the same queue
    and would preempt it at once. When ``low``'s turn comes its admission is rolled
    back unwritten, and the next cycle admits ``high``: no write for ``low`` at all,
    where admitting it would have cost an admission, an eviction and a re-admission."""

    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects(), controller=options(pending_delay=60)
        ) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            gate = shut(s)
            low, high = f"{NS}/low", f"{NS}/high"
            await create(s, standalone("low"))
            await eventually(
                lambda: low in ctrl.cache.admitted and gate.decisions_waiting,
                what="the admission of low is decided and waits for its turn",
            )
            await create(s, standalone("high", priority=100))
            await eventually(lambda: high in ctrl.cache.workloads, what="the service saw high")
            assert ctrl.stats["preempted"] == 0  # no cycle ran: the budget holds them back
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "high", NS)), what="high admitted")
            await eventually(lambda: not ctrl.applier.tasks, what="writes settled")
            wl = s.get("workloads", "low", NS)
            assert wl is not None and not admitted(wl)
            assert service_writes(s, "workloads/status", "low") == 0
            assert writes_of_kind(s, "evict") == 0
            assert ctrl.ctx.metrics.api_writes.labels("admit", "outranked")._value.get() == 1
            assert low not in ctrl.cache.admitted

    asyncio.run(main())


def test_a_newcomer_that_fits_beside_the_waiting_admission_changes_nothing(
    tmp_path: Path, backend: Any
) -> None:
    async def main() -> None:
        async with stack(
            tmp_path, backend=backend, objects=objects(cpu=8), controller=options(pending_delay=60)
        ) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            gate = shut(s)
            await create(s, standalone("low"))
            await eventually(lambda: gate.decisions_waiting, what="low's admission waits")
            await create(s, standalone("high", priority=100))
            await eventually(lambda: f"{NS}/high" in ctrl.cache.workloads, what="high seen")
            gate.open()
            for name in ("low", "high"):
                await eventually(
                    lambda name=name: admitted(s.get("workloads", name, NS)),
                    what=f"{name} admitted",
                )
            assert service_writes(s, "workloads/status", "low") == 1
            assert ctrl.ctx.metrics.api_writes.labels("admit", "outranked")._value.get() == 0

    asyncio.run(main())


def test_an_admission_a_newcomer_would_reclaim_from_is_not_written(
    tmp_path: Path, backend: Any
) -> None:
    """The cohort case, Kueue's harness's usual one: ``m``, borrowing ``a``'s unused
    quota for ``b``, waits for the budget; ``r`` arrives in ``a`` (reclaimWithinCohort
    Any), needs its own nominal quota and finds the cohort full: it would reclaim from
    ``b`` at once. ``m`` is rolled back unwritten and ``r`` admitted; ``m`` waits."""
    from tests.support.kube_harness import cluster_queue, flavor, local_queue, namespace

    reclaim = {"reclaimWithinCohort": "Any"}
    objs = [namespace(NS), flavor("f"),
            cluster_queue("a", {"f": {"cpu": 4}}, cohort="co", preemption=reclaim),
            cluster_queue("b", {"f": {"cpu": 4}}, cohort="co", preemption=reclaim),
            local_queue(NS, "lqa", "a"), local_queue(NS, "lqb", "b")]  # fmt: skip

    def in_queue(name: str, lq: str) -> dict[str, Any]:
        from tests.support.kube_harness import workload

        return workload(NS, name, queue=lq, pod_sets=[("main", 1, "4")])

    async def main() -> None:
        opts = options(pending_delay=60)
        async with stack(tmp_path, backend=backend, objects=objs, controller=opts) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await create(s, in_queue("own", "lqb"))
            await eventually(lambda: admitted(s.get("workloads", "own", NS)), what="own admitted")
            gate = shut(s)
            await create(s, in_queue("m", "lqb"))  # borrows a's 4 cpu
            await eventually(
                lambda: f"{NS}/m" in ctrl.cache.admitted and gate.decisions_waiting,
                what="m's admission is decided and waits",
            )
            await create(s, in_queue("r", "lqa"))
            await eventually(lambda: f"{NS}/r" in ctrl.cache.workloads, what="the service saw r")
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "r", NS)), what="r admitted")
            await eventually(lambda: not ctrl.applier.tasks, what="writes settled")
            assert service_writes(s, "workloads/status", "m") == 0
            assert writes_of_kind(s, "evict") == 0
            assert ctrl.ctx.metrics.api_writes.labels("admit", "outranked")._value.get() == 1
            assert admitted(s.get("workloads", "own", NS))

    asyncio.run(main())


def test_a_reclaimer_whose_queue_holds_some_of_its_quota_still_counts(
    tmp_path: Path, backend: Any
) -> None:
    """Kueue reclaims while the reclaimer's queue is under nominal, even when its own
    request would take it over (it preempts its own lower-priority workloads too):
    ``x`` holds 1 of ``a``'s 4 cpu, ``r`` (priority 100) needs 4, ``m`` borrows for
    ``b``. ``m``'s waiting admission is not written."""
    from tests.support.kube_harness import cluster_queue, flavor, local_queue, namespace, workload

    pre = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    objs = [namespace(NS), flavor("f"),
            cluster_queue("a", {"f": {"cpu": 4}}, cohort="co", preemption=pre),
            cluster_queue("b", {"f": {"cpu": 4}}, cohort="co", preemption=pre),
            local_queue(NS, "lqa", "a"), local_queue(NS, "lqb", "b")]  # fmt: skip

    def wl(name: str, lq: str, cpu: str, priority: int = 0) -> dict[str, Any]:
        return workload(NS, name, queue=lq, pod_sets=[("main", 1, cpu)], priority=priority)

    async def main() -> None:
        opts = options(pending_delay=60)
        async with stack(tmp_path, backend=backend, objects=objs, controller=opts) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            await create(s, wl("x", "lqa", "1"))
            await create(s, wl("own", "lqb", "4"))
            for name in ("x", "own"):
                await eventually(
                    lambda name=name: admitted(s.get("workloads", name, NS)), what=name
                )
            gate = shut(s)
            await create(s, wl("m", "lqb", "3"))  # borrows a's unused 3 cpu
            await eventually(
                lambda: f"{NS}/m" in ctrl.cache.admitted and gate.decisions_waiting,
                what="m's admission is decided and waits",
            )
            await create(s, wl("r", "lqa", "4", priority=100))
            await eventually(lambda: f"{NS}/r" in ctrl.cache.workloads, what="the service saw r")
            gate.open()
            await eventually(lambda: admitted(s.get("workloads", "r", NS)), what="r admitted")
            assert service_writes(s, "workloads/status", "m") == 0
            assert ctrl.ctx.metrics.api_writes.labels("admit", "outranked")._value.get() == 1

    asyncio.run(main())
