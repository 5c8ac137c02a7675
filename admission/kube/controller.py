"""The controller: informer events in, scheduling cycles, decisions out.

Every replica feeds informer events into the cache (:class:`.cachesync.CacheSync`) so
its webhooks see the live model. The Lease holder additionally runs
:meth:`Controller.run_leader`:

* workers drain a deduplicating work queue of Jobs and Workloads to reconcile
  (:mod:`.jobs`); every key is queued once when leadership starts (level-based
  resync), then on each event that touches it;
* the scheduler loop runs ``Scheduler.schedule()`` cycles while something changed (an
  event, a completion, a released quota), yielding to the event loop between cycles;
  each cycle's admissions and preemptions become write tasks (:mod:`.admit`) and its
  pending reasons go to the coalescing pending-status writer;
* a ticker releases requeue backoffs, checks waitForPodsReady timeouts, evicts noticed
  victims that are due (:mod:`.notices`, progress-aware preemption), samples usage
  for fair sharing, and writes queue status (:mod:`.status`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import assert_never

from admission.engine.cache import Cache
from admission.engine.decisions import CycleResult
from admission.engine.scheduler import Scheduler
from admission.integrations.framework.interface import Integration
from admission.kube import objects as kobj
from admission.kube.client.errors import ApiError
from admission.kube.client.ratelimit import ShareCredit
from admission.kube.client.resources import WORKLOADS
from admission.kube.client.rest import KubeClient
from admission.kube.control import work
from admission.kube.control.context import BOUND_PODS, TAS_PODS, Context, ControllerOptions
from admission.kube.control.metrics import Metrics
from admission.kube.control.work import WorkQueue
from admission.kube.control.workloads import owner_of
from admission.kube.control.writer import Writer
from admission.kube.reconcilers.admission_checks import CheckReconciler
from admission.kube.reconcilers.admit import Applier
from admission.kube.reconcilers.job_workloads import JobReconciler
from admission.kube.reconcilers.node_failures import NodeFailures, unhealthy_nodes
from admission.kube.reconcilers.notices import Notices
from admission.kube.reconcilers.pod_groups import PodGroupReconciler
from admission.kube.reconcilers.podsready import PodsReadyWatcher
from admission.kube.reconcilers.queue_status import StatusWriter
from admission.kube.reconcilers.stuck_pods import StuckPods
from admission.kube.reconcilers.topology_nodes import (
    TopologyUngater,
    TopologyWatch,
    admitted_by_tas,
)
from admission.kube.watch.cachesync import QUEUE_KINDS, CacheSync
from admission.kube.watch.informer import DELETED, Informer
from queues.model import HOLD_AND_DRAIN

log = logging.getLogger("quartermaster.kube.controller")

KIND_OF_PLURAL = {
    "resourceflavors": "ResourceFlavor",
    "clusterqueues": "ClusterQueue",
    "cohorts": "Cohort",
    "localqueues": "LocalQueue",
    "namespaces": "Namespace",
    "workloadpriorityclasses": "WorkloadPriorityClass",
    "priorityclasses": "PriorityClass",
    "topologies": "Topology",
    "admissionchecks": "AdmissionCheck",
}
assert set(KIND_OF_PLURAL.values()) == set(QUEUE_KINDS)
DECIDING_GRACE = 2.0  # seconds after a cycle's last decision the scheduler counts as busy
CYCLE_RETRY = 1.0
"""Seconds before a cycle that raised (the cache is left as it was) is tried again: the
webhooks, watches and status keep going meanwhile, and the next event may fix it."""


class Controller:
    def __init__(
        self,
        *,
        client: KubeClient,
        cache: Cache,
        make_scheduler: Callable[[Cache], Scheduler],
        informers: dict[str, Informer],
        metrics: Metrics,
        options: ControllerOptions,
        clock: Callable[[], float] = time.time,
        fair_sharing: bool = False,
        progress: bool = False,
    ) -> None:
        """``progress``: the configuration has progressAwarePreemption (checkpoints are
        read from jobs, pods and Workloads; notices are written)."""
        self.cache = cache
        self.clock = clock
        self.informers = informers
        self.options = options
        self.sync = CacheSync(cache, clock=clock, on_change=self.wake)
        kinds = [i for i in options.frameworks.integrations() if i.reconciler == "object"]
        self.writer = Writer(
            client,
            workloads=informers["workloads"],
            objects={i.resource.plural: informers[i.resource.plural] for i in kinds},
            sync=self.sync,
        )
        self._wake = asyncio.Event()
        self._cycle_idle = asyncio.Event()
        self._cycle_idle.set()
        self.leading = False
        self.queue = WorkQueue(base=options.retry_base, cap=options.retry_cap)
        client.share = ShareCredit(options.low_share)
        self.ctx = Context(
            client=client,
            informers=informers,
            writer=self.writer,
            cache=cache,
            sync=self.sync,
            wake=self.wake,
            enqueue=self.enqueue,
            cache_ready=self.cache_ready,
            deciding=self._deciding,
            options=options,
            clock=clock,
            metrics=metrics,
        )
        self.jobs = JobReconciler(self.ctx)
        self.podgroups = PodGroupReconciler(self.ctx)
        self.applier = Applier(self.ctx)
        self.checks = CheckReconciler(self.ctx)
        self.notices = Notices(self.ctx) if progress else None
        self.applier.notices = self.notices
        self.pods_ready = PodsReadyWatcher(self.ctx)
        self.status = StatusWriter(self.ctx, fair_sharing=fair_sharing)
        self.topology = TopologyWatch(self.ctx)
        self.tas_ungater = TopologyUngater(self.ctx, unhealthy=self.unhealthy_hosts)
        self.node_failures = NodeFailures(self.ctx, tas_pods=self.tas_ungater.pods)
        self.node_failures.notices = self.notices
        self.stuck_pods = StuckPods(self.ctx)
        self._last_decision = -math.inf  # monotonic time of the last cycle that decided
        self._lag_since_decision = 0.0  # the event loop's lag since then (see _deciding)
        self._seen = 0  # CacheSync.arrival_seq when the last cycle started
        self._make_scheduler = make_scheduler
        self.scheduler: Scheduler | None = None
        self.stats = {"cycles": 0, "admitted": 0, "preempted": 0}
        # Read-only watchers of every informer event after the cache saw it (the
        # dashboard): (resource plural, event, key, new, old).
        self.observers: list[Callable[[str, str, str, kobj.Obj | None, kobj.Obj | None], None]] = []
        for plural, inf in informers.items():
            inf.handler = self._observed(plural, self._handler(plural))

    def unhealthy_hosts(self, wkey: str) -> set[str]:
        """Hosts no pod of ``wkey`` is ungated onto: its failed nodes, and those its
        status lists as awaiting a replacement."""
        nf = self.node_failures
        failed = {nf.host_of(n) for n in nf.failed_nodes(wkey)}
        return failed | set(unhealthy_nodes(self.writer.workload(wkey)))

    # -- events (every replica) -------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def enqueue(self, item: work.Item) -> None:
        if self.leading and item.key:
            self.queue.add(self._item(item))

    def _item(self, item: work.Item) -> work.Item:
        """One work item per object: a pod group's Workload is the group itself, so
        its events and its pods' events never reconcile it twice at once (which would
        send every ungate and finalizer patch twice)."""
        if isinstance(item, work.Workload) and self.podgroups.owns(item.key):
            return work.PodGroup(item.key)
        return item

    def _observed(
        self, plural: str, handler: Callable[[str, str, kobj.Obj | None, kobj.Obj | None], None]
    ) -> Callable[[str, str, kobj.Obj | None, kobj.Obj | None], None]:
        def handle(event: str, key: str, new: kobj.Obj | None, old: kobj.Obj | None) -> None:
            handler(event, key, new, old)
            for observer in self.observers:
                observer(plural, event, key, new, old)

        return handle

    def _handler(self, plural: str) -> Callable[[str, str, kobj.Obj | None, kobj.Obj | None], None]:
        if plural == "workloads":
            return self._on_workload
        if plural == "pods":
            return self.podgroups.on_pod
        if plural == "nodes":
            return _both(self.topology.on_node, self.node_failures.on_node)
        if plural == BOUND_PODS:
            on_pod = _both(
                _both(self.topology.on_pod, self.node_failures.on_pod), self.stuck_pods.on_pod
            )
            if self.notices is not None:
                notices = self.notices

                def on_bound_pod(
                    event: str, key: str, new: kobj.Obj | None, old: kobj.Obj | None
                ) -> None:
                    on_pod(event, key, new, old)
                    notices.on_pod(key, None if event == DELETED else new, old)

                return on_bound_pod
            return on_pod
        if plural == TAS_PODS:
            return self.tas_ungater.on_pod
        for lower_kind, integ in self.jobs.kinds.items():
            if integ.resource.plural == plural:
                return self._on_object(lower_kind)
        referencing = [
            i for i in self.jobs.kinds.values() if plural in {r.plural for r in i.references}
        ]
        if referencing:
            return self._on_reference(referencing)
        kind = KIND_OF_PLURAL[plural]

        def on_queue_object(
            event: str, key: str, new: kobj.Obj | None, old: kobj.Obj | None
        ) -> None:
            self.sync.queue_object(kind, key, None if event == DELETED else new)
            if kind in ("ClusterQueue", "LocalQueue") and event != DELETED:
                self._drain_if_stopped(kind, key, new)
            if kind == "ClusterQueue":  # its checks may have changed
                for wkey in list(self.ctx.cache.by_cq.get(key, ())):
                    self.enqueue(work.Checks(wkey))

        return on_queue_object

    def _on_reference(
        self, referencing: list[Integration]
    ) -> Callable[[str, str, kobj.Obj | None, kobj.Obj | None], None]:
        """An object other objects take podSets from changed (a TrainingRuntime): their
        Workloads are built from it, so reconcile every object of the kinds that refer."""

        def on_reference(
            _event: str, _key: str, _new: kobj.Obj | None, _old: kobj.Obj | None
        ) -> None:
            for integ in referencing:
                for key in list(self.informers[integ.resource.plural].store):
                    self.enqueue(work.Job(integ.lower_kind, key))

        return on_reference

    def _drain_if_stopped(self, kind: str, key: str, obj: kobj.Obj | None) -> None:
        """``stopPolicy: HoldAndDrain`` on a queue: reconcile each workload it admitted,
        which evicts it (``jobs.drained_queue``)."""
        if ((obj or {}).get("spec") or {}).get("stopPolicy") != HOLD_AND_DRAIN:
            return
        cache = self.ctx.cache

        def drain() -> None:  # reads the cache: once the running cycle (if any) returned
            if kind == "ClusterQueue":
                keys = list(cache.by_cq.get(key, ()))
            else:
                ns, name = kobj.split_key(key)
                keys = [
                    k
                    for k in cache.admitted
                    if (wl := cache.workloads.get(k)) is not None
                    and wl.namespace == ns
                    and wl.queue_name == name
                ]
            for wkey in keys:
                self.enqueue(work.Workload(wkey))

        self.sync.apply(drain)

    def _on_workload(
        self, event: str, key: str, new: kobj.Obj | None, old: kobj.Obj | None
    ) -> None:
        if event == DELETED:
            self.writer.forget_object(WORKLOADS, key)
            self.applier.pending_written.pop(key, None)
            self.applier.failures.pop(key, None)
        else:
            self.writer.current(WORKLOADS, key)  # drops our copy once the informer caught up
        self.sync.workload(key, None if event == DELETED else new)
        obj = new or old
        owner = owner_of(self.ctx, obj) if obj is not None else None
        if owner is not None and owner[1]:
            self.ctx.job_index.add((owner[0].lower_kind, owner[1]), key)
            self.enqueue(work.Job(owner[0].lower_kind, owner[1]))
        for lower_kind, job in self.jobs.prebuilt.waiting_for(key):  # jobs naming it (prebuilt)
            self.enqueue(work.Job(lower_kind, job))
        if event != DELETED:
            self.enqueue(work.Workload(key))
            if self.checks.concerns(new):
                self.enqueue(work.Checks(key))
            if self.notices is not None:
                self.notices.on_workload(key, new)
            self.node_failures.on_workload(key, new)
            if admitted_by_tas(new) and not self.podgroups.owns(key):
                self.enqueue(work.TasUngate(key))

    def _on_object(
        self, lower_kind: str
    ) -> Callable[[str, str, kobj.Obj | None, kobj.Obj | None], None]:
        res = self.jobs.resources[lower_kind]

        def on_object(event: str, key: str, new: kobj.Obj | None, old: kobj.Obj | None) -> None:
            if event == DELETED:
                self.writer.forget_object(res, key)
                for wkey in self.ctx.job_index.pop((lower_kind, key)):
                    self.enqueue(work.Workload(wkey))
                self.jobs.prebuilt.forget((lower_kind, key))
                return
            self.writer.current(res, key)
            self.enqueue(work.Job(lower_kind, key))
            if self.notices is not None:
                self.notices.on_job(lower_kind, key, new)

        return on_object

    def _deciding(self) -> bool:
        """Decisions are being written, wait for the client's budget, or were made in
        the last ``DECIDING_GRACE`` seconds (between two cycles' writes the scheduler is
        still busy: a status pass that happens to fall in the gap is no exception).
        Seconds the event loop lagged do not count: on a starved machine the gaps
        between cycles grow by the lag, not because the scheduler ran out of work."""
        if self.applier.tasks:
            return True
        idle_for = time.monotonic() - self._last_decision - self._lag_since_decision
        if idle_for < DECIDING_GRACE:
            return True
        limiter = self.ctx.client.limiter
        return limiter is not None and limiter.decisions_waiting

    async def cache_ready(self) -> None:
        """Wait until no scheduling cycle is running (before reading the cache at length)."""
        while not self._cycle_idle.is_set():
            await self._cycle_idle.wait()

    def idle(self) -> bool:
        """Nothing queued, in flight or waiting to be scheduled (for tests and benchmarks)."""
        return (
            self.leading
            and self._cycle_idle.is_set()
            and not self._wake.is_set()
            and len(self.queue) == 0
            and not self.queue._processing
            and not self.sync.inflight
            and not self.applier.tasks
            and not self.applier.pending
            and all(q.active_count() == 0 for q in self.cache.queues.values())
        )

    # -- leader ---------------------------------------------------------------------------------

    async def run_leader(self) -> None:
        """Reconcile and schedule until cancelled (call only while holding the Lease)."""
        self.leading = True
        self.scheduler = self._make_scheduler(self.cache)
        self.status.tracker = self.scheduler.usage
        if self.notices is not None:
            self.notices.aware = self.scheduler.progress
        self.sync.flush_objects()
        for lower_kind, integ in self.jobs.kinds.items():
            for key in list(self.informers[integ.resource.plural].store):
                self.queue.add(work.Job(lower_kind, key))
        for key in list(self.informers["workloads"].store):
            self.queue.add(self._item(work.Workload(key)))
            if self.checks.concerns(self.writer.workload(key)):
                self.queue.add(work.Checks(key))
        for key in self.podgroups.group_keys():
            self.queue.add(work.PodGroup(key))
        tasks = [
            asyncio.create_task(self._worker(), name=f"worker-{i}")
            for i in range(self.options.workers)
        ]
        tasks += [
            asyncio.create_task(self.applier.pending_worker(), name=f"pending-{i}")
            for i in range(self.options.pending_writers)
        ]
        tasks.append(asyncio.create_task(self._ticker(), name="ticker"))
        tasks.append(asyncio.create_task(self._schedule_loop(), name="scheduler"))
        try:
            await asyncio.gather(*tasks)
        finally:
            self.leading = False
            self.queue.close()
            for t in [*tasks, *self.applier.tasks]:
                t.cancel()
            await asyncio.gather(*tasks, *self.applier.tasks, return_exceptions=True)

    async def _worker(self) -> None:
        while True:
            item = await self.queue.get()
            try:
                match item:
                    case work.Checks(key):
                        await self.checks.reconcile(key)
                    case work.NodeFailure(key):
                        await self.node_failures.handle(key)
                    case work.TasUngate(key):
                        await self.tas_ungater.reconcile(key)
                    case work.Job(lower_kind, key):
                        await self.jobs.reconcile(lower_kind, key)
                    case work.PodGroup(key):
                        await self.podgroups.reconcile(key)
                    case work.Workload(key) if self.podgroups.owns(key):
                        await self.podgroups.reconcile(key)
                    case work.Workload(key):
                        await self.jobs.reconcile_workload(key)
                    case _:
                        assert_never(item)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - retried with a per-key backoff
                self.queue.done(item)
                self._failed(item, err)
                continue
            self.queue.done(item)
            self.queue.forget(item)

    def _failed(self, item: work.Item, err: Exception) -> None:
        """Retry ``item`` after its backoff; say once per failure what the API refused.

        A 4xx other than 409/429 will fail again until something changes, so it gets an
        Event on the object (naming the API's message) besides the log line; the backoff
        (doubling per consecutive failure, capped) keeps a refused write from becoming
        a hot loop, while any event on the object still reconciles it at once."""
        delay = self.queue.add_after_failure(item, when=lambda: self.leading)
        status = err.status if isinstance(err, ApiError) else -1
        self.ctx.metrics.reconcile_errors.labels(item.label, str(status)).inc()
        log.warning(
            "reconciling %s %s failed (retry in %.2fs): %s", item.label, item.key, delay, err
        )
        if isinstance(err, ApiError) and 400 <= err.status < 500 and err.status not in (409, 429):
            obj = (
                self.jobs.current(item.lower_kind, item.key)
                if isinstance(item, work.Job)
                else self.writer.workload(item.key)
            )
            if obj is not None and self.queue.failures(item) == 1:
                self.ctx.record_event(obj, "Warning", "ApiRequestRefused", f"{err.call}: {err}")

    async def _schedule_loop(self) -> None:
        assert self.scheduler is not None
        sched = self.scheduler
        metrics = self.ctx.metrics
        while True:
            await self._wake.wait()
            if self.options.schedule_batch > 0:
                # let a burst of events (finishes releasing quota, arrivals) land first:
                # every capacity event requeues the parked heads of its cohort tree, so
                # one pass per burst instead of one per event saves most nominations
                await asyncio.sleep(self.options.schedule_batch)
            self._wake.clear()
            self.sync.flush_objects()
            while self.ctx.fence():
                await self._room_for_decisions()
                start = time.perf_counter()
                try:
                    result = await self._cycle(sched)
                except Exception:  # noqa: BLE001 - never the end of the service: retried
                    log.exception("scheduling cycle failed; retried in %.0f s", CYCLE_RETRY)
                    asyncio.get_running_loop().call_later(CYCLE_RETRY, self.wake)
                    break
                elapsed = time.perf_counter() - start
                self.stats["cycles"] += 1
                if result.heads:
                    outcome = "success" if result.admitted else "inadmissible"
                    metrics.admission_attempts.labels(outcome).inc()
                    metrics.attempt_duration.labels(outcome).observe(elapsed)
                for d in result.admitted:
                    self.stats["admitted"] += 1
                    self.applier.spawn(self.applier.admit(d, seen=self._seen))
                for p in result.preempted:
                    self.stats["preempted"] += 1
                    self.applier.spawn(self.applier.preempt(p))
                for key, status in result.pending.items():
                    self.applier.note_pending(key, status)
                await asyncio.sleep(0)  # let events and writes in between cycles
                if self.sync.flush_objects():
                    continue
                if not result.changed:
                    break

    async def _room_for_decisions(self) -> None:
        """Back-pressure: wait while the client's budget has more decisions to send than
        it can in ``decision_lead`` seconds (see ``TokenBucket.room_for_decisions``)."""
        limiter = self.ctx.client.limiter
        lead = self.options.decision_lead
        if limiter is not None and lead > 0:
            await limiter.room_for_decisions(max(1, math.ceil(limiter.qps * lead)))
            self.sync.flush_objects()

    def _note_unschedulable(self) -> None:
        """Workloads no cycle looks at (no LocalQueue / ClusterQueue, or an inactive
        ClusterQueue) still get their QuotaReserved=False reason."""
        cache = self.cache
        for key, status in list(cache.status.items()):
            if key in cache.unroutable and key not in self.applier.pending:
                self.applier.note_pending(key, status)
        for cq, status in cache.inactive.items():
            q = cache.queues.get(cq)
            for wl in q.workloads() if q is not None else ():
                if wl.key not in self.applier.pending:
                    self.applier.note_pending(wl.key, status)

    async def _cycle(self, sched: Scheduler) -> CycleResult:
        """One ``schedule()`` call; off the event loop (in a worker thread) when
        configured, so a long cycle never stalls watches, writes, webhooks or health
        checks. Meanwhile the cache is frozen: ``CacheSync`` queues every change and
        replays it when the cycle returns."""
        self._seen = self.sync.arrival_seq  # the arrivals this cycle sees
        if not self.options.cycle_in_thread:
            result = sched.schedule()
            self._assumed(result)
            return result
        loop = asyncio.get_running_loop()
        self.sync.pause()
        self._cycle_idle.clear()
        fut = loop.run_in_executor(None, sched.schedule)
        try:
            result = await asyncio.shield(fut)
            # before the queued events replay: they predate these admissions' writes
            self._assumed(result)
            return result
        except asyncio.CancelledError:
            await asyncio.wait([fut])  # never touch the cache while the thread does
            raise
        finally:
            self._cycle_idle.set()
            self.sync.resume()

    def _assumed(self, result: CycleResult) -> None:
        """The cycle's admissions are assumed in the cache: in flight until written.
        A cycle that decided counts as deciding from here on, before the status pass
        waiting for the cycle's end runs."""
        if result.admitted or result.preempted:
            self._last_decision = time.monotonic()
            self._lag_since_decision = 0.0
        for d in result.admitted:
            self.sync.inflight.add(d.workload.key)

    async def _ticker(self) -> None:
        last_status = 0.0
        usage = self.scheduler.usage if self.scheduler is not None else None
        sample_every = usage.sampling_interval() if usage is not None else None
        last_sample = self.clock()
        while True:
            slept = time.monotonic()
            await asyncio.sleep(self.options.tick)
            self._lag_since_decision += max(0.0, time.monotonic() - slept - self.options.tick)
            await self.cache_ready()
            now = self.clock()
            for key in self.sync.due_backoffs(now):
                self.sync.workload(key, self.writer.workload(key))
            if usage is not None and sample_every and now - last_sample >= sample_every:
                usage.sample(now)
                last_sample = now
                self.wake()
            try:
                await self.pods_ready.check()
            except Exception as err:  # noqa: BLE001 - next tick tries again
                log.warning("waitForPodsReady check failed: %s", err)
            self.node_failures.check()
            try:
                await self.stuck_pods.check()
            except Exception as err:  # noqa: BLE001 - next tick tries again
                log.warning("force-failing stuck pods failed: %s", err)
            if self.notices is not None:
                try:
                    await self.notices.check()
                except Exception as err:  # noqa: BLE001 - next tick tries again
                    log.warning("evicting noticed victims failed: %s", err)
            if time.monotonic() - last_status >= self.options.status_interval:
                last_status = time.monotonic()
                await self.cache_ready()
                self._note_unschedulable()
                try:
                    await self.status.refresh()
                except Exception as err:  # noqa: BLE001
                    log.warning("queue status refresh failed: %s", err)
                try:  # a failed refresh does not hold deleted queues' finalizers
                    await self.status.release_finalizers()
                except Exception as err:  # noqa: BLE001
                    log.warning("releasing queue finalizers failed: %s", err)


Handler = Callable[[str, str, kobj.Obj | None, kobj.Obj | None], None]


def _both(first: Handler, second: Handler) -> Handler:
    def handle(event: str, key: str, new: kobj.Obj | None, old: kobj.Obj | None) -> None:
        first(event, key, new, old)
        second(event, key, new, old)

    return handle
