"""v1 Node and v1 Pod objects -> what topology-aware scheduling reads of them.

Placement needs, per node, its labels (the topology levels), allocatable, taints,
Ready condition and ``spec.unschedulable``; and per bound pod that TAS did not place,
its node and requests (Kueue's nodesCache and nonTasUsageCache). The same functions
serve ``plan`` (Node and Pod documents in its input files) and the adapter's
informers, so both see the same cluster. Only the fields read are checked; the rest
of these large built-in objects is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.engine.tas.domains import Node, PodUsage
from queues.api import labels
from queues.model import Taint
from queues.pods import PodSpecError, pod_requests
from queues.quantity import QuantityError, to_units

__all__ = ["NodeInputError", "is_tas_pod", "node_from_object", "pod_usage_from_object"]

_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TERMINATED = ("Succeeded", "Failed")


class NodeInputError(ValueError):
    """A Node or Pod field that cannot be read: ``path`` and ``message``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


def _map(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise NodeInputError(path, "must be an object")
    return value


def _strings(value: Any, path: str) -> dict[str, str]:
    m = _map(value, path)
    for k, v in m.items():
        if not isinstance(v, str):
            raise NodeInputError(f"{path}.{k}", "must be a string")
    return dict(m)


def node_from_object(doc: Mapping[str, Any]) -> Node:
    """A ``Node`` from a v1 Node object (its name must be set)."""
    meta = _map(doc.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise NodeInputError("metadata.name", "Required value")
    spec = _map(doc.get("spec"), "spec")
    status = _map(doc.get("status"), "status")
    allocatable: dict[str, int] = {}
    raw = _map(status.get("allocatable"), "status.allocatable")
    for r, q in raw.items():
        try:
            allocatable[r] = to_units(r, q)
        except QuantityError as exc:
            raise NodeInputError(f"status.allocatable.{r}", str(exc)) from None
    taints = []
    raw_taints = spec.get("taints") or []
    if not isinstance(raw_taints, list):
        raise NodeInputError("spec.taints", "must be a list")
    for i, t in enumerate(raw_taints):
        t = _map(t, f"spec.taints[{i}]")
        effect = t.get("effect")
        if effect not in _TAINT_EFFECTS:
            raise NodeInputError(
                f"spec.taints[{i}].effect", f"must be one of {', '.join(_TAINT_EFFECTS)}"
            )
        taints.append(
            Taint(key=str(t.get("key") or ""), value=str(t.get("value") or ""), effect=effect)
        )
    ready = False
    conditions = status.get("conditions")
    if conditions is None:
        ready = True  # a Node document without status conditions (plan input) is Ready
    elif not isinstance(conditions, list):
        raise NodeInputError("status.conditions", "must be a list")
    else:
        for c in conditions:
            if isinstance(c, Mapping) and c.get("type") == "Ready":
                ready = c.get("status") == "True"
    return Node(
        name=name,
        labels=_strings(meta.get("labels"), "metadata.labels"),
        allocatable=allocatable,
        taints=tuple(taints),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
    )


def is_tas_pod(annotations: Mapping[str, Any]) -> bool:
    """Kueue's utiltas.IsTAS: a pod of a topology-aware podSet (its usage is counted by
    its Workload's topology assignment, not as a pod)."""
    return any(
        k in annotations
        for k in (
            labels.PODSET_REQUIRED_TOPOLOGY,
            labels.PODSET_PREFERRED_TOPOLOGY,
            labels.PODSET_UNCONSTRAINED_TOPOLOGY,
        )
    )


def pod_usage_from_object(doc: Mapping[str, Any]) -> PodUsage | None:
    """The usage of a v1 Pod on its node, or None when it does not count (not bound,
    finished, or placed by TAS: Kueue's belongsToNonTASCache)."""
    meta = _map(doc.get("metadata"), "metadata")
    spec = _map(doc.get("spec"), "spec")
    status = _map(doc.get("status"), "status")
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        return None
    if status.get("phase") in _TERMINATED:
        return None
    if is_tas_pod(_map(meta.get("annotations"), "metadata.annotations")):
        return None
    try:
        requests = pod_requests(spec)
    except (QuantityError, PodSpecError) as exc:
        raise NodeInputError("spec", str(exc)) from None
    ns = meta.get("namespace") or "default"
    return PodUsage(key=f"{ns}/{meta.get('name')}", node_name=node, requests=requests)
