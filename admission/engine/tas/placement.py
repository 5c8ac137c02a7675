"""Placing a podSet (or a podSet group) inside topology domains: Kueue's TAS algorithm.

A port of Kueue's ``TASFlavorSnapshot.findTopologyAssignment`` and its helpers
(pkg/cache/scheduler/tas_flavor_snapshot.go) with Kueue's default profile
(TASProfileMixed) and multi-layer slices; balanced placement
(:mod:`admission.engine.tas.balanced`) when the Configuration turns it on:

1. *Counts* (:mod:`admission.engine.tas.counts`): on every leaf, how many pods (and,
   for a group, whether its leader) fit in what is free; summed up the tree, with
   slices counted at the slice level.
2. *Level* and *descent* (:mod:`admission.engine.tas.descent`): the domain (or the
   fewest domains) at the requested level that hold the pods, then level by level the
   fewest children of each, best fit for the last one.

When nothing fits, the reason is Kueue's followed by the numbers
(:mod:`admission.engine.tas.no_fit`). Replacing a failed node's pods is
:mod:`admission.engine.tas.replacement`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from admission.engine.tas.balanced import balanced_domains
from admission.engine.tas.counts import PlacementState, fill_in_counts
from admission.engine.tas.descent import Descent
from admission.engine.tas.domains import PODS, Domain, FlavorSnapshot, Usage, add_usage, usage_key
from admission.engine.tas.request import PlacementRequest
from queues.model import TopologyAssignment, TopologyRequest

__all__ = ["PlacementResult", "place", "place_flavor"]


@dataclass(slots=True)
class PlacementResult:
    assignments: dict[str, TopologyAssignment] = field(default_factory=dict)
    failed: str | None = None  # the podSet that does not fit
    reason: str = ""


def _level_key(snap: FlavorSnapshot, tr: TopologyRequest | None, implied: bool) -> str | None:
    """Kueue's levelKeyWithImpliedFallback."""
    if tr is not None:
        if tr.required is not None:
            return tr.required
        if tr.preferred is not None:
            return tr.preferred
        if tr.slice_layers:
            return snap.levels[0]
        if tr.unconstrained:
            return snap.levels[-1]
    if implied:
        return snap.levels[-1]
    return None


def place(
    snap: FlavorSnapshot,
    workers: PlacementRequest,
    leader: PlacementRequest | None = None,
    *,
    assumed: Mapping[tuple[str, ...], Usage] | None = None,
    simulate_empty: bool = False,
    within: tuple[str, ...] | None = None,
) -> tuple[dict[str, TopologyAssignment], str]:
    """Kueue's findTopologyAssignment: the assignments of the podSet (and its group's
    leader), or an empty dict and why not. ``within`` (a domain's values, from the top
    level down) confines the pods to that domain (Kueue's requiredReplacementDomain)."""
    tr = workers.topology
    layers = tr.slice_layers if tr is not None else ()
    slice_size = 1
    if layers:
        if not layers[0][1] or layers[0][1] <= 0:
            return {}, "slice topology requested, but slice size not provided"
        slice_size = layers[0][1]
    key = _level_key(snap, tr, workers.implied)
    if key is None:
        return {}, "topology level not specified"
    level_idx = snap.level_index(key)
    if level_idx is None:
        return {}, f"no requested topology level: {key}"
    slice_key = layers[0][0] if layers else snap.levels[-1]
    slice_level_idx = snap.level_index(slice_key)
    if slice_level_idx is None:
        return {}, f"no requested topology level for slices: {slice_key}"
    if level_idx > slice_level_idx:
        return {}, f"podset slice topology {slice_key} is above the podset topology {key}"
    size_at_level, why = _inner_layers(snap, layers, slice_size, slice_level_idx)
    if why:
        return {}, why
    unconstrained = bool(
        (tr is not None and tr.unconstrained)
        or workers.implied
        or (tr is not None and tr.required is None and tr.preferred is None and bool(layers))
    )
    st = PlacementState(
        count=workers.count,
        slice_size=slice_size,
        required=tr is not None and tr.required is not None,
        unconstrained=unconstrained,
        level_idx=level_idx,
        slice_level_idx=slice_level_idx,
        leader_count=1 if leader is not None else 0,
        simulate_empty=simulate_empty,
        size_at_level=size_at_level,
        layers=tuple((t, n or 1) for t, n in layers) if size_at_level else (),
    )
    fill_in_counts(snap, workers, leader, st, assumed or {}, simulate_empty, within)
    descent = Descent(snap, dict(workers.per_pod))
    balanced = None
    try:
        if snap.balanced and not st.required and not unconstrained and within is None:
            balanced = balanced_domains(snap, st, level_idx)  # None: BestFit after all
        if balanced is not None:
            fit, fit_level = balanced
        else:
            fit_level, fit, reason = descent.find_level(level_idx, st)
            if reason:
                return {}, reason
        fit = descent.update_counts_to_minimum(
            fit, st.count, st.leader_count, st.slice_size, unconstrained, True
        )
        lvl = fit_level
        last = len(snap.levels) - 1
        while lvl < min(last, slice_level_idx) and balanced is None:
            lower = [c for d in fit for c in d.children]
            fit = descent.update_counts_to_minimum(
                descent.sorted_domains(lower, unconstrained),
                st.count,
                st.leader_count,
                st.slice_size,
                unconstrained,
                True,
            )
            lvl += 1
        while lvl < last:
            # below the outermost slice level: pods one by one, or an inner layer's slices
            size_here = st.slice_size if lvl < slice_level_idx else size_at_level.get(lvl + 1, 1)
            new_fit: list[Domain] = []
            for d in fit:
                children = descent.sorted_domains(d.children, unconstrained)
                if lvl >= slice_level_idx and size_here > 1:
                    descent.touched.append(children)  # counted again by the next fill
                    for c in children:  # the inner layer's slices, not the outermost's
                        c.slice_count = c.pod_count // size_here
                        c.slice_count_wl = c.pod_count_wl // size_here
                new_fit += descent.update_counts_to_minimum(
                    children, d.pod_count, d.leader_count, size_here, unconstrained, size_here > 1
                )
            fit = new_fit
            lvl += 1
        out: dict[str, TopologyAssignment] = {}
        if leader is not None:
            leaders = [(d.values, d.leader_count) for d in fit if d.leader_count > 0]
            out[leader.name] = _assignment(snap, leaders)
            fit = [d for d in fit if d.pod_count > 0]
        out[workers.name] = _assignment(snap, [(d.values, d.pod_count) for d in fit])
        return out, ""
    finally:
        if balanced is None:
            descent.done()  # it rewrote the snapshot's domains: the next fill counts them again
        # else it rewrote the balanced copies only: nothing to count again, none kept


def _inner_layers(
    snap: FlavorSnapshot,
    layers: tuple[tuple[str, int | None], ...],
    slice_size: int,
    slice_level_idx: int,
) -> tuple[dict[int, int], str]:
    """Kueue's buildSliceSizeAtLevel: per level below the outermost slice level, the
    slice size of the inner layer that level belongs to (every level down to an inner
    layer's own distributes in its multiples); or why the layers are not usable."""
    out: dict[int, int] = {}
    prev_size, prev_idx = slice_size, slice_level_idx
    for topo, size in layers[1:]:
        idx = snap.level_index(topo)
        if idx is None:
            return {}, f"no requested topology level for additional slice layer: {topo}"
        if idx <= prev_idx:
            return {}, (
                f"additional slice layer topology {topo} must be at a lower level than "
                f"{snap.levels[prev_idx]}"
            )
        n = size or 1
        if prev_size % n != 0:
            return {}, (
                f"additional slice layer size {n} must evenly divide parent layer size {prev_size}"
            )
        for lvl in range(prev_idx + 1, idx + 1):
            out[lvl] = n
        prev_size, prev_idx = n, idx
    return out, ""


def _assignment(
    snap: FlavorSnapshot, domains: list[tuple[tuple[str, ...], int]]
) -> TopologyAssignment:
    """Kueue's buildAssignment: sorted by level values; hosts only when the lowest
    level is the hostname."""
    domains = sorted((v, c) for v, c in domains if c > 0)
    if snap.lowest_is_node:
        return TopologyAssignment(
            levels=(snap.levels[-1],), domains=tuple(((v[-1],), c) for v, c in domains)
        )
    return TopologyAssignment(levels=snap.levels, domains=tuple(domains))


def place_flavor(
    snap: FlavorSnapshot,
    requests: Sequence[PlacementRequest],
    *,
    assumed: Mapping[tuple[str, ...], Usage] | None = None,
    simulate_empty: bool = False,
) -> PlacementResult:
    """Kueue's FindTopologyAssignmentsForFlavor: podSets in order, a podSet group (two
    podSets with one ``podSetGroupName``) placed together as leader + workers, each
    placement's usage assumed for the next."""
    result = PlacementResult()
    used: dict[tuple[str, ...], Usage] = {k: dict(v) for k, v in (assumed or {}).items()}
    groups: dict[str, list[PlacementRequest]] = {}
    order: list[str] = []
    for i, r in enumerate(requests):
        key = r.group if r.group is not None else f"\0{i}"
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(r)
    for key in order:
        members = groups[key]
        workers, leader = members[0], None
        if len(members) > 1:
            leader = members[1]
            if leader.count > workers.count:
                workers, leader = leader, workers
        assignments, reason = place(
            snap, workers, leader, assumed=used, simulate_empty=simulate_empty
        )
        if reason:
            result.failed = workers.name
            result.reason = reason
            return result
        for m in members:
            ta = assignments[m.name]
            result.assignments[m.name] = ta
            for values, count in ta.domains:
                k = usage_key(ta.levels, values)
                add_usage(
                    used.setdefault(k, {}),
                    {r: v * count for r, v in m.per_pod.items() if r != PODS},
                )
                add_usage(used[k], {PODS: count})
    return result
