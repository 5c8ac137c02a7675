"""A failed node replaced inside its domain (Kueue's findReplacementAssignment).

Two blocks × two racks × two hosts, 4 GPUs each. A gang's pods on a failed node move to
healthy hosts with room in the domain its request requires; the rest stays put; no room
there means no replacement (the caller evicts)."""

from __future__ import annotations

from admission.engine.tas.domains import HOSTNAME, Node, TopologyState
from admission.engine.tas.replacement import find_replacement
from admission.engine.tas.request import PlacementRequest
from queues.model import ResourceFlavor, Topology, TopologyAssignment, TopologyRequest

LEVELS = ("block", "rack", HOSTNAME)
FLAVOR = ResourceFlavor("tas", node_labels={"pool": "gpu"}, topology_name="t")
HOSTS = {f"b{b}-r{r}-h{h}": (f"b{b}", f"b{b}-r{r}") for b in (0, 1) for r in (0, 1) for h in (0, 1)}


def state(*, down: tuple[str, ...] = (), used: dict[str, int] | None = None) -> TopologyState:
    st = TopologyState()
    st.set_topologies({"t": Topology("t", LEVELS)})
    for name, (block, rack) in HOSTS.items():
        st.set_node(
            Node(
                name,
                {"pool": "gpu", "block": block, "rack": rack, HOSTNAME: name},
                {"gpu": 4, "pods": 110},
                ready=name not in down,
            )
        )
    for host, gpus in (used or {}).items():
        st.charge("tas", TopologyAssignment((HOSTNAME,), (((host,), 1),)), {"gpu": gpus})
    return st


def assignment(*hosts: str) -> TopologyAssignment:
    return TopologyAssignment((HOSTNAME,), tuple(((h,), 1) for h in hosts))


def request(tr: TopologyRequest) -> PlacementRequest:
    return PlacementRequest(name="main", count=0, per_pod={"gpu": 4}, topology=tr)


def replace_in(st: TopologyState, tr: TopologyRequest, existing: TopologyAssignment, host: str):  # type: ignore[no-untyped-def]
    snap = st.snapshot(FLAVOR)
    assert snap is not None
    return find_replacement(snap, request(tr), existing, host)


def test_a_failed_hosts_pod_moves_to_a_free_host_of_the_required_block() -> None:
    # the gang holds 3 hosts of block b0; b0-r0-h0 fails, b0-r1-h1 is free
    gang = assignment("b0-r0-h0", "b0-r0-h1", "b0-r1-h0")
    used = {"b0-r0-h0": 4, "b0-r0-h1": 4, "b0-r1-h0": 4}
    new, reason = replace_in(
        state(down=("b0-r0-h0",), used=used), TopologyRequest(required="block"), gang, "b0-r0-h0"
    )
    assert reason == ""
    assert new == assignment("b0-r0-h1", "b0-r1-h0", "b0-r1-h1")


def test_no_room_in_the_required_domain_means_no_replacement_though_another_block_is_free() -> None:
    gang = assignment("b0-r0-h0", "b0-r0-h1")
    used = {h: 4 for h in HOSTS if h.startswith("b0-")}  # b0 full (the gang and others)
    new, reason = replace_in(
        state(down=("b0-r0-h0",), used=used), TopologyRequest(required="block"), gang, "b0-r0-h0"
    )
    assert new is None
    assert "block" in reason and "b1" not in reason.split(";")[0]


def test_required_rack_stays_in_the_rack() -> None:
    """Two 2-GPU pods in rack b1-r0, one per host; b1-r0-h0 fails: its pod joins the
    other host (2 GPUs left there), not the empty rack b1-r1."""
    snap_ok = state(down=("b1-r0-h0",), used={"b1-r0-h0": 2, "b1-r0-h1": 2}).snapshot(FLAVOR)
    assert snap_ok is not None
    req = PlacementRequest(name="main", count=0, per_pod={"gpu": 2},
                           topology=TopologyRequest(required="rack"))  # fmt: skip
    gang = assignment("b1-r0-h0", "b1-r0-h1")
    new, reason = find_replacement(snap_ok, req, gang, "b1-r0-h0")
    assert (reason, new) == ("", TopologyAssignment((HOSTNAME,), ((("b1-r0-h1",), 2),)))
    # the other host of the rack full: no replacement, though rack b1-r1 is empty
    snap_full = state(down=("b1-r0-h0",), used={"b1-r0-h0": 2, "b1-r0-h1": 4}).snapshot(FLAVOR)
    assert snap_full is not None
    new, reason = find_replacement(snap_full, req, gang, "b1-r0-h0")
    assert new is None and reason


def test_preferred_may_go_anywhere() -> None:
    gang = assignment("b0-r0-h0", "b0-r0-h1")
    used = {h: 4 for h in HOSTS if h.startswith("b0-")}
    new, reason = replace_in(
        state(down=("b0-r0-h0",), used=used), TopologyRequest(preferred="block"), gang, "b0-r0-h0"
    )
    assert reason == ""
    assert new is not None
    hosts = [v[0] for v, _ in new.domains]
    assert "b0-r0-h1" in hosts and len(hosts) == 2 and any(h.startswith("b1-") for h in hosts)


def test_a_stale_domain_in_the_rest_of_the_assignment_is_refused() -> None:
    gang = assignment("b0-r0-h0", "gone-host")
    new, reason = replace_in(state(), TopologyRequest(required="block"), gang, "b0-r0-h0")
    assert new is None
    assert "stale domain gone-host" in reason


def test_a_broken_slice_is_mended_inside_its_slice_domain() -> None:
    """Slices of 2 pods per rack: the failed host's pod must rejoin its slice's rack."""
    tr = TopologyRequest(required="block", slice_required_topology="rack", slice_size=2)
    gang = TopologyAssignment(
        (HOSTNAME,),
        ((("b0-r0-h0",), 1), (("b0-r0-h1",), 1), (("b0-r1-h0",), 1), (("b0-r1-h1",), 1)),
    )
    # a half-used host in rack b0-r1 would fit the pod, but the slice is in rack b0-r0
    st = state(down=("b0-r0-h1",), used={"b0-r0-h0": 2})
    # free: b0-r0-h0 has 2 GPUs left (4 - 2 of another workload's), 1 pod of 2 GPUs fits
    snap = st.snapshot(FLAVOR)
    assert snap is not None
    req = PlacementRequest(name="main", count=0, per_pod={"gpu": 2}, topology=tr)
    new, reason = find_replacement(snap, req, gang, "b0-r0-h1")
    assert reason == ""
    assert new is not None and dict(new.domains)[("b0-r0-h0",)] == 2
