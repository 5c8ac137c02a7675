"""What an admission injects into a podSet's pod template and what a stop puts back
(Kueue's pkg/podset/podset.go: ``PodSetInfo``, ``FromAssignment``, ``FromPodSet``,
``Merge``, ``RestorePodSpec``)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from admission.integrations.framework.fields import Obj
from queues.api.labels import PODSET as PODSET_LABEL
from queues.api.labels import PODSET_UNCONSTRAINED_TOPOLOGY, TOPOLOGY_GATE
from queues.api.labels import WORKLOAD as WORKLOAD_ANNOTATION
from queues.model import (
    ResourceFlavor,
    Toleration,
)


@dataclass(slots=True)
class PodSetInfo:
    """What an admission injects into one podSet's pod template (Kueue's PodSetInfo):
    the admitted count, the flavors' node selector and tolerations, our labels and
    annotations, and scheduling gates (a TAS podSet's pods wait behind
    ``kueue.x-k8s.io/topology`` for the ungater to give each its domain)."""

    name: str
    count: int
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[Obj] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    min_count: int | None = None  # the podSet's minCount: its count is restored on stop
    annotations: dict[str, str] = field(default_factory=dict)
    scheduling_gates: list[str] = field(default_factory=list)


def toleration_json(t: Toleration) -> Obj:
    out: Obj = {}
    if t.key:
        out["key"] = t.key
    if t.operator:
        out["operator"] = t.operator
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def flavor_info(name: str, count: int, flavors: Iterable[ResourceFlavor]) -> PodSetInfo:
    """The PodSetInfo of an admitted podSet (Kueue's ``podset.FromAssignment``): the
    flavors' node labels and tolerations, and the podset label."""
    info = PodSetInfo(name=name, count=count, labels={PODSET_LABEL: name})
    for flv in flavors:
        info.node_selector.update(flv.node_labels)
        for t in flv.tolerations:
            tj = toleration_json(t)
            if tj not in info.tolerations:
                info.tolerations.append(tj)
    return info


TAS_ANNOTATIONS = (WORKLOAD_ANNOTATION, PODSET_UNCONSTRAINED_TOPOLOGY)
"""The pod-template annotations :func:`tas_info` adds (removed again on stop)."""


def tas_info(info: PodSetInfo, *, wl_name: str, pod_set: Mapping[str, Any]) -> PodSetInfo:
    """Add to an admitted podSet's info what a topology assignment needs (Kueue's
    ``FromAssignment`` under TAS): the ``kueue.x-k8s.io/topology`` scheduling gate, so
    each pod waits for the ungater to give it its domain's node selector; the
    ``kueue.x-k8s.io/workload`` annotation naming the Workload its pods belong to; and,
    for a podSet that asked for no topology (implicit TAS), the unconstrained
    annotation. ``pod_set`` is the Workload's ``spec.podSets[]`` entry. In place."""
    tr = pod_set.get("topologyRequest") or {}
    if not any(tr.get(k) is not None for k in ("required", "preferred", "unconstrained")):
        info.annotations[PODSET_UNCONSTRAINED_TOPOLOGY] = "true"
    info.annotations[WORKLOAD_ANNOTATION] = wl_name
    if TOPOLOGY_GATE not in info.scheduling_gates:
        info.scheduling_gates.append(TOPOLOGY_GATE)
    return info


def original_info(pod_set: Mapping[str, Any]) -> PodSetInfo:
    """The PodSetInfo of a Workload ``spec.podSets[]`` entry: the original template's
    scheduling fields (Kueue's ``podset.FromPodSet``), to restore on stop."""
    tmpl = pod_set.get("template") or {}
    tspec = tmpl.get("spec") or {}
    tmeta = tmpl.get("metadata") or {}
    return PodSetInfo(
        name=str(pod_set.get("name") or ""),
        count=int(pod_set.get("count") or 0),
        node_selector=dict(tspec.get("nodeSelector") or {}),
        tolerations=[dict(t) for t in tspec.get("tolerations") or [] if isinstance(t, Mapping)],
        labels=dict(tmeta.get("labels") or {}),
        min_count=pod_set.get("minCount") if isinstance(pod_set.get("minCount"), int) else None,
        annotations=dict(tmeta.get("annotations") or {}),
        scheduling_gates=[
            str(g["name"])
            for g in tspec.get("schedulingGates") or []
            if isinstance(g, Mapping) and "name" in g
        ],
    )


def merge_info(template: Obj, info: PodSetInfo) -> None:
    """``podset.Merge``: add the info's labels, annotations, node selector, tolerations
    and scheduling gates to a PodTemplateSpec (in place; none duplicated)."""
    tmeta = template.setdefault("metadata", {})
    if info.labels:
        tmeta["labels"] = {**(tmeta.get("labels") or {}), **info.labels}
    if info.annotations:
        tmeta["annotations"] = {**(tmeta.get("annotations") or {}), **info.annotations}
    tspec = template.setdefault("spec", {})
    gates = [g for g in tspec.get("schedulingGates") or [] if isinstance(g, dict)]
    have = {g.get("name") for g in gates}
    new_gates = [{"name": g} for g in info.scheduling_gates if g not in have]
    if new_gates:
        tspec["schedulingGates"] = gates + new_gates
    if info.node_selector:
        tspec["nodeSelector"] = {**(tspec.get("nodeSelector") or {}), **info.node_selector}
    tolerations = [t for t in tspec.get("tolerations") or [] if isinstance(t, dict)]
    added = [t for t in info.tolerations if t not in tolerations]
    if added:
        tspec["tolerations"] = tolerations + added


def restore_info(template: Obj, info: PodSetInfo) -> None:
    """``podset.RestorePodSpec``: the template's labels, annotations, node selector,
    tolerations and scheduling gates become the original's again (in place)."""
    tmeta = template.setdefault("metadata", {})
    for mkey, mwant in (("labels", info.labels), ("annotations", info.annotations)):
        if dict(tmeta.get(mkey) or {}) != mwant:
            if mwant:
                tmeta[mkey] = dict(mwant)
            else:
                tmeta.pop(mkey, None)
    if not tmeta:
        template.pop("metadata", None)
    tspec = template.setdefault("spec", {})
    gates = [{"name": g} for g in info.scheduling_gates]
    for key, want in (
        ("nodeSelector", info.node_selector),
        ("tolerations", info.tolerations),
        ("schedulingGates", gates),
    ):
        if (tspec.get(key) or type(want)()) != want:
            if want:
                tspec[key] = copy.deepcopy(want)
            else:
                tspec.pop(key, None)
