"""In which order a cycle processes its nominated heads (docs/semantics.md §4.2 step 4).

A scheduler is built with one :data:`EntryOrder`: a function from the cycle's entries
to an iterator over them. Kueue's classical iterator sorts once
(:func:`classical_order`); with cohort credits the sort key gains the credit between
borrowers (:func:`credit_order`); fair sharing replaces the sort with a tournament that
is re-run after every entry (:class:`admission.engine.preemption.fair_sharing.Tournament`). The
configuration picks one, once (``admission.engine.build.build_scheduler``).

An :class:`Entry` is what the cycle carries for one head, its preemption victims
(:class:`Target`) included; the preemption policies fill those in, so both live here,
below them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from admission.engine.assignment import Assignment
from admission.engine.queue_manager import PendingStatus
from admission.engine.vocabulary import PreemptionReason
from queues.model import Workload
from queues.tree import CohortTree

if TYPE_CHECKING:
    from admission.engine.usage import UsageTracker


@dataclass(slots=True)
class Target:
    """A victim: its key, the ClusterQueue it is charged to, and why it is preempted."""

    key: str
    cluster_queue: str
    reason: PreemptionReason


@dataclass(slots=True)
class Entry:
    """A nominated head: the workload, its ClusterQueue and its flavor assignment."""

    workload: Workload
    cluster_queue: str
    assignment: Assignment | None = None
    status: PendingStatus | None = None
    targets: list[Target] = field(default_factory=list)  # preemption victims
    park_even_if_strict: bool = False
    preemptor: bool = False  # issued preemptions in an earlier cycle and waits for them


EntryOrder = Callable[[list[Entry], CohortTree], Iterator[Entry]]
"""The cycle's entries, in the order the cycle processes them. The tree is the cycle's
snapshot, which holds the admissions of the entries already processed when the
iterator is advanced (an order may re-rank the rest by it: fair sharing does)."""


def classical_order_key(e: Entry) -> tuple:
    """Kueue's classical iterator: workloads that already issued preemptions first (so
    the capacity they freed is theirs: without this, three workloads can evict each
    other forever, Kueue #13662), then non-borrowing, higher priority, older, UID."""
    wl = e.workload
    borrow = e.assignment.borrow if e.assignment is not None else 0
    return (not e.preemptor, borrow, -wl.priority, wl.queue_order_time, wl.tiebreak)


def classical_order(entries: list[Entry], _tree: CohortTree) -> Iterator[Entry]:
    return iter(sorted(entries, key=classical_order_key))


def credit_order(tracker: UsageTracker) -> EntryOrder:
    """Classical order with credits between borrowers (``cohortCredits``): preemptors
    first, non-borrowing, priority, then (borrowers only) the higher credit, then age."""

    def key(e: Entry) -> tuple:
        wl = e.workload
        borrow = e.assignment.borrow if e.assignment is not None else 0
        credit = -tracker.credit_of_node(e.cluster_queue) if borrow else 0.0
        return (not e.preemptor, borrow, -wl.priority, credit, wl.queue_order_time, wl.tiebreak)

    def order(entries: list[Entry], _tree: CohortTree) -> Iterator[Entry]:
        return iter(sorted(entries, key=key))

    return order
