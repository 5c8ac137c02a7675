"""Why a podSet does not fit a topology: Kueue's reason, then the numbers.

Kueue's message ("topology "x" allows to fit only 3 out of 4 pod(s)") followed by
which level, the largest domain's free amount of the binding resource against what is
needed, and how many nodes were excluded why.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission.engine.tas.counts import PlacementState
from admission.engine.tas.domains import Domain, FlavorSnapshot, Usage, add_usage
from queues.quantity import format_quantity

__all__ = ["not_fit"]


def not_fit(
    snap: FlavorSnapshot,
    per_pod: Mapping[str, int],
    fit: int,
    total: int,
    st: PlacementState,
    level_idx: int,
) -> str:
    """Kueue's message (only ``fit`` of ``total`` pods or slices fit), then the numbers
    at the level and the nodes excluded, by reason."""
    s = snap
    if st.layers:
        return _multi_layer(snap, st, level_idx)
    unit = "pod" if st.slice_size == 1 else "slice"
    if fit == 0:
        msg = f'topology "{s.topology}" doesn\'t allow to fit any of {total} {unit}(s)'
    else:
        msg = f'topology "{s.topology}" allows to fit only {fit} out of {total} {unit}(s)'
    detail = _explain(snap, per_pod, st, level_idx)
    if detail:
        msg += f"; {detail}"
    if st.excluded:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(st.excluded.items()))
        msg += f". Total nodes: {s.total_nodes}; excluded: {reasons}"
    return msg


def _multi_layer(snap: FlavorSnapshot, st: PlacementState, level_idx: int) -> str:
    """Kueue's multiLayerNotFitMessage: for the domain at the level holding the most
    slices, how many slices of each layer fit in it against how many are needed."""
    s = snap
    msg = f'topology "{s.topology}" doesn\'t allow to fit'
    domains = s.per_level[level_idx]
    if not domains:
        return msg
    best = min(domains, key=lambda d: (-d.slice_count, d.values))
    for topo, size in st.layers:
        target = s.level_index(topo)
        if target is None:
            continue
        fit = sum(d.pod_count // size for d in _at_level(best, target))
        msg += f"; {fit}/{st.count // size} slice(s) fit on level {topo}"
    if st.excluded:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(st.excluded.items()))
        msg += f". Total nodes: {s.total_nodes}; excluded: {reasons}"
    return msg


def _at_level(d: Domain, level: int) -> list[Domain]:
    out, stack = [], [d]
    while stack:
        x = stack.pop()
        if x.level == level or not x.children:
            out.append(x)
        else:
            stack.extend(x.children)
    return out


def _explain(
    snap: FlavorSnapshot, per_pod: Mapping[str, int], st: PlacementState, level_idx: int
) -> str:
    """The numbers: the largest domain at the level and what it lacks."""
    s = snap
    req = per_pod
    if not req:
        return ""
    level = s.levels[level_idx]
    totals: list[tuple[Domain, Usage]] = []
    for d in s.per_level[level_idx]:
        free: Usage = {}
        for leaf in _leaves(d):
            got = st.free_by_leaf.get(leaf.values)
            if got is None:
                got = s.free(leaf, simulate_empty=st.simulate_empty)
            add_usage(free, {r: max(0, v) for r, v in got.items()})
        totals.append((d, free))
    if not totals:
        return ""
    per = st.slice_size
    need_pods = st.count
    # The binding resource: the one whose need is largest against the best domain.
    best_d, best_free = min(totals, key=lambda t: (-t[0].pod_count, t[0].values))
    worst_r, worst_gap = "", -1.0
    for r, v in req.items():
        if v <= 0:
            continue
        need = v * need_pods
        gap = need - best_free.get(r, 0)
        if gap > worst_gap:
            worst_r, worst_gap = r, gap
    if not worst_r:
        return ""
    need_text = format_quantity(worst_r, req[worst_r] * need_pods)
    have_text = format_quantity(worst_r, best_free.get(worst_r, 0))
    what = f"{need_pods} pod(s)" + (f" in slices of {per}" if per > 1 else "")
    where = "/".join(best_d.values)
    if worst_gap <= 0:
        return (
            f"no {level} domain fits {what}; the largest, {where}, holds {best_d.pod_count} "
            f"pod(s) ({have_text} free {worst_r})"
        )
    return (
        f"no {level} domain has {need_text} free {worst_r} for {what}; "
        f"the largest, {where}, has {have_text}"
    )


def _leaves(d: Domain) -> list[Domain]:
    out, stack = [], [d]
    while stack:
        x = stack.pop()
        if x.children:
            stack.extend(x.children)
        else:
            out.append(x)
    return out
