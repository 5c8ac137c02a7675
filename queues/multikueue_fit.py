"""Where a gang fits among MultiKueue's workers: the decision of this project's
``fits`` dispatcher (``quartermaster.x-k8s.io/multikueue-dispatcher-fits``), as pure
functions on raw objects, so the live dispatcher (``admission.kube.multikueue``) and
``plan`` across clusters make the very same choice.

A worker's ClusterQueue is judged from its quota and ``status.flavorsReservation``:
the workers where the gang fits within nominal quota come first (the most room left
after it first), then those where it fits by borrowing (the least borrowed first); a
worker where it would need preemption is never chosen while one fits. Exactly one
worker is nominated when one fits; only when none does are all connected workers
nominated, as AllAtOnce would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from queues.quantity import QuantityError, parse_quantity

Obj = dict[str, Any]


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


def unfit(worker: str, why: str) -> Fit:
    """A worker that cannot take the gang (not connected, no such LocalQueue, ...)."""
    return Fit(worker, False, Fraction(0), Fraction(0), why)


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
        return unfit(worker, f"does not fit ClusterQueue {name} now without preemption")
    return best


def choose(fits: Sequence[Fit], connected: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """The workers to nominate and the reasons: the best worker where the gang fits
    (least borrowed, then most room left), else every connected worker, sorted."""
    good = sorted((f for f in fits if f.fits), key=lambda f: (f.borrowed, -f.room))
    reasons = tuple(f"{f.worker}: {f.why}" for f in fits)
    if good:
        return [good[0].worker], (f"nominated {good[0].worker}", *reasons)
    return sorted(connected), ("no worker fits now: nominated every connected worker", *reasons)
