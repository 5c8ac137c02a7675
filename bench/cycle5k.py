"""``cycle-5k``: steady-state scheduling cycles at cluster scale (docs/benchmarks.md).

5,000 ClusterQueues (cpu nominal 20, borrowing limit 100, ``withinClusterQueue:
LowerPriority``, ``reclaimWithinCohort: Any`` — Kueue's perf-test queues) and 100,000
pending single-pod workloads (priority 50/100/200, 1/2/5 cpu), in two shapes:

* ``flat`` — 500 cohorts of 10 ClusterQueues (one cohort level);
* ``deep`` — one tree of depth 4: a root, 10 children, 10 grandchildren each, 5
  great-grandchildren each (500 leaf cohorts), 10 ClusterQueues per leaf cohort.

The engine runs on a fake clock (one second per cycle). After the cycles that fill the
empty cluster (until a cycle admits fewer than ``STEADY_ADMISSIONS``) the backlog is
topped up to 100,000 again; from then on every cycle is
followed by ``FINISHES`` random admitted workloads finishing and as many new pending
workloads arriving — the cluster stays full and the backlog at 100k — and preempted
workloads release their quota at once (the simulator's ``eviction_latency=0``). Each
cycle's ``schedule()`` is timed in CPU (``time.thread_time``); ``cycleCpuMs`` gives
p50/p99/max over the measured steady cycles, ``admissionsPerCpuSecond`` their
admissions over their CPU. A shape stops after ``CYCLES`` steady cycles
(``QM_CYCLE5K_CYCLES``, default 200) or ``CPU_BUDGET`` seconds of cycle CPU, whichever
comes first (``steadyCycles`` says how many were measured); ``gcCpuMs`` is the part of the cycle CPU the cyclic garbage
collector took, ``gcOutsideCyclesCpuSeconds`` what it took between the timed cycles and
``fullCollections`` how many generation-2 collections ran, ``gcTotalCpuSeconds`` the
two together, all over the steady phase. Like a controller after its startup sync, the
run freezes what survives the fill and the backlog (``admission.engine.gc_pause``:
``freeze_survivors``; ``QM_CYCLE5K_FREEZE=0`` does not): a generation-2 collection then
walks only what was made since the previous one, not the 1.4M objects of 100k workloads
(about 1 s each unfrozen). ``freeze`` says what freezing held on to: the frozen count at
the end, the compactions, and ``reclaimedAfterUnfreeze``, the objects a full collection
reclaims once everything is unfrozen at the end (cyclic garbage that died frozen);
``rssMiB`` the resident size at the start and the end of the steady phase.
Measurement only: compare with itself over time and with the tight-loop floor the
issue quotes; there is no peer figure.

``QM_CYCLE5K_PARK_UNTIL_FEASIBLE=1`` runs the engine with deficit-bounded parking
(``parkUntilFeasible: true``, our extension; off is Kueue's behaviour), reported as
``parkUntilFeasible``; ``headsPerCycle`` is the heads nominated per steady cycle.

``QM_CYCLE5K_TIME_KEPT=1`` also times every nomination answered from a kept answer
(``admission.engine.verdicts``: a head whose answer its tree's values give again) and
reports ``keptAnswers``: how many heads a steady cycle answers so, what evaluating them
costs (``evaluationMs``), and the cycle's CPU without it (``cycleLessEvaluationMs``):
what a cycle would cost if evaluating those heads were free, the most that skipping
the evaluation of unchanged heads can take off. The timers slow the cycle a little;
the decisions are the same.
"""

from __future__ import annotations

import gc
import os
import random
import time
from typing import Any

CQS = 5_000
PENDING = 100_000
FINISHES = 64  # per steady cycle (the issue's ≈63 admissions per cycle)
STEADY_ADMISSIONS = 500  # a fill cycle admits more than this
CYCLES = int(os.environ.get("QM_CYCLE5K_CYCLES", "200"))
CPU_BUDGET = 300.0  # seconds of cycle CPU per shape at most
WARMUP_MAX = 200  # fill cycles at most
SHAPES = {"flat": (500,), "deep": (10, 10, 5)}  # cohort fan-out per level below the root


def cohort_objects(shape: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(Cohort docs, leaf cohort names) for a shape; ``flat`` has no parent cohorts."""
    fanout = SHAPES[shape]
    if shape == "flat":
        return [], [f"cohort-{i}" for i in range(fanout[0])]
    docs: list[dict[str, Any]] = [_cohort("root", None)]
    level = ["root"]
    for width in fanout:
        nxt = []
        for parent in level:
            for i in range(width):
                name = f"{parent}-{i}"
                docs.append(_cohort(name, parent))
                nxt.append(name)
        level = nxt
    return docs, level


def _cohort(name: str, parent: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent is not None:
        spec["parentName"] = parent
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def queue_documents(shape: str) -> list[dict[str, Any]]:
    """ResourceFlavor, Cohorts, ClusterQueues and one LocalQueue per ClusterQueue."""
    cohorts, leaves = cohort_objects(shape)
    docs: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "default"}},
        *cohorts,
    ]  # fmt: skip
    per_leaf = CQS // len(leaves)
    for li, leaf in enumerate(leaves):
        for q in range(per_leaf):
            name = f"cq-{li}-{q}"
            docs.append({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "cohortName": leaf, "namespaceSelector": {},
                    "preemption": {"withinClusterQueue": "LowerPriority",
                                   "reclaimWithinCohort": "Any"},
                    "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{
                        "name": "default", "resources": [{
                            "name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}]}]}],
                },
            })  # fmt: skip
            docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                         "metadata": {"name": "lq", "namespace": name},
                         "spec": {"clusterQueue": name}})  # fmt: skip
    return docs


def workload_document(i: int, namespace: str, rng: random.Random) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"wl-{i}", "namespace": namespace, "uid": f"uid-{i:07d}",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"queueName": "lq", "priority": rng.choice([50, 100, 200]), "podSets": [{
            "name": "main", "count": 1, "template": {"spec": {"containers": [{
                "name": "c", "image": "x",
                "resources": {"requests": {"cpu": str(rng.choice([1, 2, 5]))}}}]}}}]},
    }  # fmt: skip


class _KeptAnswerTimer:
    """Stands in for a scheduler's nominator (measurement only): each nomination it
    passes on that the kept answers served (their ``hits`` count rose) is timed, in
    wall time, which on a quiet machine is its CPU."""

    def __init__(self, nominator: Any) -> None:
        self._nominator = nominator
        self.ns = 0
        self.count = 0

    @property
    def snap(self) -> Any:
        return self._nominator.snap

    @snap.setter
    def snap(self, value: Any) -> None:
        self._nominator.snap = value

    def nominate(self, e: Any, snap: Any, **kwargs: Any) -> None:
        kept = self._nominator.kept
        before = kept.hits
        t0 = time.perf_counter_ns()
        self._nominator.nominate(e, snap, **kwargs)
        if kept.hits > before:
            self.ns += time.perf_counter_ns() - t0
            self.count += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nominator, name)


def _percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, max(0, -(-len(sorted_values) * p // 100) - 1))]


def _p50_p99(sorted_values: list[float], scale: float = 1.0) -> dict[str, float]:
    """The median and p99 of ``sorted_values`` times ``scale``, rounded to 0.1."""
    return {
        "p50": round(_percentile(sorted_values, 50) * scale, 1),
        "p99": round(_percentile(sorted_values, 99) * scale, 1),
    }


def _rss_mib() -> float:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:
        return 0.0


def run_shape(shape: str, *, seed: int = 1) -> dict[str, Any]:
    from admission.config.load import parse_config
    from admission.engine import gc_pause
    from admission.engine.cache import Cache
    from queues import model as m
    from queues.api.parse import parse_model

    rng = random.Random(seed)
    objs = [parse_model(d) for d in queue_documents(shape)]
    cache = Cache(
        flavors={o.name: o for o in objs if isinstance(o, m.ResourceFlavor)},
        cluster_queues={o.name: o for o in objs if isinstance(o, m.ClusterQueue)},
        cohorts={o.name: o for o in objs if isinstance(o, m.Cohort)},
        local_queues={o.key: o for o in objs if isinstance(o, m.LocalQueue)},
    )
    cq_names = list(cache.cluster_queues)
    now = [1_767_225_600.0]
    bounded = os.environ.get("QM_CYCLE5K_PARK_UNTIL_FEASIBLE", "") not in ("", "0")
    config = parse_config({"parkUntilFeasible": True} if bounded else {})
    scheduler = config.make_scheduler(cache, clock=lambda: now[0], explain=False)
    timer = None
    if os.environ.get("QM_CYCLE5K_TIME_KEPT", "") not in ("", "0"):
        timer = _KeptAnswerTimer(scheduler._nominator)  # (measurement only: see the module)
        scheduler._nominator = timer
    serial = iter(range(10**9))

    def arrive(count: int) -> None:
        for _ in range(count):
            i = next(serial)
            wl = parse_model(workload_document(i, cq_names[i % len(cq_names)], rng))
            assert isinstance(wl, m.Workload)
            wl.creation_time = now[0] + i * 1e-6
            cache.add_workload(wl)

    # Collector CPU: [inside the timed schedule(), outside it, when the running one
    # started, whether schedule() is running, full collections]
    gc_spent: list[Any] = [0.0, 0.0, 0.0, False, 0]

    def collector(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_spent[2] = time.thread_time()
            return
        gc_spent[0 if gc_spent[3] else 1] += time.thread_time() - gc_spent[2]
        gc_spent[4] += info["generation"] == 2

    def cycle() -> tuple[float, int, int, int]:
        gc_spent[0] = 0.0
        gc_spent[3] = True
        t0 = time.thread_time()
        r = scheduler.schedule()
        spent = time.thread_time() - t0
        gc_spent[3] = False
        for p in r.preempted:
            if p.workload.key in cache.admitted:
                cache.evicted(p.workload.key)
        now[0] += 1.0
        return spent, len(r.admitted), len(r.preempted), r.heads

    arrive(PENDING)
    fill, fill_cpu = 0, 0.0
    while fill < WARMUP_MAX:
        spent, admitted, _, _ = cycle()
        fill += 1
        fill_cpu += spent
        if admitted < STEADY_ADMISSIONS or fill_cpu > CPU_BUDGET:
            break
    arrive(PENDING - sum(len(q) for q in cache.queues.values()))  # the backlog back at 100k
    # a controller's startup sync: what survives it is frozen (admission.engine.gc_pause)
    freeze = os.environ.get("QM_CYCLE5K_FREEZE", "1") not in ("", "0")
    if freeze:
        gc_pause.freeze_survivors()
    rss = [_rss_mib()]
    gc.callbacks.append(collector)  # what collections cost, inside the cycles and between
    gc_spent[1] = gc_spent[4] = 0
    cpu: list[float] = []
    in_gc: list[float] = []
    admissions = preemptions = heads = 0
    kept_ms: list[float] = []  # per steady cycle: its kept answers' evaluation
    kept_heads = 0
    while len(cpu) < CYCLES and sum(cpu) < CPU_BUDGET:
        running = list(cache.admitted)
        done = rng.sample(running, min(FINISHES, len(running)))
        for key in done:
            cache.finish(key)
        arrive(len(done))
        if timer is not None:
            timer.ns = timer.count = 0
        spent, admitted, preempted, nominated = cycle()
        if timer is not None:
            kept_ms.append(timer.ns / 1e6)
            kept_heads += timer.count
        gc_pause.between_cycles()  # a compaction, if due: outside the timed cycle
        cpu.append(spent)
        heads += nominated
        in_gc.append(gc_spent[0])
        admissions += admitted
        preemptions += preempted
    gc.callbacks.remove(collector)
    rss.append(_rss_mib())
    frozen = gc_pause.frozen_state()
    gc.collect()  # the garbage of the young part, then what freezing held on to
    leaked = gc_pause.release() if freeze else 0
    frozen_figures = {"frozenAtEnd": frozen["frozen"], "compactions": frozen["compactions"],
                      "reclaimedAfterUnfreeze": leaked} if freeze else None  # fmt: skip
    ordered = sorted(cpu)
    total = sum(cpu)
    gc_ordered = sorted(in_gc)
    kept_answers = None
    if timer is not None and cpu:
        evaluation = sorted(kept_ms)
        less = sorted(c * 1000 - k for c, k in zip(cpu, kept_ms, strict=True))
        kept_answers = {
            "perCycle": round(kept_heads / len(cpu), 1),
            "evaluationMs": _p50_p99(evaluation),
            "cycleLessEvaluationMs": _p50_p99(less),
        }
    return {
        "parkUntilFeasible": bounded,
        "clusterQueues": len(cq_names),
        "cohorts": len(cache.cohorts) or len(cohort_objects(shape)[1]),
        "pending": sum(len(q) for q in cache.queues.values()),
        "admitted": len(cache.admitted),
        "fillCycles": fill,
        "fillCpuSeconds": round(fill_cpu, 3),
        "steadyCycles": len(cpu),
        "cycleCpuMs": {
            **_p50_p99(ordered, 1000),
            "max": round(ordered[-1] * 1000, 1) if ordered else 0.0,
        },
        "gcCpuMs": {  # of cycleCpuMs: the cyclic collector, run inside the timed cycles
            **_p50_p99(gc_ordered, 1000),
            "total": round(sum(in_gc) * 1000, 1),
        },
        # between the timed cycles (finishes, arrivals, evictions): collections the
        # cycle's allocations may have made due run there too
        "gcOutsideCyclesCpuSeconds": round(gc_spent[1], 3),
        "fullCollections": gc_spent[4],
        "gcTotalCpuSeconds": round(sum(in_gc) + gc_spent[1], 3),
        "freeze": frozen_figures,
        "rssMiB": {"steadyStart": rss[0], "steadyEnd": rss[1]},
        "headsPerCycle": round(heads / len(cpu), 1) if cpu else 0.0,
        "admissionsPerCycle": round(admissions / len(cpu), 1) if cpu else 0.0,
        "preemptionsPerCycle": round(preemptions / len(cpu), 1) if cpu else 0.0,
        "admissionsPerCpuSecond": round(admissions / total, 1) if total else None,
        "keptAnswers": kept_answers,
    }


def run() -> dict[str, Any]:
    return {shape: run_shape(shape) for shape in SHAPES}


def write_simulate_trace(path: str, *, workloads: int = 200_000, shape: str = "deep",
                         seed: int = 1) -> None:  # fmt: skip
    """A trace for ``quartermaster simulate``: this benchmark's queues (``shape``) and
    ``workloads`` single-pod workloads arriving uniformly over 600 s, running 60-600 s,
    priority 50/100/200, 1/2/5 cpu (the ``simulate`` 200k / 5,000 / depth-4 figure)."""
    import json
    from pathlib import Path

    import yaml

    rng = random.Random(seed)
    out = Path(path)
    docs: list[Any] = queue_documents(shape)
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterQueue"]
    lines = out.with_suffix(".jsonl")
    with lines.open("w", encoding="utf-8") as f:
        for i in range(workloads):
            f.write(json.dumps({
                "name": f"wl-{i}", "namespace": names[i % len(names)], "localQueue": "lq",
                "arrival": round(rng.uniform(0, 600), 3), "runtime": rng.randint(60, 600),
                "priority": rng.choice([50, 100, 200]),
                "podSets": [{"name": "main", "count": 1,
                             "requests": {"cpu": str(rng.choice([1, 2, 5]))}}],
            }) + "\n")  # fmt: skip
    docs.append({"name": f"simulate-{workloads}-{shape}", "trace": lines.name})
    with out.open("w", encoding="utf-8") as f:
        yaml.safe_dump_all(docs, f)


if __name__ == "__main__":
    import sys

    write_simulate_trace(sys.argv[1], workloads=int(sys.argv[2]) if len(sys.argv) > 2 else 200_000)
