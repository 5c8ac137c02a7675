"""A ClusterQueue or Cohort edit unlinks the quota tree it replaces, and decides nothing
differently for it (``CohortTree.retire``).

The replaced tree and its kept working copy are freed by reference counting, without
the cyclic collector (which, with the heap frozen, would only free them at a
compaction). What may still hold their nodes — flavor assigners and kept answers,
the wake index of ``parkUntilFeasible``, a cycle's snapshot taken before the edit —
must decide exactly as with a tree left linked: random event streams with quota edits
are played both ways, with and without bounded parking, and so is a cycle during which
the tree is replaced.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings

from admission.config.load import parse_config
from admission.engine.build import build_scheduler
from admission.engine.cache import Cache
from admission.engine.ordering import classical_order
from admission.engine.scheduler import Scheduler
from queues.model import ClusterQueue, Cohort, LocalQueue, ResourceFlavor
from queues.tree import CohortTree
from tests.support.collector import collector_off
from tests.unit.engine._support import cq as cpu_queue
from tests.unit.engine.test_feasibility import _cpu, bounded_world, play_bounded
from tests.unit.engine.test_kept_nominations import _Run, worlds


def _never_unlinked() -> Any:
    """Replaced trees are left linked (``retire`` does nothing)."""
    return mock.patch.object(CohortTree, "retire", lambda self: None)


def _pool() -> tuple[dict[str, ClusterQueue], Cache, Scheduler]:
    """Cohort ``pool`` of ``a`` and ``b`` (4 cpu each), ``c`` alone (2 cpu): the cohort
    full, a preemptor and parked heads waiting, the kept working copy and the flavor
    assigners built."""
    cqs = {
        "a": cpu_queue("a", 4, cohort="pool", within_cluster_queue="LowerPriority"),
        "b": cpu_queue("b", 4, cohort="pool"),
        "c": cpu_queue("c", 2),
    }
    cache = Cache(
        flavors={"default": ResourceFlavor(name="default")},
        cluster_queues=cqs,
        cohorts={"pool": Cohort(name="pool")},
        local_queues={
            f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs
        },
    )
    sched = build_scheduler(
        parse_config({"parkUntilFeasible": True}).engine_policy(), cache, clock=lambda: 0.0
    )
    for i in range(6):
        cache.add_workload(_cpu("a", f"a{i}", 2, float(i)))
        cache.add_workload(_cpu("c", f"c{i}", 1, float(i)))
    cache.add_workload(_cpu("b", "b0", 3, 10.0))
    while sched.schedule().changed:
        pass
    return cqs, cache, sched


def _edited(cqs: dict[str, ClusterQueue], name: str, cpu: int) -> dict[str, ClusterQueue]:
    spec = cqs[name]
    return {**cqs, name: cpu_queue(name, cpu, cohort=spec.cohort)}


def test_a_cluster_queue_edit_leaves_no_cyclic_garbage() -> None:
    """The replaced tree, its kept working copy and their nodes are freed by reference
    counting alone, and nothing of theirs is left for the collector."""
    cqs, cache, sched = _pool()
    with collector_off():
        old = weakref.ref(cache.tree)
        cache.update_objects(cluster_queues=_edited(cqs, "b", 6))
        assert old() is None
        sched.schedule()  # the assigners and kept answers of the old nodes are replaced
        assert gc.collect() == 0


def test_a_snapshot_taken_before_an_edit_decides_on_and_is_freed_when_given_back() -> None:
    """A cycle during which the tree is replaced (its snapshot taken from the old one)
    decides as with the old tree left linked; the old working copy it decided on is
    unlinked when the cycle gives it back, and freed then by reference counting."""

    def play() -> tuple[list[tuple[Any, ...]], bool]:
        cqs, cache, _ = _pool()
        decided_on: list[weakref.ref[CohortTree]] = []

        def order_with_an_edit(entries: Any, tree: CohortTree) -> Any:
            if not decided_on:
                decided_on.append(weakref.ref(tree))
                cache.update_objects(cluster_queues=_edited(cqs, "b", 6))
            return classical_order(entries, tree)

        sched = Scheduler(cache, clock=lambda: 0.0, order=order_with_an_edit)
        for key in ("ns-b/b0", "ns-c/c0"):  # a may borrow what b held
            cache.finish(key)
        log: list[tuple[Any, ...]] = []
        with collector_off():
            for _ in range(3):
                r = sched.schedule()
                log.append(
                    (
                        sorted((d.workload.key, d.cluster_queue) for d in r.admitted),
                        sorted((p.workload.key, p.by) for p in r.preempted),
                        sorted((k, s.reason, s.message) for k, s in r.pending.items()),
                    )
                )
            freed = bool(decided_on) and decided_on[0]() is None
        return log, freed

    log, freed = play()
    with _never_unlinked():
        linked_log, _ = play()
    assert log == linked_log
    assert log[0][0], "the cycle admitted nothing: the edit was not mid-decision"
    assert freed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_edits_with_kept_nominations_decide_as_with_trees_left_linked(w: tuple) -> None:
    """Kueue's parking (no wake index), kept answers and assigners on: every cycle's
    decisions and every queue are the same either way."""
    cqs, cohorts, ops, explain = w

    def play() -> list[object]:
        run = _Run(cqs, cohorts, kept=True, explain=explain)
        return [run.apply(op) for op in ops]

    unlinked = play()
    with _never_unlinked():
        linked = play()
    assert unlinked == linked


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bounded_world())
def test_edits_with_bounded_parking_decide_as_with_trees_left_linked(w: tuple) -> None:
    """``parkUntilFeasible``: heads parked with evidence on the old tree's nodes."""
    cqs, cohorts, ops = w
    unlinked = play_bounded(cqs, cohorts, ops, check=False)
    with _never_unlinked():
        linked = play_bounded(cqs, cohorts, ops, check=False)
    assert unlinked == linked
