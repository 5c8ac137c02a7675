"""The read-only slice of the model the webhooks consult.

Handlers never mutate the model: they ask whether a LocalQueue or a
WorkloadPriorityClass exists (defaulting), which labels a namespace carries
(``managedJobsNamespaceSelector``), and read the cohort tree (cycle detection) and
queues (impact warnings). :class:`ModelView` is that contract; the controller's live
cache implements it in ``serve``, :class:`InMemoryView` implements it over a fixed set
of objects (``serve --webhooks-only``, tests, benchmarks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from queues.model import (
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Namespace,
    PriorityClass,
    ResourceFlavor,
    Workload,
)

from .config import NAMESPACE_NAME_LABEL


@runtime_checkable
class ModelView(Protocol):
    """What a webhook handler may read. Keys: names; LocalQueues and Workloads "ns/name"."""

    @property
    def cluster_queues(self) -> Mapping[str, ClusterQueue]: ...

    @property
    def cohorts(self) -> Mapping[str, Cohort]: ...

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]: ...

    @property
    def local_queues(self) -> Mapping[str, LocalQueue]: ...

    @property
    def workloads(self) -> Mapping[str, Workload]: ...

    @property
    def admission_checks(self) -> Mapping[str, AdmissionCheck]: ...

    def local_queue_exists(self, namespace: str, name: str) -> bool: ...

    def workload_priority_class_exists(self, name: str) -> bool: ...

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        """The namespace's labels, always including ``kubernetes.io/metadata.name``."""
        ...


def _keyed(items: Any, what: str, key: str = "name") -> dict[str, Any]:
    """Accept a mapping (kept as is) or an iterable of objects keyed by ``key``."""
    if items is None:
        return {}
    if isinstance(items, Mapping):
        return dict(items)
    if isinstance(items, Iterable):
        out: dict[str, Any] = {}
        for obj in items:
            out[getattr(obj, key)] = obj
        return out
    raise TypeError(
        f"InMemoryView: {what} must be a mapping or an iterable, got {type(items).__name__}"
    )


@dataclass(slots=True)
class InMemoryView:
    """A :class:`ModelView` over plain dicts of ``queues.model`` objects."""

    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    local_queues: dict[str, LocalQueue] = field(default_factory=dict)
    workload_priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    workloads: dict[str, Workload] = field(default_factory=dict)
    admission_checks: dict[str, AdmissionCheck] = field(default_factory=dict)

    @classmethod
    def from_inputs(cls, inputs: Any) -> InMemoryView:
        """Build from ``admission.drivers.inputs.Inputs`` (or anything with the same attributes)."""
        return cls(
            cluster_queues=_keyed(getattr(inputs, "cluster_queues", None), "cluster_queues"),
            cohorts=_keyed(getattr(inputs, "cohorts", None), "cohorts"),
            flavors=_keyed(getattr(inputs, "flavors", None), "flavors"),
            local_queues=_keyed(getattr(inputs, "local_queues", None), "local_queues", "key"),
            workload_priority_classes=_keyed(
                getattr(inputs, "workload_priority_classes", None), "workload_priority_classes"
            ),
            namespaces=_keyed(getattr(inputs, "namespaces", None), "namespaces"),
            workloads=_keyed(getattr(inputs, "workloads", None), "workloads", "key"),
            admission_checks=_keyed(getattr(inputs, "admission_checks", None), "admission_checks"),
        )

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self.local_queues

    def workload_priority_class_exists(self, name: str) -> bool:
        return name in self.workload_priority_classes

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        ns = self.namespaces.get(namespace)
        labels = dict(ns.labels) if ns is not None else {}
        labels[NAMESPACE_NAME_LABEL] = namespace
        return labels
