"""Applying a scheduling cycle's decisions to the API.

* **Admission** — the scheduler has already *assumed* the admission in the cache (the
  next cycle sees the quota taken). The Workload's status gets ``QuotaReserved`` /
  ``Admitted`` and ``status.admission``, pinned to the resourceVersion the decision was
  computed from. A ``409`` re-reads the Workload: if it is still pending with the same
  spec (generation) the write is retried once on the new version, otherwise the
  assumption is rolled back (``Cache.forget``). A ``429`` (or 5xx) with ``Retry-After``
  is sent again by the client after the wait, the assumption held meanwhile
  (``KubeClient._send``); a 429 that outlasts those retries was not applied and rolls
  back. A transport error or a 5xx is ambiguous (the write may have landed), so the
  Workload is re-read before deciding; a definite failure rolls back. Only after the
  write succeeded is the Job started.
* **Preemption** — the victim gets ``Evicted`` + ``Preempted``; the job reconciler stops
  its Job and releases the quota once the Job is inactive. A victim whose own admission
  is still waiting for its turn at the rate limit (assumed by an earlier cycle, never
  sent) is not admitted and then evicted: that admission is withdrawn, no request is
  sent for either, and the quota is released when its turn would have come.
* **Pending** — ``QuotaReserved=False`` with the engine's reason and message, written
  only when it differs from what the object says, coalesced per workload (the latest
  reason wins) and never for a workload that is admitted or being admitted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from admission.engine.decisions import AdmittedDecision, PreemptedDecision
from admission.engine.queue_manager import PendingStatus
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.ratelimit import low_priority
from admission.kube.control import work
from admission.kube.control.context import Context, Obj
from admission.kube.control.workloads import PreemptionNotices, enqueue_owner, evict
from admission.kube.control.writer import Abandon
from queues.api.conditions import condition, is_true
from queues.backoff import BackoffPolicy
from queues.model import FlavorResource, Workload
from queues.times import rfc3339_seconds

log = logging.getLogger("quartermaster.kube.admit")

VERIFY_ATTEMPTS = 5
YIELD_POLL = 0.2  # seconds between looks at the budget while pending reasons yield
FAILURE_BACKOFF = BackoffPolicy(base=1.0, cap=60.0)
# quartermaster_api_writes_total{kind} of pending-status writes: a new reason, or only
# its message refreshed (the numbers in it moved)
PENDING_REASON = "pending"
PENDING_MESSAGE = "pending-message"
# quartermaster_api_writes_total{kind="admit",result} of an admission never sent: the
# workload was chosen as a victim while its write waited for its turn (see preempt)
WITHDRAWN = "withdrawn"
# ... and of one that a newcomer would preempt at once (see _outranked)
OUTRANKED = "outranked"


class Applier:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.pending: dict[str, tuple[PendingStatus, float]] = {}  # key -> (status, due)
        self._pending_ready = asyncio.Event()
        self.failures: dict[str, int] = {}  # key -> refused admission writes in a row
        self._refused: dict[str, bool] = {}  # key -> the last admission write was refused (4xx)
        self.pending_written: dict[str, float] = {}  # key -> when its reason was last written
        self.tasks: set[asyncio.Task[None]] = set()
        self.notices: PreemptionNotices | None = None  # progress-aware preemption (serve wires it)
        # admissions being written that an eviction waits for (see preempt)
        self._settling: dict[str, asyncio.Event] = {}
        # admissions whose write was composed (its turn came): a victim among them is
        # evicted once it lands; one not composed yet is withdrawn instead (see preempt)
        self._sending: set[str] = set()
        self._withdrawn: set[str] = set()
        self._outranked_keys: set[str] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("decision task failed", exc_info=task.exception())

    # -- admission -------------------------------------------------------------------------

    async def admit(self, d: AdmittedDecision, *, seen: int | None = None) -> None:
        """Write the admission ``d``; ``seen``: ``CacheSync.arrival_seq`` when the cycle
        that decided it started (None: arrivals since are not looked at)."""
        key = d.workload.key
        try:
            await self._admit(d, seen)
        finally:
            self._sending.discard(key)
            self._withdrawn.discard(key)
            self._outranked_keys.discard(key)
            settled = self._settling.pop(key, None)
            if settled is not None:
                settled.set()

    async def _settled(self, key: str) -> None:
        """Return once the admission of ``key`` being written (if any) has landed or
        been rolled back."""
        if key in self.ctx.sync.inflight:
            await self._settling.setdefault(key, asyncio.Event()).wait()

    async def _admit(self, d: AdmittedDecision, seen: int | None) -> None:
        ctx = self.ctx
        key = d.workload.key
        ok = False
        try:
            ok = await self._write_admission(key, d, seen)
        except Exception:  # noqa: BLE001 - never leave an assumption behind
            log.exception("admission of %s failed", key)
        finally:
            ctx.sync.settle(key)  # and what the informer delivered meanwhile
        if not ok:
            result = (
                WITHDRAWN
                if key in self._withdrawn
                else OUTRANKED
                if key in self._outranked_keys
                else "rolled-back"
            )
            ctx.metrics.api_writes.labels("admit", result).inc()
            refused = self._refused.pop(key, False)
            ctx.sync.apply(lambda: self._roll_back(key, refused=refused))
            ctx.wake()
            return
        self.failures.pop(key, None)
        self.pending_written.pop(key, None)
        cq = d.cluster_queue
        wl = d.workload
        written = ctx.writer.workload(key)
        admitted = written is not None and is_true(written, kobj.ADMITTED)
        log.info("%s %s in ClusterQueue %s: QuotaReserved on %s",
                 "admitted" if admitted else "reserved quota for", key, cq, _flavors(d))  # fmt: skip
        ctx.metrics.quota_reserved_total.labels(cq).inc()
        ctx.metrics.api_writes.labels("admit", "ok").inc()
        if admitted:
            ctx.metrics.admitted_total.labels(cq).inc()
            if wl.admission_time is not None:
                ctx.metrics.admission_wait.labels(cq).observe(
                    max(0.0, wl.admission_time - wl.queue_order_time)
                )
            if d.checks:  # Kueue reports a zero wait when every check was Ready already
                ctx.metrics.admission_checks_wait.labels(cq).observe(0.0)
        if written is not None:
            ctx.record_event(
                written, "Normal", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}"
            )
            if admitted:
                ctx.record_event(written, "Normal", "Admitted", f"Admitted by ClusterQueue {cq}")
                enqueue_owner(ctx, key, written)  # start its job, ungate its group's pods
            else:  # its AdmissionChecks' controllers act on the reservation
                ctx.enqueue(work.Checks(key))

    def _roll_back(self, key: str, *, refused: bool) -> None:
        """Undo the assumption. Only a refusal (a 4xx other than 409/429: a webhook's
        denial, a validation error) counts toward parking the workload: a transient
        error (5xx, 429, a conflict, a lost connection) must not cost it its place
        in the queue, or a lower-priority workload would take its quota."""
        ctx = self.ctx
        if key in ctx.cache.admitted and key not in ctx.cache.evicting:
            ctx.cache.forget(key)
        latest = ctx.writer.workload(key)
        ctx.sync.wl_sigs.pop(key, None)
        ctx.sync.workload(key, latest)
        if not refused:
            return
        n = self.failures[key] = self.failures.get(key, 0) + 1
        if (
            n > 2
            and latest is not None
            and key in ctx.cache.workloads
            and key not in ctx.cache.admitted
        ):
            # repeatedly refused (e.g. denied by a webhook): back off, don't hammer
            ctx.cache.park(key)
            ctx.sync.backoff[key] = ctx.clock() + FAILURE_BACKOFF.delay(n - 2)

    async def _write_admission(self, key: str, d: AdmittedDecision, seen: int | None) -> bool:
        ctx = self.ctx
        if not ctx.fence():
            log.warning("admission of %s not written: this replica no longer leads", key)
            return False
        obj = ctx.writer.workload(key)
        if obj is None:
            return False
        gen = kobj.generation(obj)
        now = ctx.clock()

        def compute(w: Obj) -> Obj:
            # checked again once this write's turn at the rate limit has come: the lease
            # may have run out while it waited, and what is sent now a follower sends
            if not ctx.fence():
                log.warning("admission of %s not written: this replica no longer leads", key)
                raise Abandon
            if key in self._withdrawn:
                raise Abandon  # chosen as a victim while it waited (see preempt)
            if (
                kobj.has_quota(w)
                or kobj.is_finished(w)
                or not kobj.is_active(w)
                or kobj.deleting(w)
            ):
                raise Abandon
            if kobj.generation(w) != gen:
                raise Abandon  # the spec changed since the decision was made
            if seen is not None and self._outranked(d, seen):
                self._outranked_keys.add(key)
                raise Abandon
            self._sending.add(key)
            return kobj.admission_status(w, d.admission, now=now, checks=d.checks)

        try:
            new = await ctx.writer.update_status(key, compute, attempts=2)
        except Abandon:
            return False
        except ApiError as err:
            if err.conflict or err.throttled or not err.retryable:
                # a 429 that outlasted the client's Retry-After retries was not applied
                # either: roll back without a read, and without counting a refusal
                log.info("admission of %s not written: %s", key, err)
                if not (err.conflict or err.throttled) and err.status != 0:
                    self._refused[key] = True
                return False
            return await self._verify(key, d, err)
        if new is None or not kobj.has_quota(new):
            return False
        # the spec this admission was decided on: a later spec change is re-read
        ctx.sync.admitted_gen[key] = gen
        return True

    def _outranked(self, d: AdmittedDecision, seen: int) -> bool:
        """Whether a workload that arrived after the cycle that decided ``d`` started (it
        could not see it) would preempt ``d`` at once: pending, in ``d``'s ClusterQueue
        and above ``d`` under its ``withinClusterQueue`` policy, or in another
        ClusterQueue of its cohort tree that may reclaim from ``d``'s
        (``reclaimWithinCohort``; ``d``'s queue borrows, the newcomer's is under nominal:
        Kueue's queueUnderNominalInResourcesNeedingPreemption), and short of quota
        beside ``d`` in a flavor ``d`` takes. Writing ``d`` would then cost an
        admission, an eviction and a second admission; rolled back instead (its token
        refunded), the next cycle decides on what is known now, the newcomer first, as
        a cycle started a moment later would have. Not while a cycle runs: the cache is
        the cycle's then."""
        ctx = self.ctx
        if ctx.sync.paused:
            return False
        cache = ctx.cache
        usage = cache.usage_of.get(d.workload.key)
        if not usage:
            return False
        for cq in cache.same_tree(d.cluster_queue):
            arrivals = ctx.sync.arrivals.get(cq)
            if not arrivals or arrivals[-1][0] <= seen:
                continue
            for seq, new in reversed(arrivals):
                if seq <= seen:
                    break
                if cache.workloads.get(new.key) is not new or new.key in cache.admitted:
                    continue  # changed since (a newer entry follows), gone, or admitted
                if self._would_preempt(new, cq, d, usage):
                    return True
        return False

    def _would_preempt(
        self, new: Workload, cq: str, d: AdmittedDecision, usage: dict[FlavorResource, int]
    ) -> bool:
        """Whether ``new``, pending in ``cq``, would have to preempt and could take ``d``
        (charged ``usage`` in its ClusterQueue)."""
        cache = self.ctx.cache
        spec = cache.cluster_queues.get(cq)
        node = cache.tree.queues.get(cq)
        mine_node = cache.tree.queues.get(d.cluster_queue)
        if spec is None or node is None or mine_node is None:
            return False
        same = cq == d.cluster_queue
        policy = (
            spec.preemption.within_cluster_queue if same else spec.preemption.reclaim_within_cohort
        )
        if not _ranks_above(policy, new, d.workload):
            return False
        for fr in usage:
            need = _requested(new, fr[1])
            if need <= 0 or node.available(fr) >= need:
                continue  # fits beside d (borrowing included), or needs none of it
            if same:
                return True
            if mine_node.usage.get(fr, 0) > mine_node.nominal(fr) and (
                node.usage.get(fr, 0) < node.nominal(fr)
            ):
                return True  # d's queue borrows it, the newcomer's is under nominal
        return False

    async def _verify(self, key: str, d: AdmittedDecision, err: ApiError) -> bool:
        """An ambiguous failure: read the Workload back to learn whether the write landed."""

        def landed(obj: Obj) -> bool:
            if not kobj.has_quota(obj):
                return False
            return (kobj.admission_of(obj) or {}).get("clusterQueue") == d.cluster_queue

        found = await self.ctx.writer.read_back(key, landed, attempts=VERIFY_ATTEMPTS)
        if found is not None:
            return found
        log.warning(
            "admission of %s: cannot tell whether it was written (%s); keeping it", key, err
        )
        return True  # holding quota we may not have is safe; over-admitting is not

    # -- preemption ------------------------------------------------------------------------

    async def preempt(self, d: PreemptedDecision) -> None:
        ctx = self.ctx
        key = d.workload.key
        if key in ctx.sync.inflight and key not in self._sending:
            # A victim whose admission an earlier cycle decided and whose write still
            # waits for its turn: the API never saw it admitted, nothing runs on it.
            # Withdraw the admission (no request for it, none for an eviction); when
            # its turn comes the assumption is rolled back, releasing the quota the
            # preemptor waits for, and the workload is queued again in its place.
            self._withdrawn.add(key)
            await self._settled(key)
            return
        # A victim chosen while its own admission is being sent: evict what lands.
        # The Workload read before it lands holds no quota, so an eviction decided on
        # it would write nothing and the admission would land after it, holding quota
        # the preemptor is counting on.
        await self._settled(key)
        if not ctx.fence():
            log.warning(
                "preemption of %s not written: this replica no longer leads", d.workload.key
            )
            ctx.sync.apply(lambda: self._not_preempted(d.workload.key))
            return
        notices = self.notices
        if notices is not None and d.notice_deadline is not None:
            await notices.notify(d)  # evicted later, by notices.Notices.check
            return
        if notices is not None:  # with the requeue policy after preemption
            ok = await notices.evict(d.workload.key, message=d.message, reason=d.reason)
        else:
            ok = await evict(
                ctx,
                d.workload.key,
                reason="Preempted",
                message=d.message,
                preempted_reason=d.reason,
            )
        if ok:
            ctx.metrics.preempted_total.labels(d.cluster_queue, d.reason).inc()
        else:
            ctx.wake()

    def _not_preempted(self, key: str) -> None:
        """A later cycle may choose (and notice) it again."""
        self.ctx.cache.unmark_evicting(key)
        self.ctx.cache.progress.released(key)

    # -- pending statuses --------------------------------------------------------------------

    def note_pending(self, key: str, status: PendingStatus) -> None:
        """Write this reason once it has held for ``pending_delay`` (most heads that miss
        a cycle are admitted moments later). A newer status with the same reason only
        replaces the message: the hold is measured from when the reason first appeared,
        so a head re-evaluated every few milliseconds is still written; a new reason
        starts a new hold."""
        prev = self.pending.get(key)
        if prev is not None and prev[0].reason == status.reason:
            self.pending[key] = (status, prev[1])
            return
        self.pending.pop(key, None)
        self.pending[key] = (status, time.monotonic() + self.ctx.options.pending_delay)
        self._pending_ready.set()

    async def pending_worker(self) -> None:
        with low_priority():  # pending reasons wait behind admissions and evictions
            await self._pending_loop()

    async def _pending_loop(self) -> None:
        ctx = self.ctx
        while True:
            if not self.pending:
                self._pending_ready.clear()
                await self._pending_ready.wait()
                continue
            key = next(iter(self.pending))  # the oldest reason noted
            status, due = self.pending[key]
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            if self._yield_to_decisions(due):
                await asyncio.sleep(YIELD_POLL)
                continue
            del self.pending[key]
            if key in ctx.sync.inflight or key in ctx.cache.admitted:
                continue
            if key not in ctx.cache.workloads and key not in ctx.cache.unroutable:
                continue
            last = self.pending_written.get(key)
            recent = last is not None and time.monotonic() - last < ctx.options.pending_refresh
            sent = [""]  # what the last compute asked to write (PENDING_REASON, ...)

            def compute(
                w: Obj, key: str = key, status: PendingStatus = status, recent: bool = recent,
                sent: list[str] = sent,
            ) -> Obj | None:  # fmt: skip
                body, sent[0] = self._pending_body(w, key, status, recent=recent)
                return body

            try:
                after = await ctx.writer.update_status(key, compute, attempts=2)
                if after is not None and sent[0]:
                    self.pending_written[key] = time.monotonic()
                    ctx.metrics.api_writes.labels(sent[0], "ok").inc()
            except ApiError as err:
                ctx.metrics.api_writes.labels("pending", "error").inc()
                log.debug("pending status of %s not written: %s", key, err)
                if err.retryable:
                    await asyncio.sleep(0.1)

    def _yield_to_decisions(self, due: float) -> bool:
        """Whether a due pending reason waits while admissions and evictions are being
        written: a head admitted meanwhile needs no reason at all, and a request a
        reason makes is one a decision waits for. Meanwhile reasons take the
        low-priority share of the budget (``low_share`` of the decisions' requests);
        the oldest waits at most ``pending_max_hold`` since it was noted."""
        opts = self.ctx.options
        if not self.ctx.deciding():
            return False
        noted = due - opts.pending_delay
        if time.monotonic() - noted >= opts.pending_max_hold:
            return False
        return not self.ctx.client.share.take()

    def _pending_body(
        self, w: Obj, key: str, status: PendingStatus, *, recent: bool
    ) -> tuple[Obj | None, str]:
        """The pending-status write for ``w``, decided once its turn at the rate limit
        came, and its kind (``PENDING_REASON``, ``PENDING_MESSAGE``); (None, "") when
        there is nothing to write. A newer reason noted meanwhile replaces the one
        taken from the queue, so one wait never leads to two writes."""
        ctx = self.ctx
        newer = self.pending.pop(key, None)
        if newer is not None:
            status = newer[0]
        if kobj.has_quota(w) or kobj.is_finished(w) or key in ctx.cache.admitted:
            return None, ""  # admitted (or being admitted) while it waited
        if key in ctx.sync.inflight:
            return None, ""
        now = ctx.clock()
        kind = PENDING_REASON
        current = condition(w, kobj.QUOTA_RESERVED) or {}
        if current.get("status") == "False" and current.get("reason") == status.reason:
            # only the message moved: at most every pending_refresh per workload, counting
            # from our last pending write or from the eviction that set the condition,
            # never while decisions wait (the reason the user sees is still right), and
            # only with the low-priority share the decisions earned: on a starved machine
            # the gaps between decisions grow long, and refreshes that followed the time
            # instead of the work grew with them
            since = rfc3339_seconds(current.get("lastTransitionTime"))
            if (
                recent
                or (since is not None and now - since < ctx.options.pending_refresh)
                or ctx.deciding()
                or not ctx.client.share.take()
            ):
                return None, ""
            kind = PENDING_MESSAGE
        body = kobj.pending_status(w, reason=status.reason, message=status.message, now=now)
        return body, kind


def _ranks_above(policy: str, new: Workload, mine: Workload) -> bool:
    """Whether ``new`` may preempt ``mine`` under ``policy`` (withinClusterQueue, or
    reclaimWithinCohort from another ClusterQueue)."""
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return new.priority > mine.priority
    if policy == "LowerOrNewerEqualPriority":
        return new.priority > mine.priority or (
            new.priority == mine.priority and new.queue_order_time < mine.queue_order_time
        )
    return False


def _requested(wl: Workload, resource: str) -> int:
    """What ``wl`` asks of ``resource`` in all, its pods' requests times their counts."""
    return sum(ps.count * ps.requests.get(resource, 0) for ps in wl.pod_sets)


def _flavors(d: AdmittedDecision) -> str:
    """The flavors of an admission, for its log line: ``gpu=a100, cpu=on-demand``."""
    chosen: dict[str, str] = {}
    for psa in d.admission.pod_set_assignments:
        for resource, flavor in psa.flavors.items():
            chosen.setdefault(resource, flavor)
    return ", ".join(f"{r}={f}" for r, f in chosen.items()) or "no resources"
