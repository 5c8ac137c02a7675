"""The controller's work items: what its workers reconcile, one frozen value per object.

The work queue (:class:`.context.WorkQueue`) deduplicates items by equality, so each
kind of item is its own class: an item names which reconciler handles it, and a
misspelt kind is a type error rather than an item no worker recognises. ``label`` is
the kind as the ``quartermaster_reconcile_errors_total`` metric and the logs name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Workload:
    """Reconcile the Workload ``key`` (``namespace/name``) on its own."""

    key: str
    label: ClassVar[str] = "wl"


@dataclass(frozen=True, slots=True)
class PodGroup:
    """Reconcile a pod group: its Workload ``key`` and the group's pods together."""

    key: str
    label: ClassVar[str] = "podgroup"


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """Handle a node failure under the TAS-admitted Workload ``key``."""

    key: str
    label: ClassVar[str] = "nodefail"


@dataclass(frozen=True, slots=True)
class TasUngate:
    """Ungate the pods of the TAS-admitted Workload ``key`` (topology assignment)."""

    key: str
    label: ClassVar[str] = "tasungate"


@dataclass(frozen=True, slots=True)
class Job:
    """Reconcile the job object ``key`` of the integration ``what`` (``Integration.what``)."""

    what: str
    key: str

    @property
    def label(self) -> str:
        return self.what


Item = Workload | PodGroup | NodeFailure | TasUngate | Job
"""Any work item."""
