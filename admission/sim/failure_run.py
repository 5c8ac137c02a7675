"""A simulated run with node failures: the engine's scheduler, a failure schedule, and
one of the two node-failure policies (:mod:`admission.sim.failure_policy`).

A driver like :mod:`admission.sim.simulator` (it owns no scheduling logic: admissions
and preemptions are the ``Scheduler``'s, TAS placement and hot swap the engine's
``node_replacement``), with the events a node failure brings:

* **node down / up** — the outages of :class:`admission.sim.failure_model.FailureModel`.
  A TAS node is marked not Ready in the cache (placement skips it); a plain node loses
  its pods (:mod:`admission.sim.failure_pods`). A running workload with a pod there is
  *interrupted*: its work since its last checkpoint is lost, and it holds its GPUs idle
  until the policy acts;
* **detect** (30 s later), **pod evicted** (Kueue, 300 s later, plain pool) and
  **recovery timeout** (Kueue, 30 min later) — the policy's steps: hot swap, in-place
  pod replacement, eviction with ``NodeFailures`` or ``PodsReadyTimeout``;
* **requeue** (a backoff ran out), **forget** (a remembered bad node's window ended) and
  **uncordon** (a quarantined node's window ended: the quarantine variant);
* **arrival**, **finish**, **checkpoint** and the scheduling **cycle** (1 ms each) as in
  the simulator. A workload that checkpoints resumes from its last checkpoint; one that
  does not reruns from the start. Every restart first pays the policy's restart overhead.

Accounting (useful, lost, held GPU-hours) is :mod:`admission.sim.failure_report`'s. A
run is a pure function of the cluster, the outages and the policy.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field

from admission.engine.tas.admission import node_replacement
from admission.engine.tas.domains import HOSTNAME
from admission.sim.failure_cluster import GPU, GPUS_PER_NODE, FailureCluster
from admission.sim.failure_model import Outage
from admission.sim.failure_pods import PlainPool
from admission.sim.failure_policy import POD_EVICTION_SECONDS, FailurePolicy
from admission.sim.failure_report import FailureStats
from admission.sim.progress import checkpoint_offset
from admission.sim.scenario import US_PER_S, SimWorkload
from admission.sim.simulator import EPOCH
from queues.model import NodeSelectorTerm, SelectorRequirement, Workload
from queues.node_health import AvoidedNodes, FlakyNodes

PENDING, WAITING, RUNNING, BROKEN, DONE, DEACTIVATED = range(6)
(_DOWN, _UP, _FINISH, _CKPT, _DETECT, _POD_EVICTED, _RECOVERY, _STARTUP, _REQUEUE, _FORGET) = range(
    10
)
_UNCORDON = 10
NODE_FAILURES, PODS_READY_TIMEOUT, PREEMPTED = "NodeFailures", "PodsReadyTimeout", "Preempted"
CYCLE_US = 1_000
DAY_US = 86_400 * US_PER_S


@dataclass(slots=True)
class Job:
    """One workload's state across its runs."""

    sim: SimWorkload
    tas: bool
    gpus: int
    need: list[int]  # GPUs of each pod
    state: int = PENDING
    gen: int = 0  # bumped at every run start and stop: stale finishes/checkpoints drop
    incident: int = 0  # bumped at every interruption and recovery: stale policy steps drop
    hosts: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)  # failed nodes of this interruption
    mark_us: int = 0  # held GPU-time accounted up to here
    held_since_us: int = 0
    run_start_us: int = 0
    prod_start_us: int = 0  # run start + restart overhead
    base_us: int = 0  # work saved when the run started
    saved_us: int = 0
    checkpoints: int = 0
    runs: int = 0
    interrupted_us: int | None = None  # the node failure being recovered from
    avoid: AvoidedNodes = field(default_factory=AvoidedNodes)  # bad-node memory
    flaky_hit_us: int | None = None  # last time the flaky node failed under it
    parked: bool = False  # waiting out a backoff
    hit: bool = False  # a node failure interrupted it at least once

    @property
    def wl(self) -> Workload:
        return self.sim.workload


class FailureRun:
    """One run (use ``run()`` once)."""

    def __init__(
        self,
        cluster: FailureCluster,
        outages: list[Outage],
        policy: FailurePolicy,
        *,
        flaky_node: str | None = None,
        flaky_window_seconds: float | None = None,
    ) -> None:
        from admission.config.schema import Config
        from admission.engine.cache import Cache

        sc = cluster.scenario
        self.policy = policy
        self.flaky = flaky_node
        # re-admissions onto the flaky node count "within the window" by this window
        # (default: the policy's bad-node memory; a benchmark passes ours' to both)
        if flaky_window_seconds is None:
            flaky_window_seconds = policy.bad_node_memory_seconds
        self.flaky_window_us = round(flaky_window_seconds * US_PER_S)
        self.now_us = 0
        self.cache = cache = Cache(
            flavors=sc.flavors,
            cluster_queues=sc.cluster_queues,
            cohorts=sc.cohorts,
            local_queues=sc.local_queues,
            namespaces=sc.namespaces,
        )
        cache.set_topologies(sc.topologies)
        self.tas_nodes = dict(sc.nodes)
        for name in sorted(self.tas_nodes):
            cache.set_node(self.tas_nodes[name])
        self.scheduler = Config().make_scheduler(cache, clock=self.now, explain=False)
        self.pool = PlainPool(dict.fromkeys(cluster.plain_nodes, GPUS_PER_NODE))
        self.stats = FailureStats(gpus=sum(cluster.node_gpus.values()))
        self.jobs: dict[str, Job] = {}
        for s in sc.workloads:
            wl = dataclasses.replace(
                s.workload,
                pod_sets=list(s.workload.pod_sets),
                admission=None,
                creation_time=EPOCH + s.arrival_us / US_PER_S,
            )
            need = [ps.requests.get(GPU, 0) for ps in wl.pod_sets for _ in range(ps.count)]
            tas = any(ps.topology is not None for ps in wl.pod_sets)
            self.jobs[wl.key] = Job(dataclasses.replace(s, workload=wl), tas, sum(need), need)
        self.stats.workloads = len(self.jobs)
        self.heap: list[tuple[int, int, int, str, int]] = []
        self.seq = 0
        for o in outages:
            self._push(o.down_us, _DOWN, o.node, 0)
            self._push(o.up_us, _UP, o.node, o.down_us)
        self.on_node: dict[str, set[str]] = {}
        self.waiting: dict[str, None] = {}  # admitted plain gangs whose pods wait for room
        self.awaiting: dict[str, None] = {}  # broken gangs waiting for a replacement (Kueue)
        self.down: set[str] = set()
        self.cordoned: dict[str, int] = {}  # quarantined node -> until
        self.flaky_nodes = FlakyNodes(
            workloads=policy.flaky_workloads, window=policy.flaky_window_seconds
        )
        self.open = len(self.jobs)

    def now(self) -> float:
        return EPOCH + self.now_us / US_PER_S

    def _push(self, at_us: int, kind: int, key: str, tag: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at_us, self.seq, kind, key, tag))

    def _after(self, seconds: float) -> int:
        return self.now_us + round(seconds * US_PER_S)

    # -- the run ----------------------------------------------------------------------

    def run(self) -> FailureStats:
        arrivals = sorted(self.jobs.values(), key=lambda j: (j.sim.arrival_us, j.wl.key))
        nxt = 0
        next_cycle: int | None = None
        busy_until = 0
        streak = 0
        inf = 1 << 62
        while self.open:
            t_arr = arrivals[nxt].sim.arrival_us if nxt < len(arrivals) else inf
            t_evt = self.heap[0][0] if self.heap else inf
            t_cyc = next_cycle if next_cycle is not None else inf
            t = min(t_arr, t_evt, t_cyc)
            if t == inf:
                break
            self.now_us = t
            if t_arr == t or t_evt == t:
                while nxt < len(arrivals) and arrivals[nxt].sim.arrival_us == t:
                    self.cache.add_workload(arrivals[nxt].wl)
                    nxt += 1
                while self.heap and self.heap[0][0] == t:
                    _, _, kind, key, tag = heapq.heappop(self.heap)
                    self._event(kind, key, tag)
                self._retry()
                streak = 0
                if next_cycle is None:
                    next_cycle = max(t, busy_until)
                continue
            r = self.scheduler.schedule()
            busy_until = t + CYCLE_US
            for d in r.admitted:
                self._admitted(self.jobs[d.workload.key])
            for p in r.preempted:
                job = self.jobs[p.workload.key]
                if job.state in (WAITING, RUNNING, BROKEN):
                    self._evict(job, PREEMPTED)
            if r.admitted or r.preempted:
                self._retry()
            streak += 1
            progressed = bool(r.admitted or r.preempted or r.changed) and streak < 10_000
            next_cycle = busy_until if progressed else None
        self.stats.end_us = self.now_us
        return self.stats

    def _event(self, kind: int, key: str, tag: int) -> None:
        if kind == _DOWN:
            self._node_down(key)
            return
        if kind == _UP:
            self._node_up(key, tag)
            return
        if kind == _UNCORDON:
            if self.cordoned.get(key, 0) <= self.now_us:
                self.cordoned.pop(key, None)
                self._sync_node(key)
            return
        job = self.jobs[key]
        if kind == _FINISH and tag == job.gen and job.state == RUNNING:
            self._finish(job)
        elif kind == _CKPT and tag == job.gen and job.state == RUNNING:
            job.checkpoints += 1
            job.saved_us = job.base_us + (self.now_us - job.prod_start_us)
            self._next_checkpoint(job, self.now_us)
        elif kind in (_DETECT, _POD_EVICTED, _RECOVERY) and tag == job.incident:
            if job.state == BROKEN:
                self._policy_step(job, kind)
        elif kind == _STARTUP and tag == job.incident and job.state == WAITING:
            self._evict(job, PODS_READY_TIMEOUT, counted=True)  # user-side: counts for both
        elif kind == _REQUEUE and job.parked:
            job.parked = False
            self._set_affinity(job)
            self.cache.add_workload(job.wl)
        elif kind == _FORGET:
            self._forget(job)

    # -- runs -------------------------------------------------------------------------

    def _admitted(self, job: Job) -> None:
        job.held_since_us = job.mark_us = self.now_us
        adm = job.wl.admission
        if job.tas:
            assert adm is not None
            hosts: set[str] = set()
            for psa in adm.pod_set_assignments:
                ta = psa.topology_assignment
                if ta is not None and ta.levels[-1] == HOSTNAME:
                    hosts.update(v[-1] for v, _ in ta.domains)
            self._place(job, hosts)
            self._start(job)
            return
        job.state = WAITING
        job.incident += 1
        self.waiting[job.wl.key] = None
        self._push(
            self._after(self.policy.pods_ready_timeout_seconds), _STARTUP, job.wl.key, job.incident
        )
        self._bind(job)

    def _bind(self, job: Job) -> bool:
        nodes = self.pool.bind(job.wl.key, job.need, self._excluded(job))
        if nodes is None:
            return False
        self.waiting.pop(job.wl.key, None)
        self._place(job, set(nodes))
        self._start(job)
        return True

    def _place(self, job: Job, hosts: set[str]) -> None:
        for h in job.hosts - hosts:
            self.on_node.get(h, set()).discard(job.wl.key)
        for h in hosts:
            self.on_node.setdefault(h, set()).add(job.wl.key)
        job.hosts = hosts

    def _start(self, job: Job) -> None:
        """A run starts now (every pod bound): after a restart's overhead it progresses."""
        now = self.now_us
        self._idle(job, now)  # held idle until now (pods waiting, or broken)
        job.mark_us = now
        job.state = RUNNING
        job.gen += 1
        job.incident += 1
        overhead = round(self.policy.restart_overhead_seconds * US_PER_S) if job.runs else 0
        job.runs += 1
        job.run_start_us, job.prod_start_us, job.base_us = now, now + overhead, job.saved_us
        ends = job.prod_start_us + job.sim.runtime_us - job.base_us
        self._push(ends, _FINISH, job.wl.key, job.gen)
        self._next_checkpoint(job, job.prod_start_us)
        if job.interrupted_us is not None:
            self.stats.recoveries_us.append(now - job.interrupted_us)
            job.interrupted_us = None
        if self.flaky is not None and self.flaky in job.hosts and job.flaky_hit_us is not None:
            self.stats.flaky_readmissions += 1
            if now - job.flaky_hit_us <= self.flaky_window_us:
                self.stats.flaky_readmissions_in_window += 1
            if now - job.flaky_hit_us <= DAY_US:
                self.stats.flaky_readmissions_day += 1

    def _next_checkpoint(self, job: Job, since: int) -> None:
        """The next checkpoint, one interval of progress after ``since``."""
        s = job.sim
        if not s.checkpoint_interval_us:
            return
        at = since + checkpoint_offset(
            job.wl.key, job.checkpoints, s.checkpoint_interval_us, s.checkpoint_jitter_us
        )
        if at < job.prod_start_us + s.runtime_us - job.base_us:
            self._push(at, _CKPT, job.wl.key, job.gen)

    def _stop(self, job: Job, *, preempted: bool) -> None:
        """The run stops now: overhead spent, work since the last checkpoint lost."""
        now = self.now_us
        idle_end = min(now, job.prod_start_us)
        self.stats.overhead += job.gpus * max(0, idle_end - job.mark_us)
        worked = max(0, now - job.prod_start_us)
        lost = job.gpus * max(0, worked - (job.saved_us - job.base_us))
        if preempted:
            self.stats.lost_preemptions += lost
        else:
            self.stats.lost_failures += lost
        job.mark_us = now
        job.gen += 1

    def _finish(self, job: Job) -> None:
        now = self.now_us
        self.stats.overhead += job.gpus * max(0, job.prod_start_us - job.mark_us)
        self.stats.useful += job.gpus * job.sim.runtime_us
        job.mark_us = now
        self._release(job)
        self.cache.finish(job.wl.key)
        job.state = DONE
        self.stats.finished += 1
        self.open -= 1

    def _idle(self, job: Job, now: int) -> None:
        if job.state == WAITING:
            self.stats.waiting_for_pods += job.gpus * (now - job.mark_us)
        elif job.state == BROKEN:
            self.stats.broken_held += job.gpus * (now - job.mark_us)

    def _release(self, job: Job) -> None:
        now = self.now_us
        self._idle(job, now)
        job.mark_us = now
        self.stats.held += job.gpus * (now - job.held_since_us)
        if not job.tas:
            self.pool.release(job.wl.key)
        self._place(job, set())
        self.waiting.pop(job.wl.key, None)
        self.awaiting.pop(job.wl.key, None)

    # -- failures ---------------------------------------------------------------------

    def _sync_node(self, node: str) -> None:
        """What scheduling sees of ``node``: Ready unless down, cordoned when quarantined."""
        cordoned = node in self.cordoned
        if node in self.tas_nodes:
            ready = node not in self.down
            self.cache.set_node(
                dataclasses.replace(self.tas_nodes[node], ready=ready, unschedulable=cordoned)
            )
        elif cordoned:
            self.pool.cordoned.add(node)
        else:
            self.pool.cordoned.discard(node)

    def _node_down(self, node: str) -> None:
        now = self.now_us
        self.stats.outages += 1
        self.down.add(node)
        if node in self.tas_nodes:
            self._sync_node(node)
        else:
            self.pool.node_down(node)
        self._quarantine(node, self.on_node.get(node, ()))
        for key in sorted(self.on_node.get(node, ())):
            job = self.jobs[key]
            if node == self.flaky:
                job.flaky_hit_us = now
            if job.state == BROKEN:
                job.failed.add(node)
                continue
            if job.state != RUNNING:
                continue
            self.stats.interruptions += 1
            job.hit = True
            self._stop(job, preempted=False)
            job.state = BROKEN
            job.failed = {node}
            job.incident += 1
            job.interrupted_us = now
            p = self.policy
            if job.tas or p.non_tas_node_failures:
                self._push(self._after(p.detect_seconds), _DETECT, key, job.incident)
            else:
                self._push(self._after(POD_EVICTION_SECONDS), _POD_EVICTED, key, job.incident)
            waits = not p.evict_when_no_replacement if job.tas else not p.non_tas_node_failures
            if waits:  # Kueue: PodsReady is False until the gang recovers or times out
                self._push(self._after(p.recovery_timeout_seconds), _RECOVERY, key, job.incident)

    def _node_up(self, node: str, down_us: int) -> None:
        self.stats.down += GPUS_PER_NODE * (self.now_us - down_us)
        self.down.discard(node)
        if node in self.tas_nodes:
            self._sync_node(node)
        else:
            self.pool.node_up(node)

    def _quarantine(self, node: str, keys: Iterable[str]) -> None:
        """The product's flaky-node report (``FlakyNodes``) for the workloads ``node``
        breaks now; with the quarantine variant, a reported node is cordoned for the
        report's window, as health tooling acting on it would."""
        reported = False
        for key in sorted(keys):
            if self.jobs[key].state == RUNNING:
                reported |= self.flaky_nodes.record(node, key, self.now()) is not None
        if not reported:
            return
        self.stats.flaky_reports += 1
        if self.policy.quarantine and node not in self.cordoned:
            until = self._after(self.policy.flaky_window_seconds)
            self.cordoned[node] = until
            self.stats.quarantined += 1
            self._sync_node(node)
            self._push(until, _UNCORDON, node, 0)

    def _policy_step(self, job: Job, kind: int) -> None:
        p = self.policy
        if kind == _RECOVERY:  # the hold ran out: recoveryTimeout (Kueue), or ours' hold
            if p.hold_is_pods_ready_timeout:
                self._evict(job, PODS_READY_TIMEOUT, counted=True)
            else:
                self._evict(job, NODE_FAILURES)
            return
        if p.bad_node_memory_seconds:
            job.avoid = job.avoid.remember(
                job.failed, now=self.now(), duration=p.bad_node_memory_seconds
            )
            self._push(self._after(p.bad_node_memory_seconds), _FORGET, job.wl.key, 0)
            self._set_affinity(job)
        if kind == _POD_EVICTED:  # Kueue, plain pool: the Job's pods are recreated
            self.awaiting[job.wl.key] = None
            self._try_recover(job)
            return
        if job.tas and len(job.failed) == 1 and self._hot_swap(job):
            return
        if job.tas and len(job.failed) == 1 and not p.evict_when_no_replacement:
            self.awaiting[job.wl.key] = None  # retried as capacity frees, until the hold ends
            return
        self._evict(job, NODE_FAILURES)  # requeued at once (Kueue does too)

    def _hot_swap(self, job: Job) -> bool:
        """Kueue's failed-node replacement, through the engine's ``node_replacement``."""
        (host,) = job.failed
        new, _ = node_replacement(self.cache.topology, self.cache.flavors, job.wl, host)
        if not new:
            return False
        self.cache.replace_topology_assignments(job.wl.key, new)
        hosts = {v[-1] for ta in new.values() for v, _ in ta.domains}
        self.stats.hot_swaps += 1
        self.awaiting.pop(job.wl.key, None)
        self._place(job, hosts)
        job.failed = set()
        self._start(job)
        return True

    def _try_recover(self, job: Job) -> bool:
        if job.tas:
            return len(job.failed) == 1 and self._hot_swap(job)
        lost = len(job.need) - sum(1 for _ in self.pool.pods.get(job.wl.key, []))
        need = sorted(job.need, reverse=True)[:lost]
        nodes = self.pool.bind(job.wl.key, need, self._excluded(job))
        if nodes is None:
            return False
        self.awaiting.pop(job.wl.key, None)
        self.stats.hot_swaps += 1
        self._place(job, self.pool.hosts(job.wl.key))
        job.failed = set()
        self._start(job)
        return True

    def _retry(self) -> None:
        """Capacity may have changed: broken gangs waiting for room, then pods waiting."""
        for key in list(self.awaiting):
            job = self.jobs[key]
            if job.state == BROKEN:
                self._try_recover(job)
        for key in list(self.waiting):
            self._bind(self.jobs[key])

    def _evict(self, job: Job, reason: str, *, counted: bool = False) -> None:
        """Evict ``job``: release, then requeue (backoff, or deactivate when counted)."""
        if job.state == RUNNING:
            self._stop(job, preempted=reason == PREEMPTED)
        self.stats.evicted(reason)
        self._release(job)
        job.gen += 1
        job.incident += 1
        job.failed = set()
        key = job.wl.key
        wl = job.wl
        if counted:
            d = self.policy.requeue.after_preemption(wl.requeue_count, self.now())
            wl.requeue_count = d.requeue_count
            if d.deactivate:
                wl.active = False
                self.cache.evicted(key)
                job.state = DEACTIVATED
                self.stats.deactivated += 1
                self.stats.deactivated_after_infra += job.hit
                self.stats.stranded += job.gpus * job.saved_us
                if job.interrupted_us is not None:
                    self.stats.never_recovered += 1
                self.open -= 1
                return
            wl.requeue_time = self.now()  # requeuingStrategy.timestamp: Eviction
            self.cache.evicted(key)
            self.cache.park(key)
            job.parked = True
            job.state = PENDING
            assert d.requeue_at is not None
            self._push(round((d.requeue_at - EPOCH) * US_PER_S), _REQUEUE, key, 0)
            return
        job.state = PENDING
        wl.requeue_time = None  # not a PodsReadyTimeout: queued by its creation time
        self.cache.evicted(key)
        if self._set_affinity(job) or self._excluded(job):  # changed: re-read, as an informer would
            self.cache.park(key)
            self.cache.add_workload(wl)

    # -- bad-node memory ---------------------------------------------------------------

    def _excluded(self, job: Job) -> tuple[str, ...]:
        return job.avoid.active(self.now())

    def _set_affinity(self, job: Job) -> bool:
        """The pods' required affinity ``NotIn`` the remembered bad nodes; True if changed."""
        bad = self._excluded(job)
        terms = [NodeSelectorTerm((SelectorRequirement(HOSTNAME, "NotIn", bad),))] if bad else []
        wl = job.wl
        if all(ps.required_affinity == terms for ps in wl.pod_sets):
            return False
        wl.pod_sets = [dataclasses.replace(ps, required_affinity=list(terms)) for ps in wl.pod_sets]
        return True

    def _forget(self, job: Job) -> None:
        """A remembered node's time ran out: the pods may go there again."""
        if job.state == PENDING and not job.parked and self._set_affinity(job):
            self.cache.park(job.wl.key)
            self.cache.add_workload(job.wl)
        elif job.state != PENDING:
            self._set_affinity(job)
