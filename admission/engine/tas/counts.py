"""Phase 1 of a TAS placement: how many pods each topology domain holds for one request.

Kueue's ``fillInCounts``: on every leaf, how many pods (and, for a podSet group,
whether its leader) fit in what is free on the nodes the request may use; summed up
the tree, with slices counted at the slice level. The result is written on the
snapshot's domains (``pod_count``, ``slice_count``, ``leader_count`` and their
``_wl`` variants, the counts left once the leader is placed), where the descent
(:mod:`admission.engine.tas.descent`) reads and rewrites it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from admission.engine.tas.domains import (
    PODS,
    Domain,
    FlavorSnapshot,
    Node,
    Usage,
    add_usage,
)
from admission.engine.tas.request import PlacementRequest
from queues.model import Toleration

MAX_COUNT = 2**31 - 1
"""More pods than any domain holds (Kueue's math.MaxInt32)."""

__all__ = ["MAX_COUNT", "FillState", "PlacementState", "fill_in_counts"]


def _node_excluded(node: Node, req: PlacementRequest, flavor_tol: Sequence[Toleration]) -> str:
    """Why a node cannot take the podSet's pods ("" when it can): Kueue's scheduling
    simulator filters (taints, node selector, required node affinity)."""
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if any(t.tolerates(taint) for t in req.tolerations) or any(
            t.tolerates(taint) for t in flavor_tol
        ):
            continue
        return "untolerated taint"
    labels = node.labels
    for k, v in req.node_selector.items():
        if labels.get(k) != v:
            return "node selector"
    if req.required_affinity and not any(
        all(e.matches(labels) for e in term.match_expressions) for term in req.required_affinity
    ):
        return "node affinity"
    return ""


def _count_in(requests: Mapping[str, int], free: Mapping[str, int]) -> tuple[int, str]:
    """How many copies of ``requests`` fit in ``free``, and the resource that binds."""
    best, limiting = MAX_COUNT, ""
    for r, v in requests.items():
        if v <= 0:
            continue
        n = max(0, free.get(r, 0)) // v
        if n < best:
            best, limiting = n, r
    return best, limiting


@dataclass(slots=True)
class FillState:
    """The counts the snapshot's domains hold for the last incremental request shape
    (``sig``), and what changed since: leaves whose usage moved (``FlavorSnapshot.
    invalidate``) and domains a placement rewrote. ``excluded`` and ``free_by_leaf``
    are the fill's exclusion reasons and filtered free capacity, per leaf so a leaf's
    share can be replaced."""

    sig: tuple[object, ...] | None
    dirty: set[Domain] = field(default_factory=set)
    # the usage assumed on leaves (this cycle's placements) the counts were made with
    assumed: dict[tuple[str, ...], Usage] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)
    leaf_excluded: dict[tuple[str, ...], dict[str, int]] = field(default_factory=dict)
    free_by_leaf: dict[tuple[str, ...], Usage] = field(default_factory=dict)


@dataclass(slots=True)
class PlacementState:
    """One placement's request resolved against the snapshot (pods, slice size, mode,
    levels), and what its fill found: why nodes were excluded, and the free capacity
    of the leaves a filter or an assumed usage changed."""

    count: int
    slice_size: int
    required: bool
    unconstrained: bool
    level_idx: int
    slice_level_idx: int
    leader_count: int = 0
    simulate_empty: bool = False
    # multi-layer slices: the inner layers' slice size per level below the outermost,
    # and every layer (level, size) for the not-fit message; empty for one layer
    size_at_level: dict[int, int] = field(default_factory=dict)
    layers: tuple[tuple[str, int], ...] = ()
    excluded: dict[str, int] = field(default_factory=dict)
    free_by_leaf: dict[tuple[str, ...], Usage] = field(default_factory=dict)


def fill_in_counts(
    snap: FlavorSnapshot,
    workers: PlacementRequest,
    leader: PlacementRequest | None,
    st: PlacementState,
    assumed: Mapping[tuple[str, ...], Usage],
    simulate_empty: bool,
    within: tuple[str, ...] | None = None,
) -> None:
    """Phase 1 (Kueue's fillInCounts): how many pods (slices, with the leader …)
    each domain holds for this request, leaves first, then every parent.

    The common request — no node selector or affinity, no leader, not confined — is
    incremental: the snapshot keeps the counts of the last such request
    (:class:`FillState`); when the next has the same shape, only the leaves whose
    usage changed since (committed, or assumed in this cycle) and the domains the
    last placement rewrote are computed again, with their ancestors: a full pass
    costs every leaf of the flavor, this costs the few that changed."""
    s = snap
    req = dict(workers.per_pod)
    req[PODS] = req.get(PODS, 0) + 1
    lreq: dict[str, int] | None = None
    if leader is not None:
        lreq = dict(leader.per_pod)
        lreq[PODS] = lreq.get(PODS, 0) + 1
    # Per-pod counts of leaves nothing excludes and nothing is assumed on are cached
    # per request shape until their usage changes (the common case: gangs of the
    # same shape, tried again and again).
    shape = tuple(sorted(req.items()))
    counts = s.count_cache.setdefault((shape, simulate_empty), {})
    filter_all = bool(
        workers.node_selector
        or workers.required_affinity
        or (leader is not None and (leader.node_selector or leader.required_affinity))
    )
    fast = not filter_all and lreq is None and within is None
    sig = (
        (
            shape,
            simulate_empty,
            st.slice_size,
            st.slice_level_idx,
            tuple(workers.tolerations),
            tuple(sorted(st.size_at_level.items())),
        )
        if fast
        else None
    )
    fs = s.fill if isinstance(s.fill, FillState) else None
    if sig is not None and fs is not None and fs.sig == sig:
        _assumed_changes(snap, fs, assumed)
        _refill(snap, fs, workers, req, counts, st, simulate_empty, assumed)
        return
    fs = FillState(sig) if sig is not None else None
    s.fill = fs
    if fs is not None:
        fs.assumed = {k: dict(v) for k, v in assumed.items()}
    for leaf in s.per_level[-1]:
        if within is not None and leaf.values[: len(within)] != within:
            # outside the domain a replacement must stay in: no room there
            leaf.pod_count = leaf.pod_count_wl = leaf.leader_count = 0
            leaf.slice_count = leaf.slice_count_wl = 0
            continue
        if fs is None:
            _fill_leaf(
                snap, leaf, workers, leader, req, lreq, counts, filter_all, assumed, st,
                simulate_empty, st.excluded, st.free_by_leaf,
            )  # fmt: skip
        else:
            _fill_tracked(snap, fs, leaf, workers, req, counts, st, simulate_empty, assumed)
    if fs is not None:
        st.excluded.update(fs.excluded)
        st.free_by_leaf.update(fs.free_by_leaf)
    leader_required = leader is not None
    for lvl in range(len(s.levels) - 2, -1, -1):
        for d in s.per_level[lvl]:
            aggregate(d, st, lvl, leader_required)


def _assumed_changes(
    snap: FlavorSnapshot, fs: FillState, assumed: Mapping[tuple[str, ...], Usage]
) -> None:
    """Mark dirty the leaves whose assumed usage differs from the last fill's."""
    old = fs.assumed
    if not old and not assumed:
        return
    by_key = snap.by_key
    for key in old.keys() | assumed.keys():
        if old.get(key) != assumed.get(key):
            leaf = by_key.get(key)
            if leaf is not None:
                fs.dirty.add(leaf)
    fs.assumed = {k: dict(v) for k, v in assumed.items()}


def _fill_tracked(
    snap: FlavorSnapshot,
    fs: FillState,
    leaf: Domain,
    workers: PlacementRequest,
    req: Mapping[str, int],
    counts: dict[tuple[str, ...], tuple[int, str]],
    st: PlacementState,
    simulate_empty: bool,
    assumed: Mapping[tuple[str, ...], Usage],
) -> None:
    """One leaf of an incremental fill: its counts, and its share of the exclusion
    reasons and filtered free capacity kept in ``fs`` (replaced, not added)."""
    old = fs.leaf_excluded.pop(leaf.key, None)
    if old:
        add_usage(fs.excluded, old, -1)
    fs.free_by_leaf.pop(leaf.values, None)
    mine: dict[str, int] = {}
    _fill_leaf(
        snap, leaf, workers, None, req, None, counts, False, assumed, st, simulate_empty,
        mine, fs.free_by_leaf,
    )  # fmt: skip
    if mine:
        fs.leaf_excluded[leaf.key] = mine
        add_usage(fs.excluded, mine)


def _refill(
    snap: FlavorSnapshot,
    fs: FillState,
    workers: PlacementRequest,
    req: Mapping[str, int],
    counts: dict[tuple[str, ...], tuple[int, str]],
    st: PlacementState,
    simulate_empty: bool,
    assumed: Mapping[tuple[str, ...], Usage],
) -> None:
    """The incremental pass: the changed leaves and rewritten domains, then their
    ancestors bottom-up."""
    s = snap
    dirty = fs.dirty
    fs.dirty = set()
    parents: list[set[Domain]] = [set() for _ in s.levels]
    for d in dirty:
        if d.children:
            parents[d.level].add(d)
        else:
            _fill_tracked(snap, fs, d, workers, req, counts, st, simulate_empty, assumed)
        up = d.parent
        while up is not None and up not in parents[up.level]:
            parents[up.level].add(up)
            up = up.parent
    for lvl in range(len(s.levels) - 2, -1, -1):
        for d in parents[lvl]:
            aggregate(d, st, lvl, False)
    st.excluded.update(fs.excluded)
    st.free_by_leaf.update(fs.free_by_leaf)


def _fill_leaf(
    snap: FlavorSnapshot,
    leaf: Domain,
    workers: PlacementRequest,
    leader: PlacementRequest | None,
    req: Mapping[str, int],
    lreq: Mapping[str, int] | None,
    counts: dict[tuple[str, ...], tuple[int, str]],
    filter_all: bool,
    assumed: Mapping[tuple[str, ...], Usage],
    st: PlacementState,
    simulate_empty: bool,
    excluded: dict[str, int],
    free_by_leaf: dict[tuple[str, ...], Usage],
) -> None:
    s = snap
    key = leaf.key
    extra = assumed.get(key) if assumed else None
    filtered = filter_all or leaf.tainted
    cached = counts.get(key) if not filtered and not extra and lreq is None else None
    if cached is not None:
        leaf.pod_count, limiting = cached
        leaf.pod_count_wl = leaf.pod_count
        leaf.leader_count = 0
        if leaf.pod_count == 0 and limiting:
            k = f'resource "{limiting}"'
            excluded[k] = excluded.get(k, 0) + len(leaf.nodes)
    else:
        nodes_ok = (
            [n for n in leaf.nodes if not _excluded(snap, n, workers, leader, excluded)]
            if filtered
            else leaf.nodes
        )
        free = s.free(leaf, simulate_empty=simulate_empty)
        if len(nodes_ok) != len(leaf.nodes):
            # only the feasible nodes' share of the leaf counts
            free = _share(free, leaf, nodes_ok) if nodes_ok else {}
        if extra:
            free = dict(free)
            add_usage(free, extra, -1)
        leaf.pod_count, limiting = _count_in(req, free)
        if not filtered and not extra:
            counts[key] = (leaf.pod_count, limiting)
        if leaf.pod_count == 0 and limiting and nodes_ok:
            k = f'resource "{limiting}"'
            excluded[k] = excluded.get(k, 0) + len(nodes_ok)
        leaf.leader_count = 0
        leaf.pod_count_wl = leaf.pod_count
        if lreq is not None:
            if _count_in(lreq, free)[0] > 0:
                leaf.leader_count = 1
                free = dict(free)
                add_usage(free, lreq, -1)
            leaf.pod_count_wl = _count_in(req, free)[0]
        if extra or filtered:
            free_by_leaf[leaf.values] = free
    if st.slice_level_idx == len(s.levels) - 1:
        leaf.slice_count = leaf.pod_count // st.slice_size
        leaf.slice_count_wl = leaf.pod_count_wl // st.slice_size
    else:
        leaf.slice_count = leaf.slice_count_wl = 0


def _excluded(
    snap: FlavorSnapshot,
    node: Node,
    workers: PlacementRequest,
    leader: PlacementRequest | None,
    excluded: dict[str, int],
) -> bool:
    why = _node_excluded(node, workers, snap.tolerations)
    if why and leader is not None:
        why = why if _node_excluded(node, leader, snap.tolerations) else ""
    if why:
        excluded[why] = excluded.get(why, 0) + 1
    return bool(why)


def aggregate(d: Domain, st: PlacementState, level: int, leader_required: bool) -> None:
    """Kueue's fillInCountsHelper for a parent (its children are done)."""
    pods = slices = leader = 0
    contributor = False
    min_pod_diff = min_slice_diff = MAX_COUNT
    # an inner slice layer at the children's level: they give pods in its multiples
    inner = st.size_at_level.get(level + 1, 1) if st.size_at_level else 1
    for c in d.children:
        cp, cpw = c.pod_count, c.pod_count_wl
        if inner > 1:
            cp, cpw = cp // inner * inner, cpw // inner * inner
        pods += cp
        slices += c.slice_count
        if not leader_required or c.leader_count > 0:
            contributor = True
            pd = cp - cpw
            if pd < min_pod_diff:
                min_pod_diff = pd
            sd = c.slice_count - c.slice_count_wl
            if sd < min_slice_diff:
                min_slice_diff = sd
        if c.leader_count > leader:
            leader = c.leader_count
    d.pod_count = pods
    slices_wl = 0
    if contributor:
        d.pod_count_wl = pods - min_pod_diff
        slices_wl = slices - min_slice_diff
    else:
        d.pod_count_wl = 0
    d.leader_count = leader
    if level == st.slice_level_idx:
        slices = d.pod_count // st.slice_size
        slices_wl = d.pod_count_wl // st.slice_size
    d.slice_count = slices
    d.slice_count_wl = slices_wl


def _share(free: Usage, leaf: Domain, nodes_ok: Sequence[Node]) -> Usage:
    """The part of a multi-node leaf's free capacity on its feasible nodes (scaled by
    their share of the leaf's allocatable, per resource)."""
    out: Usage = {}
    for r, v in free.items():
        total = sum(n.allocatable.get(r, 0) for n in leaf.nodes)
        ok = sum(n.allocatable.get(r, 0) for n in nodes_ok)
        out[r] = v * ok // total if total else 0
    return out
