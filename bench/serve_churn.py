"""``serve-churn``: what freezing the heap holds on to under a service's churn
(docs/benchmarks.md).

``serve`` keeps its state for as long as it runs while that state turns over: Jobs and
their Workloads arrive, wait, are admitted, finish and are deleted; pending reasons are
written; ClusterQueues are edited. Freezing what survives a full collection
(:mod:`admission.engine.gc_pause`) makes full collections walk only new objects, but a
cycle of objects that dies while frozen is not reclaimed until the next compaction.
This benchmark drives the pieces of ``serve`` that hold that state, in one process and
without the API or the event loop: the Job and Workload informer stores (their
slimmers, as ``serve`` builds them), ``CacheSync`` and the scheduler, with the events an
API server would send for what the service writes. Two runs, one process each: without
freezing, and with it (``freeze_survivors`` after the startup sync and the first cycles,
``between_cycles`` after every cycle).

Per run: ``rssMiB`` and ``allocatedBlocks`` (``sys.getallocatedblocks()``) at ten
checkpoints, the frozen count there, compactions, full collections, the longest single
collection (wall, between the collector's start and stop callbacks) and, at the end,
``reclaimedAfterUnfreeze``: the objects a full collection reclaims right after
``gc.unfreeze()`` (what freezing held on to), after a full collection before it has taken
the ordinary garbage. ``QM_SERVE_CHURN_BACKLOG`` (pending Workloads, 20,000) and
``QM_SERVE_CHURN_ROUNDS`` (rounds of one simulated second, 3,000) override the size.
"""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import time
from typing import Any

from bench.jobgen import TEAMS, realistic_job

Obj = dict[str, Any]
BACKLOG = 20_000
ROUNDS = 3_000
COHORTS = 8
QUEUES_PER_COHORT = 8
EDIT_EVERY = 25  # rounds between two ClusterQueue edits (QM_SERVE_CHURN_EDIT_EVERY; 0: none)
CHECKPOINTS = 10


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


class Pauses:
    """The collector's passes, timed from its start and stop callbacks."""

    def __init__(self) -> None:
        self.longest_ms = 0.0
        self.longest_full_ms = 0.0
        self.full = 0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        ms = (time.perf_counter() - self._t0) * 1000
        self.longest_ms = max(self.longest_ms, ms)
        if info.get("generation") == 2:
            self.full += 1
            self.longest_full_ms = max(self.longest_full_ms, ms)


class Cluster:
    """What the API server would hold and send: objects in, events to the service's
    stores and cache out."""

    def __init__(self, *, seed: int, edit_every: int = EDIT_EVERY) -> None:
        from admission.config.schema import Config
        from admission.engine.cache import Cache
        from admission.kube.client.resources import WORKLOADS
        from admission.kube.watch.cachesync import CacheSync
        from admission.kube.watch.informer import Informer, strip_managed_fields
        from admission.kube.watch.slim import slimmer_for

        self.rng = random.Random(seed)
        self.edit_every = edit_every
        self.now = 1_700_000_000.0
        self.rv = 0
        self.cache = Cache(
            flavors={}, cluster_queues={}, cohorts={}, local_queues={}, namespaces={}
        )
        self.sync = CacheSync(self.cache, clock=lambda: self.now)
        self.scheduler = Config().make_scheduler(self.cache, clock=lambda: self.now)
        jobs_resource = _jobs_resource()
        self.workloads = Informer(
            None,  # type: ignore[arg-type]  # fed below, never listing or watching
            WORKLOADS,
            transform=strip_managed_fields,
            slimmer=slimmer_for("workloads", "kueue.x-k8s.io"),
        )
        self.jobs = Informer(
            None,  # type: ignore[arg-type]
            jobs_resource,
            transform=strip_managed_fields,
            slimmer=slimmer_for("jobs", "batch"),
            keep_recent=4096,
        )
        self.api: dict[str, Obj] = {}  # Workload key -> the API's whole object
        self.job_of: dict[str, str] = {}  # Workload key -> its Job's key
        self.finish_at: dict[str, float] = {}  # admitted Workload -> when it finishes
        self.finished: list[str] = []  # finished last round: deleted this round
        self.cqs: dict[str, Obj] = {}
        self.next_job = 0
        self.admitted = self.finished_total = self.edits = 0

    def _meta(self, obj: Obj) -> Obj:
        self.rv += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"uid-{self.rv}")
        meta.setdefault("generation", 1)
        meta.setdefault("creationTimestamp", _rfc3339(self.now))
        return obj

    def _deliver(self, inf: Any, obj: Obj | None, key: str) -> Obj | None:
        """An informer's watch event: the stored (slim) form, as the handlers get it."""
        if obj is None:
            inf._recent.pop(key)
            inf.store.pop(key, None)
            return None
        _, stored = inf._ingest(json.loads(json.dumps(obj)))  # a decoded copy, as a watch's
        inf.store[key] = stored
        return stored

    def workload_event(self, key: str, obj: Obj | None) -> None:
        self.sync.workload(key, self._deliver(self.workloads, obj, key))

    def setup(self) -> None:
        from tests.support.kube_harness import cluster_queue, flavor, local_queue, namespace

        objs = [flavor("h100", **{"nvidia.com/gpu.product": "H100"}),
                flavor("a100", **{"nvidia.com/gpu.product": "A100"})]  # fmt: skip
        for t in TEAMS:
            objs.append(namespace(f"team-{t}"))
        for c in range(COHORTS):
            for q in range(QUEUES_PER_COHORT):
                name = f"cq-{c}-{q}"
                quota = {"cpu": 64, "memory": "384Gi", "nvidia.com/gpu": 8}
                cq = cluster_queue(name, {"h100": quota, "a100": quota}, cohort=f"co-{c}")
                self.cqs[name] = cq
                objs.append(cq)
        for i, t in enumerate(TEAMS):
            for c in range(COHORTS):
                objs.append(local_queue(f"team-{t}", f"q{c}", f"cq-{c}-{i % QUEUES_PER_COHORT}"))
        for obj in objs:
            self._meta(obj)
            meta = obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
            self.sync.queue_object(obj["kind"], key, obj)
        self.sync.flush_objects()

    def arrive(self, n: int) -> None:
        """``n`` new Jobs, and the Workload the service creates for each."""
        from admission.integrations.framework.composition import compose
        from admission.integrations.kinds.job import JOB

        for _ in range(n):
            i = self.next_job
            self.next_job += 1
            team = TEAMS[i % len(TEAMS)]
            job = self._meta(
                realistic_job(i, namespace=f"team-{team}", queue=f"q{i % COHORTS}", seed=7)
            )
            jkey = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
            self._deliver(self.jobs, job, jkey)
            _, body = compose(JOB, job, workload_priority_classes={}, priority_classes={})
            body = self._meta(body)
            key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            self.api[key] = body
            self.job_of[key] = jkey
            self.workload_event(key, body)

    def _status(self, key: str, status: Obj) -> None:
        obj = self.api[key]
        obj["status"] = {**(obj.get("status") or {}), **status}
        self._meta(obj)

    def cycle(self) -> Any:
        """One scheduling cycle and what the service writes for it, as events back."""
        from admission.kube import objects as kobj

        self.sync.flush_objects()
        self.sync.pause()
        try:
            result = self.scheduler.schedule()
        finally:
            self.sync.resume()
        for d in result.admitted:  # assumed, written, the event held until it settles
            key = d.workload.key
            self.sync.inflight.add(key)
            self._status(key, kobj.admission_status(self.api[key], d.admission, now=self.now))
            self.workload_event(key, self.api[key])
            self.sync.admitted_gen[key] = kobj.generation(self.api[key])
            self.sync.settle(key)
            self.finish_at[key] = self.now + self.rng.randint(5, 40)
            self.admitted += 1
        for key, st in result.pending.items():
            if key not in self.api:
                continue
            body = kobj.pending_status(
                self.api[key], reason=str(st.reason), message=st.message, now=self.now
            )
            if body is not None:
                self._status(key, body)
                self.workload_event(key, self.api[key])
        return result

    def tick(self) -> int:
        """One second: last round's finished Workloads and their Jobs deleted, the ones
        due finish, as many new Jobs arrive, sometimes a ClusterQueue edit."""
        from admission.kube import objects as kobj

        self.now += 1.0
        for key in self.finished:
            self.api.pop(key)
            self.workload_event(key, None)
            self._deliver(self.jobs, None, self.job_of.pop(key))
        due = [k for k, at in self.finish_at.items() if at <= self.now]
        for key in due:
            del self.finish_at[key]
            self._status(key, kobj.finished_status(self.api[key], succeeded=True, now=self.now))
            self.workload_event(key, self.api[key])
        self.finished = due
        self.finished_total += len(due)
        self.arrive(len(due))
        if self.edit_every and int(self.now) % self.edit_every == 0:
            self.edit_cluster_queue()
        return len(due)

    def edit_cluster_queue(self) -> None:
        """A ClusterQueue's CPU quota moves between 48 and 80 (a new generation)."""
        name = self.rng.choice(sorted(self.cqs))
        cq = json.loads(json.dumps(self.cqs[name]))
        for fl in cq["spec"]["resourceGroups"][0]["flavors"]:
            for r in fl["resources"]:
                if r["name"] == "cpu":
                    r["nominalQuota"] = str(self.rng.choice((48, 64, 80)))
        cq["metadata"]["generation"] += 1
        self.cqs[name] = self._meta(cq)
        self.sync.queue_object("ClusterQueue", name, cq)
        self.edits += 1


def _jobs_resource() -> Any:
    from admission.integrations.kinds.job import JOB
    from admission.kube.client.resources import resource_of

    return resource_of(JOB)


def _rfc3339(ts: float) -> str:
    from admission.kube.objects import rfc3339

    return rfc3339(ts)


def run_mode(*, freeze: bool, backlog: int, rounds: int, edit_every: int) -> dict[str, Any]:
    from admission.engine import gc_pause

    cluster = Cluster(seed=1, edit_every=edit_every)
    cluster.setup()
    cluster.arrive(backlog)
    while cluster.cycle().changed:  # the first cycles: the startup sync's end
        pass
    t0 = time.perf_counter()
    if freeze:
        gc_pause.freeze_survivors()
    startup_freeze_ms = round((time.perf_counter() - t0) * 1000, 1)
    pauses = Pauses()
    gc.callbacks.append(pauses)
    checkpoints = []
    every = max(1, rounds // CHECKPOINTS)
    cycles = 0
    for r in range(1, rounds + 1):
        cluster.tick()
        while True:
            result = cluster.cycle()
            cycles += 1
            if freeze:
                gc_pause.between_cycles()
            if not result.changed:
                break
        if r % every == 0:
            checkpoints.append(
                {
                    "round": r,
                    "rssMiB": _rss_mib(),
                    "allocatedBlocks": sys.getallocatedblocks(),
                    "frozen": gc.get_freeze_count(),
                    "workloads": len(cluster.api),
                }
            )
    gc.callbacks.remove(pauses)
    state = gc_pause.frozen_state()
    collected_before = gc.collect()  # the ordinary garbage, reachable by a full pass
    reclaimed = gc_pause.release() if freeze else None
    return {
        "freeze": freeze,
        "backlog": backlog,
        "rounds": rounds,
        "cycles": cycles,
        "admitted": cluster.admitted,
        "finished": cluster.finished_total,
        "clusterQueueEdits": cluster.edits,
        "workloadsAtEnd": len(cluster.api),
        "pendingAtEnd": len(cluster.api) - len(cluster.finish_at) - len(cluster.finished),
        "startupFreezeMs": startup_freeze_ms,
        "fullCollections": pauses.full,
        "longestCollectionMs": round(pauses.longest_ms, 1),
        "longestFullCollectionMs": round(pauses.longest_full_ms, 1),
        "compactions": state["compactions"],
        "frozenAtEnd": state["frozen"],
        "collectedAtEnd": collected_before,
        "reclaimedAfterUnfreeze": reclaimed,
        "checkpoints": checkpoints,
        "loadavg": _loadavg(),
    }


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run() -> dict[str, Any]:
    """Both runs, each in a process of its own (the collector's policy is process-wide)."""
    out: dict[str, Any] = {"loadavgStart": _loadavg()}
    for mode in ("off", "on"):
        proc = subprocess.run(
            [sys.executable, "-m", "bench.serve_churn", mode],
            capture_output=True,
            text=True,
            check=True,
        )
        out[f"freeze{mode.capitalize()}"] = json.loads(proc.stdout)
    return out


if __name__ == "__main__":
    print(
        json.dumps(
            run_mode(
                freeze=sys.argv[1] == "on",
                backlog=int(os.environ.get("QM_SERVE_CHURN_BACKLOG", BACKLOG)),
                rounds=int(os.environ.get("QM_SERVE_CHURN_ROUNDS", ROUNDS)),
                edit_every=int(os.environ.get("QM_SERVE_CHURN_EDIT_EVERY", EDIT_EVERY)),
            )
        )
    )
