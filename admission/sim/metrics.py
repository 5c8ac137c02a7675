"""What a simulation run measured: the summary of CLI.md and the makespan lower bound.

The summary has the shape of Kueue's scheduler-performance runner summary
(test/performance/scheduler/runner/recorder in kubernetes-sigs/kueue), computed the
same way, plus what this project adds (``makespanMs``, ``lowerBoundMs``, p95s,
engine counters):

* time to admission = last admission − creation (the runner overwrites it at every
  admission, so an evicted workload counts its last one); time to finish = finish −
  creation. Workloads never admitted are left out of the averages and counted in
  ``neverAdmitted`` (the runner would wait for them forever); in a run stopped early
  only those that had arrived by then count.
* ``usagePercent`` of a ClusterQueue class = Σ ∫ admitted usage dt × 100 ÷
  (Σ nominal quota × elapsed), on the class's *primary* resource: the first covered
  resource of the first resource group, summed over that group's flavors (the runner
  reads the first flavor's first resource — the same thing for its one-flavor cpu
  queues). Elapsed runs from t=0, when the queues are created (the runner's first
  ClusterQueue event), to the last event of any queue of the class (an arrival, an
  admission or a release; the runner's last ClusterQueue status update).
  ``usagePercentByResource`` gives the same figure for every resource.

**Lower bound on the makespan** (``lowerBound``): no scheduler can finish the
scenario earlier than the largest of

1. ``max(arrival + runtime)`` over the workloads — each must run whole after it
   arrives;
2. for every independent cohort tree (a root Cohort with everything below it, or a
   ClusterQueue without a cohort) and every resource r, and every arrival time t:
   ``t + Σ(request_r × runtime of the tree's workloads arriving at or after t) ÷ C_r``
   where ``C_r`` is the sum of all nominal quotas for r (every flavor) of every node in
   the tree — with borrowing, that is the most of r the tree can ever hold at once;
3. the same per ClusterQueue, with ``C_r`` the most of r the ClusterQueue can ever
   hold (Σ over its flavors for r of nominal quota plus what it may borrow, capped by
   borrowing limits and the cohort's lendable capacity).

A workload that allows partial admission counts with its ``minCount`` pods (it may
run that small). Only workloads that could ever be admitted count (their LocalQueue and ClusterQueue
exist and are active, the namespace is selected, and each resource's total request is
at most what the ClusterQueue can ever hold); preemption and reruns only add work, so
each term stays a bound. Times are floored to whole milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from admission.sim.scenario import US_PER_MS, Scenario
from queues.model import STOP_NONE, ClusterQueue
from queues.quantity import format_quantity
from queues.quota_node import QuotaNode
from queues.tree import CohortTree


@dataclass(slots=True)
class LowerBound:
    us: int
    arrival_runtime_us: int
    cohort_work_us: int
    queue_work_us: int
    binding: str  # which term binds, in words
    excluded: int  # workloads that can never be admitted (not counted)

    @property
    def ms(self) -> int:
        return self.us // US_PER_MS


def _requests(wl_pod_sets: Iterable[Any]) -> dict[str, int]:
    """The least a workload can hold once admitted (partial admission: ``minCount`` pods)."""
    out: dict[str, int] = {}
    for ps in wl_pod_sets:
        count = ps.min_count if ps.min_count is not None else ps.count
        for r, v in ps.requests.items():
            if v:
                out[r] = out.get(r, 0) + v * count
    return out


def _queue_capacity(cq: ClusterQueue, node: QuotaNode) -> dict[str, int]:
    """The most of each resource the ClusterQueue can ever hold (all its flavors)."""
    cap: dict[str, int] = {}
    for g in cq.resource_groups:
        for r in g.covered_resources:
            cap[r] = cap.get(r, 0) + sum(
                max(0, node.potential_available((fq.name, r))) for fq in g.flavors
            )
    return cap


def _admissible_cq(scenario: Scenario, tree: CohortTree, namespace: str, queue: str) -> str | None:
    lq = scenario.local_queues.get(f"{namespace}/{queue}")
    if lq is None or lq.cluster_queue not in scenario.cluster_queues:
        return None
    cq = scenario.cluster_queues[lq.cluster_queue]
    node = tree.queues[cq.name]
    if node.disabled_reason or cq.stop_policy != STOP_NONE or lq.stop_policy != STOP_NONE:
        return None
    if any(fq.name not in scenario.flavors for g in cq.resource_groups for fq in g.flavors):
        return None
    if scenario.namespaces is None:
        labels: dict[str, str] | None = {"kubernetes.io/metadata.name": namespace}
    else:
        ns = scenario.namespaces.get(namespace)
        labels = ns.labels if ns is not None else None
    if labels is None or cq.namespace_selector is None or not cq.namespace_selector.matches(labels):
        return None
    return cq.name


def _suffix_bound(items: list[tuple[int, int]], capacity: int) -> tuple[int, int]:
    """max over t of t + (work arriving at or after t) / capacity; returns (bound, t)."""
    best, best_t, total = 0, 0, 0
    for arrival, work in sorted(items, reverse=True):
        total += work
        cand = arrival + total // capacity
        if cand > best:
            best, best_t = cand, arrival
    return best, best_t


def lower_bound(scenario: Scenario) -> LowerBound:
    """A makespan no scheduler can beat (see the module docstring)."""
    tree = CohortTree(scenario.cluster_queues, scenario.cohorts)
    queue_cap = {
        name: _queue_capacity(cq, tree.queues[name]) for name, cq in scenario.cluster_queues.items()
    }
    root_of = {name: node.root().name for name, node in tree.queues.items()}
    tree_cap: dict[str, dict[str, int]] = {}
    for node in list(tree.cohorts.values()) + list(tree.queues.values()):
        cap = tree_cap.setdefault(node.root().name, {})
        for (_flavor, r), q in node.quotas.items():
            cap[r] = cap.get(r, 0) + q.nominal
    admissible_cache: dict[tuple[str, str], str | None] = {}
    excluded = 0
    arrival_runtime = 0
    per_tree: dict[tuple[str, str], list[tuple[int, int]]] = {}
    per_queue: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for s in scenario.workloads:
        wl = s.workload
        lk = (wl.namespace, wl.queue_name)
        if lk not in admissible_cache:
            admissible_cache[lk] = _admissible_cq(scenario, tree, wl.namespace, wl.queue_name)
        cq = admissible_cache[lk]
        req = _requests(wl.pod_sets)
        if cq is None or any(v > queue_cap[cq].get(r, 0) for r, v in req.items()):
            excluded += 1
            continue
        arrival_runtime = max(arrival_runtime, s.arrival_us + s.runtime_us)
        for r, v in req.items():
            work = v * s.runtime_us
            per_tree.setdefault((root_of[cq], r), []).append((s.arrival_us, work))
            per_queue.setdefault((cq, r), []).append((s.arrival_us, work))
    binding = "the last workload to finish on its own: max(arrival + runtime)"
    cohort_work, queue_work = 0, 0
    cohort_detail = queue_detail = ""
    for (root, r), items in sorted(per_tree.items()):
        b, t = _suffix_bound(items, tree_cap[root][r])
        if b > cohort_work:
            cohort_work = b
            kind = "Cohort tree" if root in tree.cohorts else "ClusterQueue"
            cohort_detail = (
                f"work on {r} in {kind} {root} arriving from t={t / 1e6:g}s "
                f"÷ its total quota {format_quantity(r, tree_cap[root][r])}"
            )
    for (cq, r), items in sorted(per_queue.items()):
        b, t = _suffix_bound(items, queue_cap[cq][r])
        if b > queue_work:
            queue_work = b
            queue_detail = (
                f"work on {r} in ClusterQueue {cq} arriving from t={t / 1e6:g}s "
                f"÷ the most it can hold, {format_quantity(r, queue_cap[cq][r])}"
            )
    best = max(arrival_runtime, cohort_work, queue_work)
    if best == cohort_work and cohort_work > arrival_runtime:
        binding = cohort_detail
    elif best == queue_work and queue_work > arrival_runtime:
        binding = queue_detail
    return LowerBound(
        us=best,
        arrival_runtime_us=arrival_runtime,
        cohort_work_us=cohort_work,
        queue_work_us=queue_work,
        binding=binding,
        excluded=excluded,
    )


def _p95(values: list[int]) -> int:
    """Nearest-rank 95th percentile."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = -(-95 * len(ordered) // 100)  # ceil(0.95 n)
    return ordered[max(0, rank - 1)]


def summarize(
    result: Any, bound: LowerBound, *, engine_cpu_seconds: float | None = None
) -> dict[str, Any]:
    """The CLI.md ``simulate`` summary for a ``SimResult``."""
    sc: Scenario = result.scenario
    classes: dict[str, dict[str, Any]] = {}
    tta: dict[str, list[int]] = {}
    ttf: dict[str, list[int]] = {}
    never = finished = running = 0
    # A run stopped early has workloads that had not arrived yet: they were never
    # admitted because they never asked, so they are not counted as never admitted.
    horizon_us = getattr(result, "stopped_at_us", None) if result.truncated else None
    for rec in result.records:
        c = rec.sim.wl_class
        if rec.finished_us is not None:
            finished += 1
        elif rec.running:
            running += 1
        entry = classes.setdefault(c, {"count": 0, "totalEvictions": 0, "neverAdmitted": 0})
        entry["count"] += 1
        entry["totalEvictions"] += rec.evictions
        if rec.admitted_us is None:
            if horizon_us is None or rec.sim.arrival_us <= horizon_us:
                entry["neverAdmitted"] += 1
                never += 1
            continue
        tta.setdefault(c, []).append(rec.admitted_us - rec.sim.arrival_us)
        if rec.finished_us is not None:
            ttf.setdefault(c, []).append(rec.finished_us - rec.sim.arrival_us)
    workload_classes: dict[str, Any] = {}
    for c in sorted(classes):
        e = classes[c]
        t = tta.get(c, [])
        f = ttf.get(c, [])
        workload_classes[c] = {
            "count": e["count"],
            "averageTimeToAdmissionMs": (sum(t) // len(t)) // US_PER_MS if t else 0,
            "p95TimeToAdmissionMs": _p95(t) // US_PER_MS,
            "maxTimeToAdmissionMs": max(t, default=0) // US_PER_MS,
            "averageTimeToFinishMs": (sum(f) // len(f)) // US_PER_MS if f else 0,
            "totalEvictions": e["totalEvictions"],
            "neverAdmitted": e["neverAdmitted"],
        }
    cq_classes: dict[str, Any] = {}
    groups: dict[str, list[Any]] = {}
    for name, qr in result.queues.items():
        groups.setdefault(sc.class_of_cq(name), []).append(qr)
    for c in sorted(groups):
        qrs = groups[c]
        elapsed = max(q.last_event_us for q in qrs)
        primary = next((q.primary for q in qrs if q.primary), None)
        by_res: dict[str, float] = {}
        nominal: dict[str, int] = {}
        used: dict[str, int] = {}
        for q in qrs:
            for r, v in q.nominal.items():
                nominal[r] = nominal.get(r, 0) + v
            for r, v in q.integral.items():
                used[r] = used.get(r, 0) + v
        for r in sorted(nominal):
            if nominal[r] and elapsed:
                by_res[r] = round(used.get(r, 0) * 100 / (nominal[r] * elapsed), 2)
            else:
                by_res[r] = 0.0
        out: dict[str, Any] = {
            "usagePercent": by_res.get(primary, 0.0) if primary else 0.0,
            "resource": primary,
            "nominalQuota": format_quantity(primary, nominal.get(primary, 0)) if primary else "0",
            "averageUsage": (
                format_quantity(primary, used.get(primary, 0) // elapsed)
                if primary and elapsed
                else "0"
            ),
            "elapsedMs": elapsed // US_PER_MS,
            "queues": len(qrs),
        }
        if len(by_res) > 1:
            out["usagePercentByResource"] = by_res
        cq_classes[c] = out
    stats = result.stats
    summary: dict[str, Any] = {
        "scenario": sc.name,
        "workloads": len(result.records),
        "makespanMs": result.end_us // US_PER_MS,
        "lowerBoundMs": bound.ms,
        "lowerBound": {
            "arrivalPlusRuntimeMs": bound.arrival_runtime_us // US_PER_MS,
            "cohortWorkMs": bound.cohort_work_us // US_PER_MS,
            "clusterQueueWorkMs": bound.queue_work_us // US_PER_MS,
            "binding": bound.binding,
            "excludedWorkloads": bound.excluded,
        },
        "workloadClasses": workload_classes,
        "clusterQueueClasses": cq_classes,
        "engine": {
            "cycles": stats.get("cycles", 0),
            "admissions": stats.get("admissions", 0),
            "preemptions": stats.get("preemptions", 0),
            "nominations": stats.get("nominations", 0),
            "cpuSeconds": round(
                result.cpu_seconds if engine_cpu_seconds is None else engine_cpu_seconds, 3
            ),
            "cycleCpuSeconds": round(getattr(result, "cycle_cpu_seconds", 0.0), 3),
        },
        "neverAdmitted": never,
    }
    loss = getattr(result, "loss", None)
    if loss is not None:  # checkpoints or progressAwarePreemption (admission.sim.progress)
        summary["preemptionLoss"] = preemption_loss(result)
    if bound.ms and not result.truncated:  # a stopped run has no makespan to compare
        summary["makespanOverLowerBound"] = round(result.end_us / bound.us, 3)
    if getattr(result, "api_writes", 0):
        summary["api"] = {
            "writes": result.api_writes,
            "waitSeconds": round(result.api_wait_seconds, 3),
        }
    if result.truncated:
        summary["truncated"] = True
        arrived = getattr(result, "arrived", len(result.records))
        summary["stoppedEarly"] = {
            "by": getattr(result, "stopped_by", None) or "maxCycles",
            "simulatedMs": getattr(result, "stopped_at_us", result.end_us) // US_PER_MS,
            "arrivedWorkloads": arrived,
            "finishedWorkloads": finished,
            "runningWorkloads": running,
            "waitingWorkloads": arrived - finished - running,
        }
    if getattr(result, "livelock_breaks", 0):
        summary["livelockBreaks"] = result.livelock_breaks
    return summary


def preemption_loss(result: Any) -> dict[str, Any]:
    """Work lost to preemption, the preemptors' time to admission and notice time."""
    loss = result.loss
    waits = [
        rec.first_admitted_us - rec.sim.arrival_us
        for rec in result.records
        if rec.key in loss.preemptors and rec.first_admitted_us is not None
    ]
    quoted = {
        r for cq in result.scenario.cluster_queues.values() for g in cq.resource_groups
        for r in g.covered_resources
    }  # fmt: skip
    return {
        **loss.as_json(),
        # the configured lost-work resources this scenario has quota for
        "resourcesPresent": [r for r in loss.resources if r in quoted],
        "preemptors": len(loss.preemptors),
        "preemptorAverageTimeToAdmissionMs": (sum(waits) // len(waits)) // US_PER_MS
        if waits
        else 0,
    }


def summary_table(summary: dict[str, Any]) -> str:
    """The summary for a person."""
    makespan = format_duration(summary["makespanMs"])
    if summary.get("truncated"):
        makespan = f"incomplete (last finish at {makespan})"
    lines = [
        f"Scenario: {summary['scenario']} ({summary['workloads']} workloads)",
        f"Makespan: {makespan}   lower bound: {format_duration(summary['lowerBoundMs'])}"
        + (
            f"   ratio: {summary['makespanOverLowerBound']}"
            if "makespanOverLowerBound" in summary
            else ""
        ),
        f"  bound set by {summary['lowerBound']['binding']}",
    ]
    if summary.get("truncated"):
        stop = summary.get("stoppedEarly", {})
        limit = {"cpuLimit": "the CPU limit"}.get(stop.get("by", ""), "the cycle limit")
        lines.append(
            f"  WARNING: stopped at {limit}; the run is incomplete: "
            f"t={format_duration(stop.get('simulatedMs', 0))} simulated, "
            f"{stop.get('finishedWorkloads', 0)} of {summary['workloads']} workloads finished, "
            f"{stop.get('runningWorkloads', 0)} running, {stop.get('waitingWorkloads', 0)} waiting "
            f"({stop.get('arrivedWorkloads', 0)} arrived)"
        )
    if summary.get("livelockBreaks"):
        lines.append(
            f"  WARNING: {summary['livelockBreaks']} time(s) the engine cycled without end "
            "(e.g. mutual preemption); the simulator waited for the next event"
        )
    lines += ["", "WORKLOAD CLASSES"]
    rows = [
        (
            "CLASS",
            "COUNT",
            "AVG TO ADMISSION",
            "P95 TO ADMISSION",
            "MAX TO ADMISSION",
            "EVICTIONS",
            "NEVER ADMITTED",
        )
    ]
    for c, w in summary["workloadClasses"].items():
        rows.append(
            (
                c,
                str(w["count"]),
                format_duration(w["averageTimeToAdmissionMs"]),
                format_duration(w["p95TimeToAdmissionMs"]),
                format_duration(w.get("maxTimeToAdmissionMs", 0)),
                str(w["totalEvictions"]),
                str(w["neverAdmitted"]),
            )
        )
    lines += _table(rows)
    lines += ["", "CLUSTERQUEUE CLASSES"]
    qrows = [("CLASS", "QUEUES", "USAGE %", "RESOURCE", "NOMINAL", "AVG USAGE")]
    for c, q in summary["clusterQueueClasses"].items():
        qrows.append(
            (
                c,
                str(q["queues"]),
                f"{q['usagePercent']:.1f}",
                q["resource"] or "-",
                q["nominalQuota"],
                share_of_quantity(q["nominalQuota"], q["usagePercent"] / 100)
                if q["usagePercent"]
                else q["averageUsage"],  # no nominal quota: the usage as it is
            )
        )
    lines += _table(qrows)
    pl = summary.get("preemptionLoss")
    if pl is not None:
        lines += [
            "",
            f"Preemption: {pl['evictions']} evictions, {pl['gpuHoursLost']} GPU-hours lost "
            f"({', '.join(pl.get('resourcesPresent', pl['resources'])) or 'no GPU quota in the scenario'}); "
            "preemptors wait "
            f"{format_duration(pl['preemptorAverageTimeToAdmissionMs'])} on average; "
            f"{pl['notices']} notices ({pl['yieldedOnCheckpoint']} yielded on a checkpoint), "
            f"{pl['noticeWaitSeconds']:g}s noticed, {pl['wastedNoticeSeconds']:g}s wasted",
        ]
    e = summary["engine"]
    lines += [
        "",
        f"Engine: {e['cycles']} cycles, {e['admissions']} admissions, {e['preemptions']} preemptions, "
        f"{e['cpuSeconds']:.2f} CPU s",
    ]
    return "\n".join(lines) + "\n"


def share_of_quantity(quantity: str, share: float) -> str:
    """``share`` of the quantity string ``quantity``, written in that quantity's own
    unit ("16" cores at 0.953 -> "15.2"; "64Gi" at 0.5 -> "32Gi"), so an average is
    read against its nominal quota without converting milli-cores or bytes."""
    match = re.fullmatch(r"(\d+)([a-zA-Z]*)", quantity)
    if match is None:
        return quantity if share else "0"
    value = int(match.group(1)) * share
    if value >= 100 or value == int(value):
        text = f"{value:.0f}"
    else:
        text = f"{value:.2f}" if value < 10 else f"{value:.1f}"
    return text + match.group(2)


def format_duration(ms: int) -> str:
    """A duration for a person, as the terminal summary and the report print it."""
    if ms < 1_000:
        return f"{ms}ms"
    s = ms / 1000
    if s < 120:
        return f"{s:.1f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
