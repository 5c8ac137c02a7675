"""``Inputs``: everything read from the input files, as engine objects keyed by name;
how a parsed object is filed in it, and how two of them merge (``plan --what-if``'s
overlay on its base)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from admission.drivers.unqueued import NotQueued
from admission.engine.tas.domains import Node, PodUsage
from queues.api import parse as api
from queues.model import (
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Namespace,
    PriorityClass,
    ResourceFlavor,
    Topology,
    Workload,
)

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, slots=True)
class GeneratedName:
    """A name given to an object that had only ``metadata.generateName``."""

    where: str  # "file document N"
    kind: str
    generate_name: str
    name: str  # namespace/name for namespaced kinds


@dataclass
class Inputs:
    """Everything read from the input files, as engine objects, keyed by name.

    ``local_queues`` and workload keys are ``namespace/name``. ``namespaces`` holds the
    Namespace documents given, or (``namespaces_given`` false) one per namespace used by
    a LocalQueue or Workload, labelled only ``kubernetes.io/metadata.name=<name>``.
    Finished workloads are left out (their keys are in ``finished_workloads``).
    ``warnings`` are one line each (skipped kinds); ``generated_names`` the names given
    for ``generateName``.
    """

    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    local_queues: dict[str, LocalQueue] = field(default_factory=dict)
    workload_priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    topologies: dict[str, Topology] = field(default_factory=dict)
    admission_checks: dict[str, AdmissionCheck] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, PodUsage] = field(default_factory=dict)
    """Bound, running pods not placed by TAS (their requests use their nodes)."""
    workloads: list[Workload] = field(default_factory=list)
    namespaces_given: bool = False
    finished_workloads: set[str] = field(default_factory=set)
    """Keys of the Finished workloads left out (an overlay's finish its base's ones)."""
    warnings: list[str] = field(default_factory=list)
    generated_names: list[GeneratedName] = field(default_factory=list)
    not_queued: list[NotQueued] = field(default_factory=list)
    """Jobs no queue manages, with why (:mod:`.unqueued`)."""
    references: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict)
    """Objects job kinds take podSets from (a TrainingRuntime), by (plural, namespace, name)."""
    dra: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """DRA objects (DeviceClass, ResourceClaimTemplate, ...) by (kind, [namespace/]name)."""
    dra_counted: bool = False
    """The workloads' podSets already hold their DRA devices (a snapshot of a live cache,
    which counted them with its own catalog): they are not counted again."""


def store(inputs: Inputs, obj: api.ModelObject) -> None:
    """File a parsed queue object (not a Workload) in its table of ``inputs``."""
    if isinstance(obj, ResourceFlavor):
        inputs.flavors[obj.name] = obj
    elif isinstance(obj, ClusterQueue):
        inputs.cluster_queues[obj.name] = obj
    elif isinstance(obj, Cohort):
        inputs.cohorts[obj.name] = obj
    elif isinstance(obj, LocalQueue):
        inputs.local_queues[obj.key] = obj
    elif isinstance(obj, PriorityClass):
        if obj.kind == "PriorityClass":
            inputs.priority_classes[obj.name] = obj
        else:
            inputs.workload_priority_classes[obj.name] = obj
    elif isinstance(obj, Namespace):
        inputs.namespaces[obj.name] = obj
        inputs.namespaces_given = True
    elif isinstance(obj, Topology):
        inputs.topologies[obj.name] = obj
    elif isinstance(obj, AdmissionCheck):
        inputs.admission_checks[obj.name] = obj
    else:  # pragma: no cover - workloads are collected by the caller
        raise TypeError(f"unexpected object {obj!r}")


def default_namespaces(inputs: Inputs) -> dict[str, Namespace]:
    """One Namespace per namespace a LocalQueue or Workload uses, as the API server makes it."""
    names = {lq.namespace for lq in inputs.local_queues.values()}
    names.update(wl.namespace for wl in inputs.workloads)
    return {n: Namespace(name=n, labels={NAMESPACE_NAME_LABEL: n}) for n in sorted(names)}


def merge(base: Inputs, overlay: Inputs) -> Inputs:
    """``base`` with ``overlay``'s objects added, replacing those of the same kind and name.

    The result is what loading both sets of files would give if the overlay's objects
    replaced the base's: a Workload the overlay gives as Finished is removed; explicit
    Namespaces of either side are kept (the overlay's winning); when neither side gives
    any, namespaces are derived from the merged LocalQueues and Workloads. Neither
    argument is modified.
    """
    workloads = {wl.key: wl for wl in base.workloads}
    workloads.update((wl.key, wl) for wl in overlay.workloads)
    for key in overlay.finished_workloads:
        workloads.pop(key, None)
    merged = Inputs(
        flavors={**base.flavors, **overlay.flavors},
        cluster_queues={**base.cluster_queues, **overlay.cluster_queues},
        cohorts={**base.cohorts, **overlay.cohorts},
        local_queues={**base.local_queues, **overlay.local_queues},
        workload_priority_classes={
            **base.workload_priority_classes,
            **overlay.workload_priority_classes,
        },
        priority_classes={**base.priority_classes, **overlay.priority_classes},
        topologies={**base.topologies, **overlay.topologies},
        admission_checks={**base.admission_checks, **overlay.admission_checks},
        nodes={**base.nodes, **overlay.nodes},
        pods={**base.pods, **overlay.pods},
        dra={**base.dra, **overlay.dra},
        workloads=list(workloads.values()),
        namespaces_given=base.namespaces_given or overlay.namespaces_given,
        finished_workloads=(base.finished_workloads - workloads.keys())
        | overlay.finished_workloads,
    )
    if merged.namespaces_given:
        for side in (base, overlay):
            if side.namespaces_given:
                merged.namespaces.update(side.namespaces)
    else:
        merged.namespaces = default_namespaces(merged)
    return merged
