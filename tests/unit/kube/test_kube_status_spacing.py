"""Queue statuses: a change of figures alone, or a queue starting to hold work, waits;
a queue going idle does not.

While work flows, a queue's counts and usage change with nearly every decision, and
under a trickle of arrivals it goes idle and busy again every second or so; each write
is a token an admission waits for. Those are written at most once in
``FIGURES_EVERY`` status intervals since the queue's last write, while what users and
tooling wait for (the queue gone idle; the Active condition) goes out at the next pass.
Here the spacing is made longer than the test once the first statuses are written, so
that a spaced write cannot happen at all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from admission.kube.reconcilers import queue_status
from tests.support.kube_harness import admitted, eventually, stack
from tests.support.write_economy import (
    NS,
    create,
    mark_finished,
    objects,
    options,
    service_writes,
    standalone,
)


def cq_status(s: Any) -> dict[str, Any]:
    return dict((s.get("clusterqueues", "cq") or {}).get("status") or {})


def lq_status(s: Any) -> dict[str, Any]:
    return dict((s.get("localqueues", "lq", NS) or {}).get("status") or {})


def test_figures_wait_for_their_spacing_and_going_idle_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=objects(cpu=8), controller=options()) as s:
            ctrl = s.service.controller
            assert ctrl is not None
            interval = ctrl.options.status_interval
            await create(s, standalone("a", cpu="2"))  # idle -> holding work: significant
            await eventually(lambda: cq_status(s).get("reservingWorkloads") == 1, what="a counted")
            await eventually(lambda: lq_status(s).get("reservingWorkloads") == 1, what="a in lq")
            monkeypatch.setattr(queue_status, "FIGURES_EVERY", 10_000)
            mark = len(s.server.requests)
            await create(s, standalone("b", cpu="2"))  # 1 -> 2 reserving: figures alone
            await eventually(lambda: admitted(s.get("workloads", "b", NS)), what="b admitted")
            await asyncio.sleep(interval * 5)  # five passes, none of them busy
            assert service_writes(s, "clusterqueues/status", "cq", since=mark) == 0
            assert service_writes(s, "localqueues/status", "lq", since=mark) == 0
            assert cq_status(s)["reservingWorkloads"] == 1
            # the metrics read the cache: current meanwhile
            assert ctrl.ctx.metrics.reserving.labels("cq")._value.get() == 2
            await mark_finished(s, "a")
            await mark_finished(s, "b")  # holding work -> idle: significant
            await eventually(
                lambda: cq_status(s).get("reservingWorkloads") == 0, what="cq says idle"
            )
            await eventually(
                lambda: lq_status(s).get("reservingWorkloads") == 0, what="lq says idle"
            )
            assert service_writes(s, "clusterqueues/status", "cq", since=mark) == 1
            await create(s, standalone("c", cpu="2"))  # idle -> holding work: spaced
            await eventually(lambda: admitted(s.get("workloads", "c", NS)), what="c admitted")
            await asyncio.sleep(interval * 5)
            assert service_writes(s, "clusterqueues/status", "cq", since=mark) == 1
            assert cq_status(s)["reservingWorkloads"] == 0

    asyncio.run(main())
