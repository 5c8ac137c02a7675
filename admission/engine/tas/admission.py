"""Topology-aware admission in the engine: quota *and* placement, both required.

The glue between flavor assignment and Kueue's TAS placement (``admission.engine.tas.domains*``),
mirroring flavorassigner's TAS parts (tas_flavorassigner.go, the end of
``assignFlavors``) and the TAS check of preemption (``workloadFits``):

* A podSet requests topology-aware scheduling when its ``topologyRequest`` says so,
  or (implied, lowest level, unconstrained) when every flavor of its ClusterQueue has
  a topology. Its flavor must then have a Topology that has the requested level.
* When quota fits, the podSets are placed on the current free capacity; when that
  fails the workload needs preemption (mode Preempt), with the placement's reason.
* When quota or placement needs preemption, placement is retried as if the flavor's
  nodes were empty: if even that fails the workload cannot fit (NoFit); otherwise
  preemption must choose victims after whose removal the placement succeeds
  (``PlacementCheck``), so freeing GPUs scattered over racks does not count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from admission.engine import messages
from admission.engine.tas.domains import (
    PODS,
    TopologyState,
    Usage,
    add_usage,
    usage_key,
    usage_pool,
)
from admission.engine.tas.placement import place_flavor
from admission.engine.tas.replacement import find_replacement
from admission.engine.tas.request import PlacementRequest, pod_requests, requests_tas
from admission.engine.vocabulary import PendingReason
from queues.model import ResourceFlavor, TopologyAssignment, Workload

TOPOLOGY_PLACEMENT_FAILED = PendingReason.TOPOLOGY_PLACEMENT_FAILED

__all__ = [
    "TOPOLOGY_PLACEMENT_FAILED",
    "ChosenPodSet",
    "PlacementCheck",
    "TasCharge",
    "flavor_level_mismatch",
    "placement_requests",
    "place_workload",
    "leaf_usage",
    "node_replacement",
    "still_fits",
    "tas_charges",
]


class ChosenPodSet(Protocol):
    """What placement reads of a podSet's flavor assignment (``flavors.
    PodSetAssignmentResult``); a protocol, so this module sits below the assigner."""

    @property
    def name(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def flavors(self) -> Mapping[str, str]: ...  # resource -> flavor
    @property
    def topology(self) -> TopologyAssignment | None: ...


@dataclass(slots=True, frozen=True)
class TasCharge:
    """What one podSet's topology assignment holds on one flavor's leaves."""

    flavor: str
    assignment: TopologyAssignment
    per_pod: Mapping[str, int]

    @property
    def pool(self) -> str:
        """The usage pool it is charged to (``domains.usage_pool``)."""
        return usage_pool(self.flavor, self.assignment.levels)


def flavor_level_mismatch(
    state: TopologyState | None, flavor: ResourceFlavor, levels_wanted: Sequence[str]
) -> str | None:
    """Kueue's checks for a TAS podSet on a flavor with a topology ("information
    missing in TAS cache", "does not contain the requested level")."""
    if state is None or flavor.topology_name not in state.topologies:
        return messages.tas_information_missing(flavor.name)
    levels = state.topologies[flavor.topology_name].levels
    if any(lv not in levels for lv in levels_wanted):
        return messages.topology_level_missing(flavor)
    return None


def placement_requests(
    wl: Workload,
    results: Sequence[ChosenPodSet],
    flavors: Mapping[str, ResourceFlavor],
    *,
    tas_only: bool,
    errors: dict[str, str] | None = None,
    cq_has_tas: bool = True,
) -> dict[str, list[PlacementRequest]]:
    """Kueue's WorkloadsTopologyRequests: per TAS flavor, the podSets to place; a podSet
    that cannot be placed at all (its resources on two TAS flavors) goes to ``errors``."""
    out: dict[str, list[PlacementRequest]] = {}
    for ps, res in zip(wl.pod_sets, results, strict=True):
        explicit = requests_tas(ps.topology)
        if not (explicit or tas_only) or res.count == 0:
            continue
        tas_flavors = [
            f
            for f in sorted(set(res.flavors.values()))
            if (flv := flavors.get(f)) is not None and flv.topology_name is not None
        ]
        if not tas_flavors:
            # Kueue's podSetTopologyRequest: an explicit request with no TAS flavor to
            # place it on (no resources of its own, outside a podSet group) cannot be placed
            if explicit and errors is not None:
                errors[ps.name] = (
                    "no TAS flavor assigned"
                    if cq_has_tas
                    else "workload requires Topology, but there is no TAS cache information"
                )
            continue
        if len(tas_flavors) > 1:
            # Kueue's onlyTASFlavor (MultipleTASFlavorsAssignedError): one podSet, one tree
            if errors is not None:
                errors[ps.name] = f"more than one TAS flavor assigned: {', '.join(tas_flavors)}"
            continue
        tas_flavor = tas_flavors[0]
        out.setdefault(tas_flavor, []).append(
            PlacementRequest(
                name=ps.name,
                count=res.count,
                per_pod=pod_requests(ps),
                topology=ps.topology,
                implied=not explicit and tas_only,
                tolerations=tuple(ps.tolerations),
                node_selector=ps.node_selector,
                required_affinity=tuple(ps.required_affinity),
            )
        )
    return out


def place_workload(
    state: TopologyState,
    flavors: Mapping[str, ResourceFlavor],
    requests: Mapping[str, list[PlacementRequest]],
    *,
    simulate_empty: bool = False,
    released: Mapping[str, Mapping[tuple[str, ...], Usage]] | None = None,
    assumed: Mapping[str, Mapping[tuple[str, ...], Usage]] | None = None,
) -> tuple[dict[str, TopologyAssignment], tuple[str, str] | None]:
    """Place every TAS podSet; (assignments, None) or ({}, (podSet, reason)).

    ``released`` is usage per pool and leaf to count as free (preemption victims),
    ``assumed`` usage per pool and leaf to count as taken (this cycle's placements not
    yet committed). The podSets placed on one flavor count as taken for those placed
    on the next flavor of the same pool (two flavors over the same nodes)."""
    out: dict[str, TopologyAssignment] = {}
    taken: dict[str, dict[tuple[str, ...], Usage]] = {}
    if not simulate_empty:
        for source, sign in ((released, -1), (assumed, 1)):
            for pool, per_leaf in (source or {}).items():
                dest = taken.setdefault(pool, {})
                for key, usage in per_leaf.items():
                    add_usage(dest.setdefault(key, {}), usage, sign)
    for flavor_name in sorted(requests):
        snap = state.snapshot(flavors[flavor_name])
        reqs = requests[flavor_name]
        if snap is None:
            return {}, (reqs[0].name, messages.tas_information_missing(flavor_name))
        in_pool = taken.setdefault(snap.pool, {})
        result = place_flavor(snap, reqs, assumed=in_pool, simulate_empty=simulate_empty)
        if result.failed is not None:
            return {}, (result.failed, result.reason)
        out.update(result.assignments)
        if len(requests) > 1:
            for r in reqs:
                ta = result.assignments[r.name]
                for values, count in ta.domains:
                    used = in_pool.setdefault(usage_key(ta.levels, values), {})
                    add_usage(used, {k: v * count for k, v in r.per_pod.items()})
                    add_usage(used, {PODS: count})
    return out, None


def tas_charges(
    wl: Workload,
    assignments: Sequence[tuple[str, Mapping[str, str], TopologyAssignment | None]],
    flavors: Mapping[str, ResourceFlavor],
) -> list[TasCharge]:
    """The TAS usage of an admission: per podSet with a topology assignment, its flavor
    (the one with a topology among its flavors) and its pods' requests."""
    by_name = {ps.name: ps for ps in wl.pod_sets}
    out: list[TasCharge] = []
    for name, psa_flavors, ta in assignments:
        ps = by_name.get(name)
        if ta is None or ps is None:
            continue
        flavor = next(
            (
                f
                for f in sorted(set(psa_flavors.values()))
                if (flv := flavors.get(f)) is not None and flv.topology_name is not None
            ),
            None,
        )
        if flavor is None:
            continue
        per_pod = pod_requests(ps)
        out.append(TasCharge(flavor, ta, per_pod))
    return out


def leaf_usage(charges: Sequence[TasCharge]) -> dict[str, dict[tuple[str, ...], Usage]]:
    """Per pool and leaf, what these charges hold (for releasing victims)."""
    out: dict[str, dict[tuple[str, ...], Usage]] = {}
    for ch in charges:
        per = out.setdefault(ch.pool, {})
        for values, count in ch.assignment.domains:
            key = usage_key(ch.assignment.levels, values)
            used = per.setdefault(key, {})
            add_usage(used, {r: v * count for r, v in ch.per_pod.items()})
            add_usage(used, {PODS: count})
    return out


class PlacementCheck:
    """Would the workload's TAS podSets fit once these victims are gone? (Kueue's
    workloadFits, TAS part.) Handed to preemption with the assignment."""

    def __init__(
        self,
        state: TopologyState,
        flavors: Mapping[str, ResourceFlavor],
        requests: Mapping[str, list[PlacementRequest]],
        charges_of: Mapping[str, Sequence[TasCharge]],
        assumed: Mapping[str, Mapping[tuple[str, ...], Usage]] | None = None,
    ) -> None:
        self.state = state
        self.flavors = flavors
        self.requests = requests
        self.charges_of = charges_of
        self.assumed = assumed  # this cycle's placements not yet committed (per pool)

    def placement(self, victims: Sequence[str]) -> dict[str, TopologyAssignment] | None:
        """Where the podSets go once these victims are gone, or None if nowhere."""
        charges = [ch for key in victims for ch in self.charges_of.get(key, ())]
        placed, failure = place_workload(
            self.state,
            self.flavors,
            self.requests,
            released=leaf_usage(charges),
            assumed=self.assumed,
        )
        return placed if failure is None else None

    def __call__(self, victims: Sequence[str]) -> bool:
        return self.placement(victims) is not None

    def reservation(self, victims: Sequence[str]) -> dict[str, TopologyAssignment]:
        """Where a preemptor holds capacity for the rest of its cycle (Kueue's
        updateAssignmentForTAS): with victims, its placement once they are gone; without,
        its placement on empty nodes. {} when there is none."""
        if victims:
            return self.placement(victims) or {}
        placed, failure = place_workload(
            self.state, self.flavors, self.requests, simulate_empty=True
        )
        return placed if failure is None else {}

    def released(self, victims: Sequence[str]) -> dict[str, dict[tuple[str, ...], Usage]]:
        """What these victims hold, per pool and leaf."""
        return leaf_usage([ch for key in victims for ch in self.charges_of.get(key, ())])


def still_fits(
    state: TopologyState,
    flavors: Mapping[str, ResourceFlavor],
    charges: Sequence[TasCharge],
    extra: Mapping[str, Mapping[tuple[str, ...], Usage]] | None = None,
) -> str:
    """Kueue's TASFlavorSnapshot.Fits: do the assigned pods still fit their leaves after
    this cycle's earlier admissions (``extra``, per pool and leaf)? "" when they do,
    else where they do not. Charges of two flavors over one node add up there."""
    need: dict[tuple[str, tuple[str, ...]], tuple[str, Usage]] = {}
    for ch in charges:
        for values, count in ch.assignment.domains:
            k = (ch.pool, usage_key(ch.assignment.levels, values))
            flavor, used = need.setdefault(k, (ch.flavor, {}))
            add_usage(used, {r: v * count for r, v in ch.per_pod.items()})
            add_usage(used, {PODS: count})
    for (pool, key), (flavor, want) in sorted(need.items()):
        snap = state.snapshot(flavors[flavor])
        if snap is None:
            return messages.tas_information_missing(flavor)
        leaf = snap.by_key.get(key)
        if leaf is None:
            return messages.topology_domain_gone(key, flavor)
        free = snap.free(leaf)
        taken = (extra or {}).get(pool, {}).get(key)
        if taken:
            free = dict(free)
            add_usage(free, taken, -1)
        for r, v in want.items():
            if v > free.get(r, 0):
                return messages.topology_domain_short(key, flavor, r, v, free.get(r, 0))
    return ""


def node_replacement(
    state: TopologyState,
    flavors: Mapping[str, ResourceFlavor],
    wl: Workload,
    failed_host: str,
) -> tuple[dict[str, TopologyAssignment], str]:
    """Kueue's node replacement (the scheduler's second pass after a node failure):
    for each TAS podSet of the admitted ``wl`` with pods on ``failed_host``, its new
    assignment with those pods on healthy nodes of the same domain
    (``admission.engine.tas.replacement.find_replacement``), or ({}, why not)."""
    adm = wl.admission
    if adm is None:
        return {}, "the workload is not admitted"
    by_name = {ps.name: ps for ps in wl.pod_sets}
    out: dict[str, TopologyAssignment] = {}
    for psa in adm.pod_set_assignments:
        ta = psa.topology_assignment
        ps = by_name.get(psa.name)
        if ta is None or ps is None or not any(v[-1] == failed_host for v, _ in ta.domains):
            continue
        flavor = next(
            (
                flavors[f]
                for f in sorted(set(psa.flavors.values()))
                if f in flavors and flavors[f].topology_name is not None
            ),
            None,
        )
        snap = state.snapshot(flavor) if flavor is not None else None
        if snap is None:
            return {}, f"podSet {psa.name}: its topology flavor is gone"
        request = PlacementRequest(
            name=ps.name,
            count=psa.count,
            per_pod=pod_requests(ps),
            topology=ps.topology,
            implied=not requests_tas(ps.topology),
            tolerations=tuple(ps.tolerations),
            node_selector=ps.node_selector,
            required_affinity=tuple(ps.required_affinity),
        )
        new, reason = find_replacement(snap, request, ta, failed_host)
        if new is None:
            return {}, f"podSet {psa.name}: {reason}"
        out[psa.name] = new
    return out, ""
