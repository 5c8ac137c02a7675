"""The topology domain tree of a TAS flavor and the capacity it has free.

Topology-aware scheduling (Kueue's TAS) places a gang *inside* a domain of the
cluster's network hierarchy — a block, a rack, an NVLink fabric, a host. For each
ResourceFlavor with ``spec.topologyName`` this module builds, from the Nodes that
match the flavor's ``nodeLabels`` and carry every level's label, the tree of domains
(Kueue's tas_topology_tree.go / tas_flavor.go), and keeps what is free on every leaf:

    allocatable of the leaf's Ready, schedulable nodes
      − what pods *not* placed by TAS already use there (DaemonSets, static pods, …)
      − what admitted TAS workloads were assigned there

``TopologyState`` is the cluster-wide part (Topologies, Nodes, bound pods, TAS usage
per flavor and leaf), fed by the drivers; ``FlavorSnapshot`` is one flavor's tree,
built lazily and reused until a Node, Topology or flavor changes. The placement
algorithm itself is ``admission.engine.tas.placement``. Pure: no I/O.

A leaf is a domain of the lowest level. When the lowest level is
``kubernetes.io/hostname`` a leaf is one node and assignments name hosts only (as
Kueue); otherwise a leaf aggregates the nodes that share every level's value.

TAS usage is kept per *pool* (:func:`usage_pool`): every flavor whose topology ends at
the hostname shares one pool keyed by host, so what one flavor places on a node lowers
what every other flavor over that node can place there (Kueue's
TASHandleOverlappingFlavors, on by default since 0.18: usage aggregated across the
flavors with a hostname leaf). A flavor whose leaves aggregate nodes has a pool of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from queues.model import (
    ResourceFlavor,
    Taint,
    Toleration,
    Topology,
    TopologyAssignment,
)

HOSTNAME = "kubernetes.io/hostname"
HOST_POOL = "\0hosts"  # the usage pool of every flavor whose lowest level is the hostname
PODS = "pods"
DEFAULT_MAX_PODS = 110  # the kubelet's default; used when a Node reports no allocatable pods
DomainValues = tuple[str, ...]
Usage = dict[str, int]

__all__ = [
    "HOSTNAME",
    "HOST_POOL",
    "Domain",
    "FlavorSnapshot",
    "Node",
    "PodUsage",
    "TopologyState",
    "add_usage",
    "usage_key",
    "usage_pool",
]


@dataclass(slots=True)
class Node:
    """What topology-aware scheduling needs of a v1 Node."""

    name: str
    labels: dict[str, str]
    allocatable: Usage  # engine units; "pods" included
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False

    @property
    def schedulable_and_ready(self) -> bool:
        return self.ready and not self.unschedulable


@dataclass(slots=True, frozen=True)
class PodUsage:
    """A bound, running pod that TAS did not place: its requests use its node."""

    key: str  # namespace/name
    node_name: str
    requests: Mapping[str, int]  # per pod, "pods" not included


K = TypeVar("K")


def add_usage(into: dict[K, int], other: Mapping[K, int], sign: int = 1) -> None:
    """``into += sign × other``, dropping keys that reach zero."""
    for r, v in other.items():
        left = into.get(r, 0) + sign * v
        if left:
            into[r] = left
        else:
            into.pop(r, None)


class Domain:
    """A topology domain: its level values from the top down to its own level.

    The placement algorithm keeps its per-request state in the ``pod_count`` …
    ``leader_count`` slots (Kueue's domainState), rewritten on every request.

    ``parent`` and ``children`` link the tree both ways, a reference cycle; a tree that
    has been replaced has neither (:meth:`FlavorSnapshot.retire`), so it is freed by
    reference counting and any use of it left fails with AttributeError. The balanced
    placement's copies (``admission.engine.tas.balanced``) link downwards only."""

    __slots__ = (
        "values",
        "level",
        "parent",
        "children",
        "nodes",
        "capacity",
        "pod_count",
        "slice_count",
        "pod_count_wl",
        "slice_count_wl",
        "leader_count",
        "key",
        "tainted",
        "__weakref__",  # a domain's lifetime can be watched (a replaced tree is freed at once)
    )

    def __init__(self, values: DomainValues, level: int, parent: Domain | None) -> None:
        self.values = values
        self.level = level
        self.parent = parent
        self.children: list[Domain] = []
        self.nodes: list[Node] = []  # leaves only
        self.capacity: Usage = {}  # leaves only: allocatable − non-TAS pods' usage
        self.pod_count = 0
        self.slice_count = 0
        self.pod_count_wl = 0  # pods that fit when the group's leader is placed here too
        self.slice_count_wl = 0
        self.leader_count = 0
        self.key: DomainValues = values  # leaves: how TAS usage names it (usage_key)
        self.tainted = False  # leaves: a node has a NoSchedule/NoExecute taint

    def __repr__(self) -> str:
        return f"Domain({'/'.join(self.values)})"


@dataclass(slots=True)
class FlavorSnapshot:
    """One TAS flavor's domain tree over the nodes it selects."""

    flavor: str
    topology: str
    levels: tuple[str, ...]
    tolerations: tuple[Toleration, ...]
    per_level: list[list[Domain]]  # each level's domains, sorted by values
    leaves: dict[DomainValues, Domain]
    node_leaf: dict[str, DomainValues]  # node name -> its leaf
    usage: dict[DomainValues, Usage]  # TAS usage per leaf of its pool (shared with the state)
    total_nodes: int = 0
    host_leaf: dict[str, Domain] = field(default_factory=dict)  # hostname label -> leaf
    by_key: dict[DomainValues, Domain] = field(default_factory=dict)  # usage key -> leaf
    free_cache: dict[DomainValues, Usage] = field(default_factory=dict)
    # (request shape, simulate_empty) -> usage key -> (pods that fit, limiting resource)
    count_cache: dict[
        tuple[tuple[tuple[str, int], ...], bool], dict[DomainValues, tuple[int, str]]
    ] = field(default_factory=dict)
    # the placement's incremental phase-1 state (admission.engine.tas.counts.FillState)
    fill: object | None = None
    balanced: bool = False  # Kueue's TASBalancedPlacement for preferred requests
    retired: bool = False  # replaced by a tree built again: see retire

    @property
    def lowest_is_node(self) -> bool:
        return self.levels[-1] == HOSTNAME

    @property
    def pool(self) -> str:
        """The usage pool it shares with other flavors (:func:`usage_pool`)."""
        return usage_pool(self.flavor, self.levels)

    @property
    def roots(self) -> list[Domain]:
        return self.per_level[0]

    def level_index(self, key: str) -> int | None:
        try:
            return self.levels.index(key)
        except ValueError:
            return None

    def leaf_of(self, values: DomainValues, levels: tuple[str, ...]) -> Domain | None:
        """The leaf an assignment domain names (hostname-only or full values)."""
        if levels == self.levels:
            return self.leaves.get(values)
        if len(levels) == 1 and levels[0] == HOSTNAME and self.lowest_is_node:
            return self.host_leaf.get(values[0])
        return None

    def remaining(self, leaf: Domain, *, simulate_empty: bool = False) -> Usage:
        """What is free on the leaf (a copy the caller may change)."""
        return dict(self.free(leaf, simulate_empty=simulate_empty))

    def free(self, leaf: Domain, *, simulate_empty: bool = False) -> Usage:
        """What is free on the leaf, cached until its usage changes: do not modify."""
        if simulate_empty:
            return leaf.capacity
        cached = self.free_cache.get(leaf.key)
        if cached is None:
            cached = dict(leaf.capacity)
            used = self.usage.get(leaf.key)
            if used:
                add_usage(cached, used, -1)
            self.free_cache[leaf.key] = cached
        return cached

    def retire(self) -> None:
        """This tree has been replaced (:meth:`TopologyState.snapshot` built another after
        a Node, pod, Topology or flavor change): its domains lose ``parent`` and
        ``children``, and the fill state and caches go, so that it is freed by reference
        counting once its last holder lets go of it. Linked, it is a reference cycle,
        which only the cyclic collector frees, and one frozen by
        ``admission.engine.gc_pause`` only at a compaction.

        Nothing reads a replaced tree: each placement takes the flavor's snapshot when it
        starts and holds it no longer than it runs, and what a tree is built from changes
        only between scheduling cycles (the cache is frozen during one), so no tree is
        replaced while a cycle uses it. A use left anyway fails loudly (AttributeError on
        ``parent`` or ``children``) rather than placing on domains that no longer are."""
        if self.retired:
            return
        self.retired = True
        for domains in self.per_level:
            for d in domains:
                del d.parent, d.children
        self.fill = None
        self.free_cache = {}
        self.count_cache = {}

    def invalidate(self, key: DomainValues) -> None:
        """TAS usage on the leaf named ``key`` changed."""
        self.free_cache.pop(key, None)
        for (_, empty), counts in self.count_cache.items():
            if not empty:
                counts.pop(key, None)
        dirty = getattr(self.fill, "dirty", None)
        leaf = self.by_key.get(key)
        if dirty is not None and leaf is not None:
            dirty.add(leaf)


def build_snapshot(
    flavor: ResourceFlavor,
    topology: Topology,
    nodes: Iterable[Node],
    pod_usage: Mapping[str, Usage],
    usage: dict[DomainValues, Usage],
) -> FlavorSnapshot:
    """The flavor's tree: nodes matching its ``nodeLabels`` with every level's label,
    Ready and schedulable (Kueue's nodesCache.find / newTopologyTree)."""
    levels = topology.levels
    leaves: dict[DomainValues, Domain] = {}
    node_leaf: dict[str, DomainValues] = {}
    total = 0
    for node in nodes:
        labels = node.labels
        if any(labels.get(k) != v for k, v in flavor.node_labels.items()):
            continue
        if any(level not in labels for level in levels):
            continue
        if not node.schedulable_and_ready:
            continue
        total += 1
        values = tuple(labels[level] for level in levels)
        leaf = leaves.get(values)
        if leaf is None:
            leaf = leaves[values] = Domain(values, len(levels) - 1, None)
        leaf.nodes.append(node)
        leaf.key = usage_key(levels, values)
        if any(t.effect in ("NoSchedule", "NoExecute") for t in node.taints):
            leaf.tainted = True
        add_usage(leaf.capacity, node.allocatable)
        if PODS not in node.allocatable:
            add_usage(leaf.capacity, {PODS: DEFAULT_MAX_PODS})
        used = pod_usage.get(node.name)
        if used:
            add_usage(leaf.capacity, used, -1)
        node_leaf[node.name] = values
    per_level: list[dict[DomainValues, Domain]] = [{} for _ in levels]
    per_level[-1] = leaves
    for lvl in range(len(levels) - 2, -1, -1):
        for child_values, child in sorted(per_level[lvl + 1].items()):
            values = child_values[: lvl + 1]
            parent = per_level[lvl].get(values)
            if parent is None:
                parent = per_level[lvl][values] = Domain(values, lvl, None)
            child.parent = parent
            parent.children.append(child)
    for lvl_domains in per_level:
        for d in lvl_domains.values():
            d.children.sort(key=lambda c: c.values)
    return FlavorSnapshot(
        flavor=flavor.name,
        topology=topology.name,
        levels=levels,
        tolerations=tuple(flavor.tolerations),
        per_level=[[d for _, d in sorted(lv.items())] for lv in per_level],
        leaves=leaves,
        node_leaf=node_leaf,
        usage=usage,
        total_nodes=total,
        host_leaf={v[-1]: leaf for v, leaf in leaves.items()} if levels[-1] == HOSTNAME else {},
        by_key={leaf.key: leaf for leaf in leaves.values()},
    )


@dataclass
class TopologyState:
    """Topologies, Nodes, non-TAS pod usage and TAS usage: what placement reads.

    Drivers replace Topologies and Nodes and add/remove pods; the engine charges and
    releases TAS assignments (``charge``). Snapshots are rebuilt only after a change
    to what they were built from (``generation``), and the one a rebuild replaces is
    unlinked (:meth:`FlavorSnapshot.retire`), as is the one of a flavor deleted
    (:meth:`drop_snapshot`)."""

    topologies: dict[str, Topology] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, PodUsage] = field(default_factory=dict)
    # pool (usage_pool) -> leaf key -> usage (resources and "pods"), of admitted TAS workloads
    usage: dict[str, dict[DomainValues, Usage]] = field(default_factory=dict)
    generation: int = 0
    # Kueue's TASBalancedPlacement (Alpha, off by default): featureGates in the Configuration
    balanced_placement: bool = False
    _node_usage: dict[str, Usage] = field(default_factory=dict)
    # One thread at a time reads and builds these: a scheduling cycle in its thread while
    # the cache is frozen, the event loop (a node failure's replacement) only between
    # cycles (it waits for the running one), so no tree is retired under its reader.
    _snapshots: dict[str, tuple[int, ResourceFlavor, FlavorSnapshot]] = field(default_factory=dict)

    # -- objects ------------------------------------------------------------------

    def set_topologies(self, topologies: Mapping[str, Topology]) -> None:
        if dict(topologies) != self.topologies:
            self.topologies = dict(topologies)
            self.generation += 1
            for name, (_, _, snap) in list(self._snapshots.items()):
                if snap.topology not in self.topologies:
                    self.drop_snapshot(name)  # no tree is built over a missing Topology

    def set_node(self, node: Node) -> bool:
        """Add or replace a node; True when what placement reads of it changed."""
        if self.nodes.get(node.name) == node:
            return False
        self.nodes[node.name] = node
        self.generation += 1
        return True

    def delete_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self.generation += 1

    def set_pod(self, pod: PodUsage | None, key: str) -> None:
        """A pod was added, changed or (``pod`` None) went away or stopped counting."""
        old = self.pods.pop(key, None)
        if old is not None:
            add_usage(self._node_usage.setdefault(old.node_name, {}), old.requests, -1)
            add_usage(self._node_usage[old.node_name], {PODS: 1}, -1)
        if pod is not None:
            self.pods[key] = pod
            add_usage(self._node_usage.setdefault(pod.node_name, {}), pod.requests)
            add_usage(self._node_usage[pod.node_name], {PODS: 1})
        if old != pod:
            self.generation += 1

    def node_usage(self, name: str) -> Usage:
        return dict(self._node_usage.get(name, {}))

    # -- snapshots ----------------------------------------------------------------

    def snapshot(self, flavor: ResourceFlavor) -> FlavorSnapshot | None:
        """The flavor's tree, or None when it has no topology or its Topology is missing."""
        if flavor.topology_name is None:
            return None
        topology = self.topologies.get(flavor.topology_name)
        if topology is None:
            return None
        cached = self._snapshots.get(flavor.name)
        if cached is not None and cached[0] == self.generation and cached[1] == flavor:
            cached[2].balanced = self.balanced_placement
            return cached[2]
        snap = build_snapshot(
            flavor,
            topology,
            (self.nodes[n] for n in sorted(self.nodes)),
            self._node_usage,
            self.usage.setdefault(usage_pool(flavor.name, topology.levels), {}),
        )
        snap.balanced = self.balanced_placement
        self._snapshots[flavor.name] = (self.generation, flavor, snap)
        if cached is not None:
            cached[2].retire()  # freed by reference counting, frozen or not (gc_pause)
        return snap

    def drop_snapshot(self, flavor_name: str) -> None:
        """Forget the flavor's tree: the flavor was deleted or no longer names an existing
        Topology, so no placement asks for it again. It is retired as a replaced tree is,
        so it is freed by reference counting, and a flavor of the same name made later
        gets a tree built afresh. Called only between scheduling cycles (the cache is
        frozen during one), so no placement holds the tree."""
        cached = self._snapshots.pop(flavor_name, None)
        if cached is not None:
            cached[2].retire()

    def keep_snapshots(self, flavors: Mapping[str, ResourceFlavor]) -> None:
        """The ResourceFlavors are now ``flavors``: drop the trees of those deleted or no
        longer topology-aware (:meth:`drop_snapshot`); a changed one is rebuilt when next
        asked for."""
        for name in list(self._snapshots):
            flavor = flavors.get(name)
            if flavor is None or flavor.topology_name is None:
                self.drop_snapshot(name)

    # -- TAS usage ----------------------------------------------------------------

    def charge(
        self,
        flavor_name: str,
        assignment: TopologyAssignment,
        per_pod: Mapping[str, int],
        sign: int = 1,
    ) -> None:
        """Add (``sign`` 1) or remove (-1) what an assignment puts on each leaf.

        Usage is keyed by the host (hostname-lowest topologies) or the full level values,
        not by tree objects, so it survives trees being rebuilt and nodes going away and
        releasing it later is exact. It goes to the flavor's pool, so every snapshot of
        that pool sees it."""
        pool = usage_pool(flavor_name, assignment.levels)
        per_pool = self.usage.setdefault(pool, {})
        sharing = [c[2] for c in self._snapshots.values() if c[2].pool == pool]
        for values, count in assignment.domains:
            key = usage_key(assignment.levels, values)
            used = per_pool.setdefault(key, {})
            add_usage(used, {r: v * count for r, v in per_pod.items() if r != PODS}, sign)
            add_usage(used, {PODS: count}, sign)
            if not used:
                del per_pool[key]
            for snap in sharing:
                snap.invalidate(key)


def usage_pool(flavor_name: str, levels: tuple[str, ...]) -> str:
    """Where a flavor's TAS usage is kept: the shared host pool when its lowest level is
    the hostname (an assignment's levels end the same way), else the flavor's own."""
    return HOST_POOL if levels[-1] == HOSTNAME else flavor_name


def usage_key(levels: tuple[str, ...], values: DomainValues) -> DomainValues:
    """How TAS usage names a leaf: its host when the lowest level is the hostname."""
    return (values[-1],) if levels[-1] == HOSTNAME else tuple(values)
