"""One scheduling cycle, exactly as Kueue runs it (docs/semantics.md §4.2).

1. Take one head per active ClusterQueue, and a snapshot of the quota tree
   (:mod:`admission.engine.snapshot`).
2. Nominate each head: namespace selector, LocalQueue state, flavor assignment (and,
   when the assignment needs it, the preemption search) against the snapshot
   (:mod:`admission.engine.nomination`).
3. Order the entries with the scheduler's ``EntryOrder`` (classical: preemptors,
   non-borrowing, higher priority, older; fair sharing: a tournament).
4. Process them in order against the snapshot, which holds this cycle's earlier
   admissions and preemptions: admit what still fits, issue preemptions, requeue the
   rest with a reason and a message that says in numbers what is short.
5. Commit the decisions to the cache (assume admissions, mark victims, requeue) and
   drop the snapshot.

The cycle returns decisions (:mod:`admission.engine.decisions`) and performs no I/O;
drivers apply them.

Scheduling refill (:class:`Refill`, the Configuration's ``schedulingRefill``, our
extension; off is Kueue's one head per ClusterQueue per cycle): after step 5, while the
last round admitted something, the cycle runs another round from step 1 on the cache it
has just committed to, so a ClusterQueue with free quota admits its next heads in the
same cycle. Each round is exactly the cycle that would run next with no event in
between (fair sharing, preemption and TAS see the earlier rounds' admissions as
committed), so the decisions equal those of back-to-back cycles (docs/semantics.md §4.2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING

from admission.engine import messages
from admission.engine.admission_checks import all_ready, sync_states
from admission.engine.cache import Cache
from admission.engine.decisions import (
    BACK_TO_THE_HEAP,
    PARK,
    PARK_EQUIVALENTS,
    Admit,
    AdmittedDecision,
    CycleResult,
    Outcome,
    Preempt,
    PreemptedDecision,
    Refill,
    Requeue,
    merge_round,
)
from admission.engine.faults import cannot_evaluate
from admission.engine.gc_pause import collector_paused
from admission.engine.nomination import Nominator, phantom_entries, reserve_placement
from admission.engine.ordering import Entry, EntryOrder, classical_order
from admission.engine.preemption.classical import Preemptor
from admission.engine.progress import Notice
from admission.engine.queue_manager import PendingStatus, same_status
from admission.engine.snapshot import Snapshot
from admission.engine.tas.domains import add_usage
from admission.engine.vocabulary import AssignmentMode, PendingReason
from queues.model import (
    ANY,
    NEVER,
    STRICT_FIFO,
    Admission,
    FlavorResource,
    PodSetAssignment,
)
from queues.quota_node import QuotaNode

if TYPE_CHECKING:
    from admission.engine.preemption.checkpoint import ProgressAware
    from admission.engine.usage import UsageTracker


log = logging.getLogger("quartermaster.engine")

_FIT = AssignmentMode.FIT
_NEEDS_PREEMPTION = frozenset(m for m in AssignmentMode if m.needs_preemption)
_WAITING_FOR_QUOTA = PendingReason.WAITING_FOR_QUOTA


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
        "_notices",
        "_nominator",
        "_refill",
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
        refill: Refill | None = None,
        kept_nominations: bool = True,
    ) -> None:
        """``explain``: format numeric explanations for pending workloads (drivers that
        never show them, the simulator, save the formatting).

        ``reserve_evicting_capacity`` (the Configuration's ``reserveEvictingCapacity``,
        our extension; off is Kueue's behaviour): in the cycle that issues preemptions,
        the victims' quota stays charged for everybody else; only their preemptor
        counts on it, so admitted plus evicting workloads never exceed any quota.

        ``refill`` (the Configuration's ``schedulingRefill``, our extension; None is
        Kueue's behaviour): the bounds of the rounds a cycle adds while it admits.
        ``kept_nominations``: admission.engine.verdicts (the same decisions either way)."""
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
        # with notice windows a reclaim waits out the victims' window: it is not free later
        self._notices = progress is not None and progress.policy.has_notices
        self._refill = refill
        self._nominator = Nominator(cache, self._preemptor, explain=explain, kept=kept_nominations)
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

    @property
    def refill(self) -> Refill | None:
        """Scheduling refill's bounds (None when off: Kueue's behaviour)."""
        return self._refill

    # -- the cycle ----------------------------------------------------------------

    def schedule(self) -> CycleResult:
        """One cycle: decide on a snapshot, then commit the decisions to the cache.

        Nothing in the cache changes until every head is decided; if anything raises
        before that, the heads go back to their queues and the cache (its tree's usage
        included) is exactly as it was. With refill, a refill round that raises is
        undone the same way and ends the cycle with the earlier rounds' decisions. The
        cyclic collector waits until the cycle is over (admission.engine.gc_pause)."""
        with collector_paused():
            return self._schedule()

    def _schedule(self) -> CycleResult:
        self.cycle_count += 1
        self.stats["cycles"] += 1
        result = CycleResult(cycle=self.cycle_count)
        admitted = self._round(result)
        refill = self._refill
        if refill is None:
            return result
        rounds = 0
        while admitted and rounds < refill.max_rounds and result.heads < refill.max_heads:
            rounds += 1
            part = CycleResult(cycle=result.cycle)
            try:
                admitted = self._round(part)
            except Exception:  # noqa: BLE001 - the earlier rounds are committed: hand them out
                log.exception("scheduling refill round %d of cycle %d failed", rounds, result.cycle)
                admitted = 0  # and what this round committed before it failed, if anything
            merge_round(result, part)
        return result

    def _round(self, result: CycleResult) -> int:
        """Kueue's cycle proper, committed into ``result``: how many it admitted."""
        cache = self._cache
        heads: list[Entry] = []
        queues, inactive, preemptors = cache.queues, cache.inactive, cache.preemptors
        lq_order = self._lq_order
        by_cq = lq_order is _no_lq_order  # (no LocalQueue order to ask each queue for)
        phantoms = phantom_entries(cache, wake_all=self._notices)  # (a short head holds quota)
        # Only the queues that got a head since a cycle last found them empty: a cycle
        # in a cluster of 5,000 ClusterQueues with work in a few costs those few.
        for name in sorted(cache.with_heads):
            q = queues.get(name)
            if q is None:
                cache.with_heads.discard(name)
                continue
            if name in inactive:
                continue
            wl = q.take_head(None if by_cq else lq_order(name))  # stays queued until committed
            if wl is None:
                cache.with_heads.discard(name)  # it joins again when it gets a head
                continue
            heads.append(Entry(wl, name, preemptor=wl.key in preemptors))
        result.heads += len(heads)
        if not heads and not phantoms:
            return 0
        snap: Snapshot | None = None
        try:
            snap = self._nominator.snap = Snapshot(cache.tree)
            nominate, process, commit = self._nominator.nominate, self._process, self._commit
            for e in heads:
                try:
                    nominate(e, snap)
                except Exception as err:  # noqa: BLE001 - one head never stops the cycle
                    cannot_evaluate(cache, e, err)
            self.stats["nominations"] += len(heads)
            cycle = result.cycle
            entries = [*heads, *(e for e, _ in phantoms.values())] if phantoms else heads
            decided: list[tuple[Entry, Outcome]] = []
            for e in self._order(entries, snap.tree):
                phantom = phantoms.get(e.workload.key) if phantoms else None
                if phantom is not None:
                    try:
                        if not self._nominator.phantom_turn(e, snap, phantom[1]):
                            continue  # it would go back to its queue: it stays parked
                    except Exception as err:  # noqa: BLE001 - one head never stops the cycle
                        cannot_evaluate(cache, e, err)
                    self.stats["nominations"] += 1
                decided.append((e, process(e, snap, cycle)))
            for e, outcome in decided:
                commit(e, outcome, result)
            return sum(isinstance(outcome, Admit) for _, outcome in decided)
        except BaseException:
            # Heads not committed are still in their queues (taken, not removed); one
            # that is neither there nor admitted goes back.
            for e in heads:
                key = e.workload.key
                if key not in cache.admitted and key not in cache.queues[e.cluster_queue]:
                    cache.queues[e.cluster_queue].push(e.workload)
            raise
        finally:
            self._nominator.snap = None
            if snap is not None:
                snap.release()

    # -- processing: decide against the snapshot ------------------------------------

    def _process(self, e: Entry, snap: Snapshot, cycle: int, recomputed: bool = False) -> Outcome:
        """Kueue's processEntry: admit, preempt, or requeue with a reason. Changes only
        the snapshot; what it returns is committed to the cache after the last entry.

        When quota still fits but the TAS placement chosen at nomination no longer does
        (an earlier entry of this cycle took its nodes), the assignment is recomputed
        once on what is left, with the nominated flavors (Kueue's
        TASRecomputeAssignmentWithinSchedulingCycle), and the entry is processed anew."""
        if e.status is not None:
            return PARK
        a = e.assignment
        assert a is not None
        mode = a.mode
        quota_ok = mode is _FIT and not e.targets  # most heads: fitted at nomination, no victims
        if quota_ok:  # _still_fits's first answer, without the rest of the way there
            short = _short_on(snap.tree.queues[e.cluster_queue], a.usage)
            if short:
                return self._no_longer_fits(e, snap, short)
        preempting = mode in _NEEDS_PREEMPTION and bool(e.targets)
        if mode != _FIT and not preempting:
            if mode != AssignmentMode.NO_FIT:  # preemption was needed, and found nobody
                self._reserve_unreclaimable(e, snap)
            reason = a.reason or _WAITING_FOR_QUOTA
            e.status = same_status(self._cache.status, e.workload.key, reason, a.message)
            return PARK_EQUIVALENTS
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
                return BACK_TO_THE_HEAP
            reserve_placement(e)
        short, on_topology = self._still_fits(e, snap, quota_ok=quota_ok)
        if short and on_topology and not recomputed:
            self._nominator.nominate(
                e, snap, only_flavors=frozenset(f for p in a.pod_sets for f in p.flavors.values())
            )
            return self._process(e, snap, cycle, recomputed=True)
        if short:
            return self._no_longer_fits(e, snap, short)
        if preempting:
            return self._issue_preemptions(e, snap, cycle)
        snap.tree.add_usage(e.cluster_queue, a.usage)  # later entries see this admission
        self._cache.topology_assume(e.workload, a.pod_sets, snap.tas)  # and its topology placement
        return Admit(
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

    def _no_longer_fits(self, e: Entry, snap: Snapshot, short: str) -> Requeue:
        """An entry whose quota an earlier entry of the cycle took: back to the heap,
        "no longer fits" (the status it already has when that says the same)."""
        if self._notices:  # a later entry takes it, to be reclaimed after a notice window
            spec = self._cache.cluster_queues[e.cluster_queue]
            if spec.preemption.reclaim_within_cohort != NEVER:
                self._reserve_quota(e, snap)
        e.status = same_status(
            self._cache.status, e.workload.key, _WAITING_FOR_QUOTA, messages.no_longer_fits(short)
        )
        return BACK_TO_THE_HEAP

    def _still_fits(self, e: Entry, snap: Snapshot, *, quota_ok: bool = False) -> tuple[str, bool]:
        """Kueue's fits(): the entry's usage fits once every workload preempted earlier
        in this cycle and the entry's own targets are counted as released (``quota_ok``:
        the quota of an entry without targets is known to fit).

        Returns ("", False) when it fits, else what is short (for the pending message)
        and whether it is the TAS placement (quota fits)."""
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
            short = "" if quota_ok else _short_on(node, a.usage)
        if short:
            return short, False
        if not targets:  # placed at nomination: do the pods still fit their domains?
            short = cache.topology_still_fits(e.workload, a.pod_sets, snap.tas)
            return short, bool(short)
        if a.placement is not None and any(p.topology is not None for p in a.pod_sets):
            # a preemptor: does its placement still fit once this cycle's victims and its
            # own are gone, around what earlier entries hold?
            gone = a.placement.released([*snap.victims, *(t.key for t in targets)])
            extra = {pool: dict(per) for pool, per in snap.tas.items()}
            for pool, per_leaf in gone.items():
                dest = extra.setdefault(pool, {})
                for key, usage in per_leaf.items():
                    left = dict(dest.get(key, {}))
                    add_usage(left, usage, -1)
                    dest[key] = left
            short = cache.topology_still_fits(e.workload, a.pod_sets, extra)
            return short, bool(short)
        return "", False

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
        # its TAS placement on empty nodes too (Kueue's resourcesToReserve, TAS part)
        self._cache.topology_assume(e.workload, a.pod_sets, snap.tas)
        self._reserve_quota(e, snap)

    def _reserve_quota(self, e: Entry, snap: Snapshot) -> None:
        """Hold the quota ``e`` would need, capped by what its ClusterQueue may use."""
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

    def _issue_preemptions(self, e: Entry, snap: Snapshot, cycle: int) -> Preempt:
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
        # and its TAS placement (its victims gone), for the rest of the cycle
        cache.topology_assume(wl, a.pod_sets, snap.tas)
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
        return Preempt(issued)

    # -- commit: apply the decisions to the cache -------------------------------------

    def _commit(self, e: Entry, outcome: Outcome, result: CycleResult) -> None:
        cache = self._cache
        wl = e.workload
        key = wl.key
        if outcome is BACK_TO_THE_HEAP and cache.wake_index is None:
            # what the end of this method does for it, without the questions that only
            # matter when parking (nothing else changes)
            status = e.status
            assert status is not None
            cache.status[key] = result.pending[key] = status
            cache.requeue(wl, e.cluster_queue, park=False)
            return
        if isinstance(outcome, Admit):
            wl.admission = outcome.admission
            wl.admission_time = self._clock()
            checks = cache.checks_for(e.cluster_queue, outcome.admission)
            if checks or wl.admission_checks:
                wl.admission_checks = sync_states(wl.admission_checks, checks, wl.admission_time)[0]
            wl.admitted = all_ready(wl.admission_checks, checks)
            cache.queues[e.cluster_queue].remove(key)
            cache.assume(wl, e.cluster_queue, outcome.usage)
            if self._usage is not None:
                self._usage.on_admit(wl, e.cluster_queue, outcome.usage)
            result.admitted.append(
                AdmittedDecision(wl, e.cluster_queue, outcome.admission, result.cycle, checks)
            )
            result.changed = True
            self.stats["admissions"] += 1
            return
        assert e.status is not None
        if isinstance(outcome, Preempt):
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
