"""Placement inside topology domains: Kueue's TAS algorithm, pinned by properties.

Random clusters (1-3 levels, nodes of random size, some tainted, some not Ready),
random gangs and requests: an assignment never puts more on a leaf than it has free,
its counts add up to the podSet's count, a required level is one domain, a required
gang that some domain could hold is never refused, and the same inputs (in any order)
give the same placement."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.engine.tas.domains import (
    HOSTNAME,
    Node,
    PodUsage,
    TopologyState,
    add_usage,
    usage_key,
)
from admission.engine.tas.placement import place_flavor
from admission.engine.tas.request import PlacementRequest
from queues.api.topology_assignment import from_v1beta2, node_selectors, to_v1beta2
from queues.model import ResourceFlavor, Taint, Toleration, Topology, TopologyRequest
from tests.support.collector import collector_off

LEVELS = ("block", "rack", HOSTNAME)
FLAVOR = ResourceFlavor("tas", node_labels={"pool": "gpu"}, topology_name="t")


def cluster(
    nodes: list[tuple[int, int, int, int, bool, bool]], levels: tuple[str, ...]
) -> TopologyState:
    state = TopologyState()
    state.set_topologies({"t": Topology("t", levels)})
    for i, (block, rack, gpus, used, tainted, ready) in enumerate(nodes):
        name = f"n{i:02d}"
        labels = {"pool": "gpu", "block": f"b{block}", "rack": f"b{block}-r{rack}", HOSTNAME: name}
        state.set_node(
            Node(
                name,
                {k: v for k, v in labels.items() if k in levels or k == "pool"},
                {"gpu": gpus, "cpu": 64_000, "pods": 110},
                taints=(Taint("gpu-broken", "", "NoSchedule"),) if tainted else (),
                ready=ready,
            )
        )
        if used:
            state.set_pod(
                PodUsage(f"kube-system/ds-{i}", name, {"gpu": used}), f"kube-system/ds-{i}"
            )
    return state


nodes_st = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.integers(0, 2),
        st.integers(0, 8),
        st.integers(0, 3),
        st.booleans(),
        st.booleans() | st.just(True),
    ),
    min_size=1,
    max_size=24,
)
levels_st = st.sampled_from([LEVELS, ("block", HOSTNAME), (HOSTNAME,), ("block", "rack")])
request_st = st.sampled_from(
    [
        lambda lv: TopologyRequest(required=lv[0]),
        lambda lv: TopologyRequest(required=lv[-1]),
        lambda lv: TopologyRequest(preferred=lv[-1]),
        lambda lv: TopologyRequest(preferred=lv[0]),
        lambda lv: TopologyRequest(unconstrained=True),
        lambda lv: TopologyRequest(required=lv[0], slice_required_topology=lv[-1], slice_size=2),
        # multi-layer slices: 4 pods in one domain of the second-lowest level, 2 per leaf
        lambda lv: TopologyRequest(
            required=lv[0], slice_constraints=((lv[-2], 4), (lv[-1], 2)) if len(lv) > 1 else ()
        ),
    ]
)


def _round_to_slices(tr: TopologyRequest, count: int) -> int:
    """The count rounded up to whole outermost slices."""
    size = tr.slice_layers[0][1] if tr.slice_layers else None
    return count + (size - count % size) % size if size else count


def leaf_free(state: TopologyState) -> dict[tuple[str, ...], dict[str, int]]:
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    return {v: snap.remaining(leaf) for v, leaf in snap.leaves.items()}


def feasible_free(state: TopologyState, tolerate: bool) -> dict[tuple[str, ...], dict[str, int]]:
    """Free capacity of each leaf on the nodes the pods may use (taints)."""
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    out = {}
    for values, leaf in snap.leaves.items():
        if not tolerate and all(n.taints for n in leaf.nodes):
            continue
        out[values] = snap.remaining(leaf)
    return out


def check(state: TopologyState, req: PlacementRequest, result: Any, gpus: int) -> None:
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    ta = result.assignments[req.name]
    assert ta.pod_count == req.count
    per_leaf: dict[tuple[str, ...], int] = {}
    for values, count in ta.domains:
        assert count > 0
        leaf = snap.leaf_of(values, ta.levels)
        assert leaf is not None, values
        per_leaf[leaf.values] = per_leaf.get(leaf.values, 0) + count
    for values, count in per_leaf.items():
        free = snap.remaining(snap.leaves[values])
        assert count * gpus <= free.get("gpu", 0), (values, count, free)
        assert count <= free.get("pods", 0)
        if req.tolerations == ():
            assert not all(n.taints for n in snap.leaves[values].nodes)
        assert all(n.ready for n in snap.leaves[values].nodes)
    tr = req.topology
    if tr is not None and tr.required is not None:
        idx = snap.levels.index(tr.required)
        assert len({v[: idx + 1] for v in per_leaf}) == 1, per_leaf
    for level, size in tr.slice_layers if tr is not None else ():
        # every slice layer: each of its domains holds whole slices
        idx = snap.levels.index(level)
        per_domain: dict[tuple[str, ...], int] = {}
        for values, count in per_leaf.items():
            per_domain[values[: idx + 1]] = per_domain.get(values[: idx + 1], 0) + count
        assert all(n % (size or 1) == 0 for n in per_domain.values()), (level, per_domain)


@settings(max_examples=300, deadline=None)
@given(
    nodes_st,
    levels_st,
    request_st,
    st.integers(1, 12),
    st.integers(1, 4),
    st.booleans(),
    st.booleans(),
)
def test_placement_respects_capacity_counts_and_the_required_domain(
    nodes: list[Any],
    levels: tuple[str, ...],
    make: Any,
    count: int,
    gpus: int,
    tolerate: bool,
    balanced: bool,
) -> None:
    state = cluster(nodes, levels)
    state.balanced_placement = balanced  # Kueue's TASBalancedPlacement (preferred requests)
    tr = make(levels)
    count = _round_to_slices(tr, count)
    req = PlacementRequest(
        "main",
        count,
        {"gpu": gpus},
        tr,
        tolerations=(Toleration("gpu-broken", "Exists"),) if tolerate else (),
    )
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    result = place_flavor(snap, [req])
    if result.failed is None:
        check(state, req, result, gpus)
    else:
        assert result.failed == "main" and result.reason
        if tr.required is not None and not tr.slice_layers:
            # Completeness: no domain at the required level could hold the gang.
            idx = levels.index(tr.required)
            per_domain: dict[tuple[str, ...], int] = {}
            for values, free in feasible_free(state, tolerate).items():
                n = min(max(0, free.get("gpu", 0)) // gpus, free.get("pods", 0))
                per_domain[values[: idx + 1]] = per_domain.get(values[: idx + 1], 0) + n
            if not any(n.taints for leaf in snap.leaves.values() for n in leaf.nodes) or tolerate:
                assert max(per_domain.values(), default=0) < count, (per_domain, result.reason)


@settings(max_examples=150, deadline=None)
@given(nodes_st, levels_st, request_st, st.integers(1, 12), st.randoms(use_true_random=False))
def test_placement_is_deterministic_whatever_the_node_order(
    nodes: list[Any], levels: tuple[str, ...], make: Any, count: int, rnd: Any
) -> None:
    tr = make(levels)
    count = _round_to_slices(tr, count)
    req = PlacementRequest("main", count, {"gpu": 1}, tr)
    a = cluster(nodes, levels)
    shuffled = list(enumerate(nodes))
    rnd.shuffle(shuffled)
    b = TopologyState()
    b.set_topologies(a.topologies)
    for name in [f"n{i:02d}" for i, _ in shuffled]:
        b.set_node(a.nodes[name])
    for key, pod in reversed(list(a.pods.items())):
        b.set_pod(pod, key)
    sa, sb = a.snapshot(FLAVOR), b.snapshot(FLAVOR)
    assert sa is not None and sb is not None
    ra, rb = place_flavor(sa, [req]), place_flavor(sb, [req])
    assert ra == rb
    assert place_flavor(sa, [req]) == ra  # and again on the same snapshot


@settings(max_examples=150, deadline=None)
@given(nodes_st, st.integers(1, 6), st.integers(1, 3))
def test_charged_assignments_are_never_overcommitted(
    nodes: list[Any], count: int, rounds: int
) -> None:
    """Gang after gang on the same cluster, each charged: no leaf goes negative."""
    state = cluster(nodes, LEVELS)
    for k in range(rounds * 3):
        snap = state.snapshot(FLAVOR)
        assert snap is not None
        req = PlacementRequest(f"g{k}", count, {"gpu": 1}, TopologyRequest(preferred="rack"))
        r = place_flavor(snap, [req])
        if r.failed is not None:
            continue
        check(state, req, r, 1)
        state.charge("tas", r.assignments[req.name], {"gpu": 1})
        for free in leaf_free(state).values():
            assert free.get("pods", 0) >= 0


def _fresh(state: TopologyState) -> TopologyState:
    """The same cluster and usage in a new state: its snapshot has no incremental fill."""
    copy = TopologyState()
    copy.set_topologies(state.topologies)
    for node in state.nodes.values():
        copy.set_node(node)
    for key, pod in state.pods.items():
        copy.set_pod(pod, key)
    copy.usage = {f: {k: dict(u) for k, u in per.items()} for f, per in state.usage.items()}
    copy.balanced_placement = state.balanced_placement
    return copy


@settings(max_examples=150, deadline=None)
@given(
    nodes_st,
    levels_st,
    st.booleans(),
    st.lists(
        st.tuples(
            request_st,
            st.integers(1, 10),
            st.integers(1, 3),
            st.booleans(),
            st.booleans(),
            st.booleans(),
            st.sampled_from(["commit", "assume", "new cycle"]),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_the_incremental_fill_places_exactly_as_a_full_one(
    nodes: list[Any], levels: tuple[str, ...], balanced: bool, steps: list[Any]
) -> None:
    """Placement reuses the last request's counts and recomputes only what changed
    (charged leaves, domains the last placement rewrote). Whatever the sequence of
    requests (shapes, levels, tolerations, simulated-empty tries) and charges (a
    placement is not always admitted: quota may refuse it; an admitted one is either
    committed or only assumed for the rest of a cycle, and a new cycle drops what was
    assumed), each
    result — assignment or reason, numbers included — is the one a snapshot built afresh
    gives, with Kueue's balanced placement or without (it tries on copies of the
    snapshot's domains, never on them)."""
    state = cluster(nodes, levels)
    state.balanced_placement = balanced
    assumed: dict[tuple[str, ...], dict[str, int]] = {}
    for k, (make, count, gpus, tolerate, empty, admit, then) in enumerate(steps):
        if then == "new cycle":
            assumed.clear()
        tr = make(levels)
        count = _round_to_slices(tr, count)
        req = PlacementRequest(
            f"g{k}", count, {"gpu": gpus}, tr,
            tolerations=(Toleration("gpu-broken", "Exists"),) if tolerate else (),
        )  # fmt: skip
        snap = state.snapshot(FLAVOR)
        fresh = _fresh(state).snapshot(FLAVOR)
        assert snap is not None and fresh is not None
        got = place_flavor(snap, [req], simulate_empty=empty, assumed=assumed)
        want = place_flavor(fresh, [req], simulate_empty=empty, assumed=assumed)
        assert (got.assignments, got.failed, got.reason) == (
            want.assignments, want.failed, want.reason
        )  # fmt: skip
        if got.failed is None and not empty and admit:
            ta = got.assignments[req.name]
            if then == "commit":
                state.charge("tas", ta, {"gpu": gpus})
            else:  # held for the rest of the cycle (Snapshot.tas), not committed
                for values, n in ta.domains:
                    used = assumed.setdefault(usage_key(ta.levels, values), {})
                    add_usage(used, {"gpu": gpus * n, "pods": n})


def test_what_a_cycle_assumed_is_free_again_when_it_is_dropped() -> None:
    """Assumed usage (a cycle's placements not yet committed) counts as taken while it
    is passed, and the incremental fill recomputes the leaves it covered once it is
    not: the next gang of the same shape sees them free again."""
    state = cluster([(0, 0, 2, 0, False, True), (0, 1, 2, 0, False, True)], LEVELS)
    snap = state.snapshot(FLAVOR)
    assert snap is not None

    def gang(name: str) -> PlacementRequest:
        return PlacementRequest(name, 2, {"gpu": 1}, TopologyRequest(required="rack"))

    assumed: dict[tuple[str, ...], dict[str, int]] = {}
    first = place_flavor(snap, [gang("a")], assumed=assumed).assignments["a"]
    assert first.domains == ((("n00",), 2),)
    assumed[("n00",)] = {"gpu": 2, "pods": 2}
    second = place_flavor(snap, [gang("b")], assumed=assumed).assignments["b"]
    assert second.domains == ((("n01",), 2),)
    assumed.clear()
    third = place_flavor(snap, [gang("c")], assumed=assumed).assignments["c"]
    assert third.domains == ((("n00",), 2),)


def test_best_fit_picks_the_smallest_rack_that_holds_the_gang() -> None:
    # Racks with 4, 2 and 3 free GPUs (one GPU per host): a 2-pod gang takes rack r1.
    state = cluster(
        [(0, 0, 1, 0, False, True)] * 4
        + [(0, 1, 1, 0, False, True)] * 2
        + [(0, 2, 1, 0, False, True)] * 3,
        LEVELS,
    )
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    r = place_flavor(
        snap, [PlacementRequest("main", 2, {"gpu": 1}, TopologyRequest(required="rack"))]
    )
    assert r.assignments["main"].domains == ((("n04",), 1), (("n05",), 1))


def test_required_block_too_small_says_how_short_in_numbers() -> None:
    state = cluster([(0, 0, 4, 0, False, True)] * 3 + [(1, 0, 4, 0, False, True)] * 2, LEVELS)
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    r = place_flavor(
        snap, [PlacementRequest("main", 4, {"gpu": 4}, TopologyRequest(required="block"))]
    )
    assert r.failed == "main"
    assert r.reason == (
        'topology "t" allows to fit only 3 out of 4 pod(s); no block domain has 16 free gpu for '
        "4 pod(s); the largest, b0, has 12"
    )


def test_untolerated_taints_exclude_nodes_and_are_counted_in_the_reason() -> None:
    state = cluster([(0, 0, 4, 0, True, True)] * 2 + [(0, 0, 4, 0, False, True)], LEVELS)
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    req = PlacementRequest("main", 2, {"gpu": 4}, TopologyRequest(required="block"))
    r = place_flavor(snap, [req])
    assert r.failed == "main"
    assert r.reason.endswith("Total nodes: 3; excluded: untolerated taint: 2")
    req.tolerations = (Toleration("gpu-broken", "Exists"),)
    assert place_flavor(snap, [req]).failed is None


def test_a_pod_set_group_puts_its_leader_with_its_workers() -> None:
    state = cluster([(0, 0, 2, 0, False, True)] * 2 + [(1, 0, 2, 0, False, True)] * 4, LEVELS)
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    grp = TopologyRequest(required="block", pod_set_group_name="g")
    r = place_flavor(
        snap,
        [
            PlacementRequest("leader", 1, {"gpu": 1}, grp),
            PlacementRequest("workers", 7, {"gpu": 1}, grp),
        ],
    )
    assert r.failed is None
    hosts = {v[0] for ta in r.assignments.values() for v, _ in ta.domains}
    assert hosts <= {"n02", "n03", "n04", "n05"}  # block b1: 8 GPUs for 1 + 7 pods
    assert r.assignments["workers"].pod_count == 7


def test_v1beta2_form_round_trips_and_compacts_like_kueue() -> None:
    state = cluster([(0, 0, 1, 0, False, True)] * 3, LEVELS)
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    r = place_flavor(
        snap, [PlacementRequest("main", 3, {"gpu": 1}, TopologyRequest(required="rack"))]
    )
    ta = r.assignments["main"]
    wire = to_v1beta2(ta)
    assert wire == {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": 3,
                "valuesPerLevel": [{"individual": {"prefix": "n0", "roots": ["0", "1", "2"]}}],
                "podCounts": {"universal": 1},
            }
        ],
    }
    assert from_v1beta2(wire) == ta
    assert node_selectors(ta) == [{HOSTNAME: "n00"}, {HOSTNAME: "n01"}, {HOSTNAME: "n02"}]


def test_a_node_heartbeat_is_not_a_change() -> None:
    state = cluster([(0, 0, 4, 0, False, True)], LEVELS)
    node = state.nodes["n00"]
    gen = state.generation
    assert state.set_node(Node(node.name, dict(node.labels), dict(node.allocatable))) is False
    assert state.generation == gen  # snapshots are reused
    assert state.set_node(Node(node.name, dict(node.labels), {"gpu": 2})) is True


# -- a replaced domain tree -----------------------------------------------------------------


def test_a_domain_tree_replaced_after_a_node_change_is_freed_by_reference_counting() -> None:
    """A Node or pod change makes the next snapshot build the flavor's tree again; the
    tree it replaces (its domains linked both ways) is unlinked and freed at once,
    without the cyclic collector, which with the heap frozen (admission.engine.gc_pause)
    would free it only at a compaction."""
    import gc
    import weakref

    state = cluster([(b, r, 8, 0, False, True) for b in range(2) for r in range(3)], LEVELS)
    gang = PlacementRequest("g", 8, {"gpu": 1}, TopologyRequest(required="block"))
    old = state.snapshot(FLAVOR)
    assert old is not None and place_flavor(old, [gang]).failed is None  # its fill kept
    root, leaf = old.roots[0], old.leaves[next(iter(old.leaves))]
    assert leaf.parent is not None and root.children  # linked both ways
    dead_root, dead_leaf = weakref.ref(root), weakref.ref(leaf)
    del old, root, leaf
    with collector_off():
        state.set_pod(PodUsage("kube-system/ds", "n00", {"gpu": 1}), "kube-system/ds")
        new = state.snapshot(FLAVOR)
        assert new is not None and new.leaves[("b0", "b0-r0", "n00")].capacity["gpu"] == 7
        assert (dead_root(), dead_leaf()) == (None, None)  # freed by reference counting
        assert gc.collect() == 0  # and nothing of it left for the collector
    assert place_flavor(new, [gang]).failed is None
    assert state.snapshot(FLAVOR) is new  # unchanged since: the same tree, not retired


def test_a_replaced_domain_tree_fails_loudly_if_used() -> None:
    """Nothing reads a tree once replaced; a placement on one anyway fails instead of
    placing on domains that no longer are."""
    import pytest

    state = cluster([(0, r, 8, 0, False, True) for r in range(2)], LEVELS)
    old = state.snapshot(FLAVOR)
    assert old is not None
    state.delete_node("n01")
    assert state.snapshot(FLAVOR) is not old
    gang = PlacementRequest("g", 2, {"gpu": 1}, TopologyRequest(required="rack"))
    with pytest.raises(AttributeError, match="children|parent"):
        place_flavor(old, [gang])
