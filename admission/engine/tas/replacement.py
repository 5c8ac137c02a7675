"""Replacing a failed node's pods inside a TAS assignment (Kueue's TASFailedNodeReplacement)."""

from __future__ import annotations

from dataclasses import replace

from admission.engine.tas.domains import Domain, FlavorSnapshot
from admission.engine.tas.placement import place
from admission.engine.tas.request import PlacementRequest
from queues.model import TopologyAssignment

__all__ = ["find_replacement"]


def find_replacement(
    snap: FlavorSnapshot,
    request: PlacementRequest,
    existing: TopologyAssignment,
    failed_host: str,
) -> tuple[TopologyAssignment | None, str]:
    """Kueue's findReplacementAssignment (TASFailedNodeReplacement): the podSet's
    assignment with the pods of ``failed_host`` moved to other nodes, or (None, why).

    The failed node's pods are placed anew, each on a node with room, inside the domain
    the assignment must stay in: the domain of the ``required`` level that holds the
    rest of the assignment, or — when slices are requested and the node's pods broke
    one — the slice-level domain left incomplete (the replacement pods then form no
    slices of their own). A preferred or unconstrained podSet may go anywhere. The
    failed node no longer counts as capacity (deleted or not Ready); the workload's
    other pods keep their places. ``request`` carries the podSet's per-pod requests and
    topology request (its ``count`` is ignored)."""
    missing = sum(c for v, c in existing.domains if v[-1] == failed_host)
    kept = [(v, c) for v, c in existing.domains if v[-1] != failed_host]
    if missing == 0:
        return existing, ""
    leaves: list[Domain] = []
    for values, _ in kept:
        leaf = snap.leaf_of(values, existing.levels)
        if leaf is None:
            return None, (
                "Cannot replace the node, because the existing topologyAssignment is "
                f"invalid, as it contains the stale domain {values[0]}"
            )
        leaves.append(leaf)
    tr = request.topology
    within: tuple[str, ...] | None = None
    replacement_tr = tr
    slice_size = tr.slice_size if tr is not None and tr.slice_required_topology else None
    if tr is not None and slice_size and missing % slice_size != 0 and leaves:
        slice_idx = snap.level_index(tr.slice_required_topology or snap.levels[-1])
        if slice_idx is not None:
            per_slice: dict[tuple[str, ...], int] = {}
            for leaf, (_, c) in zip(leaves, kept, strict=True):
                key = leaf.values[: slice_idx + 1]
                per_slice[key] = per_slice.get(key, 0) + c
            broken = sorted(k for k, n in per_slice.items() if n % slice_size != 0)
            if broken:
                within = broken[0]
        replacement_tr = replace(tr, slice_required_topology=None, slice_size=None)
    elif tr is not None and tr.required is not None and leaves:
        idx = snap.level_index(tr.required)
        if idx is not None:
            within = leaves[0].values[: idx + 1]
    if replacement_tr is not None and replacement_tr.required is None and within is not None:
        replacement_tr = replace(replacement_tr, required=snap.levels[len(within) - 1])
    req = replace(request, count=missing, topology=replacement_tr)
    out, reason = place(snap, req, None, within=within)
    if reason:
        return None, reason
    found = out.get(request.name)
    if found is None or not found.domains:
        return None, f"cannot find replacement assignment for unhealthy node: {failed_host}"
    merged: dict[tuple[str, ...], int] = dict(kept)
    for values, c in found.domains:
        merged[values] = merged.get(values, 0) + c
    return TopologyAssignment(levels=existing.levels, domains=tuple(sorted(merged.items()))), ""
