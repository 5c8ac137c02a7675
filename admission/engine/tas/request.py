"""What one podSet asks of a TAS placement: its pods, their requests, where they may go."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from queues.model import NodeSelectorTerm, PodSet, Toleration, TopologyRequest

__all__ = ["PlacementRequest", "pod_requests", "requests_tas"]

PODS = "pods"


def pod_requests(ps: PodSet) -> dict[str, int]:
    """What one pod takes on a node: the pod template's requests (Kueue's TAS reads
    the pod spec), not what the Configuration's resource transformations made of them
    for quota (a Retain output such as credits, a Replace output) nor DRA devices;
    zero requests and "pods" left out."""
    declared = ps.requests if ps.declared_requests is None else ps.declared_requests
    return {r: v for r, v in declared.items() if v > 0 and r != PODS}


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
