"""ClusterQueue / LocalQueue status and the queue-level metrics.

Computed from the cache (the same numbers the scheduler works with) and written as a
``/status`` merge patch only when it differs from what was last written, at most once
per ``status_interval`` per queue — a busy cluster changes usage every few
milliseconds, and rewriting every queue on each change would be a write storm. A change
of figures alone (counts, usage), and a queue starting to hold work, wait
``FIGURES_EVERY`` intervals since the queue's last write; the Active condition and a
queue gone idle go at the next pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from admission.engine.admission_checks import waiting_on
from admission.engine.cache import Cache
from admission.engine.usage import UsageTracker
from admission.engine.vocabulary import PendingReason
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.ratelimit import low_priority
from admission.kube.client.resources import CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS
from admission.kube.control.context import Context
from queues.api.labels import RESOURCE_IN_USE
from queues.quantity import format_quantity

log = logging.getLogger("quartermaster.kube.status")
BUSY_PASS_EVERY = 5  # while decisions wait for the budget: one status pass in this many
STATUS_WRITERS = 4
"""Queue status writes of one pass in flight at once: one at a time, a pass is bound by
the API's latency (20 ms a write caps it at the 50 QPS of Kueue's budget, and a busy
server answers slower), not by the client's budget, which each write still waits for."""
FIGURES_EVERY = 5
"""A queue whose figures alone changed (counts, usage), or that started holding work, is
written at most once in this many status intervals: while work flows they change
with nearly every decision, and each write is a token an admission waits for. The
metrics and ``why`` read the cache, so they stay current meanwhile."""


Obj = dict[str, Any]


def _flavor_usage(cq_spec: Any, usage: dict[tuple[str, str], int], node: Any) -> list[Obj]:
    out: list[Obj] = []
    for group in cq_spec.resource_groups:
        for fq in group.flavors:
            resources = []
            for r in group.covered_resources:
                used = usage.get((fq.name, r), 0)
                entry: Obj = {"name": r, "total": format_quantity(r, used)}
                if node is not None:
                    borrowed = max(0, used - node.nominal((fq.name, r)))
                    entry["borrowed"] = format_quantity(r, borrowed)
                resources.append(entry)
            out.append({"name": fq.name, "resources": resources})
    return out


def cluster_queue_status(cache: Cache, name: str, *, fair_sharing: bool) -> Obj:
    """What ``status`` of ClusterQueue ``name`` should say now."""
    spec = cache.cluster_queues[name]
    node = cache.tree.queues.get(name)
    q = cache.queues.get(name)
    admitted = cache.by_cq.get(name, {})
    usage = node.usage if node is not None else {}
    inactive = cache.inactive.get(name)
    flavors = _flavor_usage(spec, usage, node)
    status: Obj = {
        "pendingWorkloads": len(q) if q is not None else 0,
        "reservingWorkloads": len(admitted),
        "admittedWorkloads": len(admitted) - _waiting_on_checks(cache, admitted),
        "flavorsReservation": flavors,
        "flavorsUsage": flavors,
        "conditions": [
            {
                "type": "Active",
                "status": "False" if inactive else "True",
                "reason": cache.inactive_reasons.get(name) or _cq_reason(inactive),
                "message": inactive.message if inactive else "Can admit new workloads",
            }
        ],
    }
    if fair_sharing and node is not None:
        from queues.fairshare import dominant_resource_share

        status["fairSharing"] = {"weightedShare": dominant_resource_share(node).rounded()}
    return status


def invalid_cluster_queue_status(error: str) -> Obj:
    """The status of a ClusterQueue whose spec the service cannot use (e.g. a quantity
    the API server accepts but no exact arithmetic can hold): inactive, saying why."""
    return {
        "pendingWorkloads": 0,
        "reservingWorkloads": 0,
        "admittedWorkloads": 0,
        "conditions": [
            {
                "type": "Active",
                "status": "False",
                "reason": "InvalidSpec",
                "message": f"Can't admit new workloads: {error}",
            }
        ],
    }


def _waiting_on_checks(cache: Cache, keys: Any) -> int:
    """How many of the workloads ``keys`` (holding quota) wait on AdmissionChecks."""
    return sum(1 for k in keys if (wl := cache.workloads.get(k)) is not None and waiting_on(wl))


def _cq_reason(inactive: Any) -> str:
    if inactive is None:
        return "Ready"
    if inactive.reason == PendingReason.SUSPENDED:
        return "Stopped"
    return "FlavorNotFound" if "flavor" in inactive.message else "Unknown"


def local_queue_statuses(cache: Cache) -> dict[str, Obj]:
    """``status`` of every LocalQueue (pending / reserving counts, flavor usage)."""
    pending: dict[str, int] = {}
    for q in cache.queues.values():
        for wl in q.workloads():
            k = f"{wl.namespace}/{wl.queue_name}"
            pending[k] = pending.get(k, 0) + 1
    for wl in cache.unroutable.values():
        k = f"{wl.namespace}/{wl.queue_name}"
        pending[k] = pending.get(k, 0) + 1
    reserving: dict[str, int] = {}
    waiting: dict[str, int] = {}  # reserving, waiting on AdmissionChecks
    usage: dict[str, dict[tuple[str, str], int]] = {}
    for key in cache.admitted:
        held = cache.workloads.get(key)
        if held is None:
            continue
        k = f"{held.namespace}/{held.queue_name}"
        reserving[k] = reserving.get(k, 0) + 1
        if waiting_on(held):
            waiting[k] = waiting.get(k, 0) + 1
        acc = usage.setdefault(k, {})
        for fr, v in cache.usage_of.get(key, {}).items():
            acc[fr] = acc.get(fr, 0) + v
    out: dict[str, Obj] = {}
    for key, lq in cache.local_queues.items():
        spec = cache.cluster_queues.get(lq.cluster_queue)
        flavors = _flavor_usage(spec, usage.get(key, {}), None) if spec is not None else []
        active = spec is not None and lq.cluster_queue not in cache.inactive
        reason = (
            "Ready"
            if active
            else ("ClusterQueueDoesNotExist" if spec is None else "ClusterQueueIsInactive")
        )
        if lq.stop_policy != "None":
            active, reason = False, "Stopped"
        out[key] = {
            "pendingWorkloads": pending.get(key, 0),
            "reservingWorkloads": reserving.get(key, 0),
            "admittedWorkloads": reserving.get(key, 0) - waiting.get(key, 0),
            "flavorsReservation": flavors,
            "flavorsUsage": flavors,
            "conditions": [
                {
                    "type": "Active",
                    "status": "True" if active else "False",
                    "reason": reason,
                    "message": "Can submit new workloads" if active else f"LocalQueue is {reason}",
                }
            ],
        }
    return out


def _natural_quantity(resource: str, amount: float) -> str:
    return format_quantity(resource, round(amount * 1000) if resource == "cpu" else round(amount))


def usage_extras(
    tracker: UsageTracker | None, cache: Cache
) -> tuple[dict[str, Obj], dict[str, Obj]]:
    """Per ClusterQueue ``fairSharing`` additions (credits) and per LocalQueue
    ``fairSharing.admissionFairSharingStatus`` (consumed resources), when configured."""
    cqs: dict[str, Obj] = {}
    lqs: dict[str, Obj] = {}
    if tracker is None:
        return cqs, lqs
    if tracker.credits_cfg is not None:
        for name in cache.cluster_queues:
            cqs[name] = {"credit": round(tracker.credit_of_node(name), 3)}
    if tracker.afs is not None:
        for key, lq in cache.local_queues.items():
            if tracker.afs_enabled(lq.cluster_queue):
                consumed = tracker.consumed.get(key, {})
                lqs[key] = {
                    "admissionFairSharingStatus": {
                        "consumedResources": {
                            r: _natural_quantity(r, v) for r, v in sorted(consumed.items())
                        },
                        "lastUpdate": kobj.rfc3339(tracker.last_sample),
                    }
                }
    return cqs, lqs


def cache_invalid_cluster_queues(ctx: Context) -> list[str]:
    """ClusterQueues present in the API whose spec was refused by the model."""
    out = []
    for label in ctx.sync.invalid:
        kind, _, name = label.partition(" ")
        if kind == "ClusterQueue" and ctx.informers["clusterqueues"].get(name) is not None:
            out.append(name)
    return out


def significant(old: Obj, new: Obj) -> bool:
    """A queue status change that is written even while the budget is spent on
    decisions: the Active condition changed, or the queue went from holding no work
    (nothing pending, nothing reserving) to holding some, or back (what users and
    tooling wait for: Kueue's own performance harness stops when every ClusterQueue
    says nothing is pending or reserving).

    Whole-queue transitions, not each count's: in a cluster of a thousand busy queues
    a queue's pending count goes 0 -> 1 -> 0 with every arrival admitted a cycle later
    while its reserving count stays above zero; writing each of those flips would cost
    a status write for a good share of the arrivals, a token each that an admission
    waits for (the figures are in docs/benchmarks.md)."""
    if old.get("conditions") != new.get("conditions"):
        return True
    return _holds_work(old) != _holds_work(new)


def _holds_work(status: Obj) -> bool:
    return bool(status.get("pendingWorkloads")) or bool(status.get("reservingWorkloads"))


class StatusWriter:
    """Writes ClusterQueue and LocalQueue status: only what changed, newest first.

    Each write takes its turn at the client's rate limit (low priority, behind
    admissions and evictions) *before* it is composed: when the turn comes after a
    long wait, the statuses are recomputed (at most once per ``status_interval``), so
    a queue's waiting write is replaced by its newer status, and a status that went
    back to what the API already holds is not written at all (the token is refunded).
    """

    def __init__(self, ctx: Context, *, fair_sharing: bool) -> None:
        self.ctx = ctx
        self.fair_sharing = fair_sharing
        self.tracker: UsageTracker | None = None
        self.written: dict[tuple[str, str], Obj] = {}
        self.written_at: dict[tuple[str, str], float] = {}  # monotonic time of each write
        self._known_cqs: dict[str, list[tuple[str, str]]] = {}
        self._offset = 0  # round-robin start, so a write budget reaches every queue
        self._budget = 0
        self._put_off = 0  # passes skipped in a row while decisions waited for tokens

    def desired(self) -> dict[tuple[str, str], Obj]:
        """What every queue's status should say now (read the cache when no cycle runs)."""
        ctx = self.ctx
        cache = ctx.cache
        out: dict[tuple[str, str], Obj] = {}
        cq_extra, lq_extra = usage_extras(self.tracker, cache)
        for name in sorted(cache.cluster_queues):
            if ctx.informers["clusterqueues"].get(name) is not None:
                try:
                    status = cluster_queue_status(cache, name, fair_sharing=self.fair_sharing)
                except Exception as err:  # noqa: BLE001 - one queue never freezes the others
                    log.warning("status of ClusterQueue %s not computed: %s", name, err)
                    out[("cq", name)] = invalid_cluster_queue_status(
                        f"its status cannot be computed: {err}"
                    )
                    continue
                if name in cq_extra:
                    status["fairSharing"] = {**status.get("fairSharing", {}), **cq_extra[name]}
                out[("cq", name)] = status
        for name in sorted(cache_invalid_cluster_queues(ctx)):
            out[("cq", name)] = invalid_cluster_queue_status(
                ctx.sync.invalid[f"ClusterQueue {name}"]
            )
        for key, status in sorted(local_queue_statuses(cache).items()):
            if ctx.informers["localqueues"].get(key) is not None:
                if key in lq_extra:
                    status["fairSharing"] = lq_extra[key]
                out[("lq", key)] = status
        return out

    async def refresh(self) -> None:
        """Write changed queue statuses (within the budget) and update the queue metrics.

        While decisions are written or wait for the client's budget (``ctx.deciding``:
        the budget and the CPU go to admissions and evictions), a queue's status is a
        luxury: passes run only every
        ``BUSY_PASS_EVERY`` intervals and write what the low-priority share of the budget
        affords (``low_share``: the cost follows the decisions, not the time they take),
        the changes that matter first (:func:`significant`: the Active condition, or the
        queue started or stopped holding work). When nothing is being decided, every
        first status, Active condition and queue gone idle is written at the next pass,
        the rest once ``FIGURES_EVERY`` intervals passed since the queue's last write."""
        ctx = self.ctx
        cache = ctx.cache
        await ctx.cache_ready()
        self._metrics()
        busy = ctx.deciding()
        if busy and self._put_off < BUSY_PASS_EVERY - 1:
            self._put_off += 1
            return
        self._put_off = 0
        want = self.desired()
        taken = time.monotonic()
        todo = self._due(want)
        if busy:
            todo = self._while_deciding(todo, want)
        elif todo:
            todo = self._when_idle(todo, want)
        self._budget = ctx.options.status_budget
        queue = iter(enumerate(todo))
        stopped_at: list[int] = []

        async def writer() -> None:
            # one of STATUS_WRITERS: the items of ``todo`` in order, each written once
            nonlocal want, taken
            for i, item in queue:
                if self._budget <= 0:
                    stopped_at.append(i)
                    return
                with low_priority():  # queue status waits behind admissions and evictions
                    async with ctx.client.turn():
                        if time.monotonic() - taken >= ctx.options.status_interval:
                            await ctx.cache_ready()  # the wait was long: write what is true now
                            want, taken = self.desired(), time.monotonic()
                        status = want.get(item)
                        if status is not None and self.written.get(item) != status:
                            await self._write_now(*item, status)

        await asyncio.gather(*(writer() for _ in range(min(STATUS_WRITERS, len(todo)))))
        if stopped_at:
            self._offset += min(stopped_at)
        for k in [k for k in self.written if k[1] not in cache.cluster_queues and k[0] == "cq"]:
            del self.written[k]
            self.written_at.pop(k, None)

    def _due(self, want: dict[tuple[str, str], Obj]) -> list[tuple[str, str]]:
        """The queues whose status differs from what was written and may be written
        now: a first status, a changed Active condition and a queue gone idle at once;
        a queue that started holding work, or whose figures alone changed, once
        ``FIGURES_EVERY`` intervals have passed since that queue's last write (under a
        trickle of arrivals a queue goes idle and busy again every second or so, and
        what users and tooling wait for is the idle state at the end of its work)."""
        now = time.monotonic()
        spacing = FIGURES_EVERY * self.ctx.options.status_interval
        out = []
        for k, status in want.items():
            old = self.written.get(k)
            if old == status:
                continue
            if (
                old is None
                or old.get("conditions") != status.get("conditions")
                or (_holds_work(old) and not _holds_work(status))
                or now - self.written_at.get(k, float("-inf")) >= spacing
            ):
                out.append(k)
        return out

    def _when_idle(
        self, todo: list[tuple[str, str]], want: dict[tuple[str, str], Obj]
    ) -> list[tuple[str, str]]:
        """The order changed queues are written in when nothing is being decided: the
        significant changes first, ClusterQueues before LocalQueues (what users and
        tooling wait for: Kueue's performance harness stops once every ClusterQueue
        says it is idle, when many queues go idle at once), the rest after them;
        round-robin within each group (the budget reaches every queue)."""
        self._offset %= len(todo)
        rotated = todo[self._offset :] + todo[: self._offset]

        def urgency(k: tuple[str, str]) -> int:
            old = self.written.get(k)
            if old is None or significant(old, want[k]):
                return 0 if k[0] == "cq" else 1
            return 2

        return sorted(rotated, key=urgency)  # stable: the rotation holds within a group

    def _while_deciding(
        self, todo: list[tuple[str, str]], want: dict[tuple[str, str], Obj]
    ) -> list[tuple[str, str]]:
        """The changed queues written while decisions are: every significant change
        (a queue's first status, its Active condition, idle <-> holding work: bounded by
        the queues' transitions, one write per queue per busy pass at most, and what
        users and tooling wait for), then the least recently written others as far as
        the low-priority share affords.

        Significant changes must not depend on the share: thousands of due pending
        reasons spend it the moment it is earned, and a queue whose status never says
        it holds work looks idle for as long as the budget stays saturated (Kueue's
        harness then stops its run at once)."""
        out: list[tuple[str, str]] = []
        others: list[tuple[str, str]] = []
        for k in todo:
            old = self.written.get(k)
            (out if old is None or significant(old, want[k]) else others).append(k)
        share = self.ctx.client.share
        for k in sorted(others, key=lambda k: self.written_at.get(k, 0.0)):
            if not share.take():
                break
            out.append(k)
        return out

    async def _write_now(self, kind: str, key: str, status: Obj) -> None:
        res = CLUSTER_QUEUES if kind == "cq" else LOCAL_QUEUES
        stored = self.ctx.informers[res.plural].get(key) or {}
        current = stored.get("status") or {}
        if (
            all(current.get(f) == v for f, v in status.items() if f != "conditions")
            and [
                {k: c.get(k) for k in ("type", "status", "reason", "message")}
                for c in current.get("conditions") or []
            ]
            == status["conditions"]
        ):
            self.written[(kind, key)] = status
            return
        body = dict(status)
        body["conditions"] = [
            {**c, "lastTransitionTime": _ltt(current, c, self.ctx.clock())}
            for c in status["conditions"]
        ]
        ns, name = kobj.split_key(key) if kind == "lq" else (None, key)
        self._budget -= 1
        try:
            await self.ctx.client.patch(
                res, name, {"status": body}, namespace=ns, subresource="status"
            )
        except ApiError as err:
            if not err.not_found:
                log.debug("status of %s %s not written: %s", res.kind, key, err)
            return
        self.written[(kind, key)] = status
        self.written_at[(kind, key)] = time.monotonic()

    async def release_finalizers(self) -> None:
        """A deleted ClusterQueue keeps ``kueue.x-k8s.io/resource-in-use`` until no
        workload holds its quota; a deleted ResourceFlavor until no ClusterQueue uses it."""
        ctx = self.ctx
        cache = ctx.cache
        await ctx.cache_ready()
        used_flavors = {
            fq.name
            for cq in cache.cluster_queues.values()
            for g in cq.resource_groups
            for fq in g.flavors
        }
        for res, busy in (
            (CLUSTER_QUEUES, lambda name: bool(cache.by_cq.get(name))),
            (RESOURCE_FLAVORS, lambda name: name in used_flavors),
        ):
            for name, obj in list(ctx.informers[res.plural].store.items()):
                finalizers = list(kobj.meta(obj).get("finalizers") or [])
                if not kobj.deleting(obj) or RESOURCE_IN_USE not in finalizers or busy(name):
                    continue
                rest = [f for f in finalizers if f != RESOURCE_IN_USE]
                body = {"metadata": {"finalizers": rest, "resourceVersion": kobj.rv(obj)}}
                try:
                    await ctx.client.patch(res, name, body)
                except ApiError as err:
                    if not (err.conflict or err.not_found):
                        log.warning("removing the finalizer of %s %s: %s", res.kind, name, err)

    def _metrics(self) -> None:
        m = self.ctx.metrics
        cache = self.ctx.cache
        for name in list(self._known_cqs):
            if name not in cache.cluster_queues:
                m.forget_cluster_queue(name, self._known_cqs.pop(name))
        for name, spec in cache.cluster_queues.items():
            try:
                self._queue_metrics(name, spec)
            except Exception as err:  # noqa: BLE001 - one queue never freezes the others
                log.warning("metrics of ClusterQueue %s not updated: %s", name, err)

    def _queue_metrics(self, name: str, spec: Any) -> None:
        """The gauges of ClusterQueue ``name``."""
        m = self.ctx.metrics
        cache = self.ctx.cache
        q = cache.queues.get(name)
        node = cache.tree.queues.get(name)
        active = q.active_count() if q is not None else 0
        m.pending.labels(name, "active").set(active)
        m.pending.labels(name, "inadmissible").set(len(q) - active if q is not None else 0)
        n = len(cache.by_cq.get(name, {}))
        m.reserving.labels(name).set(n)
        m.admitted_active.labels(name).set(n - _waiting_on_checks(cache, cache.by_cq.get(name, {})))
        inactive = name in cache.inactive
        for s in ("pending", "active", "terminated"):
            m.cq_status.labels(name, s).set(1 if s == ("pending" if inactive else "active") else 0)
        frs = [
            (fq.name, r)
            for g in spec.resource_groups
            for fq in g.flavors
            for r in g.covered_resources
        ]
        self._known_cqs[name] = frs
        for flavor, r in frs:
            used = node.usage.get((flavor, r), 0) if node is not None else 0
            scale = 1000.0 if r == "cpu" else 1.0
            m.resource_usage.labels(name, flavor, r).set(used / scale)
            m.resource_reservation.labels(name, flavor, r).set(used / scale)
            nominal = node.nominal((flavor, r)) if node is not None else 0
            m.nominal_quota.labels(name, flavor, r).set(nominal / scale)
        if self.fair_sharing and node is not None:
            from queues.fairshare import dominant_resource_share

            m.weighted_share.labels(name).set(dominant_resource_share(node).rounded())


def _ltt(current: Obj, cond: Obj, now: float) -> str:
    for c in current.get("conditions") or []:
        if c.get("type") == cond["type"] and c.get("status") == cond["status"]:
            return str(c.get("lastTransitionTime") or kobj.rfc3339(now))
    return kobj.rfc3339(now)
