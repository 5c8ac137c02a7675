"""Which workers get a copy of a Workload (``status.nominatedClusterNames``).

Kueue's three dispatchers (``multiKueue.dispatcherName``):

* ``AllAtOnce`` (the default): every connected worker of the check's MultiKueueConfig;
* ``Incremental``: ``stepSize`` more workers (3 by default), in the config's order, each
  round of 5 minutes (Kueue's ``incrementalDispatcherRoundTimeout``) while none admitted
  the workload (pkg/controller/workloaddispatcher/incrementaldispatcher.go);
* External (any other name): a controller of the user's writes
  ``nominatedClusterNames``; the service creates copies only on the workers it names.

And this project's ``fits`` dispatcher (:data:`admission.config.multikueue.FITS`): from
each worker's ClusterQueue (found through the worker's LocalQueue of the Workload's
queue name) and its ``status.flavorsReservation``, the workers where the gang fits now
within nominal quota come first (the most room left after it first), then those where
it fits by borrowing (the least borrowed first); a worker where it would need
preemption is never chosen while one fits. Exactly one worker is nominated when one
fits; only when none does are all of them nominated, as AllAtOnce would. Each choice
is explained in a ``MultiKueue`` event on the Workload, which ``why`` shows.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from admission.config.multikueue import ALL_AT_ONCE, FITS, INCREMENTAL, MultiKueueSettings
from admission.kube.client.errors import ApiError
from admission.kube.client.rest import CLUSTER_QUEUES, LOCAL_QUEUES, Obj
from admission.kube.multikueue.dispatch import Group
from queues.quantity import QuantityError, parse_quantity

log = logging.getLogger("quartermaster.kube.multikueue")

Nomination = tuple[list[str] | None, float | None, tuple[str, ...]]
"""(workers to hold copies, None: wait; seconds to look again; reasons)."""
Patch = Callable[[Group, Obj], Awaitable[Obj | None]]


def requests_of(wl: Obj) -> dict[str, Fraction]:
    """The Workload's total requests: each podSet's count times its pod's requests."""
    total: dict[str, Fraction] = {}
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        count = int(ps.get("count") or 0)
        spec = (ps.get("template") or {}).get("spec") or {}
        for c in spec.get("containers") or []:
            for name, value in (((c.get("resources") or {}).get("requests")) or {}).items():
                try:
                    total[name] = total.get(name, Fraction(0)) + count * parse_quantity(value)
                except QuantityError:
                    continue
    return total


@dataclass(frozen=True, slots=True)
class Fit:
    """How a gang fits one worker's ClusterQueue now."""

    worker: str
    fits: bool  # within nominal quota, or by borrowing
    borrowed: Fraction  # how much of its request is beyond the free nominal quota
    room: Fraction  # free nominal quota left after it (the smallest share of a resource)
    why: str


def _quantities(items: Iterable[Mapping[str, Any]], key: str) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for r in items:
        try:
            out[str(r.get("name"))] = parse_quantity(r.get(key) or 0)
        except QuantityError:
            continue
    return out


def fit_in(worker: str, cq: Obj, request: Mapping[str, Fraction]) -> Fit:
    """The best flavor of ClusterQueue ``cq`` for ``request``, judged from its quota and
    ``status.flavorsReservation`` (borrowing is possible only with a cohort, up to
    ``borrowingLimit`` when one is set, and is no promise the cohort has it free)."""
    spec, status = cq.get("spec") or {}, cq.get("status") or {}
    reserved = {
        f.get("name"): _quantities(f.get("resources") or [], "total")
        for f in status.get("flavorsReservation") or status.get("flavorsUsage") or []
    }
    cohort = bool(spec.get("cohortName"))
    best: Fit | None = None
    for group in spec.get("resourceGroups") or []:
        covered = set(group.get("coveredResources") or [])
        if not set(request) & covered:
            continue
        for flavor in group.get("flavors") or []:
            fname = str(flavor.get("name"))
            nominal = _quantities(flavor.get("resources") or [], "nominalQuota")
            limits = {
                str(r.get("name")): r.get("borrowingLimit") for r in flavor.get("resources") or []
            }
            used = reserved.get(fname, {})
            fits, borrowed, room = True, Fraction(0), None
            for res, want in request.items():
                if res not in covered:
                    continue
                free = nominal.get(res, Fraction(0)) - used.get(res, Fraction(0))
                if want <= free:
                    share = (free - want) / nominal[res] if nominal.get(res) else Fraction(0)
                    room = share if room is None else min(room, share)
                    continue
                extra = want - max(free, Fraction(0))
                limit = limits.get(res)
                if not cohort or (limit is not None and extra > parse_quantity(limit)):
                    fits = False
                    break
                borrowed += extra
                room = Fraction(0)
            if not fits:
                continue
            cq_name = (cq.get("metadata") or {}).get("name")
            how = "by borrowing" if borrowed else "within nominal quota"
            why = f"fits in flavor {fname} of ClusterQueue {cq_name} {how}"
            cand = Fit(worker, True, borrowed, room or Fraction(0), why)
            if best is None or (cand.borrowed, -cand.room) < (best.borrowed, -best.room):
                best = cand
    if best is None:
        name = (cq.get("metadata") or {}).get("name")
        return Fit(worker, False, Fraction(0), Fraction(0),
                   f"does not fit ClusterQueue {name} now without preemption")  # fmt: skip
    return best


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
                fits.append(Fit(worker, False, Fraction(0), Fraction(0), "is not connected"))
                continue
            try:
                lq = await remote.client.get(LOCAL_QUEUES, queue, namespace=group.namespace)
                cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
                cq = await remote.client.get(CLUSTER_QUEUES, cq_name)
            except ApiError as err:
                why = f"has no LocalQueue {queue}" if err.not_found else f"answered {err.status}"
                fits.append(Fit(worker, False, Fraction(0), Fraction(0), why))
                continue
            fits.append(fit_in(worker, cq, request))
        good = sorted((f for f in fits if f.fits), key=lambda f: (f.borrowed, -f.room))
        reasons = tuple(f"{f.worker}: {f.why}" for f in fits)
        if good:
            names = [good[0].worker]
            reasons = (f"nominated {good[0].worker}", *reasons)
        else:
            names = sorted(group.remotes)
            reasons = ("no worker fits now: nominated every connected worker", *reasons)
        if set(names) != set(current):
            return await self._set(group, names, current, 5.0, reasons)
        return names, 5.0, ()
