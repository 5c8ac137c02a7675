"""What one podSet asks of a TAS placement: its pods, their requests, where they may go."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from queues.model import NodeSelectorTerm, Toleration, TopologyRequest

__all__ = ["PlacementRequest", "requests_tas"]


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
