"""``quartermaster plan``: what the admission service would do now, offline.

A driver of the same scheduler the service runs: it loads objects into a ``Cache``,
runs cycles (between cycles, workloads preempted in the previous cycle are treated as
fully evicted — except victims given a notice window, which keep running until their
deadline or a checkpoint newer than the notice, both read from the inputs), and reports admissions, preemptions, pending reasons and usage in
the JSON contract of CLI.md. ``--what-if`` runs the same plan on the inputs with
some objects replaced or added and lists the workloads whose outcome differs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from admission.config.dra import accounting
from admission.config.schema import Config
from admission.drivers.checks import CheckOutcome, apply_verdicts, checks_report
from admission.drivers.dra_inputs import catalog as dra_catalog
from admission.drivers.inputs import Inputs
from admission.engine import messages
from admission.engine.cache import Cache
from admission.engine.decisions import AdmittedDecision, PreemptedDecision
from admission.engine.preemption.checkpoint import RequeueDecision
from admission.engine.queue_manager import PendingStatus
from admission.engine.scheduler import Scheduler
from admission.engine.vocabulary import PendingReason
from queues.api.topology_assignment import from_v1beta2, to_v1beta2
from queues.dra import DeviceClassMapping
from queues.model import STRICT_FIFO, Workload
from queues.quantity import format_quantity
from queues.transformations import ResourceTransformer

MAX_CYCLES = 10_000


class DeadlineExceeded(TimeoutError):
    """The cycles did not reach quiescence before the caller's deadline."""


@dataclass(slots=True)
class PlanResult:
    cycles: int
    admitted: list[AdmittedDecision] = field(default_factory=list)
    preempted: list[PreemptedDecision] = field(default_factory=list)
    pending: dict[str, tuple[str | None, PendingStatus]] = field(default_factory=dict)
    # progressAwarePreemption: what the requeue policy decided for each evicted victim
    requeues: dict[str, RequeueDecision] = field(default_factory=dict)
    # the AdmissionChecks' verdicts on the workloads loaded holding quota (.checks)
    checks: list[CheckOutcome] = field(default_factory=list)
    cache: Cache | None = None
    scheduler: Scheduler | None = None


def build_cache(
    inputs: Inputs,
    *,
    resources: ResourceTransformer | None = None,
    device_class_mappings: tuple[DeviceClassMapping, ...] = (),
) -> Cache:
    """A cache holding the inputs; ``resources`` and ``device_class_mappings`` are the
    Configuration's resources section (DRA devices are counted from ``inputs.dra``)."""
    cache = Cache(
        flavors=inputs.flavors,
        cluster_queues=inputs.cluster_queues,
        cohorts=inputs.cohorts,
        local_queues=inputs.local_queues,
        namespaces=inputs.namespaces if inputs.namespaces_given else None,
        resources=resources,
        dra=None
        if inputs.dra_counted
        else accounting(device_class_mappings, dra_catalog(inputs.dra)),
        admission_checks=inputs.admission_checks,
    )
    cache.set_topologies(inputs.topologies)
    for name in sorted(inputs.nodes):
        cache.set_node(inputs.nodes[name])
    for key in sorted(inputs.pods):
        cache.set_pod(key, inputs.pods[key])
    for wl in sorted(inputs.workloads, key=lambda w: w.key):
        cache.add_workload(wl)
    return cache


def run_plan(
    inputs: Inputs,
    *,
    cycles: int | None = None,
    config: Config | None = None,
    before_cycles: Callable[[Cache], None] | None = None,
    deadline: float | None = None,
) -> PlanResult:
    """Run scheduling cycles over the inputs until quiescent (or exactly ``cycles``).

    The scheduler is the one ``config`` builds (:meth:`Config.make_scheduler`: fair
    sharing, admission fair sharing, cohort credits), on the clock ``config.now``.
    ``before_cycles`` sees the cache as loaded, before the first cycle (the what-if
    reads the usage the edit meets); ``deadline`` (a ``time.monotonic()`` value) makes
    the run raise :class:`DeadlineExceeded` between cycles once passed.
    """
    config = config or Config()
    cache = build_cache(
        inputs, resources=config.resources, device_class_mappings=config.device_class_mappings
    )
    if before_cycles is not None:
        before_cycles(cache)
    now = config.now if config.now is not None else 0.0
    scheduler = config.make_scheduler(cache, clock=lambda: now)
    result = PlanResult(cycles=0, cache=cache, scheduler=scheduler)
    result.checks = apply_verdicts(cache, now)
    result.cycles = run_cycles(
        scheduler,
        cycles=cycles,
        admitted=result.admitted,
        preempted=result.preempted,
        deadline=deadline,
        requeues=result.requeues,
    )
    result.pending = pending_report(cache)
    return result


def run_cycles(
    scheduler: Scheduler,
    *,
    cycles: int | None,
    admitted: list[AdmittedDecision],
    preempted: list[PreemptedDecision],
    deadline: float | None = None,
    requeues: dict[str, RequeueDecision] | None = None,
) -> int:
    """The plan loop: cycles until one changes nothing (or exactly ``cycles``);
    workloads preempted in a cycle are fully evicted before the next one, noticed ones
    once due (``ProgressBook.due``: deadline passed or a newer checkpoint)."""
    cache = scheduler.cache
    to_evict: list[str] = []
    limit = cycles if cycles is not None else MAX_CYCLES
    ran = 0
    last_pending: dict[str, PendingStatus] | None = None
    while ran < limit:
        if deadline is not None and time.monotonic() > deadline:
            raise DeadlineExceeded(f"not quiescent after {ran} scheduling cycle(s)")
        if scheduler.progress is not None:
            to_evict += [k for k in cache.progress.due(scheduler.clock()) if k not in to_evict]
        for key in to_evict:
            evict_preempted(scheduler, key, requeues)
        released = bool(to_evict)
        r = scheduler.schedule()
        ran += 1
        admitted.extend(r.admitted)
        preempted.extend(r.preempted)
        to_evict = [p.workload.key for p in r.preempted if p.notice_deadline is None]
        if cycles is None and not r.changed and not released and not to_evict:
            ran -= 1  # the idle cycle that proved quiescence is not counted
            break
        if (
            cycles is None
            and scheduler.progress is not None
            and not (r.admitted or r.preempted or released)
            and r.pending == last_pending
        ):
            # Preemptors waiting on noticed victims (which run until their deadline,
            # beyond this instant) repeat the same decision: that is quiescence too.
            ran -= 1
            break
        last_pending = r.pending
    return ran


def evict_preempted(
    scheduler: Scheduler, key: str, requeues: dict[str, RequeueDecision] | None = None
) -> RequeueDecision | None:
    """A preempted workload's eviction completes; with a requeue policy after
    preemption (progressAwarePreemption) it is deactivated, or kept out of the queue
    until its backoff ends (beyond this plan's instant), instead of requeued at once."""
    cache = scheduler.cache
    wl = cache.workloads.get(key)
    progress = scheduler.progress
    policy = (
        progress.policy.requeue_for(wl, cache.admitted.get(key))
        if progress is not None and wl is not None
        else None
    )
    if policy is None or wl is None:
        cache.evicted(key)
        return None
    decision = policy.after_preemption(wl.requeue_count, scheduler.clock())
    wl.requeue_count = decision.requeue_count
    if decision.deactivate:
        wl.active = False
        cache.evicted(key)  # not queued: inactive
    else:
        cache.evicted(key)
        cache.park(key)  # back once its backoff ends
    if requeues is not None:
        requeues[key] = decision
    return decision


def pending_report(cache: Cache) -> dict[str, tuple[str | None, PendingStatus]]:
    """Every workload left pending, with why (including ones never nominated)."""
    out: dict[str, tuple[str | None, PendingStatus]] = {}
    for name in sorted(cache.queues):
        q = cache.queues[name]
        head: Workload | None = None
        strict = cache.cluster_queues[name].queueing_strategy == STRICT_FIFO
        for ahead, wl in enumerate(q.workloads()):
            status = cache.inactive.get(name) or cache.status_of(wl, name)
            if status is None:
                if strict and head is not None:
                    why = messages.blocked_behind_strict_head(head.key, name)
                else:
                    why = messages.pending_not_nominated(ahead, name)
                status = PendingStatus(PendingReason.WAITING_FOR_QUOTA, why)
            if head is None:
                head = wl
            out[wl.key] = (name, status)
    for key in cache.unroutable:
        out[key] = (None, cache.status[key])
    return out


def _psa_json(psa: Any) -> dict[str, Any]:
    out = {
        "name": psa.name,
        "count": psa.count,
        "flavors": dict(sorted(psa.flavors.items())),
        "resourceUsage": {r: format_quantity(r, v) for r, v in sorted(psa.resource_usage.items())},
    }
    if psa.topology_assignment is not None:  # Kueue's v1beta2 form, as written to status
        out["topologyAssignment"] = to_v1beta2(psa.topology_assignment)
    return out


def topology_text(wire: dict[str, Any]) -> str:
    """A topology assignment for a person: ``host-a×2,host-b×1`` (level values joined by /)."""
    ta = from_v1beta2(wire)
    return ",".join(f"{'/'.join(values)}×{count}" for values, count in ta.domains)


def usage_report(cache: Cache) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(cache.tree.queues):
        node = cache.tree.queues[name]
        frs = sorted(set(node.quotas) | set(node.usage))
        per: dict[str, Any] = {}
        for flavor, res in frs:
            used = node.usage.get((flavor, res), 0)
            borrowed = max(0, used - node.nominal((flavor, res)))
            per.setdefault(flavor, {})[res] = {
                "total": format_quantity(res, used),
                "borrowed": format_quantity(res, borrowed),
            }
        out[name] = per
    return out


def _last_admissions(result: PlanResult) -> list[AdmittedDecision]:
    """Per workload still admitted at the end, its last admission (a workload preempted
    and admitted again appears once)."""
    assert result.cache is not None
    last = {d.workload.key: d for d in result.admitted}
    return [d for key, d in last.items() if key in result.cache.admitted]


def plan_json(result: PlanResult) -> dict[str, Any]:
    """The plan document of CLI.md. Its numbers are integers everywhere but in the
    sections of :data:`FLOAT_SECTIONS` (``plan_json_text`` relies on it)."""
    assert result.cache is not None
    return {
        "cycles": result.cycles,
        "admitted": sorted(
            (
                {
                    "workload": d.workload.key,
                    "clusterQueue": d.cluster_queue,
                    "cycle": d.cycle,
                    "podSetAssignments": [_psa_json(p) for p in d.admission.pod_set_assignments],
                    **({"admissionChecks": list(d.checks)} if d.checks else {}),
                }
                for d in _last_admissions(result)
            ),
            key=lambda x: x["workload"],
        ),
        "preempted": sorted(
            (
                {
                    "workload": p.workload.key,
                    "clusterQueue": p.cluster_queue,
                    "cycle": p.cycle,
                    "by": p.by,
                    "reason": str(p.reason),  # plain str: the document is plain data
                    "message": p.message,
                    **_progress_json(result, p),
                }
                for p in result.preempted
            ),
            key=lambda x: (x["workload"], x["cycle"]),
        ),
        "pending": [
            {"workload": key, "clusterQueue": cq, "reason": str(st.reason), "message": st.message}
            for key, (cq, st) in sorted(result.pending.items())
        ],
        "usage": usage_report(result.cache),
        **fair_sharing_report(result),
        **(
            {"admissionChecks": checks}
            if (checks := checks_report(result.checks, _last_admissions(result)))
            else {}
        ),
    }


# The top-level sections of a plan document that hold floats (shares, credit balances)
FLOAT_SECTIONS = frozenset({"fairSharing", "credits"})


def plan_json_text(doc: dict[str, Any]) -> str:
    """``json.dumps(doc, indent=2)``: the same text, by orjson when it is sure to be.

    The standard encoder writes indented JSON in Python, half a second for plan-50k's
    18 MB. orjson writes the same bytes for strings, integers, booleans, null, lists
    and dicts with string keys; it differs for floats (``1e-05``), non-ASCII text
    (written raw, not ``\\u`` escaped) and keys that are not strings (an error), so
    those documents go to the standard encoder."""
    if not FLOAT_SECTIONS.isdisjoint(doc):
        return json.dumps(doc, indent=2)
    try:
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
    except TypeError:  # a key that is not a string, an integer beyond 64 bits
        return json.dumps(doc, indent=2)
    if not text.isascii() or "\x7f" in text:  # the standard encoder escapes DEL too
        return json.dumps(doc, indent=2)
    return text


def _progress_json(result: PlanResult, p: PreemptedDecision) -> dict[str, Any]:
    """A victim's notice deadline and requeue decision (progressAwarePreemption)."""
    from queues.api.progress import format_time

    out: dict[str, Any] = {}
    if p.notice_deadline is not None:
        out["noticeDeadline"] = format_time(p.notice_deadline)
        out["evicted"] = p.workload.key not in (result.cache.admitted if result.cache else {})
    r = result.requeues.get(p.workload.key)
    if r is not None:
        out["requeue"] = {
            "action": "Deactivate" if r.deactivate else "Backoff",
            "count": r.requeue_count,
            **({"requeueAt": format_time(r.requeue_at)} if r.requeue_at is not None else {}),
            "message": r.message,
        }
    return out


def fair_sharing_report(result: PlanResult) -> dict[str, Any]:
    """Shares (when fair sharing is on) and credit balances (AFS / cohortCredits)."""
    out: dict[str, Any] = {}
    sched = result.scheduler
    if sched is None:
        return out
    if sched.preemptor.fair_sharing:
        from queues.fairshare import dominant_resource_share

        tree = sched.cache.tree
        out["fairSharing"] = {
            "clusterQueues": {
                n: dominant_resource_share(tree.queues[n]).rounded() for n in sorted(tree.queues)
            },
            "cohorts": {
                n: dominant_resource_share(tree.cohorts[n]).rounded() for n in sorted(tree.cohorts)
            },
        }
    if sched.usage is not None:
        out["credits"] = sched.usage.report()
    return out


def outcomes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per workload: what happened to it in a plan document."""
    out: dict[str, dict[str, Any]] = {}
    for a in doc["admitted"]:
        flavors = sorted({f for p in a["podSetAssignments"] for f in p["flavors"].values()})
        out[a["workload"]] = {
            "outcome": "admitted",
            "clusterQueue": a["clusterQueue"],
            "flavors": flavors,
        }
    for p in doc["preempted"]:
        out[p["workload"]] = {"outcome": "preempted", "by": p["by"], "reason": p["reason"]}
        if "noticeDeadline" in p:  # progressAwarePreemption: noticed, evicted later
            out[p["workload"]]["noticeDeadline"] = p["noticeDeadline"]
        if "requeue" in p:
            out[p["workload"]]["requeue"] = p["requeue"]["action"]
    for p in doc["pending"]:
        out.setdefault(
            p["workload"], {"outcome": "pending", "reason": p["reason"], "message": p["message"]}
        )
    return out


def what_if_diff(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Workloads whose outcome differs between two plan documents, and how."""
    b, a = outcomes(before), outcomes(after)
    changes = []
    for key in sorted(set(b) | set(a)):
        ob, oa = b.get(key), a.get(key)
        if ob is None or oa is None or _core(ob) != _core(oa):
            changes.append({"workload": key, "before": ob, "after": oa})
    return changes


def _core(o: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in o.items() if k != "message"))


def plan_table(doc: dict[str, Any], *, wide: bool = False) -> str:
    """The plan for a person: admitted, preempted, pending and usage tables.

    ``wide`` (``-o wide``) gives every podSet of an admission its own row with its
    count, flavors and usage in separate columns, and adds the preemption messages.
    """
    lines = [f"Cycles: {doc['cycles']}", ""]
    lines.append("ADMITTED")
    rows: list[tuple[str, ...]]
    if wide:
        rows = [("WORKLOAD", "CLUSTERQUEUE", "CYCLE", "PODSET", "COUNT", "FLAVORS", "USAGE")]
        topology = any(
            "topologyAssignment" in p for a in doc["admitted"] for p in a["podSetAssignments"]
        )
        if topology:
            rows[0] += ("TOPOLOGY",)
        for a in doc["admitted"]:
            for p in a["podSetAssignments"]:
                flavors = ",".join(f"{r}@{f}" for r, f in p["flavors"].items())
                usage = ",".join(f"{r}={q}" for r, q in p["resourceUsage"].items())
                row: tuple[str, ...] = (
                    a["workload"],
                    a["clusterQueue"],
                    str(a["cycle"]),
                    p["name"],
                    str(p["count"]),
                    flavors,
                    usage,
                )
                if topology:
                    t = p.get("topologyAssignment")
                    row += (topology_text(t) if t else "-",)
                rows.append(row)
    else:
        rows = [("WORKLOAD", "CLUSTERQUEUE", "CYCLE", "ASSIGNMENT")]
        for a in doc["admitted"]:
            assign = "; ".join(
                f"{p['name']}×{p['count']} "
                + ",".join(f"{r}={p['resourceUsage'][r]}@{f}" for r, f in p["flavors"].items())
                + (
                    f" topology[{topology_text(p['topologyAssignment'])}]"
                    if "topologyAssignment" in p
                    else ""
                )
                for p in a["podSetAssignments"]
            )
            if a.get("admissionChecks"):  # reserved; admitted once these checks are Ready
                assign += f"; waits for AdmissionChecks {','.join(a['admissionChecks'])}"
            rows.append((a["workload"], a["clusterQueue"], str(a["cycle"]), assign))
    lines += _table(rows)
    if doc["preempted"]:
        lines += ["", "PREEMPTED"]
        header: tuple[str, ...] = ("WORKLOAD", "CLUSTERQUEUE", "CYCLE", "BY", "REASON")
        noticed = any("noticeDeadline" in p or "requeue" in p for p in doc["preempted"])
        if noticed:
            header += ("NOTICE DEADLINE", "REQUEUE")
        rows = [(*header, "MESSAGE") if wide else header]
        for p in doc["preempted"]:
            row = (
                p["workload"],
                p["clusterQueue"],
                str(p["cycle"]),
                p["by"],
                p["reason"],
            )
            if noticed:
                rq = p.get("requeue")
                row += (
                    p.get("noticeDeadline", "-")
                    + (
                        ""
                        if "noticeDeadline" not in p
                        else (" (evicted)" if p.get("evicted") else " (running)")
                    ),
                    "-"
                    if rq is None
                    else (
                        "deactivate"
                        if rq["action"] == "Deactivate"
                        else f"backoff until {rq['requeueAt']}"
                    ),
                )
            rows.append((*row, p.get("message") or "") if wide else row)
        lines += _table(rows)
    lines += ["", "PENDING"]
    rows = [("WORKLOAD", "CLUSTERQUEUE", "POSITION", "REASON", "MESSAGE")]
    rows += [
        (p["workload"], p["clusterQueue"] or "-", str(p.get("positionInClusterQueue", "-")),
         p["reason"], p["message"])
        for p in doc["pending"]
    ]  # fmt: skip
    lines += _table(rows)
    lines += ["", "USAGE"]
    rows = [("CLUSTERQUEUE", "FLAVOR", "RESOURCE", "TOTAL", "BORROWED")]
    for cq, flavors in doc["usage"].items():
        for flv, res in flavors.items():
            for r, u in res.items():
                rows.append((cq, flv, r, u["total"], u["borrowed"]))
    lines += _table(rows)
    if "whatIf" in doc:
        lines += ["", "WHAT-IF CHANGES"]
        rows = [("WORKLOAD", "BEFORE", "AFTER")]
        for c in doc["whatIf"]["changes"]:
            rows.append((c["workload"], _short(c["before"]), _short(c["after"])))
        lines += _table(rows)
    if doc.get("notQueued"):
        lines += ["", "NOT QUEUED"]
        rows = [("KIND", "NAME", "REASON")]
        rows += [(n["kind"], n["name"], n["reason"]) for n in doc["notQueued"]]
        lines += _table(rows)
    if doc.get("generatedNames"):
        lines += ["", "GENERATED NAMES"]
        rows = [("KIND", "NAME", "GENERATENAME", "SOURCE")]
        rows += [
            (g["kind"], g["name"], g["generateName"], g["source"]) for g in doc["generatedNames"]
        ]
        lines += _table(rows)
    return "\n".join(lines) + "\n"


def _short(o: dict[str, Any] | None) -> str:
    if o is None:
        return "-"
    if o["outcome"] == "admitted":
        return f"admitted in {o['clusterQueue']} on {','.join(o['flavors'])}"
    if o["outcome"] == "preempted":
        notice = f", noticed until {o['noticeDeadline']}" if "noticeDeadline" in o else ""
        requeue = f", then {o['requeue'].lower()}" if "requeue" in o else ""
        return f"preempted by {o['by']} ({o['reason']}{notice}{requeue})"
    return f"pending: {o['reason']}"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    if len(rows) == 1:
        return ["(none)"]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
