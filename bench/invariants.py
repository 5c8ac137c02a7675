"""``invariants``: a long randomized run of the whole service with faults, SIGKILLs and two
replicas, checked continuously (issue 13; a benchmark, not a test: it reports figures).

The in-repo API-server double holds 30 ClusterQueues in cohorts (3 trees: a root cohort
with two child cohorts of 5 ClusterQueues each), one LocalQueue each, three priority
classes, and receives 2,000 Jobs over time (1-3 cpu, 3-12 s of work, more than the quota serves: created suspended
as the mutating webhook leaves them). Two ``serve`` replicas with leader election run
as subprocesses. This process plays the Job controller (a started Job runs for its
time, then completes; a stopped one has no pods), injects API faults (500/409/429/503
on Workload, Job and Lease writes, abrupt watch drops, watch-window compaction) and
SIGKILLs a replica (the Lease holder, mostly) 20 times, restarting it a second later.

Every Workload write is checked as the double stores it, from the Workload objects
alone (``QuotaReserved=True`` with ``status.admission`` and not ``Finished`` holds
quota — evicting ones included):

* ``overAdmission`` — a ClusterQueue above nominal + borrowingLimit, or a cohort tree
  above the quota of its whole tree (the cohorts here have no limits of their own, so
  every node's bound follows from these two); counted once per Workload write that
  takes a node over its bound;
* ``doubleAdmission`` — a Workload whose admission is replaced by another without being
  cleared, or a Job with two Workloads holding quota at once;
* ``releasedTwice`` — the service's ClusterQueue status showing less in use than the
  Workloads hold (a quota released twice), checked whenever the run is idle and at
  the end;
* ``lost`` — a Job not finished (or a Workload not ``Finished``) once the faults stop;
* ``checkerDrift`` — the checker's running sums differ from a recount of the store
  (every 15 s and at the end): a bug of this benchmark, not of the service.

``QM_INVARIANTS_STRICT=1`` runs with ``reserveEvictingCapacity: true`` in the
Configuration (capacity held by evicting workloads usable only by their preemptors).
``QM_INVARIANTS_JOBS``, ``QM_INVARIANTS_KILLS``, ``QM_INVARIANTS_SEED`` change the run;
``QM_INVARIANTS_TRACE=<file>`` writes one JSON line per Workload event (what it holds
before and after, its conditions, the Lease holder) and per violation, to find the
first violating write and its history.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.serve_process import ServeProcess
from bench.stack import TOKEN, USERNAME
from queues.api.conditions import is_true

JOBS = 2000
KILLS = 20
SEED = 13
TREES = 3
CQS_PER_COHORT = 5
ARRIVALS_PER_SECOND = 20.0  # demand above the 176 cpu of quota: queues, preemption
SERVICE_NS = "quartermaster-system"
LEASE = "quartermaster-leader-election"
PRIORITIES = (("low", 10), ("mid", 100), ("high", 1000))
RECOUNT_SECONDS = 15.0  # how often the incremental checker is checked against the store

Obj = dict[str, Any]


def topology(rng: random.Random) -> tuple[list[Obj], dict[str, Any]]:
    """The queue objects, and the tree: cq -> (cohort path to root, nominal, borrowingLimit)."""
    from tests.support.kube_harness import (
        cluster_queue,
        flavor,
        local_queue,
        namespace,
        priority_class,
    )

    objs: list[Obj] = [flavor("f")]
    objs += [priority_class(n, v) for n, v in PRIORITIES]
    tree: dict[str, Any] = {}
    for t in range(TREES):
        root = f"org-{t}"
        objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
                     "metadata": {"name": root}, "spec": {}})  # fmt: skip
        for c in range(2):
            cohort = f"{root}-team-{c}"
            objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
                         "metadata": {"name": cohort}, "spec": {"parentName": root}})  # fmt: skip
            for q in range(CQS_PER_COHORT):
                name = f"cq-{t}-{c}-{q}"
                nominal = rng.choice((4, 6, 8))
                limit = rng.choice((None, 2, 4))
                objs.append(
                    cluster_queue(
                        name,
                        {"f": {"cpu": nominal}},
                        cohort=cohort,
                        borrowing_limit=None if limit is None else str(limit),
                        preemption={
                            "withinClusterQueue": "LowerPriority",
                            "reclaimWithinCohort": "Any",
                            "borrowWithinCohort": {"policy": "LowerPriority"},
                        },
                    )
                )
                objs.append(namespace(f"ns-{name}"))
                objs.append(local_queue(f"ns-{name}", "lq", name))
                tree[name] = (
                    (cohort, root),
                    nominal * 1000,
                    None if limit is None else limit * 1000,
                )
    return objs, tree


class Checker:
    """Hooked on the double's store: every Workload event is checked (server's loop).

    Incremental: each event changes what one Workload holds, so the checker keeps what
    every Workload holds (ClusterQueue, cpu, owner) and the sums per ClusterQueue and
    per cohort tree, and checks the nodes the event touched. (Recomputing the sums from
    the store's every Workload on every event made the check O(workloads) per event:
    with 2,000 Jobs it ran on the double's loop for most of the run and slowed the API
    the replicas depend on.) ``recount`` recomputes everything from the store and
    reports any drift between the two, so the shortcut is checked too.
    """

    def __init__(self, tree: dict[str, Any]) -> None:
        self.tree = tree
        self.roots: dict[str, int] = defaultdict(int)
        for _, (path, nominal, _) in tree.items():
            self.roots[path[-1]] += nominal
        self.violations: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.events = 0
        self.admissions = 0
        self.releases = 0
        self.peak_tree_use: dict[str, int] = defaultdict(int)
        # Workload (namespace/name) -> (ClusterQueue, milli-cpu, owner uids) it holds.
        self.held: dict[str, tuple[str, int, tuple[str, ...]]] = {}
        self.per_cq: dict[str, int] = defaultdict(int)
        self.per_tree: dict[str, int] = defaultdict(int)
        self.holders: dict[str, set[str]] = defaultdict(set)  # owner uid -> Workloads
        self._server: Any = None
        trace = os.environ.get("QM_INVARIANTS_TRACE")
        self.trace = open(trace, "w", encoding="utf-8") if trace else None  # noqa: SIM115

    def _violate(self, kind: str, what: str) -> None:
        self.violations[kind] += 1
        self.examples.setdefault(kind, what)
        if self.trace is not None:
            self.trace.write(json.dumps({"t": round(time.monotonic(), 3), "violation": kind,
                                         "what": what}) + "\n")  # fmt: skip

    def install(self, server: Any) -> Checker:
        store = server.store
        rt = server.registry.resolve("workloads")
        emit = store._emit
        self._server, self._workloads = server, rt

        def checked(rtype: Any, event: Any) -> None:
            emit(rtype, event)
            if rtype.key == rt.key:
                self.on_event(event.type, event.obj, event.old)

        store._emit = checked
        return self

    @staticmethod
    def _holding(wl: Obj | None) -> tuple[str, int, tuple[str, ...]] | None:
        from tests.support.kube_invariants import holds_quota, usage_by_cq

        if not holds_quota(wl):
            return None
        assert wl is not None
        ((cq, used),) = usage_by_cq([wl]).items()
        cpu = sum(v for (_, r), v in used.items() if r == "cpu")
        owners = tuple(r.get("uid", "") for r in wl["metadata"].get("ownerReferences") or [])
        return cq, cpu, owners

    def on_event(self, kind: str, new: Obj | None, old: Obj | None) -> None:
        self.events += 1
        before = ((old or {}).get("status") or {}).get("admission")
        after = ((new or {}).get("status") or {}).get("admission") if kind != "DELETED" else None
        meta = (new or old or {}).get("metadata") or {}
        name = meta.get("name", "?")
        key = f"{meta.get('namespace', '')}/{name}"
        if before and after and before != after:
            self._violate("doubleAdmission", f"{name}: admission {before} replaced by {after}")
        was = self.held.pop(key, None)
        now = None if kind == "DELETED" else self._holding(new)
        if self.trace is not None:
            self._trace(kind, key, new, was, now)
        self.admissions += int(now is not None and was is None)
        self.releases += int(was is not None and now is None)
        if was is not None:
            cq, cpu, owners = was
            self.per_cq[cq] -= cpu
            self.per_tree[self.tree[cq][0][-1]] -= cpu
            for uid in owners:
                self.holders[uid].discard(key)
        if now is None:
            return
        self.held[key] = now
        cq, cpu, owners = now
        path, nominal, limit = self.tree[cq]
        root = path[-1]
        self.per_cq[cq] += cpu
        self.per_tree[root] += cpu
        used = self.per_cq[cq]
        if limit is not None and used > nominal + limit:
            self._violate("overAdmission", f"{cq}: {used}m > nominal {nominal}m + limit {limit}m")
        tree_use = self.per_tree[root]
        self.peak_tree_use[root] = max(self.peak_tree_use[root], tree_use)
        if tree_use > self.roots[root]:
            self._violate(
                "overAdmission", f"cohort {root}: {tree_use}m > tree quota {self.roots[root]}m"
            )
        for uid in owners:
            self.holders[uid].add(key)
            if len(self.holders[uid]) > 1:
                self._violate(
                    "doubleAdmission", f"job {uid}: {len(self.holders[uid])} Workloads hold quota"
                )

    def _trace(self, kind: str, key: str, new: Obj | None, was: Any, now: Any) -> None:
        """One line per Workload event (``QM_INVARIANTS_TRACE``): to find the first
        violating write and its history."""
        assert self.trace is not None
        status = (new or {}).get("status") or {}
        conds = [
            f"{c.get('type')}={c.get('status')}:{c.get('reason', '')}"
            for c in status.get("conditions") or []
        ]
        leader = ""
        if self._server is not None:
            lease = self._server.get_object("leases", LEASE, SERVICE_NS) or {}
            leader = (lease.get("spec") or {}).get("holderIdentity") or ""
        self.trace.write(json.dumps({
            "t": round(time.monotonic(), 3), "ev": kind, "key": key,
            "rv": ((new or {}).get("metadata") or {}).get("resourceVersion"),
            "was": was and list(was[:2]), "now": now and list(now[:2]),
            "conds": conds, "leader": leader,
            "msg": [c.get("message", "")[:160] for c in status.get("conditions") or []
                    if c.get("type") in ("Evicted", "Preempted")],
        }) + "\n")  # fmt: skip

    def recount(self, server: Any) -> None:
        """Recompute what is held from the store (server's loop): drift is a checker bug."""
        fresh: dict[str, tuple[str, int, tuple[str, ...]]] = {}
        for wl in server.store.list(self._workloads):
            held = self._holding(wl)
            if held is not None:
                fresh[f"{wl['metadata'].get('namespace', '')}/{wl['metadata']['name']}"] = held
        if fresh != self.held:
            self._violate(
                "checkerDrift", f"{len(set(fresh.items()) ^ set(self.held.items()))} differ"
            )


class JobController:
    """Started Jobs run for their time and complete; stopped ones lose their pods."""

    def __init__(self, api: Any, runtime: dict[str, float]) -> None:
        self.api = api
        self.runtime = runtime  # job name -> seconds of work
        self.started: dict[str, float] = {}
        self.completed = 0
        self.restarts = 0

    def tick(self) -> None:
        self.api.call(self._tick)

    def _tick(self, server: Any) -> None:
        rt = server.registry.resolve("jobs")
        now = time.monotonic()
        for job in list(server.store.list(rt)):
            meta, spec, status = job["metadata"], job["spec"], job.get("status") or {}
            name = meta["name"]
            if any(c.get("type") in ("Complete", "Failed") for c in status.get("conditions") or []):
                continue
            if spec.get("suspend"):
                if self.started.pop(name, None) is not None:
                    self.restarts += 1
                if status.get("active"):
                    self._status(server, job, {**status, "active": 0})
                continue
            if name not in self.started:
                self.started[name] = now
                self._status(server, job, {**status, "active": spec.get("parallelism", 1)})
            elif now - self.started[name] >= self.runtime.get(name, 1.0):
                done = {"conditions": [{"type": "Complete", "status": "True"}],
                        "succeeded": spec.get("parallelism", 1), "active": 0}  # fmt: skip
                self._status(server, job, {**status, **done})
                self.completed += 1
                self.started.pop(name, None)

    @staticmethod
    def _status(server: Any, job: Obj, status: Obj) -> None:
        import copy

        body = copy.deepcopy(job)
        body["status"] = status
        body["metadata"].pop("resourceVersion", None)
        try:
            server.put_object(body)
        except Exception:  # noqa: BLE001 - the next tick tries again
            pass


def _config(strict: bool) -> Obj:
    doc: Obj = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "clientConnection": {"qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": True},
    }
    if strict:
        doc["reserveEvictingCapacity"] = True
    return doc


def run() -> dict[str, Any]:
    from admission.apiserver_double import DEFAULT_NAMESPACES, start_apiserver
    from tests.support.kube_harness import job as make_job

    n_jobs = int(os.environ.get("QM_INVARIANTS_JOBS", JOBS))
    n_kills = int(os.environ.get("QM_INVARIANTS_KILLS", KILLS))
    seed = int(os.environ.get("QM_INVARIANTS_SEED", SEED))
    strict = os.environ.get("QM_INVARIANTS_STRICT") == "1"
    if strict:
        from admission.config.load import parse_config
        from admission.config.schema import ConfigError

        try:
            parse_config(_config(strict))
        except ConfigError as err:
            raise RuntimeError(f"strict mode is not in this build: {err}") from err
    rng = random.Random(seed)
    objects, tree = topology(rng)
    cqs = sorted(tree)
    runtime: dict[str, float] = {}
    jobs: list[Obj] = []
    for i in range(n_jobs):
        cq = rng.choice(cqs)
        name = f"job-{i}"
        prio = rng.choices([p for p, _ in PRIORITIES], weights=(6, 3, 1))[0]
        jobs.append(make_job(f"ns-{cq}", name, queue="lq", cpu=str(rng.choice((1, 1, 2, 3))),
                             priority_class=prio, suspend=True))  # fmt: skip
        runtime[name] = rng.uniform(3.0, 12.0)
    faults: Counter[str] = Counter()
    kills = 0
    wall0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="qm-invariants-") as tmp,
        start_apiserver(
            objects=objects,
            tokens={TOKEN: USERNAME},
            namespaces=(*DEFAULT_NAMESPACES, SERVICE_NS),
            record_requests=False,
            watch_window=5000,
            bookmark_interval=5.0,
        ) as api,
    ):
        work = Path(tmp)
        checker = api.call(lambda s: Checker(tree).install(s))
        kubeconfig = api.write_kubeconfig(work / "kubeconfig", token=TOKEN)
        replicas = [
            ServeProcess(
                kubeconfig=kubeconfig,
                workdir=work,
                name=f"replica-{i}",
                config=_config(strict),
                args=("--leader-elect",),
                env={"POD_NAME": f"replica-{i}"},
                log_level="ERROR",
            )
            for i in range(2)
        ]
        for r in replicas:
            r.start(ready_timeout=600)
        controller = JobController(api, runtime)
        stop = threading.Event()

        def play() -> None:
            while not stop.is_set():
                try:
                    controller.tick()
                except Exception:  # noqa: BLE001 - a busy double: next tick
                    pass
                stop.wait(0.2)

        player = threading.Thread(target=play, daemon=True)
        player.start()

        def leader() -> ServeProcess:
            lease = api.call(lambda s: s.get_object("leases", LEASE, SERVICE_NS)) or {}
            holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            return next((r for r in replicas if r.name == holder), rng.choice(replicas))

        def inject() -> None:
            kind = rng.choice(("status", "status", "create", "job", "lease", "watch", "compact"))
            code = rng.choice((500, 409, 429, 503))
            if kind == "status":
                api.fail_next(
                    rng.randint(1, 3), code=code, verb="patch", resource="workloads/status"
                )
            elif kind == "create":
                api.fail_next(1, code=code, verb="create", resource="workloads")
            elif kind == "job":
                api.fail_next(rng.randint(1, 2), code=code, verb="patch", resource="jobs")
            elif kind == "lease":
                api.fail_next(1, code=rng.choice((500, 503)), verb="update", resource="leases")
            elif kind == "watch":
                api.drop_watches(abrupt=rng.random() < 0.5)
            else:
                api.compact()
            faults[kind] += 1

        created = 0
        arrival_s = n_jobs / ARRIVALS_PER_SECOND
        kill_at = sorted(rng.uniform(5.0, arrival_s + 20.0) for _ in range(n_kills))
        next_fault = time.monotonic() + rng.uniform(0.5, 2.0)
        t0 = time.monotonic()
        restarts: list[tuple[float, ServeProcess]] = []
        next_recount = time.monotonic() + RECOUNT_SECONDS
        while created < n_jobs or kill_at or restarts:
            now = time.monotonic()
            if now >= next_recount:
                api.call(checker.recount)
                next_recount = now + RECOUNT_SECONDS
            due = min(n_jobs, int((now - t0) * ARRIVALS_PER_SECOND))
            if due > created:
                batch = jobs[created:due]
                api.call(lambda s, b=batch: [s.put_object(j) for j in b])
                created = due
            if kill_at and now - t0 >= kill_at[0]:
                kill_at.pop(0)
                victim = leader() if rng.random() < 0.75 else rng.choice(replicas)
                if victim.alive():
                    victim.kill()
                    kills += 1
                    restarts.append((now + rng.uniform(0.5, 2.0), victim))
            for when, r in list(restarts):
                if now >= when:
                    restarts.remove((when, r))
                    r.start(wait_ready=False)
            if now >= next_fault:
                inject()
                next_fault = now + rng.uniform(0.5, 2.0)
            for r in replicas:  # a replica that lost its Lease exits (by design): restart
                if not r.alive() and all(r is not x for _, x in restarts):
                    faults["exits"] += 1
                    r.start(wait_ready=False)
            time.sleep(0.05)
        faults_stopped = time.monotonic()
        api.clear_faults()
        deadline = time.monotonic() + float(os.environ.get("QM_INVARIANTS_DRAIN", 900))
        unfinished: list[str] = []
        while time.monotonic() < deadline:
            unfinished = api.call(_unfinished)
            if not unfinished:
                break
            for r in replicas:
                if not r.alive():
                    faults["exits"] += 1
                    r.start(wait_ready=False)
            time.sleep(1.0)
        drain = time.monotonic() - faults_stopped
        time.sleep(3.0)  # the leader's last queue status writes
        api.call(checker.recount)
        if checker.trace is not None:
            checker.trace.close()
        # only meaningful once drained: the queue status lags the Workloads while running
        released_twice = api.call(lambda s: _released_twice(s, tree)) if not unfinished else None
        stop.set()
        player.join(timeout=10)
        logs = {r.name: r.log_tail(1500) for r in replicas}
        for r in replicas:
            r.stop()
    # every kind, 0 included: "0 over-admissions" is a figure, not a missing key
    violations = {k: checker.violations.get(k, 0) for k in ("overAdmission", "doubleAdmission")}
    violations |= dict(checker.violations)
    violations["releasedTwice"] = None if released_twice is None else len(released_twice)
    violations["lost"] = sum(1 for u in unfinished if not u.startswith("workload/"))
    return {
        "mode": "strict (reserveEvictingCapacity)" if strict else "default (Kueue's)",
        "seed": seed,
        "jobs": n_jobs,
        "clusterQueues": len(tree),
        "cohorts": TREES * 3,
        "replicas": 2,
        "kills": kills,
        "faultsInjected": sum(v for k, v in faults.items() if k != "exits"),
        "replicaExits": faults.get("exits", 0),  # a replica that lost its Lease stops
        "faultsByKind": dict(faults),
        "wallSeconds": round(time.monotonic() - wall0, 1),
        "drainSeconds": round(drain, 1),
        "workloadEventsChecked": checker.events,
        "admissions": checker.admissions,
        "releases": checker.releases,
        "jobsCompleted": controller.completed,
        "jobsStoppedAndRequeued": controller.restarts,
        "violations": violations,
        "violationExamples": checker.examples
        | ({"releasedTwice": released_twice[0]} if released_twice else {})
        | (
            {"unfinishedWorkloads": sum(u.startswith("workload/") for u in unfinished)}
            if unfinished
            else {}
        )
        | ({"lost": ", ".join(unfinished[:5])} if unfinished else {}),
        "peakTreeUseMilliCpu": dict(checker.peak_tree_use),
        "treeQuotaMilliCpu": dict(checker.roots),
        **({"logTails": logs} if unfinished else {}),
    }


def _unfinished(server: Any) -> list[str]:
    jobs = server.store.list(server.registry.resolve("jobs"))
    out = []
    for j in jobs:
        if not is_true(j, "Complete"):
            out.append(j["metadata"]["name"])
    wls = server.store.list(server.registry.resolve("workloads"))
    for w in wls:
        if not is_true(w, "Finished"):
            out.append("workload/" + w["metadata"]["name"])
    return out


def _released_twice(server: Any, tree: dict[str, Any]) -> list[str]:
    """ClusterQueues whose status (the service's view) shows less cpu in use than their
    Workloads hold: a quota released twice."""
    from queues.quantity import to_units
    from tests.support.kube_invariants import usage_by_cq

    actual = usage_by_cq(server.store.list(server.registry.resolve("workloads")))
    out = []
    for cq in server.store.list(server.registry.resolve("clusterqueues")):
        name = cq["metadata"]["name"]
        reported = 0
        for fu in (cq.get("status") or {}).get("flavorsReservation") or []:
            for r in fu.get("resources") or []:
                if r.get("name") == "cpu":
                    reported += to_units("cpu", r.get("total") or "0")
        held = sum(v for (_, r), v in actual.get(name, {}).items() if r == "cpu")
        if reported < held or reported < 0:
            out.append(f"{name}: status {reported}m < held {held}m")
    return out
