"""A victim whose admission is still being written (issue 13, item 17).

The scheduler assumes an admission in the cache before its status write lands, so the
next cycle may choose that workload as a victim while the write is in flight. The
eviction must then wait for the admission to land (and evict what it admitted): it
must never read the pre-admission copy of the Workload — which, for a workload evicted
once before, still says ``Evicted=True`` — as "already evicted, quota released" and
release the assumed charge while the admission lands. That gave the capacity to the
preemptor as well: two 4-cpu workloads holding quota in a 4-cpu ClusterQueue (the
long invariant run's over-admissions, in both modes).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from admission.kube import objects as kobj
from admission.kube.client import resources as k
from queues.api.conditions import is_true
from tests.support.kube_harness import Stack, admitted, eventually, stack
from tests.support.kube_invariants import InvariantChecker, quotas_of
from tests.support.write_economy import NS, mark_finished, objects, standalone


class HeldAdmission:
    """The service's client, with the next admission write of one Workload held on
    the wire (sent, no answer yet) until :meth:`release`."""

    def __init__(self, s: Stack, name: str) -> None:
        client = s.service.client
        assert client is not None
        self.held = asyncio.Event()
        self._go = asyncio.Event()
        real = client.patch

        async def patch(res: Any, obj_name: str, body: Any, **kw: Any) -> Any:
            status = body.get("status") if isinstance(body, dict) else None
            if (
                res is k.WORKLOADS
                and obj_name == name
                and kw.get("subresource") == "status"
                and isinstance(status, dict)
                and status.get("admission")
                and not self.held.is_set()
            ):
                self.held.set()
                await self._go.wait()
            return await real(res, obj_name, body, **kw)

        client.patch = patch  # type: ignore[method-assign]

    def release(self) -> None:
        self._go.set()


def test_a_victim_whose_admission_is_in_flight_is_evicted_after_it_lands(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=objects()) as s:
            checker = InvariantChecker(quotas_of(objects()[2:3])).install(s.server)
            ctrl = s.service.controller
            assert ctrl is not None
            await s.user.create(k.WORKLOADS, standalone("w"), namespace=NS)
            await eventually(lambda: admitted(s.get("workloads", "w", NS)), what="w admitted")
            # a first preemption: w is evicted (standalone: cleared in the same write)
            # and keeps Evicted=True while it waits in the queue again
            await s.user.create(k.WORKLOADS, standalone("h1", priority=100), namespace=NS)
            await eventually(lambda: admitted(s.get("workloads", "h1", NS)), what="h1 admitted")
            w = s.get("workloads", "w", NS)
            assert w is not None and not kobj.has_quota(w) and is_true(w, kobj.EVICTED)
            hold = HeldAdmission(s, "w")
            await mark_finished(s, "h1")  # w is admitted again: its write is held on the wire
            await eventually(lambda: hold.held.is_set(), what="w's admission is being written")
            preempted = ctrl.stats["preempted"]
            await s.user.create(k.WORKLOADS, standalone("h2", priority=100), namespace=NS)
            await eventually(
                lambda: ctrl.stats["preempted"] > preempted, what="w chosen as h2's victim"
            )
            await asyncio.sleep(0.5)  # a buggy eviction has long released w by now
            assert f"{NS}/w" in ctrl.cache.admitted, "w's assumed admission was released"
            assert not admitted(s.get("workloads", "h2", NS)), "h2 took w's capacity"
            hold.release()
            await eventually(lambda: admitted(s.get("workloads", "h2", NS)), what="h2 admitted")
            w = s.get("workloads", "w", NS)
            assert w is not None and not kobj.has_quota(w), "w was evicted after it landed"
            assert checker.violations == []

    asyncio.run(main())
