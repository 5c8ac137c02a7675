"""Placement quality of a simulated run with topology-aware scheduling.

What topology-aware admission buys is compact gangs: a training job inside one rack or
NVLink domain runs several times faster than one spread over the cluster. The numbers
here say how often that happened and what it cost, so a run can be compared with the
same workload admitted topology-blind (its topology requests removed: placed
anywhere there is room, as Kueue places podSets of a TAS-only ClusterQueue without a
request):

* ``insideOneDomain`` per requested level: of the admitted gangs that asked for (or
  would have asked for) a level, the share whose pods all landed in one domain of it;
* ``fragmentation`` per level: of the samples where gangs wait for that level, the
  share where enough GPUs are free for the smallest of them but no domain of the level
  has that many (free GPUs stranded in domains too small), and how many were stranded;
* ``largeGangs``: time to (first) admission of the largest gangs (at least half the
  largest gang's pods, and two), mean, p95 and max, and how many never got in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from admission.engine.tas.domains import HOSTNAME, Node
from queues.model import TopologyAssignment

if TYPE_CHECKING:
    from admission.sim.records import SimResult
    from admission.sim.scenario import Scenario
    from admission.sim.simulator import Simulator

GPU = "nvidia.com/gpu"


def has_topology(scenario: Scenario) -> bool:
    return bool(scenario.topologies) and any(
        ps.topology is not None and ps.topology.requests_tas
        for s in scenario.workloads
        for ps in s.workload.pod_sets
    )


def intended_levels(scenario: Scenario) -> dict[str, dict[str, str]]:
    """workload key -> podSet -> the level it requires or prefers."""
    out: dict[str, dict[str, str]] = {}
    for s in scenario.workloads:
        for ps in s.workload.pod_sets:
            tr = ps.topology
            level = tr.required or tr.preferred if tr is not None else None
            if level:
                out.setdefault(s.workload.key, {})[ps.name] = level
    return out


def topology_blind(scenario: Scenario) -> Scenario:
    """The same scenario with every podSet's topology request removed."""
    workloads = [
        dataclasses.replace(
            s,
            workload=dataclasses.replace(
                s.workload,
                pod_sets=[dataclasses.replace(ps, topology=None) for ps in s.workload.pod_sets],
            ),
        )
        for s in scenario.workloads
    ]
    return dataclasses.replace(scenario, workloads=workloads, name=f"{scenario.name} (blind)")


def _domain_of(
    ta: TopologyAssignment, values: tuple[str, ...], level: str, hosts: Mapping[str, Node]
) -> str | None:
    if level in ta.levels:
        return values[ta.levels.index(level)]
    if ta.levels[-1] == HOSTNAME:
        node = hosts.get(values[-1])
        if node is not None:
            return node.labels.get(level)
    return None


class FragmentationProbe:
    """An ``on_sample`` hook: stranded free GPUs per sample (see the module docstring)."""

    def __init__(self, scenario: Scenario, levels: Mapping[str, Mapping[str, str]]) -> None:
        self.scenario = scenario
        self.levels = levels
        self.sim: Simulator | None = None
        # level -> per sample with a gang waiting for it: free GPUs stranded, or -1
        self.samples: dict[str, list[int]] = {}

    def __call__(self, _now: float) -> None:
        sim = self.sim
        cache = getattr(sim, "cache", None)
        if cache is None:
            return
        smallest: dict[str, int] = {}  # level -> GPUs of the smallest waiting gang
        for wl, _cq in cache.pending_workloads():
            for ps in wl.pod_sets:
                level = self.levels.get(wl.key, {}).get(ps.name)
                need = ps.requests.get(GPU, 0) * ps.count
                if level and need and need < smallest.get(level, 1 << 62):
                    smallest[level] = need
        if not smallest:
            return
        for level, need in smallest.items():
            free_total = largest = 0
            for flavor in cache.flavors.values():
                snap = cache.topology.snapshot(flavor)
                idx = snap.level_index(level) if snap is not None else None
                if snap is None or idx is None:
                    continue
                per: dict[tuple[str, ...], int] = {}
                for v, leaf in snap.leaves.items():
                    f = max(0, snap.free(leaf).get(GPU, 0))
                    per[v[: idx + 1]] = per.get(v[: idx + 1], 0) + f
                free_total += sum(per.values())
                largest = max(largest, max(per.values(), default=0))
            # Enough GPUs are free for the smallest waiting gang, but in pieces too small.
            blocked = free_total >= need > largest
            self.samples.setdefault(level, []).append(free_total if blocked else -1)


def placement_quality(
    result: SimResult,
    levels: Mapping[str, Mapping[str, str]],
    probe: FragmentationProbe | None = None,
) -> dict[str, Any]:
    sc = result.scenario
    hosts = {n.labels.get(HOSTNAME, n.name): n for n in sc.nodes.values()}
    per_level: dict[str, list[int]] = {}  # level -> [admitted gangs, inside one domain]
    for rec in result.records:
        wanted = levels.get(rec.key)
        if not wanted or rec.first_admitted_us is None:
            continue
        for ps_name, level in wanted.items():
            ta = (rec.placement or {}).get(ps_name)
            counts = per_level.setdefault(level, [0, 0])
            counts[0] += 1
            if ta is None:
                continue
            domains = {_domain_of(ta, values, level, hosts) for values, _ in ta.domains}
            counts[1] += len(domains) == 1 and None not in domains
    sizes = [sum(ps.count for ps in r.sim.workload.pod_sets) for r in result.records]
    biggest = max(sizes, default=0)
    min_pods = max(2, math.ceil(biggest / 2))  # a gang: two pods or more
    large = [r for r, n in zip(result.records, sizes, strict=True) if n >= min_pods]
    waits = sorted(
        (r.first_admitted_us - r.sim.arrival_us) / 1e6
        for r in large
        if r.first_admitted_us is not None
    )
    out: dict[str, Any] = {
        "insideOneDomain": {
            level: {"gangs": n, "inside": k, "share": round(k / n, 3) if n else None}
            for level, (n, k) in sorted(per_level.items())
        },
        "largeGangs": {
            "minPods": min_pods,
            "count": len(large),
            "neverAdmitted": len(large) - len(waits),
            "meanTimeToAdmissionS": round(sum(waits) / len(waits), 1) if waits else None,
            "p95TimeToAdmissionS": round(waits[min(len(waits) - 1, int(0.95 * len(waits)))], 1)
            if waits
            else None,
            "maxTimeToAdmissionS": round(waits[-1], 1) if waits else None,
        },
    }
    if probe is not None:
        frag: dict[str, Any] = {}
        for level, v in sorted(probe.samples.items()):
            blocked = [x for x in v if x >= 0]
            frag[level] = {
                "samplesWithGangsWaiting": len(v),
                "blockedByFragmentationShare": round(len(blocked) / len(v), 3) if v else 0.0,
                "meanStrandedGpus": round(sum(blocked) / len(blocked), 1) if blocked else 0.0,
            }
        out["fragmentation"] = frag
    return out


def _rows(summary: Mapping[str, Any]) -> list[tuple[str, ...]]:
    topo = summary.get("topology")
    if not topo:
        return []
    rows: list[tuple[str, ...]] = []
    levels = sorted(set(topo["aware"]["insideOneDomain"]) | set(topo["blind"]["insideOneDomain"]))
    for level in levels:
        cells = []
        for side in ("aware", "blind"):
            q = topo[side]
            one = q["insideOneDomain"].get(level, {})
            frag = q.get("fragmentation", {}).get(level, {})
            cells += [
                f"{one.get('inside', 0)}/{one.get('gangs', 0)}",
                f"{frag.get('blockedByFragmentationShare', 0.0):.0%}",
            ]
        rows.append((level, *cells))
    for side in ("aware", "blind"):
        lg = topo[side]["largeGangs"]
        rows.append(
            (
                f"gangs of >= {lg['minPods']} pods ({side})",
                f"mean {lg['meanTimeToAdmissionS']} s",
                f"p95 {lg['p95TimeToAdmissionS']} s",
                f"max {lg.get('maxTimeToAdmissionS')} s",
                f"never {lg['neverAdmitted']}",
            )
        )
    return rows


HEADER = ("LEVEL", "AWARE IN ONE", "AWARE FRAGMENTED", "BLIND IN ONE", "BLIND FRAGMENTED")


def placement_table(summary: Mapping[str, Any]) -> str:
    """The topology comparison for ``simulate -o table`` ("" without topology)."""
    rows = _rows(summary)
    if not rows:
        return ""
    table = [HEADER, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = ["", "TOPOLOGY PLACEMENT (aware vs the same workload topology-blind)"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines) + "\n"


def placement_html(summary: Mapping[str, Any]) -> str:
    """The same comparison as an HTML section of the report ("" without topology)."""
    import html

    rows = _rows(summary)
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return (
        "<h2>Topology placement</h2>\n<p>Gangs whose pods all landed in one domain of the level "
        "they require or prefer, and the share of samples where enough GPUs were free for the "
        "smallest waiting gang but no domain of its level held them (fragmented), for this run "
        "and for the same workload with its topology requests removed.</p>\n"
        f"<table><tr>{head}</tr>{body}</table>\n"
    )
