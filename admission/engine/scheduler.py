"""One scheduling cycle, exactly as Kueue runs it (docs/semantics.md §4.2).

1. Take one head per active ClusterQueue, and a snapshot of the quota tree
   (:mod:`admission.engine.snapshot`).
2. Nominate each head: namespace selector, LocalQueue state, flavor assignment (and,
   when the assignment needs it, the preemption search) against the snapshot.
3. Order the entries with the scheduler's ``EntryOrder`` (classical: preemptors,
   non-borrowing, higher priority, older; fair sharing: a tournament).
4. Process them in order against the snapshot, which holds this cycle's earlier
   admissions and preemptions: admit what still fits, issue preemptions, requeue the
   rest with a reason and a message that says in numbers what is short.
5. Commit the decisions to the cache (assume admissions, mark victims, requeue) and
   drop the snapshot.

The cycle returns decisions and performs no I/O; drivers apply them.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from admission.engine import messages
from admission.engine.assignment import Assignment, OracleAnswer
from admission.engine.cache import Cache
from admission.engine.faults import cannot_evaluate
from admission.engine.flavors import FlavorAssigner
from admission.engine.ordering import Entry, EntryOrder, Target, classical_order
from admission.engine.preemption.classical import Preemptor
from admission.engine.progress import Notice
from admission.engine.queue_manager import PendingStatus
from admission.engine.snapshot import Snapshot
from admission.engine.vocabulary import AssignmentMode, PendingReason
from queues.model import (
    ANY,
    NEVER,
    STOP_NONE,
    STRICT_FIFO,
    Admission,
    FlavorResource,
    PodSetAssignment,
    Workload,
)
from queues.tree import QuotaNode

if TYPE_CHECKING:
    from admission.engine.preemption.checkpoint import ProgressAware
    from admission.engine.usage import UsageTracker


_collector_lock = threading.Lock()
_collector_pauses = [0, False]  # cycles running now; whether the collector was enabled


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector stays off while a cycle runs, and runs after it.

    A cycle allocates tens of short-lived containers per head (entries, assignments,
    statuses) and keeps them until it ends; with thousands of heads the collector ran
    hundreds of times inside every cycle, each time walking what the cycle still holds
    and promoting it, so full collections of the whole heap followed every few cycles
    (≈ a third of a 5,000-head cycle's CPU and its p99, ``bench cycle-5k``). What the
    cycle frees, reference counting frees; the collector runs once it is over and finds
    the survivors only. Cycles in several threads nest; a collector that was already
    off (``plan``) stays off."""
    with _collector_lock:
        if _collector_pauses[0] == 0:
            _collector_pauses[1] = gc.isenabled()
            gc.disable()
        _collector_pauses[0] += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses[0] -= 1
            if _collector_pauses[0] == 0 and _collector_pauses[1]:
                gc.enable()


def _built_from(kept: tuple[object, ...], cq: object, node: object, cache: Cache) -> bool:
    """A kept assigner was built from these very objects: the ClusterQueue's spec, its
    node of the kept working tree, the flavors, the topology state and the TAS charges
    (identity, not equality: a spec replaced by an equal one still gets a new
    assigner). Asked once per head, so compared one by one, not by building a tuple."""
    return (
        kept[0] is cq
        and kept[1] is node
        and kept[2] is cache.flavors
        and kept[3] is cache.topology
        and kept[4] is cache.tas_charged
    )


def _short_on(node: QuotaNode, usage: dict[FlavorResource, int]) -> str:
    """What of ``usage`` no longer fits ``node`` now, in (flavor, resource) order: ""
    when all of it fits, else the first resource short (for the pending message)."""
    items = usage.items()
    for fr, v in sorted(items) if len(items) > 1 else items:
        left = node.available(fr)
        if v > left:
            return messages.short_after_earlier_admissions(fr, v, left)
    return ""


def _no_lq_order(_cq: str) -> None:
    """Without admission fair sharing, LocalQueues do not order a ClusterQueue's heap."""
    return None


@dataclass(slots=True)
class AdmittedDecision:
    workload: Workload
    cluster_queue: str
    admission: Admission
    cycle: int


@dataclass(slots=True)
class PreemptedDecision:
    workload: Workload
    cluster_queue: str
    by: str
    reason: str
    message: str
    cycle: int
    # Progress-aware preemption: the victim is noticed and evicted by this deadline
    # (or when it checkpoints); None: evicted at once (Kueue).
    notice_deadline: float | None = None


@dataclass(slots=True)
class CycleResult:
    cycle: int
    admitted: list[AdmittedDecision] = field(default_factory=list)
    preempted: list[PreemptedDecision] = field(default_factory=list)
    pending: dict[str, PendingStatus] = field(default_factory=dict)
    changed: bool = False
    heads: int = 0


class Scheduler:
    """Runs cycles over a ``Cache`` with the policy it is built with.

    Everything that changes what a cycle decides is a keyword-only argument, fixed for
    the scheduler's life (Kueue's ``scheduler.New(..., WithFairSharing(...),
    WithClock(...))``): the preemption strategy, the entry order, the usage tracker
    (admission fair sharing and credits) and the clock. ``admission.engine.build.build_scheduler``
    is the one factory that picks them from a configuration; the defaults are Kueue's
    classical behaviour.
    """

    __slots__ = (
        "_cache",
        "_clock",
        "_preemptor",
        "_order",
        "_usage",
        "_lq_order",
        "_explain",
        "_progress",
        "_reserve_evicting",
        "_assigners",
        "_snap",
        "cycle_count",
        "stats",
    )

    def __init__(
        self,
        cache: Cache,
        *,
        clock: Callable[[], float] = time.time,
        preemptor: Preemptor | None = None,
        order: EntryOrder = classical_order,
        usage: UsageTracker | None = None,
        explain: bool = True,
        progress: ProgressAware | None = None,
        reserve_evicting_capacity: bool = False,
    ) -> None:
        """``explain``: format numeric explanations for pending workloads (drivers that
        never show them, the simulator, save the formatting).

        ``reserve_evicting_capacity`` (the Configuration's ``reserveEvictingCapacity``,
        our extension; off is Kueue's behaviour): in the cycle that issues preemptions,
        the victims' quota stays charged for everybody else; only their preemptor
        counts on it, so admitted plus evicting workloads never exceed any quota."""
        self._cache = cache
        self._clock = clock
        self._preemptor = preemptor if preemptor is not None else Preemptor(cache)
        self._order = order
        self._usage = usage
        self._lq_order: Callable[[str], Callable[[str], float] | None] = (
            usage.lq_order_function if usage is not None else _no_lq_order
        )
        self._explain = explain
        self._progress = progress  # notice windows and lost-work explanations
        self._reserve_evicting = reserve_evicting_capacity
        # One flavor assigner per ClusterQueue, kept while what it is built from (the
        # spec, its node of the kept working tree, the flavors) stays the same object:
        # building one per head was a measurable part of a 5,000-head cycle.
        self._assigners: dict[str, tuple[tuple[object, ...], FlavorAssigner]] = {}
        self._snap: Snapshot | None = None  # the cycle's snapshot, for the assigners' oracle
        self.cycle_count = 0
        self.stats = {"cycles": 0, "admissions": 0, "preemptions": 0, "nominations": 0}

    @property
    def cache(self) -> Cache:
        return self._cache

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    @property
    def preemptor(self) -> Preemptor:
        return self._preemptor

    @property
    def order(self) -> EntryOrder:
        return self._order

    @property
    def usage(self) -> UsageTracker | None:
        """Admission fair sharing and credits (None when neither is configured)."""
        return self._usage

    @property
    def explain(self) -> bool:
        return self._explain

    @property
    def progress(self) -> ProgressAware | None:
        """Progress-aware preemption (None when not configured: Kueue's behaviour)."""
        return self._progress

    @property
    def reserve_evicting_capacity(self) -> bool:
        return self._reserve_evicting

    # -- the cycle ----------------------------------------------------------------

    def schedule(self) -> CycleResult:
        """One cycle: decide on a snapshot, then commit the decisions to the cache.

        Nothing in the cache changes until every head is decided; if anything raises
        before that, the heads go back to their queues and the cache (its tree's usage
        included) is exactly as it was. The cyclic collector waits until the cycle is
        over (:func:`_collector_paused`)."""
        with _collector_paused():
            return self._schedule()

    def _schedule(self) -> CycleResult:
        self.cycle_count += 1
        self.stats["cycles"] += 1
        result = CycleResult(cycle=self.cycle_count)
        cache = self._cache
        heads: list[Entry] = []
        queues, inactive, preemptors = cache.queues, cache.inactive, cache.preemptors
        lq_order = self._lq_order
        # Only the queues that got a head since a cycle last found them empty: a cycle
        # in a cluster of 5,000 ClusterQueues with work in a few costs those few.
        for name in sorted(cache.with_heads):
            q = queues.get(name)
            if q is None:
                cache.with_heads.discard(name)
                continue
            if name in inactive:
                continue
            wl = q.take_head(lq_order(name))  # stays queued until committed
            if wl is None:
                cache.with_heads.discard(name)  # it joins again when it gets a head
                continue
            heads.append(Entry(wl, name, preemptor=wl.key in preemptors))
        result.heads = len(heads)
        if not heads:
            return result
        snap: Snapshot | None = None
        try:
            snap = self._snap = Snapshot(cache.tree)
            nominate, process, commit = self._nominate, self._process, self._commit
            for e in heads:
                try:
                    nominate(e, snap)
                except Exception as err:  # noqa: BLE001 - one head never stops the cycle
                    cannot_evaluate(cache, e, err)
            self.stats["nominations"] += len(heads)
            cycle = result.cycle
            decided = [(e, process(e, snap, cycle)) for e in self._order(heads, snap.tree)]
            for e, outcome in decided:
                commit(e, outcome, result)
        except BaseException:
            # Heads not committed are still in their queues (taken, not removed); one
            # that is neither there nor admitted goes back.
            for e in heads:
                key = e.workload.key
                if key not in cache.admitted and key not in cache.queues[e.cluster_queue]:
                    cache.queues[e.cluster_queue].push(e.workload)
            raise
        finally:
            self._snap = None
            if snap is not None:
                snap.release()
        return result

    def _nominate(self, e: Entry, snap: Snapshot) -> None:
        cache = self._cache
        wl = e.workload
        cq = cache.cluster_queues[e.cluster_queue]
        lq = cache.local_queue_of(wl)
        misconfigured = PendingReason.MISCONFIGURED
        if lq is not None and lq.stop_policy != STOP_NONE:
            e.status = PendingStatus(PendingReason.SUSPENDED, messages.local_queue_stopped(lq.key))
            return
        labels = cache.namespace_labels(wl.namespace)
        if labels is None:
            e.status = PendingStatus(misconfigured, messages.namespace_missing(wl.namespace))
            e.park_even_if_strict = True
            return
        if cq.namespace_selector is None:
            e.status = PendingStatus(
                misconfigured, messages.namespace_not_selected(wl.namespace, cq.name)
            )
            e.park_even_if_strict = True
            return
        if not cq.namespace_selector.matches(labels):
            e.status = PendingStatus(
                misconfigured, messages.namespace_mismatch(wl.namespace, cq.name)
            )
            e.park_even_if_strict = True
            return
        for ps in wl.pod_sets:  # (formatting the errors only when there are some)
            if ps.limit_violations:
                e.status = PendingStatus(misconfigured, messages.resource_validation_errors(wl))
                return
        assigner = self._assigner(e.cluster_queue, snap)
        a = assigner.assign(wl)
        if a.mode.needs_preemption:
            e.targets = self._preemptor.targets(
                snap, wl, e.cluster_queue, a.usage, a.frs_need_preemption, placement=a.placement
            )
        if (
            a.mode != AssignmentMode.FIT
            and not e.targets
            and any(ps.min_count is not None for ps in wl.pod_sets)
        ):
            # Partial admission: neither fits nor can preempt at full size.
            reduced = self._partial(assigner, snap, wl, e.cluster_queue)
            if reduced is not None:
                a, e.targets = reduced
        e.assignment = a

    def _assigner(self, cq_name: str, snap: Snapshot) -> FlavorAssigner:
        cache = self._cache
        cq = cache.cluster_queues[cq_name]
        node = snap.tree.queues[cq_name]
        p = cq.preemption
        preemptor = self._preemptor
        may_borrow = p.borrow_within_cohort != NEVER or (
            preemptor.fair_sharing and p.reclaim_within_cohort != NEVER
        )
        kept = self._assigners.get(cq_name)
        if kept is not None and _built_from(kept[0], cq, node, cache):
            assigner = kept[1]
            # read from the spec every time, as when an assigner was built per head
            assigner.can_preempt_while_borrowing = may_borrow
            assigner.can_preempt_within_cq = p.within_cluster_queue != NEVER
            return assigner

        def oracle(wl: Workload, node: QuotaNode, fr: FlavorResource, val: int) -> OracleAnswer:
            # the snapshot of the cycle running now (an assigner outlives its cycle)
            current = self._snap
            assert current is not None
            return preemptor.oracle(current, wl, node, fr, val)

        assigner = FlavorAssigner(
            cq=cq,
            node=node,
            flavors=cache.flavors,
            oracle=oracle,
            can_preempt_while_borrowing=may_borrow,
            can_preempt_within_cq=p.within_cluster_queue != NEVER,
            explain=self._explain,
            topology=cache.topology,
            tas_charges=cache.tas_charged,
        )
        built_from = (cq, node, cache.flavors, cache.topology, cache.tas_charged)
        self._assigners[cq_name] = (built_from, assigner)
        return assigner

    def _partial(
        self, assigner: FlavorAssigner, snap: Snapshot, wl: Workload, cq: str
    ) -> tuple[Assignment, list[Target]] | None:
        """Partial admission (Kueue's PodSetReducer): the largest count of the minCount
        podSet that fits, or that preemption can make fit (then with its victims)."""
        ps = next(p for p in wl.pod_sets if p.min_count is not None)
        lo, hi = ps.min_count or 1, ps.count - 1
        counts = {p.name: p.count for p in wl.pod_sets}
        best: tuple[Assignment, list[Target]] | None = None
        while lo <= hi:
            mid = (lo + hi + 1) // 2
            counts[ps.name] = mid
            a = assigner.assign(wl, counts)
            targets: list[Target] = []
            if a.mode.needs_preemption:
                targets = self._preemptor.targets(
                    snap, wl, cq, a.usage, a.frs_need_preemption, placement=a.placement
                )
            if a.mode == AssignmentMode.FIT or targets:
                best = (a, targets)
                lo = mid + 1
            else:
                hi = mid - 1
        return best

    # -- processing: decide against the snapshot ------------------------------------

    def _process(self, e: Entry, snap: Snapshot, cycle: int) -> _Outcome:
        """Kueue's processEntry: admit, preempt, or requeue with a reason. Changes only
        the snapshot; what it returns is committed to the cache after the last entry."""
        if e.status is not None:
            return _PARK
        a = e.assignment
        assert a is not None
        mode = a.mode
        preempting = mode in _NEEDS_PREEMPTION and bool(e.targets)
        if mode != _FIT and not preempting:
            if mode != AssignmentMode.NO_FIT:  # preemption was needed, and found nobody
                self._reserve_unreclaimable(e, snap)
            e.status = PendingStatus(a.reason or PendingReason.WAITING_FOR_QUOTA, a.message)
            return _PARK_EQUIVALENTS
        if e.targets and any(t.key in snap.victims for t in e.targets):
            # Another preemptor took some of these victims earlier in this cycle: search
            # again, with their preemptions counted as issued.
            e.targets = self._preemptor.targets(
                snap,
                e.workload,
                e.cluster_queue,
                a.usage,
                a.frs_need_preemption,
                placement=a.placement,
            )
            if not e.targets:
                e.status = PendingStatus(PendingReason.WAITING_FOR_QUOTA, messages.TARGETS_TAKEN)
                return _BACK_TO_THE_HEAP
        short = self._still_fits(e, snap)
        if short:
            e.status = PendingStatus(_WAITING_FOR_QUOTA, messages.no_longer_fits(short))
            return _BACK_TO_THE_HEAP
        if preempting:
            return self._issue_preemptions(e, snap, cycle)
        snap.tree.add_usage(e.cluster_queue, a.usage)  # later entries see this admission
        self._cache.topology_assume(e.workload, a.pod_sets, snap.tas)  # and its topology placement
        return _Admit(
            Admission(
                cluster_queue=e.cluster_queue,
                pod_set_assignments=[
                    PodSetAssignment(
                        name=p.name,
                        flavors=dict(p.flavors),
                        resource_usage=dict(p.usage),
                        count=p.count,
                        topology_assignment=p.topology,
                    )
                    for p in a.pod_sets
                ],
            ),
            dict(a.usage),
        )

    def _still_fits(self, e: Entry, snap: Snapshot) -> str:
        """Kueue's fits(): the entry's usage fits once every workload preempted earlier
        in this cycle and the entry's own targets are counted as released.

        Returns "" when it fits, else what is short (for the pending message)."""
        cache = self._cache
        tree = snap.tree
        a = e.assignment
        assert a is not None
        targets = e.targets
        node = tree.queues[e.cluster_queue]
        # This cycle's earlier victims are already off the snapshot; add the entry's own.
        released = (
            [t.key for t in targets if t.key in cache.admitted and t.key not in snap.victims]
            if targets
            else None
        )
        if released:
            with tree.scratch():
                for k in released:
                    tree.remove_usage(cache.admitted[k], cache.usage_of[k])
                short = _short_on(node, a.usage)
        else:  # nothing to try on the tree, no scratch block to pay for
            short = _short_on(node, a.usage)
        if short:
            return short
        if not targets:  # placed at nomination: do the pods still fit their domains?
            return cache.topology_still_fits(e.workload, a.pod_sets, snap.tas)
        return ""

    @staticmethod
    def _hold(snap: Snapshot, cq: str, usage: dict[FlavorResource, int]) -> None:
        """Charge ``usage`` to ``cq`` in the snapshot: capacity nobody else may take
        for the rest of the cycle."""
        usage = {fr: v for fr, v in usage.items() if v > 0}
        if usage:
            snap.tree.add_usage(cq, usage)

    def _reserve_unreclaimable(self, e: Entry, snap: Snapshot) -> None:
        """Reservation rule (§4.2 step 5): keep the capacity a preemptor may later
        reclaim from going to lower-ordered workloads elsewhere in this cycle."""
        spec = self._cache.cluster_queues[e.cluster_queue]
        if spec.preemption.reclaim_within_cohort == ANY:
            return  # it can always reclaim later
        a = e.assignment
        assert a is not None
        node = snap.tree.queues[e.cluster_queue]
        hold: dict[FlavorResource, int] = {}
        for fr, req in a.usage.items():
            used, nominal = node.usage.get(fr, 0), node.nominal(fr)
            if a.borrow == 0:
                hold[fr] = max(0, min(req, nominal - used))
            else:
                q = node.quotas.get(fr)
                bl = q.borrowing_limit if q is not None else None
                hold[fr] = req if bl is None else max(0, min(req, nominal + bl - used))
        self._hold(snap, e.cluster_queue, hold)

    def _issue_preemptions(self, e: Entry, snap: Snapshot, cycle: int) -> _Preempt:
        """Evict the victims; the preemptor waits (sticky head) for their quota."""
        cache = self._cache
        wl = e.workload
        a = e.assignment
        assert a is not None
        issued: list[PreemptedDecision] = []
        progress = self._progress
        tree = snap.tree
        deadlines: dict[str, float] = {}
        # Kueue: the victims' quota counts as released for the rest of the cycle, and the
        # preemptor's usage is held. Strict (reserveEvictingCapacity): both, but only
        # where that leaves more in use than before, so the victims' capacity stays
        # taken for everyone else until they are gone.
        with tree.keep_larger() if self._reserve_evicting else nullcontext():
            for t in e.targets:
                deadline = None
                if progress is not None and t.key not in cache.evicting:
                    deadline = progress.notice_deadline(t.cluster_queue)
                    if deadline is not None:
                        deadlines[t.key] = deadline
                if t.key not in snap.victims:
                    snap.victims.add(t.key)
                    if deadline is None and t.key not in cache.progress.notices:
                        tree.remove_usage(t.cluster_queue, cache.usage_of[t.key])
                    # A noticed victim keeps running, and so stays charged: what it
                    # holds beyond the preemptor's need goes to nobody else until it is
                    # evicted.
            self._hold(snap, e.cluster_queue, a.usage)
        for t in e.targets:
            if t.key in cache.evicting:
                continue  # already being evicted: never issue twice
            msg = self._preemptor.message(
                preemptor=wl,
                preemptor_cq=e.cluster_queue,
                victim_cq=t.cluster_queue,
                reason=t.reason,
            )
            if progress is not None:
                msg += progress.explain(wl, t.key)
            issued.append(
                PreemptedDecision(
                    cache.workloads[t.key],
                    t.cluster_queue,
                    wl.key,
                    t.reason,
                    msg,
                    cycle,
                    deadlines.get(t.key),
                )
            )
        waiting = progress.waiting_message(e.targets, deadlines) if progress is not None else ""
        e.status = PendingStatus(
            PendingReason.WAITING_FOR_PREEMPTED_WORKLOADS,
            messages.waiting_for_preempted((t.key for t in e.targets), waiting),
        )
        return _Preempt(issued)

    # -- commit: apply the decisions to the cache -------------------------------------

    def _commit(self, e: Entry, outcome: _Outcome, result: CycleResult) -> None:
        cache = self._cache
        wl = e.workload
        key = wl.key
        if isinstance(outcome, _Admit):
            wl.admission = outcome.admission
            wl.admission_time = self._clock()
            cache.queues[e.cluster_queue].remove(key)
            cache.assume(wl, e.cluster_queue, outcome.usage)
            if self._usage is not None:
                self._usage.on_admit(wl, e.cluster_queue, outcome.usage)
            result.admitted.append(
                AdmittedDecision(wl, e.cluster_queue, outcome.admission, result.cycle)
            )
            result.changed = True
            self.stats["admissions"] += 1
            return
        assert e.status is not None
        if isinstance(outcome, _Preempt):
            for d in outcome.issued:
                cache.evicting[d.workload.key] = key
                if d.notice_deadline is not None:
                    cache.progress.notice(
                        d.workload.key,
                        Notice(self._clock(), d.notice_deadline, key, d.reason, d.message),
                    )
                result.preempted.append(d)
                self.stats["preemptions"] += 1
            cache.preemptors.add(key)
            cache.status[key] = e.status
            result.pending[key] = e.status
            q = cache.queues[e.cluster_queue]
            q.keep(wl)
            q.sticky = key
            result.changed = True
            return
        if outcome.no_longer_preempting:
            cache.preemptors.discard(key)
        cache.status[key] = e.status
        result.pending[key] = e.status
        strict = cache.cluster_queues[e.cluster_queue].queueing_strategy == STRICT_FIFO
        park = outcome.park
        if park and (e.park_even_if_strict or not strict):
            result.changed = True  # the next head differs
        # Scheduling equivalence (``equivalents``): workloads interchangeable with this
        # one cannot be admitted either; they are parked with it until the next
        # capacity event.
        cache.requeue(
            wl,
            e.cluster_queue,
            park=park,
            even_if_strict=e.park_even_if_strict,
            equivalents=outcome.equivalents,
        )


@dataclass(slots=True, frozen=True)
class _Admit:
    """Admit: the admission to write and the usage it charges."""

    admission: Admission
    usage: dict[FlavorResource, int]


@dataclass(slots=True, frozen=True)
class _Preempt:
    """Wait for victims: the preemptions newly issued (none when all are under way)."""

    issued: list[PreemptedDecision]


@dataclass(slots=True, frozen=True)
class _Requeue:
    """Stay pending: parked (BestEffortFIFO) or back in the heap, and whether
    interchangeable workloads are parked with it."""

    park: bool
    equivalents: bool = False
    no_longer_preempting: bool = False  # it gave up waiting for victims


_Outcome = _Admit | _Preempt | _Requeue

_FIT = AssignmentMode.FIT
_NEEDS_PREEMPTION = frozenset(m for m in AssignmentMode if m.needs_preemption)
_WAITING_FOR_QUOTA = PendingReason.WAITING_FOR_QUOTA

# The requeue outcomes, shared (frozen): thousands of heads a cycle end in one of them.
_PARK = _Requeue(park=True)
_PARK_EQUIVALENTS = _Requeue(park=True, equivalents=True, no_longer_preempting=True)
_BACK_TO_THE_HEAP = _Requeue(park=False)
