"""TAS domain trees and their copies are freed by reference counting, collector off.

The server freezes its heap after startup (``admission.engine.gc_pause``): a reference
cycle made after that is freed only by a full collection, and one that dies frozen only
at a compaction. So what placement makes and drops at run time must hold no cycle: the
balanced placement's copies of the snapshot's domains (linked downwards only), and the
tree of a ResourceFlavor that was deleted (retired and dropped with it). Each test turns
the collector off and watches weak references die."""

from __future__ import annotations

import gc
import weakref

import pytest

from admission.engine.cache import Cache
from admission.engine.tas import balanced
from admission.engine.tas.domains import HOSTNAME, Domain, Node, TopologyState
from admission.engine.tas.placement import place_flavor
from admission.engine.tas.request import PlacementRequest
from queues.model import ResourceFlavor, Topology, TopologyRequest
from tests.support.collector import collector_off

LEVELS = ("block", "rack", HOSTNAME)
FLAVOR = ResourceFlavor("tas", node_labels={"pool": "gpu"}, topology_name="t")


def two_racks(state: TopologyState) -> None:
    """Block b1 with racks r1 and r2 of one host each, 15 GPUs and 25 pods a host
    (Kueue's tas_cache_test.go "balanced placement; basic")."""
    state.set_topologies({"t": Topology("t", LEVELS)})
    for host, rack in (("x1", "r1"), ("x2", "r2")):
        labels = {"pool": "gpu", "block": "b1", "rack": rack, HOSTNAME: host}
        state.set_node(Node(host, labels, {"gpu": 15, "pods": 25}))


def test_balanced_placement_copies_are_freed_when_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Balanced placement tries on copies of the snapshot's domains; every copy, of the
    domains it placed on and of those it only tried, is freed when the placement
    returns, not kept for the next fill nor left as a cycle."""
    state = TopologyState(balanced_placement=True)
    two_racks(state)
    copies: list[weakref.ref[Domain]] = []
    clone = balanced._clone

    def watched(d: Domain) -> Domain:
        c = clone(d)
        copies.append(weakref.ref(c))
        return c

    monkeypatch.setattr(balanced, "_clone", watched)
    gang = PlacementRequest("g", 25, {"gpu": 1}, TopologyRequest(preferred="rack"))
    snap = state.snapshot(FLAVOR)
    assert snap is not None
    with collector_off():
        for _ in range(2):  # the second fill is the incremental one, after the first's
            result = place_flavor(snap, [gang])
            # spread evenly, 13 and 12 (BestFit would put 15 and 10): the balanced path
            assert result.assignments["g"].domains == ((("x1",), 13), (("x2",), 12))
            assert copies and [c() for c in copies] == [None] * len(copies)
            assert gc.collect() == 0  # and nothing left for the collector
            copies.clear()


def tas_cache() -> Cache:
    cache = Cache(flavors={"tas": FLAVOR}, cluster_queues={}, cohorts={}, local_queues={})
    cache.set_topologies({"t": Topology("t", LEVELS)})
    for host, rack in (("x1", "r1"), ("x2", "r2")):
        labels = {"pool": "gpu", "block": "b1", "rack": rack, HOSTNAME: host}
        cache.set_node(Node(host, labels, {"gpu": 8, "pods": 110}))
    return cache


def test_a_deleted_flavors_tree_is_dropped_and_freed() -> None:
    """Deleting a ResourceFlavor drops its tree from the TAS snapshot cache, retired so
    reference counting frees it; a flavor made again with the same name gets a tree
    built afresh."""
    cache = tas_cache()
    gang = PlacementRequest("g", 8, {"gpu": 1}, TopologyRequest(required="rack"))
    old = cache.topology.snapshot(FLAVOR)
    assert old is not None and place_flavor(old, [gang]).failed is None  # its fill kept
    root, leaf = old.roots[0], old.leaves[("b1", "r1", "x1")]
    dead_root, dead_leaf = weakref.ref(root), weakref.ref(leaf)
    del root, leaf
    with collector_off():
        cache.update_objects(flavors={})
        assert old.retired and "tas" not in cache.topology._snapshots
        del old
        assert (dead_root(), dead_leaf()) == (None, None)  # freed by reference counting
        assert gc.collect() == 0
    cache.update_objects(flavors={"tas": FLAVOR})
    new = cache.topology.snapshot(FLAVOR)
    assert new is not None and not new.retired
    assert place_flavor(new, [gang]).assignments["g"].domains == ((("x1",), 8),)
    assert cache.topology.snapshot(FLAVOR) is new


def test_a_tree_no_placement_can_ask_for_is_dropped() -> None:
    """A flavor that no longer names a Topology, or whose Topology was deleted, has no
    tree to place on: the one it had is dropped and retired too."""
    cache = tas_cache()
    first = cache.topology.snapshot(FLAVOR)
    assert first is not None
    cache.update_objects(flavors={"tas": ResourceFlavor("tas", node_labels={"pool": "gpu"})})
    assert first.retired and "tas" not in cache.topology._snapshots
    cache.update_objects(flavors={"tas": FLAVOR})
    second = cache.topology.snapshot(FLAVOR)
    assert second is not None and not second.retired
    cache.set_topologies({})
    assert second.retired and "tas" not in cache.topology._snapshots
    assert cache.topology.snapshot(FLAVOR) is None
