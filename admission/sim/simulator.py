"""The simulator: the service's scheduler driven by a discrete-event simulated clock.

``quartermaster simulate`` and the ``sim-*`` benchmarks run this. It is a *driver*,
like ``plan`` and the Kubernetes controller: it owns no scheduling logic. It feeds a
``Cache`` the events of a scenario and applies the decisions of the very same
``Scheduler`` (built by ``Config.make_scheduler``) that ``serve`` runs.

Events, in simulated time (integer microseconds from the scenario start; the engine
sees ``epoch + t`` float seconds through its injectable clock):

* **arrival** — the workload is created (its queue-order timestamp is its arrival)
  and queued;
* **cycle** — one ``Scheduler.schedule()`` call (one head per ClusterQueue). Its
  decisions are stamped with the cycle's start time and it costs ``cycle_latency``:
  the next cycle starts no earlier than that. After any event batch at time t a cycle
  runs at ``max(t, end of the previous cycle)``; cycles then run back-to-back while
  they change something (admit, preempt, or move a head); when a cycle changes
  nothing the simulator waits for the next event;
* **finish** — ``runtime`` after its (last) admission the workload finishes and its
  quota is released (``Cache.finish``);
* **eviction completed** — a preempted workload releases its quota
  ``eviction_latency`` after the preemption (``Cache.evicted``; 0 = at once, before
  the next cycle) and is requeued with its original timestamp; once readmitted it runs
  its whole runtime again (Kueue's runner semantics);
* **sample** — every ``sample_interval`` the per-ClusterQueue usage and pending count
  (and cohort credits, when configured) are recorded for the report's charts and
  ``on_sample(now)`` is called;
* **usage tick** — when the configuration turns on admission fair sharing or cohort
  credits, the scheduler's usage tracker is sampled every ``usageSamplingInterval``
  (``scheduler.usage.sample(now)``), as the service's sampling loop does.

Two options charge the costs a real service pays (``sim-*`` benchmarks use both kinds
of figure; the default is the pure policy clock above):

* ``cycle_cost="measured"`` — each cycle costs the CPU time ``schedule()`` actually
  took (``time.thread_time``), not ``cycle_latency``: a policy that makes cycles slow
  makes the simulated cluster wait for it, as the service's would. The cyclic garbage
  collector is held off during the call and runs when it returns: its passes walk the
  simulator's own records as well as the engine's objects, and whichever cycle
  happened to trigger one would be charged for all of it. The figure is CPU time, so
  a busy machine still inflates it (contended caches and cores), though not by the
  time the process waits;
* ``api=ApiModel(qps, burst, latency)`` — every decision is a write through a
  client-side token bucket that lands after a latency (:mod:`admission.sim.api_model`).

Options for large runs (``quartermaster simulate`` uses the first two):

* ``copy_workloads=False`` — the engine works on the scenario's own ``Workload``
  objects instead of a fresh copy of each (the copies are a large part of a big run's
  memory); the scenario is spent by the run (its workloads end as the run left them),
  so run it only once;
* ``samples=False`` — no per-ClusterQueue series (``SimResult.samples`` stays empty;
  only the report draws them, and with thousands of queues they cost more CPU than
  the rest of the simulator); ``on_sample`` is still called on its interval;
* ``max_cycles`` / ``cpu_limit`` (CPU seconds of the run) stop a run early: the
  result says so (``truncated``, ``stopped_by``, the simulated time reached, how many
  workloads had arrived), and its queues are settled at the time it stopped.

If cycles keep "changing something" for ``livelock_cycles`` cycles in a row with
nothing arriving or finishing, the engine is going round in circles (mutual
preemption, say); the simulator then waits for the next event instead of spinning
forever and reports how often it had to (``livelock_breaks``).

Events at the same instant are applied in a fixed order (arrivals in scenario order,
then finishes and evictions in the order they were scheduled) before a cycle at that
instant, so a run is a pure function of the scenario and the configuration.
"""

from __future__ import annotations

import gc
import heapq
import time
from array import array
from collections.abc import Callable

from admission.config.dra import accounting
from admission.config.schema import Config
from admission.drivers.dra_inputs import catalog
from admission.engine.cache import Cache
from admission.engine.vocabulary import PendingReason
from admission.sim.api_model import ApiModel, TokenBucket
from admission.sim.progress import SIM_SOURCE, LossReport, checkpoint_offset, units
from admission.sim.records import (
    Samples,
    SimResult,
    WorkloadRecord,
    queue_record,
    workload_records,
)
from admission.sim.scenario import US_PER_S, Scenario
from admission.sim.sharing import EMPTY

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated t=0 as the engine sees it
DEFAULT_CYCLE_LATENCY = 0.001
DEFAULT_MAX_CYCLES = 5_000_000
DEFAULT_LIVELOCK_CYCLES = 10_000

_FINISH, _EVICTED, _ADMITTED, _CHECKPOINT, _DEADLINE, _REQUEUE = 0, 1, 2, 3, 4, 5
CYCLE_COSTS = ("fixed", "measured")
STOP_LIMITS = ("maxCycles", "cpuLimit")


class Simulator:
    """One run of a scenario through the engine. Use ``run()`` once."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        config: Config | None = None,
        cycle_latency: float = DEFAULT_CYCLE_LATENCY,
        eviction_latency: float = 0.0,
        sample_interval: float | None = None,
        max_cycles: int = DEFAULT_MAX_CYCLES,
        livelock_cycles: int = DEFAULT_LIVELOCK_CYCLES,
        epoch: float = EPOCH,
        on_sample: Callable[[float], None] | None = None,
        progress: Callable[[int, int, int], None] | None = None,
        cycle_cost: str = "fixed",
        api: ApiModel | None = None,
        copy_workloads: bool = True,
        samples: bool = True,
        cpu_limit: float | None = None,
    ) -> None:
        if cycle_cost not in CYCLE_COSTS:
            raise ValueError(f"cycle_cost must be one of {', '.join(CYCLE_COSTS)}")
        if cycle_latency <= 0:
            raise ValueError("cycle_latency must be positive (simulated time must move)")
        if eviction_latency < 0:
            raise ValueError("eviction_latency must not be negative")
        if max_cycles < 1:
            raise ValueError("max_cycles must be at least 1")
        if cpu_limit is not None and not cpu_limit > 0:
            raise ValueError("cpu_limit must be a positive number of CPU seconds")
        self.scenario = scenario
        self.config = config or Config()
        self.cycle_us = max(1, round(cycle_latency * US_PER_S))
        self.eviction_us = round(eviction_latency * US_PER_S)
        self.max_cycles = max_cycles
        self.livelock_cycles = livelock_cycles
        self.epoch = epoch
        self.on_sample = on_sample
        self.progress = progress
        self.now_us = 0
        self._sample_interval = sample_interval
        self.measured = cycle_cost == "measured"
        self.api = api
        self.copy_workloads = copy_workloads
        self.keep_samples = samples
        self.cpu_limit = cpu_limit

    # -- clock ----------------------------------------------------------------------

    def now(self) -> float:
        """The engine's clock: float seconds (epoch + simulated time)."""
        return self.epoch + self.now_us / US_PER_S

    # -- the run ---------------------------------------------------------------------

    def run(self) -> SimResult:
        t0 = time.process_time()
        # The scenario, the records and the cache live as long as the run: the collector's
        # full passes need not walk them again and again (200,000 workloads are millions
        # of objects). Given back to it at the end, unless someone else froze first.
        freeze = gc.get_freeze_count() == 0
        try:
            return self._run(t0, freeze)
        finally:
            if freeze:
                gc.unfreeze()

    def _run(self, t0: float, freeze: bool) -> SimResult:
        sc = self.scenario
        cache = Cache(
            flavors=sc.flavors,
            cluster_queues=sc.cluster_queues,
            cohorts=sc.cohorts,
            local_queues=sc.local_queues,
            namespaces=sc.namespaces,
            resources=getattr(self.config, "resources", None),
            dra=accounting(getattr(self.config, "device_class_mappings", ()), catalog(sc.dra)),
        )
        if sc.topologies or sc.nodes:  # topology-aware scheduling: the cluster's nodes
            cache.set_topologies(sc.topologies)
            for name in sorted(sc.nodes):
                cache.set_node(sc.nodes[name])
            for key in sorted(sc.pods):
                cache.set_pod(key, sc.pods[key])
        # nobody reads pending messages in a simulation: skip their numbers
        scheduler = self.config.make_scheduler(cache, clock=self.now, explain=False)
        self.cache, self.scheduler = cache, scheduler
        records = workload_records(sc, self.epoch, copy=self.copy_workloads)
        # arrival order; the sort is stable, so equal arrivals keep scenario order
        arrivals = [rec.sim.arrival_us for rec in records]
        order = array("q", sorted(range(len(records)), key=arrivals.__getitem__))
        by_key: dict[str, WorkloadRecord] = {}
        for rec in records:
            key = rec.key  # (made and interned at every call: once here)
            if key in by_key:
                raise ValueError(f"workload {key} appears twice in the scenario")
            by_key[key] = rec
        if freeze:
            gc.freeze()
        queues = {name: queue_record(name, cq) for name, cq in sc.cluster_queues.items()}
        cq_names = list(sc.cluster_queues)
        samples = Samples(interval_us=self._auto_interval(records))
        samples.usage = [[] for _ in cq_names]
        samples.pending = [[] for _ in cq_names]

        inf = 1 << 62
        heap: list[tuple[int, int, int, str, int]] = []  # (time, seq, kind, key, generation)
        seq = 0
        evicting: set[str] = set()
        total, done = len(records), 0
        next_arrival = 0
        next_cycle: int | None = None
        busy_until = 0
        next_sample = 0
        # The engine's own usage history (admission fair sharing, cohort credits) is
        # sampled on its configured interval, as the service's sampling loop does.
        tracker = getattr(scheduler, "usage", None)  # stub schedulers in tests have none
        tracker_us: int | None = None
        interval = tracker.sampling_interval() if tracker is not None else None
        if interval is not None:
            tracker_us = max(1, round(interval * US_PER_S))
        next_tracker = tracker_us if tracker_us is not None else inf
        credits = tracker is not None and getattr(tracker, "credits_cfg", None) is not None
        last_pending: dict | None = None
        stopped_by: str | None = None
        end_us = 0
        cpu_limit = self.cpu_limit
        progress_every = 256
        events_seen = 0
        streak = 0  # cycles since the last arrival or finish
        livelock_breaks = 0
        cycle_cpu = 0.0
        bucket = TokenBucket(self.api) if self.api is not None else None
        aware = getattr(scheduler, "progress", None)  # progressAwarePreemption
        loss = LossReport(resources=aware.policy.resources) if aware is not None else LossReport()
        track_loss = aware is not None or any(r.sim.checkpoint_interval_us for r in records)
        book = cache.progress

        # The series are for the report (and the tests); ``samples=False`` keeps none,
        # and with no ``on_sample`` either nothing is sampled at all.
        keep_samples = self.keep_samples
        if not keep_samples and self.on_sample is None:
            next_sample = inf
        columns = [
            (queues[name], queues[name].primary, name, samples.usage[i], samples.pending[i])
            for i, name in enumerate(cq_names)
        ]

        def take_sample(at_us: int) -> None:
            if keep_samples:
                samples.times_us.append(at_us)
                cq_queues = cache.queues
                for qr, primary, name, usage_col, pending_col in columns:
                    usage_col.append(qr.usage.get(primary, 0) if primary else 0)
                    q = cq_queues.get(name)
                    pending_col.append(len(q) if q is not None else 0)
                if credits and tracker is not None:
                    for name, value in tracker.report().get("clusterQueues", {}).items():
                        samples.credits.setdefault(name, []).append(value)
            if self.on_sample is not None:
                saved = self.now_us
                self.now_us = at_us
                self.on_sample(self.now())
                self.now_us = saved

        def land(rec: WorkloadRecord) -> None:
            nonlocal seq
            rec.admitted_us = self.now_us
            rec.running = True
            if rec.first_admitted_us is None:
                rec.first_admitted_us = self.now_us
            queues[rec.cluster_queue].add(self.now_us, rec.usage, +1)  # type: ignore[index]
            pr = rec.progress
            pr.run_start_us, pr.run_base_us, pr.last_checkpoint_us = self.now_us, pr.saved_us, None
            ends = self.now_us + max(0, rec.sim.runtime_us - pr.saved_us)
            seq += 1
            heapq.heappush(heap, (ends, seq, _FINISH, rec.key, rec.generation))
            next_checkpoint(rec, ends)

        def next_checkpoint(rec: WorkloadRecord, ends: int) -> None:
            nonlocal seq
            s = rec.sim
            if not s.checkpoint_interval_us:
                return
            at = self.now_us + checkpoint_offset(
                rec.key, rec.progress.checkpoints, s.checkpoint_interval_us, s.checkpoint_jitter_us
            )
            if at < ends:
                seq += 1
                heapq.heappush(heap, (at, seq, _CHECKPOINT, rec.key, rec.generation))

        def run_ends(rec: WorkloadRecord) -> int:
            pr = rec.progress
            assert pr.run_start_us is not None
            return pr.run_start_us + max(0, rec.sim.runtime_us - pr.run_base_us)

        def start_eviction(rec: WorkloadRecord, *, yielded: bool = False) -> None:
            """The workload stops: its run is cut short (the pending finish is void)
            and what it did since its last checkpoint is lost."""
            nonlocal seq
            key = rec.key
            rec.generation += 1
            rec.evictions += 1
            evicting.add(key)
            pr = rec.progress
            now_us = self.now_us
            if pr.noticed_us is not None:
                loss.notice_wait_us += now_us - pr.noticed_us
                if yielded:
                    loss.yielded += 1
                else:
                    loss.wasted_notice_us += now_us - pr.noticed_us
                pr.noticed_us = None
            if pr.run_start_us is not None:
                since = max(pr.run_start_us, pr.last_checkpoint_us or pr.run_start_us)
                loss.lost_unit_us += units(rec.usage, loss.resources) * (now_us - since)
                pr.run_start_us = None
            loss.evictions += 1
            if bucket is not None:  # released when the eviction write lands
                seq += 1
                at = max(bucket.done_at(max(now_us, busy_until)), now_us + self.eviction_us)
                heapq.heappush(heap, (at, seq, _EVICTED, key, rec.generation))
            elif self.eviction_us == 0:
                complete_eviction(rec)
            else:
                seq += 1
                heapq.heappush(
                    heap, (now_us + self.eviction_us, seq, _EVICTED, key, rec.generation)
                )

        def complete_eviction(rec: WorkloadRecord) -> None:
            """The eviction completed: release, then requeue (or, with a requeue policy
            after preemption, back off or deactivate)."""
            nonlocal seq
            key = rec.key
            evicting.discard(key)
            if key not in cache.admitted:
                return
            cq = cache.admitted[key]
            release(rec)
            wl = rec.sim.workload
            policy = aware.policy.requeue_for(wl, cq) if aware is not None else None
            if policy is None:
                cache.evicted(key)
                return
            d = policy.after_preemption(wl.requeue_count, self.now())
            wl.requeue_count = d.requeue_count
            if d.deactivate:
                wl.active = False
                loss.deactivated += 1
                cache.evicted(key)  # inactive: not queued again
                return
            cache.evicted(key)
            cache.park(key)
            assert d.requeue_at is not None
            seq += 1
            at = max(self.now_us, round((d.requeue_at - self.epoch) * US_PER_S))
            heapq.heappush(heap, (at, seq, _REQUEUE, key, rec.generation))

        def release(rec: WorkloadRecord) -> None:
            cq = rec.cluster_queue
            if cq is not None and rec.usage and rec.running:
                queues[cq].add(self.now_us, rec.usage, -1)
            rec.usage = EMPTY
            rec.running = False

        while True:
            t_arr = arrivals[order[next_arrival]] if next_arrival < total else inf
            t_evt = heap[0][0] if heap else inf
            t_cyc = next_cycle if next_cycle is not None else inf
            t_next = min(t_arr, t_evt, t_cyc)
            if t_next == inf:
                break
            while next_sample <= t_next or next_tracker <= t_next:
                if next_tracker < next_sample and tracker is not None:
                    self.now_us = next_tracker
                    tracker.sample(self.now())
                    next_tracker += tracker_us  # type: ignore[operator]
                else:
                    take_sample(next_sample)
                    next_sample += samples.interval_us
            self.now_us = now = t_next
            events_seen += 1
            if self.progress is not None and events_seen % progress_every == 0:
                self.progress(done, total, now)
            if t_arr == now or t_evt == now:
                changed = False
                while next_arrival < total and arrivals[order[next_arrival]] == now:
                    rec = records[order[next_arrival]]
                    next_arrival += 1
                    wl = rec.sim.workload
                    cache.add_workload(wl)
                    cq = cache.cq_of(wl)
                    rec.cluster_queue = cq
                    changed = True
                    if cq is not None:
                        queues[cq].last_event_us = now
                while heap and heap[0][0] == now:
                    _, _, kind, key, gen = heapq.heappop(heap)
                    rec = by_key[key]
                    if kind == _ADMITTED:
                        if gen == rec.generation and key in cache.admitted:
                            land(rec)  # the admission write landed: it runs from now
                        continue
                    if kind == _FINISH:
                        if gen != rec.generation or key not in cache.admitted:
                            continue  # preempted meanwhile
                        if rec.progress.noticed_us is not None:  # finished during its notice
                            loss.notice_wait_us += now - rec.progress.noticed_us
                            rec.progress.noticed_us = None
                        release(rec)
                        cache.finish(key)
                        rec.finished_us = now
                        if not track_loss:  # nothing reads a finished run's progress
                            rec.run_progress = None
                        changed = True
                        done += 1
                        end_us = now
                    elif kind == _CHECKPOINT:
                        if gen != rec.generation or not rec.running or key in evicting:
                            continue
                        pr = rec.progress
                        assert pr.run_start_us is not None
                        pr.checkpoints += 1
                        pr.saved_us = pr.run_base_us + (now - pr.run_start_us)
                        pr.last_checkpoint_us = now
                        if book.report(key, SIM_SOURCE, self.now()):
                            start_eviction(rec, yielded=True)  # checkpoint-and-yield
                            changed = True
                        else:
                            next_checkpoint(rec, run_ends(rec))
                    elif kind == _DEADLINE:
                        if gen == rec.generation and key in book.notices and key not in evicting:
                            start_eviction(rec)  # it ran out its notice
                            changed = True
                    elif kind == _REQUEUE:
                        cache.add_workload(rec.sim.workload)
                        changed = True
                    else:
                        was = key in cache.admitted
                        complete_eviction(rec)
                        changed = changed or was
                if changed:
                    streak = 0
                    if next_cycle is None:
                        next_cycle = max(now, busy_until)
                continue
            # A scheduling cycle at `now`.
            if self.scheduler.cycle_count >= self.max_cycles:
                stopped_by = "maxCycles"
                break
            if cpu_limit is not None and time.process_time() - t0 >= cpu_limit:
                stopped_by = "cpuLimit"
                break
            deferred = self.measured and gc.isenabled()
            if deferred:  # the collector runs once the cycle returns, outside its charge
                gc.disable()
            started = time.thread_time()
            try:
                r = scheduler.schedule()
            finally:
                spent = time.thread_time() - started
                if deferred:
                    gc.enable()
            cycle_cpu += spent
            cycle_us = max(1, round(spent * US_PER_S)) if self.measured else self.cycle_us
            busy_until = now + cycle_us
            for d in r.admitted:
                key = d.workload.key
                rec = by_key[key]
                rec.generation += 1
                rec.cluster_queue = d.cluster_queue
                if rec.first_admitted_us is None and rec.placement is None:
                    rec.placement = {
                        p.name: p.topology_assignment
                        for p in d.admission.pod_set_assignments
                        if p.topology_assignment is not None
                    } or None
                usage: dict[str, int] = {}
                for (_flavor, res), v in cache.usage_of[key].items():
                    usage[res] = usage.get(res, 0) + v
                rec.usage = usage
                if bucket is None:
                    land(rec)  # decisions are stamped with the cycle's start
                else:  # the write is sent when the cycle returns; it runs once it lands
                    seq += 1
                    at = bucket.done_at(busy_until)
                    heapq.heappush(heap, (at, seq, _ADMITTED, key, rec.generation))
            for p in r.preempted:
                key = p.workload.key
                if key in evicting:
                    continue
                rec = by_key[key]
                loss.preemptors.add(p.by)
                if p.notice_deadline is not None:  # noticed: it runs on until due
                    rec.progress.noticed_us = now
                    loss.notices += 1
                    seq += 1
                    at = max(now, round((p.notice_deadline - self.epoch) * US_PER_S))
                    heapq.heappush(heap, (at, seq, _DEADLINE, key, rec.generation))
                    save = rec.sim.checkpoint_on_notice_us
                    if save and rec.running:  # it saves on notice, then yields
                        seq += 1
                        heapq.heappush(heap, (now + save, seq, _CHECKPOINT, key, rec.generation))
                    continue
                start_eviction(rec)
            progressed = bool(r.admitted or r.preempted)
            if not progressed and r.changed:
                # A moved head is progress; re-waiting on the same preemptions is not.
                progressed = any(
                    st.reason != PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS
                    for st in r.pending.values()
                )
                progressed = progressed and r.pending != last_pending
            last_pending = r.pending
            streak += 1
            if progressed and streak >= self.livelock_cycles:
                # Cycles keep changing things with nothing arriving or finishing: the
                # engine is going round in circles (e.g. mutual preemption). Wait for
                # the next event instead of spinning; the summary reports it.
                livelock_breaks += 1
                progressed = False
            next_cycle = busy_until if progressed else None

        # A run stopped early is settled where it stopped (queues may have changed
        # after the last finish); a whole run ends at its last finish.
        stopped_at_us = self.now_us if stopped_by is not None else end_us
        settle_us = max(end_us, stopped_at_us)
        self.now_us = settle_us
        for qr in queues.values():
            qr.settle(settle_us)
        if next_sample != inf and (not samples.times_us or samples.times_us[-1] < settle_us):
            take_sample(settle_us)
        self.now_us = end_us
        if self.progress is not None:
            self.progress(done, total, settle_us)
        return SimResult(
            scenario=sc,
            records=records,
            queues=queues,
            samples=samples,
            stats=dict(scheduler.stats),
            end_us=end_us,
            cpu_seconds=time.process_time() - t0,
            truncated=stopped_by is not None,
            livelock_breaks=livelock_breaks,
            cycle_cpu_seconds=cycle_cpu,
            api_writes=bucket.writes if bucket is not None else 0,
            api_wait_seconds=bucket.waited_us / US_PER_S if bucket is not None else 0.0,
            loss=loss if track_loss else None,
            stopped_by=stopped_by,
            stopped_at_us=stopped_at_us,
            arrived=next_arrival,
        )

    def _auto_interval(self, records: list[WorkloadRecord]) -> int:
        if self._sample_interval is not None:
            if self._sample_interval <= 0:
                raise ValueError("sample_interval must be positive")
            return max(1, round(self._sample_interval * US_PER_S))
        # About 200 samples over the scenario's natural length (never below 1 ms).
        horizon = max((r.sim.arrival_us + r.sim.runtime_us for r in records), default=0)
        return max(1_000, horizon // 200)


def simulate(
    scenario: Scenario,
    *,
    config: Config | None = None,
    cycle_latency: float = DEFAULT_CYCLE_LATENCY,
    eviction_latency: float = 0.0,
    sample_interval: float | None = None,
    on_sample: Callable[[float], None] | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    cycle_cost: str = "fixed",
    api: ApiModel | None = None,
) -> SimResult:
    """Run ``scenario`` through the engine once (see ``Simulator``)."""
    return Simulator(
        scenario,
        config=config,
        cycle_latency=cycle_latency,
        eviction_latency=eviction_latency,
        sample_interval=sample_interval,
        on_sample=on_sample,
        progress=progress,
        cycle_cost=cycle_cost,
        api=api,
    ).run()
