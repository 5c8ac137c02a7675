"""``simulate --report DIR``: the run as files a person can open.

Writes ``summary.json`` (the CLI summary), ``workloads.csv`` (one row per workload),
``queues.csv`` (per ClusterQueue and sample time: usage and pending count), PNG charts
drawn with matplotlib (Agg backend, no display needed) and an ``index.html`` that shows
them and explains the lower bound.

More charts plug in through ``CHART_HOOKS``: a function ``(result, out_dir) ->
[(file name, title, caption), ...]`` that writes its own PNGs (the cohort-credits chart
registers itself here).
"""

from __future__ import annotations

import csv
import html
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from admission.sim.metrics import LowerBound, format_duration
from admission.sim.placement import placement_html
from admission.sim.records import SimResult
from admission.sim.scenario import US_PER_MS, US_PER_S

Chart = tuple[str, str, str]  # file name, title, caption
CHART_HOOKS: list[Callable[[SimResult, str], list[Chart]]] = []
MAX_LINES = 12  # more queues than this are charted per ClusterQueue class
LINE_STYLES = ("-", "--", "-.", ":")  # lines that coincide stay distinguishable


def write_report(
    result: SimResult, summary: dict[str, Any], bound: LowerBound, out_dir: str
) -> list[str]:
    """Write every report file into ``out_dir`` (created if needed); returns their names."""
    os.makedirs(out_dir, exist_ok=True)
    files = ["summary.json", "workloads.csv", "queues.csv"]
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    _workloads_csv(result, os.path.join(out_dir, "workloads.csv"))
    _queues_csv(result, os.path.join(out_dir, "queues.csv"))
    charts = _charts(result, out_dir)
    for hook in CHART_HOOKS:
        charts += hook(result, out_dir)
    files += [c[0] for c in charts]
    with open(os.path.join(out_dir, "index.html"), "w", encoding="utf-8") as f:
        f.write(_index_html(summary, bound, charts))
    files.append("index.html")
    return files


def _ms(us: int | None) -> str:
    return "" if us is None else f"{us / US_PER_MS:.3f}"


def _workloads_csv(result: SimResult, path: str) -> None:
    sc = result.scenario
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "workload",
                "class",
                "clusterQueue",
                "clusterQueueClass",
                "priority",
                "createdMs",
                "firstAdmittedMs",
                "admittedMs",
                "finishedMs",
                "evictions",
                "timeToAdmissionMs",
                "runtimeMs",
            ]
        )
        for rec in sorted(result.records, key=lambda r: (r.sim.arrival_us, r.key)):
            cq = rec.cluster_queue
            tta = None if rec.admitted_us is None else rec.admitted_us - rec.sim.arrival_us
            w.writerow(
                [
                    rec.key,
                    rec.sim.wl_class,
                    cq or "",
                    sc.class_of_cq(cq) if cq else "",
                    rec.sim.workload.priority,
                    _ms(rec.sim.arrival_us),
                    _ms(rec.first_admitted_us),
                    _ms(rec.admitted_us),
                    _ms(rec.finished_us),
                    rec.evictions,
                    _ms(tta),
                    _ms(rec.sim.runtime_us),
                ]
            )


def _units(resource: str | None, value: int) -> float:
    """Engine units to the resource's natural unit (cpu: cores)."""
    return value / 1000 if resource == "cpu" else float(value)


def _queues_csv(result: SimResult, path: str) -> None:
    sc = result.scenario
    s = result.samples
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "timeMs",
                "clusterQueue",
                "class",
                "resource",
                "usage",
                "nominal",
                "usagePercent",
                "pending",
            ]
        )
        names = list(result.queues)
        for k, t in enumerate(s.times_us):
            for i, name in enumerate(names):
                qr = result.queues[name]
                nominal = qr.nominal.get(qr.primary, 0) if qr.primary else 0
                used = s.usage[i][k]
                pct = f"{used * 100 / nominal:.2f}" if nominal else ""
                w.writerow(
                    [
                        _ms(t),
                        name,
                        sc.class_of_cq(name),
                        qr.primary or "",
                        f"{_units(qr.primary, used):g}",
                        f"{_units(qr.primary, nominal):g}",
                        pct,
                        s.pending[i][k],
                    ]
                )


def _time_axis(end_us: int) -> tuple[float, str]:
    end_s = end_us / US_PER_S
    if end_s >= 3 * 3600:
        return 3600.0, "hours"
    if end_s >= 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


def _series(result: SimResult) -> tuple[list[str], list[list[float]], list[list[int]], bool]:
    """Labels, usage % series and pending series: per queue, or per class if many."""
    names = list(result.queues)
    s = result.samples
    if len(names) <= MAX_LINES:
        usage = []
        for i, name in enumerate(names):
            qr = result.queues[name]
            nominal = qr.nominal.get(qr.primary, 0) if qr.primary else 0
            usage.append([u * 100 / nominal if nominal else 0.0 for u in s.usage[i]])
        return names, usage, [list(p) for p in s.pending], False
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(result.scenario.class_of_cq(name), []).append(i)
    labels, usage_out, pending_out = [], [], []
    for c, idx in sorted(groups.items()):
        nominal = 0
        for i in idx:
            qr = result.queues[names[i]]
            nominal += qr.nominal.get(qr.primary, 0) if qr.primary else 0
        n = len(s.times_us)
        used = [sum(s.usage[i][k] for i in idx) for k in range(n)]
        labels.append(f"{c} ({len(idx)} queues)")
        usage_out.append([u * 100 / nominal if nominal else 0.0 for u in used])
        pending_out.append([sum(s.pending[i][k] for i in idx) for k in range(n)])
    return labels, usage_out, pending_out, True


def _charts(result: SimResult, out_dir: str) -> list[Chart]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    scale, unit = _time_axis(
        max(result.end_us, result.samples.times_us[-1] if result.samples.times_us else 0)
    )
    times = [t / US_PER_S / scale for t in result.samples.times_us]
    labels, usage, pending, grouped = _series(result)
    resource = next((q.primary for q in result.queues.values() if q.primary), "quota")
    charts: list[Chart] = []
    per = "ClusterQueue class" if grouped else "ClusterQueue"

    fig, ax = plt.subplots(figsize=(10, 5))
    for label, ys in zip(labels, usage, strict=True):
        ax.step(times, ys, where="post", label=label, linewidth=1.2)
    ax.axhline(100, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel(f"{resource} in use, % of nominal quota")
    ax.set_title(f"Usage per {per} (above 100 %: borrowing)")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "usage.png"), dpi=100)
    plt.close(fig)
    charts.append(
        ("usage.png", f"Usage per {per}", f"Admitted {resource} as a percentage of nominal quota.")
    )

    fig, ax = plt.subplots(figsize=(10, 5))
    for label, counts in zip(labels, pending, strict=True):
        ax.step(times, counts, where="post", label=label, linewidth=1.2)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("pending workloads")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # a count
    ax.set_title(f"Pending workloads per {per}")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "pending.png"), dpi=100)
    plt.close(fig)
    charts.append(
        ("pending.png", f"Pending workloads per {per}", "Workloads queued and not admitted.")
    )

    axis = time_to_admission_axis(result)
    fig, ax = plt.subplots(figsize=(10, 5))
    for k, (label, xs, ys) in enumerate(axis.lines):
        ax.step(xs, ys, where="post", label=label, linestyle=LINE_STYLES[k % len(LINE_STYLES)])
    ax.set_xscale("log")
    ax.set_xlim(*axis.xlim)
    ticks = [t for t in ax.get_xticks() if axis.xlim[0] < t <= axis.xlim[1] and t > axis.zero_x]
    ax.set_xticks([axis.zero_x, *ticks], [axis.zero_label, *(f"{t:g}" for t in ticks)])
    at_zero = "admitted at once" if axis.zero_label == "0" else f"waits under {axis.low:g} s"
    ax.set_xlabel(f"time to admission (seconds, log scale; {at_zero} drawn at {axis.zero_label})")
    ax.set_ylabel("% of the class admitted within")
    ax.set_title("Time to admission per workload class (cumulative distribution)")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "time_to_admission.png"), dpi=100)
    plt.close(fig)
    charts.append(
        (
            "time_to_admission.png",
            "Time to admission per class",
            "Share of each workload class admitted within a given wait (last admission − creation).",
        )
    )
    if result.samples.credits:
        charts.append(_credits_chart(result, out_dir, times, unit))
    return charts


@dataclass(slots=True)
class TimeToAdmissionAxis:
    """What the time-to-admission chart draws: one cumulative line per class.

    The log axis starts at ``low``: the decade of the shortest non-zero wait, but never
    more than ``AXIS_DECADES`` decades below the longest, so a one-cycle wait of a
    millisecond next to waits of hours does not leave most of the axis empty. Waits of
    zero (admitted in the cycle they arrived) and those under ``low`` are drawn at
    ``zero_x``, one decade further down, inside the axis and labelled ``zero_label``
    ("0", or "<low" when some non-zero waits are folded in), so a class admitted at
    once is a visible line, not one hidden on the axis.
    """

    low: float
    zero_x: float
    zero_label: str
    xlim: tuple[float, float]
    lines: list[tuple[str, list[float], list[float]]]


AXIS_DECADES = 4  # the time-to-admission axis spans at most this many decades of waits


def time_to_admission_axis(result: SimResult) -> TimeToAdmissionAxis:
    by_class: dict[str, list[float]] = {}
    for rec in result.records:
        if rec.admitted_us is not None:
            by_class.setdefault(rec.sim.wl_class, []).append(
                (rec.admitted_us - rec.sim.arrival_us) / US_PER_S
            )
    positive = [v for vs in by_class.values() for v in vs if v > 0]
    high = max(positive) if positive else 1.0
    decade = math.floor(math.log10(min(positive))) if positive else 0
    low = 10.0 ** max(decade, math.floor(math.log10(high)) - AXIS_DECADES)
    zero_x = low / 10
    folded = any(v < low for v in positive)
    lines = []
    for c in sorted(by_class):
        xs = sorted(v if v >= low else zero_x for v in by_class[c])
        n = len(xs)
        lines.append((f"{c} (n={n})", [zero_x, *xs], [0.0] + [(k + 1) / n * 100 for k in range(n)]))
    return TimeToAdmissionAxis(
        low=low,
        zero_x=zero_x,
        zero_label=f"<{low:g}" if folded else "0",
        xlim=(zero_x / 2, high * 2),
        lines=lines,
    )


def _credits_chart(result: SimResult, out_dir: str, times: list[float], unit: str) -> Chart:
    import matplotlib.pyplot as plt

    series = result.samples.credits
    names = sorted(series)
    if len(names) > MAX_LINES:  # one line per ClusterQueue class: the sum of its credits
        grouped: dict[str, list[float]] = {}
        for name in names:
            c = result.scenario.class_of_cq(name)
            acc = grouped.setdefault(c, [0.0] * len(series[name]))
            for k, v in enumerate(series[name]):
                acc[k] += v
        series, names = grouped, sorted(grouped)
    fig, ax = plt.subplots(figsize=(10, 5))
    for name in names:
        ys = series[name]
        ax.step(times[: len(ys)], ys[: len(times)], where="post", label=name, linewidth=1.2)
    ax.axhline(0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("credit (resource-weighted units × seconds)")
    ax.set_title("Cohort credits per ClusterQueue over time")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "credits.png"), dpi=100)
    plt.close(fig)
    return (
        "credits.png",
        "Cohort credits over time",
        "Positive: the queue has used less than its share of the pool lately; negative: more.",
    )


def _d(ms: int) -> str:
    """A duration as the terminal prints it ("29.3h"), the exact milliseconds on hover."""
    return f'<span title="{ms} ms">{format_duration(ms)}</span>'


def _stopped_html(summary: dict[str, Any]) -> str:
    """A run stopped early says so at the top, with how far it got."""
    stop = summary.get("stoppedEarly")
    if not summary.get("truncated") or stop is None:
        return ""
    limit = "the CPU limit" if stop["by"] == "cpuLimit" else "the cycle limit"
    return (
        f'<p style="color:#a00"><b>Incomplete run:</b> stopped at {limit} at '
        f"{_d(stop['simulatedMs'])} of simulated time; {stop['finishedWorkloads']} of "
        f"{summary['workloads']} workloads had finished, {stop['runningWorkloads']} were "
        f"running and {stop['waitingWorkloads']} waiting ({stop['arrivedWorkloads']} had "
        "arrived). The figures below cover only that part.</p>"
    )


def _index_html(summary: dict[str, Any], bound: LowerBound, charts: list[Chart]) -> str:
    e = html.escape
    lb = summary["lowerBound"]
    rows = "".join(
        f"<tr><td>{e(c)}</td><td>{w['count']}</td><td>{_d(w['averageTimeToAdmissionMs'])}</td>"
        f"<td>{_d(w['p95TimeToAdmissionMs'])}</td><td>{_d(w.get('maxTimeToAdmissionMs', 0))}</td>"
        f"<td>{w['totalEvictions']}</td>"
        f"<td>{w['neverAdmitted']}</td></tr>"
        for c, w in summary["workloadClasses"].items()
    )
    qrows = "".join(
        f"<tr><td>{e(c)}</td><td>{q['queues']}</td><td>{q['usagePercent']:.2f}</td>"
        f"<td>{e(str(q['resource']))}</td><td>{e(q['nominalQuota'])}</td></tr>"
        for c, q in summary["clusterQueueClasses"].items()
    )
    figures = "".join(
        f'<figure><img src="{e(name)}" alt="{e(title)}"><figcaption><b>{e(title)}.</b> {e(caption)}'
        "</figcaption></figure>"
        for name, title, caption in charts
    )
    eng = summary["engine"]
    ratio = summary.get("makespanOverLowerBound")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Quartermaster simulation: {e(summary["scenario"])}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 10px; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child {{ text-align: left; }}
figure {{ margin: 2em 0; }} img {{ max-width: 100%; border: 1px solid #eee; }}
code {{ background: #f6f6f6; padding: 0 3px; }}
</style></head><body>
<h1>Simulation of {e(summary["scenario"])}</h1>
<p>{summary["workloads"]} workloads. Makespan <b>{_d(summary["makespanMs"])}</b>;
lower bound <b>{_d(summary["lowerBoundMs"])}</b>{f" (ratio {ratio})" if ratio else ""}.
Engine: {eng["cycles"]} cycles, {eng["admissions"]} admissions, {eng["preemptions"]} preemptions,
{eng["cpuSeconds"]} CPU seconds. Raw data: <a href="summary.json">summary.json</a>,
<a href="workloads.csv">workloads.csv</a>, <a href="queues.csv">queues.csv</a>.</p>
{_stopped_html(summary)}
<h2>Workload classes</h2>
<table><tr><th>class</th><th>count</th><th>avg time to admission</th><th>p95</th><th>max</th>
<th>evictions</th><th>never admitted</th></tr>{rows}</table>
<h2>ClusterQueue classes</h2>
<table><tr><th>class</th><th>queues</th><th>usage %</th><th>resource</th><th>nominal quota</th></tr>{qrows}</table>
<p>Usage is Kueue's formula: ∫ admitted usage dt × 100 ÷ (Σ nominal quota × elapsed time), from the
creation of the queues to the class's last event; borrowing lets a single queue exceed 100 %.</p>
{placement_html(summary)}{figures}
<h2>How the lower bound is computed</h2>
<p><code>lowerBoundMs</code> is a makespan no scheduler can beat on this scenario: the largest of</p>
<ol>
<li><b>{_d(lb["arrivalPlusRuntimeMs"])}</b>: the latest <code>arrival + runtime</code> of any workload —
each must run whole after it arrives;</li>
<li><b>{_d(lb["cohortWorkMs"])}</b>: for each independent cohort tree, resource and arrival time
<i>t</i>: <i>t</i> + (request × runtime of the workloads arriving at or after <i>t</i>) ÷ the sum of all
nominal quotas in the tree — with borrowing, the most the tree can hold at once;</li>
<li><b>{_d(lb["clusterQueueWorkMs"])}</b>: the same per ClusterQueue, dividing by the most that queue
can ever hold (nominal plus what its borrowing limit and the cohort allow).</li>
</ol>
<p>Here it is set by {e(bound.binding)}. Workloads that can never be admitted are left out
({lb["excludedWorkloads"]} of them). Preemptions and reruns only add work, so the bound holds whatever
the scheduler does; the gap between makespan and bound is what scheduling (and the bound's
looseness) costs.</p>
</body></html>
"""
