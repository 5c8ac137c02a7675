"""Kueue's balanced placement (``TASBalancedPlacement``, Alpha since 0.15, off by default).

A *preferred* request (not required, not unconstrained) is spread evenly: among the
domains one level above the preferred one, the one whose children can hold the request
with the highest *threshold* — the smallest number of slices every chosen domain gets —
is picked; domains below the threshold are pruned; then the fewest domains with the
least total capacity (a small dynamic program) take ``threshold`` slices each and the
rest in order. When no threshold above zero exists, or the balanced assignment fails,
placement falls back to BestFit. A port of pkg/cache/scheduler/tas_balanced_placement.go;
the candidates are copies of the snapshot's domains, so the snapshot's counts are never
changed by a try, and the copies are linked downwards only, so they are freed by
reference counting once the placement is done (:func:`_clone`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from admission.engine.tas.counts import PlacementState, aggregate
from admission.engine.tas.descent import Descent
from admission.engine.tas.domains import Domain, FlavorSnapshot

__all__ = ["balanced_domains"]

_sorted_with_leader = Descent.sorted_with_leader
_sorted = Descent.sorted_domains


def _greedy(
    domains: Sequence[Domain], slice_count: int, leader_count: int
) -> tuple[bool, int, Domain | None, Domain | None]:
    """Kueue's evaluateGreedyAssignment: whether BestFit order fits the request, how many
    domains it takes, and the last one taken with and without a leader."""
    selected = 0
    last_wl: Domain | None = None
    last: Domain | None = None
    slices_left, leaders_left = slice_count, leader_count
    idx = 0
    if leader_count > 0:
        with_leader = _sorted_with_leader(domains, False)
        while leaders_left > 0 and idx < len(with_leader) and with_leader[idx].leader_count > 0:
            d = with_leader[idx]
            selected += 1
            last_wl = d
            leaders_left -= d.leader_count
            slices_left -= d.slice_count_wl
            idx += 1
        rest = _sorted(with_leader[idx:], False)
    else:
        rest = _sorted(domains, False)
    if leaders_left > 0:
        return False, 0, None, None
    idx = 0
    while slices_left > 0 and idx < len(rest) and rest[idx].slice_count > 0:
        selected += 1
        last = rest[idx]
        slices_left -= rest[idx].slice_count
        idx += 1
    if slices_left > 0:
        return False, 0, None, None
    return True, selected, last_wl, last


def _threshold(slice_count: int, selected: int, last_wl: Domain | None, last: Domain | None) -> int:
    """Kueue's balanceThresholdValue: the most slices every chosen domain can get."""
    t = slice_count // selected
    if last_wl is not None:
        t = min(t, last_wl.slice_count_wl)
    if last is not None:
        t = min(t, last.slice_count)
    return t


def _entropy(domains: Sequence[Domain]) -> float:
    total = sum(d.pod_count for d in domains)
    if total == 0:
        return 0.0
    out = 0.0
    for d in domains:
        if d.pod_count > 0:
            p = d.pod_count / total
            out -= p * math.log2(p)
    return out


def _optimal_set(
    domains: Sequence[Domain],
    slice_count: int,
    leader_count: int,
    slice_size: int,
    by_entropy: bool,
) -> list[Domain] | None:
    """Kueue's selectOptimalDomainSetToFit: as few domains as the greedy order needs,
    with the least total capacity that still holds the request."""
    fits, n, _, _ = _greedy(domains, slice_count, leader_count)
    if not fits:
        return None
    if by_entropy:
        ordered = sorted(
            domains,
            key=lambda d: (-d.leader_count, -d.slice_count_wl, -_entropy(d.children), d.values),
        )
    else:
        ordered = sorted(domains, key=lambda d: d.values)
    # placements[i][leaders left][pods left]: the first set of i domains found that leaves them
    placements: list[dict[int, dict[int, list[Domain]]]] = [{} for _ in range(n + 1)]
    placements[0][leader_count] = {slice_count * slice_size: []}
    for d in ordered:
        for i in range(n, 0, -1):
            before = placements[i - 1]
            for leaders in sorted(before):
                for pods in sorted(before[leaders]):
                    if leaders <= 0 and pods <= 0:
                        continue
                    chosen = [*before[leaders][pods], d]
                    if leaders > 0 and d.leader_count > 0:
                        row = placements[i].setdefault(leaders - d.leader_count, {})
                        row.setdefault(pods - d.pod_count_wl, chosen)
                    if d.slice_count > 0:
                        row = placements[i].setdefault(leaders, {})
                        row.setdefault(pods - d.pod_count, chosen)
    done = placements[n].get(0, {})
    left = [p for p in done if p <= 0]
    return done[max(left)] if left else None


def _place_balanced(
    domains: Sequence[Domain], slice_count: int, leader_count: int, slice_size: int, threshold: int
) -> tuple[list[Domain], str]:
    """Kueue's placeSlicesOnDomainsBalanced: ``threshold`` slices on each chosen domain,
    the rest in BestFit order, leaders first."""
    chosen = _optimal_set(domains, slice_count, leader_count, slice_size, False)
    if chosen is None:
        return [], "TAS Balanced Placement: Cannot find optimal domain set to fit the request"
    if slice_count < len(chosen) * threshold:
        return [], "TAS Balanced Placement: Not enough slices to meet the threshold"
    chosen = _sorted_with_leader(chosen, False)
    extra = slice_count - len(chosen) * threshold
    leaders_left = leader_count
    for d in chosen:
        if leaders_left > 0:
            take = min(d.slice_count_wl - threshold, extra)
            d.leader_count = 1
            leaders_left -= 1
        elif extra > 0:
            take = min(d.slice_count - threshold, extra)
            d.leader_count = 0
        else:
            d.leader_count = 0
            take = 0
        d.slice_count = threshold + take
        d.pod_count = d.slice_count * slice_size
        d.slice_count_wl = d.slice_count
        d.pod_count_wl = d.pod_count - d.leader_count
        extra -= take
    if extra > 0 or leaders_left > 0:
        return [], "TAS Balanced Placement: Not all slices or leaders could be placed"
    return chosen, ""


def _clone(d: Domain) -> Domain:
    """A copy of ``d``'s subtree, counts included, for a try that must not change the
    snapshot. Linked downwards only (``parent`` is None: nothing reads a copy's parent),
    so the copies are no reference cycle and reference counting frees them as soon as
    the placement lets go, however many tries it made; with the heap frozen
    (``admission.engine.gc_pause``) a cycle would wait for a full collection, and one
    frozen for a compaction."""
    c = Domain(d.values, d.level, None)
    c.nodes, c.capacity, c.key, c.tainted = d.nodes, d.capacity, d.key, d.tainted
    c.pod_count, c.slice_count = d.pod_count, d.slice_count
    c.pod_count_wl, c.slice_count_wl, c.leader_count = (
        d.pod_count_wl,
        d.slice_count_wl,
        d.leader_count,
    )
    c.children = [_clone(x) for x in d.children]
    return c


def _clear(d: Domain, *, leader_only: bool = False) -> None:
    """Kueue's clearState / clearLeaderCapacity, over the subtree."""
    if not leader_only:
        d.pod_count = d.slice_count = 0
    d.pod_count_wl = d.slice_count_wl = d.leader_count = 0
    for c in d.children:
        _clear(c, leader_only=leader_only)


def _prune_one(d: Domain, threshold: int, leader_required: bool) -> None:
    if d.slice_count < threshold:
        _clear(d)
    elif leader_required and d.leader_count > 0 and d.slice_count_wl < threshold:
        _clear(d, leader_only=True)  # still for workers, no longer the leader's host


def _recount(d: Domain, st: PlacementState, level: int, leader_required: bool) -> None:
    """Kueue's fillInCountsHelper on a subtree (one slice layer)."""
    if not d.children:
        if level == st.slice_level_idx:
            d.slice_count = d.pod_count // st.slice_size
            d.slice_count_wl = d.pod_count_wl // st.slice_size
        return
    for c in d.children:
        _recount(c, st, level + 1, leader_required)
    aggregate(d, st, level, leader_required)


def _prune(domains: Sequence[Domain], threshold: int, st: PlacementState, level: int) -> None:
    """Kueue's pruneDomainsBelowThreshold."""
    leader_required = st.leader_count > 0
    for d in domains:
        for c in d.children:
            _prune_one(c, threshold, leader_required)
    for d in domains:
        _recount(d, st, level, leader_required)
        _prune_one(d, threshold, leader_required)


def _best_candidates(
    snap: FlavorSnapshot, st: PlacementState, level_idx: int
) -> tuple[list[Domain], int]:
    """Kueue's findBestDomainsForBalancedPlacement: the copies of the sibling domains at
    the preferred level that hold the request with the highest threshold, and it."""
    slice_count = st.count // st.slice_size
    if level_idx == 0:
        groups = [snap.per_level[0]]
    else:
        groups = [h.children for h in sorted(snap.per_level[level_idx - 1], key=lambda d: d.values)]
    one_layer = replace(st, size_at_level={})
    best, best_n, best_set = 0, 0, []
    for siblings in groups:
        cands = [_clone(d) for d in siblings]
        lower = [c for d in cands for c in d.children] if level_idx < st.slice_level_idx else cands
        fits, n, last_wl, last = _greedy(lower, slice_count, st.leader_count)
        if not fits:
            continue
        t = _threshold(slice_count, n, last_wl, last)
        t_leader = t
        if st.leader_count > 0 and last is not None:
            t_leader = min(t, last.slice_count_wl)
        if t < best:
            continue
        _prune(cands, t, one_layer, level_idx)
        ok, at_level, _, _ = _greedy(cands, slice_count, st.leader_count)
        if not ok and t_leader < t:
            if t_leader <= 0 or t_leader < best:
                continue
            t = t_leader
            cands = [_clone(d) for d in siblings]
            _prune(cands, t, one_layer, level_idx)
            ok, at_level, _, _ = _greedy(cands, slice_count, st.leader_count)
        if not ok:
            continue
        if t > best or (t == best and at_level < best_n):
            best, best_n, best_set = t, at_level, cands
    return best_set, best


def balanced_domains(
    snap: FlavorSnapshot, st: PlacementState, level_idx: int
) -> tuple[list[Domain], int] | None:
    """Kueue's balanced placement for a preferred request at ``level_idx``: the domains
    (copies) that take the pods and their level, or None to fall back to BestFit."""
    cands, threshold = _best_candidates(snap, st, level_idx)
    if threshold <= 0:
        return None
    slice_count = st.count // st.slice_size
    fit_level = level_idx
    if level_idx < st.slice_level_idx:
        chosen = _optimal_set(cands, slice_count, st.leader_count, st.slice_size, True)
        if chosen is None:
            return None
        cands = [c for d in chosen for c in d.children]
        fit_level = level_idx + 1
    placed, why = _place_balanced(cands, slice_count, st.leader_count, st.slice_size, threshold)
    if why:
        return None
    return placed, fit_level
