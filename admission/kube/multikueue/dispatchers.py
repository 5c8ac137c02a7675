"""Which workers get a copy of a Workload (``status.nominatedClusterNames``).

Kueue's three dispatchers (``multiKueue.dispatcherName``):

* ``AllAtOnce`` (the default): every connected worker of the check's MultiKueueConfig;
* ``Incremental``: ``stepSize`` more workers (3 by default), in the config's order, each
  round of 5 minutes (Kueue's ``incrementalDispatcherRoundTimeout``) while none admitted
  the workload (pkg/controller/workloaddispatcher/incrementaldispatcher.go);
* External (any other name): a controller of the user's writes
  ``nominatedClusterNames``; the service creates copies only on the workers it names.

And this project's ``fits`` dispatcher (:data:`admission.config.multikueue.FITS`): it
reads each worker's ClusterQueue (found through the worker's LocalQueue of the
Workload's queue name) and nominates the one worker where the gang fits now with the
least borrowing, never one where it would need preemption while one fits
(:mod:`queues.multikueue_fit`, which ``plan`` across clusters runs too). Each choice is
explained in a ``MultiKueue`` event on the Workload, which ``why`` shows.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from admission.config.multikueue import ALL_AT_ONCE, FITS, INCREMENTAL, MultiKueueSettings
from admission.kube.client.errors import ApiError
from admission.kube.client.resources import CLUSTER_QUEUES, LOCAL_QUEUES
from admission.kube.client.rest import Obj
from admission.kube.multikueue.dispatch import Group
from queues.multikueue_fit import Fit, choose, fit_in, requests_of, unfit

log = logging.getLogger("quartermaster.kube.multikueue")

Nomination = tuple[list[str] | None, float | None, tuple[str, ...]]
"""(workers to hold copies, None: wait; seconds to look again; reasons)."""
Patch = Callable[[Group, Obj], Awaitable[Obj | None]]


class Dispatchers:
    """The configured dispatcher, with the per-workload rounds of Incremental."""

    def __init__(self, settings: MultiKueueSettings, patch: Patch, clock: Callable[[], float]):
        self.settings = settings
        self.patch = patch
        self.clock = clock
        self.rounds: dict[str, float] = {}  # Workload key -> its round's start (Incremental)

    def forget(self, key: str) -> None:
        self.rounds.pop(key, None)

    async def nominate(self, group: Group) -> Nomination:
        name = self.settings.dispatcher
        current = list((group.local.get("status") or {}).get("nominatedClusterNames") or [])
        if name == ALL_AT_ONCE:
            return await self._set(group, sorted(group.remotes), current, None, ())
        if name == INCREMENTAL:
            return await self._incremental(group, current)
        if name == FITS:
            return await self._fits(group, current)
        return current, None, ()  # an external dispatcher names them

    async def _set(
        self,
        group: Group,
        names: list[str],
        current: list[str],
        after: float | None,
        reasons: tuple[str, ...],
    ) -> Nomination:
        if set(names) != set(current):
            if await self.patch(group, {"nominatedClusterNames": names or None}) is None:
                return None, None, reasons
        return names, after, reasons

    async def _incremental(self, group: Group, current: list[str]) -> Nomination:
        now = self.clock()
        start = self.rounds.get(group.key)
        round_ = self.settings.incremental_round
        if start is not None and now - start <= round_:
            return current, round_ - (now - start), ()
        rest = [w for w in group.workers if w not in current]
        if not rest:
            return current, None, ()
        names = current + rest[: self.settings.step_size]
        result = await self._set(group, names, current, round_, ())
        if result[0] is not None:
            self.rounds[group.key] = now
        return result

    async def _fits(self, group: Group, current: list[str]) -> Nomination:
        request = requests_of(group.local)
        queue = str((group.local.get("spec") or {}).get("queueName") or "")
        fits: list[Fit] = []
        for worker in group.workers:
            remote = group.remotes.get(worker)
            if remote is None:
                fits.append(unfit(worker, "is not connected"))
                continue
            try:
                lq = await remote.client.get(LOCAL_QUEUES, queue, namespace=group.namespace)
                cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
                cq = await remote.client.get(CLUSTER_QUEUES, cq_name)
            except ApiError as err:
                why = f"has no LocalQueue {queue}" if err.not_found else f"answered {err.status}"
                fits.append(unfit(worker, why))
                continue
            fits.append(fit_in(worker, cq, request))
        names, reasons = choose(fits, list(group.remotes))
        if set(names) != set(current):
            return await self._set(group, names, current, 5.0, reasons)
        return names, 5.0, ()
