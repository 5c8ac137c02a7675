"""Placing a podSet (or a podSet group) inside topology domains: Kueue's TAS algorithm.

A port of Kueue's ``TASFlavorSnapshot.findTopologyAssignment`` and its helpers
(pkg/cache/scheduler/tas_flavor_snapshot.go) with Kueue's default profile (feature
gates as shipped: TASProfileMixed on, balanced placement and multi-layer slices off):

1. *Counts*: on every leaf, how many pods (and, for a group, whether its leader) fit
   in what is free; summed up the tree, with slices counted at the slice level.
2. *Level*: ``required`` — the best domain at the requested level must hold every
   slice, else the podSet does not fit; ``preferred`` — go up a level at a time until
   one domain holds it, and at the top spread over the fewest domains;
   ``unconstrained`` (and slice-only or implied requests) — spread from the domains
   with the least free capacity (Kueue's LeastFreeCapacity).
3. *Descent*: level by level, give each chosen domain's pods to the fewest children,
   largest first, with *best fit* for the last one (the domain with the least
   capacity that still fits, so big domains stay whole); ties by level values, so
   the same inputs always give the same placement.

When nothing fits, the reason is Kueue's ("topology "x" allows to fit only 3 out of
4 pod(s)") followed by the numbers: which level, the largest domain's free amount of
the binding resource against what is needed, and how many nodes were excluded why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from admission.engine.tas.domains import (
    PODS,
    Domain,
    FlavorSnapshot,
    Node,
    Usage,
    add_usage,
    usage_key,
)
from queues.model import NodeSelectorTerm, Toleration, TopologyAssignment, TopologyRequest
from queues.quantity import format_quantity

_MAX = 2**31 - 1

__all__ = [
    "PlacementRequest",
    "PlacementResult",
    "find_replacement",
    "place",
    "place_flavor",
    "requests_tas",
]


def requests_tas(tr: TopologyRequest | None) -> bool:
    return tr is not None and tr.requests_tas


@dataclass(slots=True)
class PlacementRequest:
    """One podSet's part of a TAS placement (Kueue's TASPodSetRequests)."""

    name: str
    count: int
    per_pod: Mapping[str, int]  # requests of one pod, engine units ("pods" not included)
    topology: TopologyRequest | None
    implied: bool = False  # a TAS-only ClusterQueue, no explicit request (lowest level)
    tolerations: Sequence[Toleration] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_affinity: Sequence[NodeSelectorTerm] = ()

    @property
    def group(self) -> str | None:
        return self.topology.pod_set_group_name if self.topology is not None else None


@dataclass(slots=True)
class PlacementResult:
    assignments: dict[str, TopologyAssignment] = field(default_factory=dict)
    failed: str | None = None  # the podSet that does not fit
    reason: str = ""


# ------------------------------------------------------------------ feasibility


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
    best, limiting = _MAX, ""
    for r, v in requests.items():
        if v <= 0:
            continue
        n = max(0, free.get(r, 0)) // v
        if n < best:
            best, limiting = n, r
    return best, limiting


# ------------------------------------------------------------------ the algorithm


@dataclass(slots=True)
class FillState:
    """The counts the snapshot's domains hold for the last incremental request shape
    (``sig``), and what changed since: leaves whose usage moved (``FlavorSnapshot.
    invalidate``) and domains a placement rewrote. ``excluded`` and ``free_by_leaf``
    are the fill's exclusion reasons and filtered free capacity, per leaf so a leaf's
    share can be replaced."""

    sig: tuple[object, ...] | None
    dirty: set[Domain] = field(default_factory=set)
    excluded: dict[str, int] = field(default_factory=dict)
    leaf_excluded: dict[tuple[str, ...], dict[str, int]] = field(default_factory=dict)
    free_by_leaf: dict[tuple[str, ...], Usage] = field(default_factory=dict)


@dataclass(slots=True)
class _State:
    count: int
    slice_size: int
    required: bool
    unconstrained: bool
    level_idx: int
    slice_level_idx: int
    leader_count: int = 0
    simulate_empty: bool = False
    excluded: dict[str, int] = field(default_factory=dict)
    free_by_leaf: dict[tuple[str, ...], Usage] = field(default_factory=dict)


class _Placer:
    """One findTopologyAssignment call on one snapshot."""

    def __init__(self, snap: FlavorSnapshot, per_pod: Mapping[str, int]) -> None:
        self.s = snap
        self._req = per_pod
        self.touched: list[list[Domain]] = []  # the domains phase 2 rewrote

    def done(self) -> None:
        """After phase 2: the domains it rewrote are computed again by the next fill."""
        fs = self.s.fill
        if isinstance(fs, FillState):
            for ds in self.touched:
                fs.dirty.update(ds)
        self.touched = []

    # -- phase 1: counts ----------------------------------------------------------

    def fill_in_counts(
        self,
        workers: PlacementRequest,
        leader: PlacementRequest | None,
        st: _State,
        assumed: Mapping[tuple[str, ...], Usage],
        simulate_empty: bool,
        within: tuple[str, ...] | None = None,
    ) -> None:
        """Phase 1 (Kueue's fillInCounts): how many pods (slices, with the leader …)
        each domain holds for this request, leaves first, then every parent.

        The common request — no node selector or affinity, no leader, nothing assumed,
        not confined — is incremental: the snapshot keeps the counts of the last such
        request (:class:`FillState`); when the next has the same shape, only the leaves
        whose usage changed since and the domains the last placement rewrote are
        computed again, with their ancestors. A full pass costs every leaf of the
        flavor (5,000 in the plan-tas benchmark); this costs the few that changed."""
        s = self.s
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
        fast = not filter_all and not assumed and lreq is None and within is None
        sig = (
            (shape, simulate_empty, st.slice_size, st.slice_level_idx, tuple(workers.tolerations))
            if fast
            else None
        )
        fs = s.fill if isinstance(s.fill, FillState) else None
        if sig is not None and fs is not None and fs.sig == sig:
            self._refill(fs, workers, req, counts, st, simulate_empty)
            return
        fs = FillState(sig) if sig is not None else None
        s.fill = fs
        for leaf in s.per_level[-1]:
            if within is not None and leaf.values[: len(within)] != within:
                # outside the domain a replacement must stay in: no room there
                leaf.pod_count = leaf.pod_count_wl = leaf.leader_count = 0
                leaf.slice_count = leaf.slice_count_wl = 0
                continue
            if fs is None:
                self._fill_leaf(
                    leaf, workers, leader, req, lreq, counts, filter_all, assumed, st,
                    simulate_empty, st.excluded, st.free_by_leaf,
                )  # fmt: skip
            else:
                self._fill_tracked(fs, leaf, workers, req, counts, st, simulate_empty)
        if fs is not None:
            st.excluded.update(fs.excluded)
            st.free_by_leaf.update(fs.free_by_leaf)
        leader_required = leader is not None
        for lvl in range(len(s.levels) - 2, -1, -1):
            for d in s.per_level[lvl]:
                self._aggregate(d, st, lvl, leader_required)

    def _fill_tracked(
        self,
        fs: FillState,
        leaf: Domain,
        workers: PlacementRequest,
        req: Mapping[str, int],
        counts: dict[tuple[str, ...], tuple[int, str]],
        st: _State,
        simulate_empty: bool,
    ) -> None:
        """One leaf of an incremental fill: its counts, and its share of the exclusion
        reasons and filtered free capacity kept in ``fs`` (replaced, not added)."""
        old = fs.leaf_excluded.pop(leaf.key, None)
        if old:
            add_usage(fs.excluded, old, -1)
        fs.free_by_leaf.pop(leaf.values, None)
        mine: dict[str, int] = {}
        self._fill_leaf(
            leaf, workers, None, req, None, counts, False, {}, st, simulate_empty,
            mine, fs.free_by_leaf,
        )  # fmt: skip
        if mine:
            fs.leaf_excluded[leaf.key] = mine
            add_usage(fs.excluded, mine)

    def _refill(
        self,
        fs: FillState,
        workers: PlacementRequest,
        req: Mapping[str, int],
        counts: dict[tuple[str, ...], tuple[int, str]],
        st: _State,
        simulate_empty: bool,
    ) -> None:
        """The incremental pass: the changed leaves and rewritten domains, then their
        ancestors bottom-up."""
        s = self.s
        dirty = fs.dirty
        fs.dirty = set()
        parents: list[set[Domain]] = [set() for _ in s.levels]
        for d in dirty:
            if d.children:
                parents[d.level].add(d)
            else:
                self._fill_tracked(fs, d, workers, req, counts, st, simulate_empty)
            up = d.parent
            while up is not None and up not in parents[up.level]:
                parents[up.level].add(up)
                up = up.parent
        for lvl in range(len(s.levels) - 2, -1, -1):
            for d in parents[lvl]:
                self._aggregate(d, st, lvl, False)
        st.excluded.update(fs.excluded)
        st.free_by_leaf.update(fs.free_by_leaf)

    def _fill_leaf(
        self,
        leaf: Domain,
        workers: PlacementRequest,
        leader: PlacementRequest | None,
        req: Mapping[str, int],
        lreq: Mapping[str, int] | None,
        counts: dict[tuple[str, ...], tuple[int, str]],
        filter_all: bool,
        assumed: Mapping[tuple[str, ...], Usage],
        st: _State,
        simulate_empty: bool,
        excluded: dict[str, int],
        free_by_leaf: dict[tuple[str, ...], Usage],
    ) -> None:
        s = self.s
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
                [n for n in leaf.nodes if not self._excluded(n, workers, leader, excluded)]
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
        self,
        node: Node,
        workers: PlacementRequest,
        leader: PlacementRequest | None,
        excluded: dict[str, int],
    ) -> bool:
        why = _node_excluded(node, workers, self.s.tolerations)
        if why and leader is not None:
            why = why if _node_excluded(node, leader, self.s.tolerations) else ""
        if why:
            excluded[why] = excluded.get(why, 0) + 1
        return bool(why)

    @staticmethod
    def _aggregate(d: Domain, st: _State, level: int, leader_required: bool) -> None:
        """Kueue's fillInCountsHelper for a parent (its children are done)."""
        pods = slices = leader = 0
        contributor = False
        min_pod_diff = min_slice_diff = _MAX
        for c in d.children:
            pods += c.pod_count
            slices += c.slice_count
            if not leader_required or c.leader_count > 0:
                contributor = True
                pd = c.pod_count - c.pod_count_wl
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

    # -- sorting and best fit -----------------------------------------------------

    @staticmethod
    def sorted_with_leader(domains: Sequence[Domain], unconstrained: bool) -> list[Domain]:
        if unconstrained:  # LeastFreeCapacity: the least free first
            return sorted(
                domains,
                key=lambda d: (-d.leader_count, d.slice_count_wl, d.pod_count_wl, d.values),
            )
        return sorted(
            domains, key=lambda d: (-d.leader_count, -d.slice_count_wl, d.pod_count_wl, d.values)
        )

    @staticmethod
    def sorted_domains(domains: Sequence[Domain], unconstrained: bool) -> list[Domain]:
        if unconstrained:
            return sorted(domains, key=lambda d: (d.slice_count, d.pod_count, d.values))
        return sorted(domains, key=lambda d: (-d.slice_count, d.pod_count, d.values))

    @staticmethod
    def best_fit(
        domains: Sequence[Domain], needed: int, leader_count: int, *, slices: bool
    ) -> Domain:
        """The first domain with the smallest count ≥ needed (else the first)."""
        best, best_count = domains[0], _MAX
        for d in domains:
            if d.leader_count < leader_count:
                continue
            if slices:
                n = d.slice_count_wl if leader_count > 0 else d.slice_count
            else:
                n = d.pod_count_wl if leader_count > 0 else d.pod_count
            if needed <= n < best_count:
                best, best_count = d, n
        return best

    # -- phase 2a: the level ------------------------------------------------------

    def find_level(self, level_idx: int, st: _State) -> tuple[int, list[Domain], str]:
        s = self.s
        domains = s.per_level[level_idx]
        if not domains:
            return 0, [], f"no topology domains at level: {s.levels[level_idx]}"
        ordered = self.sorted_with_leader(domains, st.unconstrained)
        top = ordered[0]
        slice_count = st.count // st.slice_size
        best_fit = not st.unconstrained
        if best_fit and top.slice_count_wl >= slice_count and top.leader_count >= st.leader_count:
            top = self.best_fit(ordered, slice_count, st.leader_count, slices=True)
        if st.unconstrained:  # LeastFreeCapacity
            for cand in ordered:
                capacity = cand.slice_count
                if st.leader_count > 0:
                    if cand.leader_count < st.leader_count:
                        continue
                    capacity = cand.slice_count_wl
                if capacity >= slice_count:
                    return level_idx, [cand], ""
            if st.required:
                return 0, [], self.not_fit(ordered[-1].pod_count, slice_count, st, level_idx)
        if top.slice_count_wl < slice_count or top.leader_count < st.leader_count:
            if st.required:
                return 0, [], self.not_fit(top.slice_count, slice_count, st, level_idx)
            if level_idx > 0 and not st.unconstrained:
                return self.find_level(level_idx - 1, st)
            results: list[Domain] = []
            remaining = slice_count
            remaining_leaders = st.leader_count
            ordered = self.prioritize_leader(
                ordered, st.count, st.leader_count, st.slice_size, True
            )
            idx = 0
            while remaining_leaders > 0 and idx < len(ordered) and ordered[idx].leader_count > 0:
                d = ordered[idx]
                if best_fit and d.slice_count_wl >= remaining:
                    d = self.best_fit(ordered[idx:], remaining, remaining_leaders, slices=True)
                results.append(d)
                remaining_leaders -= d.leader_count
                remaining -= d.slice_count_wl
                idx += 1
            if remaining_leaders > 0:
                return (
                    0,
                    [],
                    self.not_fit(st.leader_count - remaining_leaders, slice_count, st, level_idx),
                )
            rest = self.sorted_domains(ordered[idx:], st.unconstrained)
            i = 0
            while remaining > 0 and i < len(rest):
                d = rest[i]
                if best_fit and d.slice_count >= remaining:
                    d = self.best_fit(rest[i:], remaining, 0, slices=True)
                results.append(d)
                remaining -= d.slice_count
                i += 1
            if remaining > 0:
                return 0, [], self.not_fit(slice_count - remaining, slice_count, st, level_idx)
            return level_idx, results, ""
        return level_idx, [top], ""

    # -- phase 2b: the descent ----------------------------------------------------

    @staticmethod
    def prioritize_leader(
        domains: list[Domain], count: int, leader_count: int, slice_size: int, slices: bool
    ) -> list[Domain]:
        if leader_count == 0 or len(domains) < 2:
            return domains
        required = count // slice_size if slices else count
        available = sum(d.slice_count if slices else d.pod_count for d in domains)
        for i, d in enumerate(domains):
            if d.leader_count < leader_count:
                continue
            penalty = (
                (d.slice_count - d.slice_count_wl) if slices else (d.pod_count - d.pod_count_wl)
            )
            if available - penalty < required:
                continue
            if i == 0:
                return domains
            return [d, *domains[:i], *domains[i + 1 :]]
        return domains

    def update_counts_to_minimum(
        self,
        domains: list[Domain],
        count: int,
        leader_count: int,
        slice_size: int,
        unconstrained: bool,
        slices: bool,
    ) -> list[Domain]:
        domains = self.prioritize_leader(domains, count, leader_count, slice_size, slices)
        result: list[Domain] = []
        self.touched.append(result)  # rewritten below: their counts are stale afterwards
        remaining = count // slice_size if slices else count
        remaining_leaders = leader_count
        best_fit = not unconstrained
        for i, dom in enumerate(domains):
            if remaining_leaders > 0:
                d = dom
                with_leader = d.slice_count_wl if slices else d.pod_count_wl
                if best_fit and with_leader >= remaining and d.leader_count >= remaining_leaders:
                    d = self.best_fit(domains[i:], remaining, remaining_leaders, slices=slices)
                    with_leader = d.slice_count_wl if slices else d.pod_count_wl
                unit = slice_size if slices else 1
                if with_leader >= remaining and d.leader_count >= remaining_leaders:
                    self._set_primary(d, remaining, slices)
                    d.leader_count = remaining_leaders
                    d.pod_count = remaining * unit
                    result.append(d)
                    return result
                with_leader = min(with_leader, remaining)
                d.leader_count = min(d.leader_count, remaining_leaders)
                self._set_primary(d, with_leader, slices)
                d.pod_count = with_leader * unit
                remaining_leaders -= d.leader_count
                remaining -= with_leader
                result.append(d)
                continue
            d = dom
            if slices:
                if best_fit and d.slice_count >= remaining:
                    d = self.best_fit(domains[i:], remaining, 0, slices=True)
                d.leader_count = 0
                if d.slice_count >= remaining:
                    d.pod_count = remaining * slice_size
                    d.slice_count = remaining
                    result.append(d)
                    return result
                d.pod_count = d.slice_count * slice_size
                remaining -= d.slice_count
                result.append(d)
                continue
            if best_fit and d.pod_count >= remaining:
                d = self.best_fit(domains[i:], remaining, 0, slices=False)
            d.leader_count = 0
            if d.pod_count >= remaining:
                d.pod_count = remaining
                result.append(d)
                return result
            remaining -= d.pod_count
            result.append(d)
        raise AssertionError(  # Kueue logs "code assumptions violated"
            f"placement left {remaining} of {count} pod(s) unassigned in topology {self.s.topology}"
        )

    @staticmethod
    def _set_primary(d: Domain, value: int, slices: bool) -> None:
        if slices:
            d.slice_count = value
        else:
            d.pod_count = value

    # -- messages -----------------------------------------------------------------

    def not_fit(self, fit: int, total: int, st: _State, level_idx: int) -> str:
        s = self.s
        unit = "pod" if st.slice_size == 1 else "slice"
        if fit == 0:
            msg = f'topology "{s.topology}" doesn\'t allow to fit any of {total} {unit}(s)'
        else:
            msg = f'topology "{s.topology}" allows to fit only {fit} out of {total} {unit}(s)'
        detail = self.explain(st, level_idx)
        if detail:
            msg += f"; {detail}"
        if st.excluded:
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(st.excluded.items()))
            msg += f". Total nodes: {s.total_nodes}; excluded: {reasons}"
        return msg

    def explain(self, st: _State, level_idx: int) -> str:
        """The numbers: the largest domain at the level and what it lacks."""
        s = self.s
        req = self._req
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


def _share(free: Usage, leaf: Domain, nodes_ok: Sequence[Node]) -> Usage:
    """The part of a multi-node leaf's free capacity on its feasible nodes (scaled by
    their share of the leaf's allocatable, per resource)."""
    out: Usage = {}
    for r, v in free.items():
        total = sum(n.allocatable.get(r, 0) for n in leaf.nodes)
        ok = sum(n.allocatable.get(r, 0) for n in nodes_ok)
        out[r] = v * ok // total if total else 0
    return out


def _level_key(snap: FlavorSnapshot, tr: TopologyRequest | None, implied: bool) -> str | None:
    """Kueue's levelKeyWithImpliedFallback."""
    if tr is not None:
        if tr.required is not None:
            return tr.required
        if tr.preferred is not None:
            return tr.preferred
        if tr.slice_required_topology is not None:
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
    slice_size = 1
    if tr is not None and tr.slice_required_topology is not None:
        if not tr.slice_size or tr.slice_size <= 0:
            return {}, "slice topology requested, but slice size not provided"
        slice_size = tr.slice_size
    key = _level_key(snap, tr, workers.implied)
    if key is None:
        return {}, "topology level not specified"
    level_idx = snap.level_index(key)
    if level_idx is None:
        return {}, f"no requested topology level: {key}"
    slice_key = (
        tr.slice_required_topology
        if tr is not None and tr.slice_required_topology
        else snap.levels[-1]
    )
    slice_level_idx = snap.level_index(slice_key)
    if slice_level_idx is None:
        return {}, f"no requested topology level for slices: {slice_key}"
    if level_idx > slice_level_idx:
        return {}, f"podset slice topology {slice_key} is above the podset topology {key}"
    unconstrained = bool(
        (tr is not None and tr.unconstrained)
        or workers.implied
        or (
            tr is not None
            and tr.required is None
            and tr.preferred is None
            and tr.slice_required_topology is not None
        )
    )
    st = _State(
        count=workers.count,
        slice_size=slice_size,
        required=tr is not None and tr.required is not None,
        unconstrained=unconstrained,
        level_idx=level_idx,
        slice_level_idx=slice_level_idx,
        leader_count=1 if leader is not None else 0,
        simulate_empty=simulate_empty,
    )
    p = _Placer(snap, dict(workers.per_pod))
    p.fill_in_counts(workers, leader, st, assumed or {}, simulate_empty, within)
    try:
        fit_level, fit, reason = p.find_level(level_idx, st)
        if reason:
            return {}, reason
        fit = p.update_counts_to_minimum(
            fit, st.count, st.leader_count, st.slice_size, unconstrained, True
        )
        lvl = fit_level
        last = len(snap.levels) - 1
        while lvl < min(last, slice_level_idx):
            lower = [c for d in fit for c in d.children]
            fit = p.update_counts_to_minimum(
                p.sorted_domains(lower, unconstrained),
                st.count,
                st.leader_count,
                st.slice_size,
                unconstrained,
                True,
            )
            lvl += 1
        while lvl < last:
            size_here = st.slice_size if lvl < slice_level_idx else 1
            new_fit: list[Domain] = []
            for d in fit:
                children = p.sorted_domains(d.children, unconstrained)
                new_fit += p.update_counts_to_minimum(
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
        p.done()


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


# ------------------------------------------------------------------ node replacement


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
