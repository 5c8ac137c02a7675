"""The cycle's shortcuts decide exactly what the general paths decide.

A cycle at 5,000 ClusterQueues takes shortcuts for the common head (docs/benchmarks.md,
``cycle-5k``): one podSet is assigned without working out units of assignment, a
resource group of one flavor without comparing candidates, the TAS step is skipped
when there is nothing to place, each ClusterQueue's admitted workloads
are read once per cycle for every victim search (and a queue with nobody of a lower
priority is skipped), a search under ``borrowWithinCohort: Never`` that would borrow
whatever it took from its own queue tries no other queue's workloads, a victim search
takes its candidates in order from rows kept sorted instead of listing and sorting them
all, the scheduler reuses the oracle's victim search, and a Cohort keeps what it has available until its
tree's usage changes. Each
shortcut has a seam; :func:`general_paths` replaces every one of them with the general
path it stands for, and the tests run the same random worlds both ways and compare
every decision, pending status and message (``explain=True``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine.assignment import Assignment
from admission.engine.cache import Cache
from admission.engine.flavors import FlavorAssigner
from admission.engine.preemption.classical import Preemptor
from admission.engine.scheduler import Scheduler
from admission.engine.snapshot import Snapshot
from queues.model import FlavorResource, LocalQueue, PodSet, ResourceFlavor, Workload
from queues.quota_node import QuotaNode
from queues.tree import CohortTree
from tests.unit.engine.test_engine_properties import FLAVORS, world
from tests.unit.engine.test_preemption_properties import (
    _filled,
    _workload,
    assert_candidates_as_classified,
    workload_of,
)

_fast_admitted_rows = Preemptor.admitted_rows
_fast_targets = Preemptor.targets


def _units_always(
    self: FlavorAssigner, wl: Workload, counts: object, assumed: dict, out: Assignment
) -> None:
    self._assign_units(wl, counts, assumed, out)  # type: ignore[arg-type]


def _best_flavor_always(self: FlavorAssigner, *args: object) -> object:
    return self._best_flavor(*args)  # type: ignore[arg-type]


def _placement_always(self: FlavorAssigner, _wl: Workload) -> bool:
    return self.topology is not None


def _rows_every_time(self: Preemptor, snap: Snapshot, cq_name: str) -> object:
    snap.admitted_rows.pop(cq_name, None)  # read from the cache again, for every search,
    self.cache._rows.pop(cq_name, None)  # and built again there
    return _fast_admitted_rows(self, snap, cq_name)


def _search_every_time(self: Preemptor, snap: Snapshot, *args: object, **kw: object) -> object:
    snap.searches = None  # never the oracle's answer: search again
    return _fast_targets(self, snap, *args, **kw)  # type: ignore[arg-type]


_kept_available = QuotaNode.available


def _available_every_time(self: QuotaNode, fr: FlavorResource) -> int:
    path = list(self.path_to_root())  # the whole path, never a kept value
    value = _kept_available(path[-1], fr)
    for node in reversed(path[:-1]):
        value = node._available_with(value, fr)
    return value


def _never_hopeless(self: Preemptor, *_args: object) -> bool:
    return False  # every search tries reclaiming from other queues


def _eager_candidates(self: Preemptor, *_args: object) -> None:
    return None  # every search lists and sorts all of its candidates


@contextmanager
def general_paths() -> Iterator[None]:
    """Every shortcut replaced by the general path it stands for."""
    with ExitStack() as stack:
        for owner, name, general in (
            (FlavorAssigner, "_assign_pod_sets", _units_always),
            (FlavorAssigner, "_only_flavor", _best_flavor_always),
            (FlavorAssigner, "_needs_placement", _placement_always),
            (Preemptor, "admitted_rows", _rows_every_time),
            (Preemptor, "targets", _search_every_time),
            (QuotaNode, "available", _available_every_time),
            (Preemptor, "_borrows_after_own_removals", _never_hopeless),
            (Preemptor, "_ordered_candidates", _eager_candidates),
        ):
            stack.enter_context(mock.patch.object(owner, name, general))
        yield


def _pod_sets(seq: int, count: int, cpu: int, gpu: int) -> list[PodSet]:
    """One podSet, or (every third workload) two: a launcher and its workers; every
    fourth may be admitted partially (minCount 1)."""
    main = PodSet(
        name="main",
        count=count + 1 if seq % 4 == 1 else count,
        requests={"cpu": cpu * 1000, "nvidia.com/gpu": gpu},
        min_count=1 if seq % 4 == 1 else None,
    )
    if seq % 3:
        return [main]
    return [PodSet(name="launcher", count=1, requests={"cpu": 500}), main]


def decisions(cqs: dict, cohorts: dict, ops: list) -> list[tuple]:
    """Everything the cycles of one random world decide and say, in order."""
    flavors = {f: ResourceFlavor(name=f) for f in FLAVORS}
    lqs = {f"ns-{n}/lq": LocalQueue(namespace=f"ns-{n}", name="lq", cluster_queue=n) for n in cqs}
    cache = Cache(flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs)
    sched = Scheduler(cache, explain=True)
    log: list[tuple] = []
    seq = 0
    for op in ops:
        if op[0] in ("submit", "burst"):
            if op[0] == "submit":
                _, cq, count, cpu, gpu, prio = op
                targets = [(cq, prio)]
            else:
                _, count, cpu, gpu = op
                targets = [(cq, (seq + i) % 3) for i, cq in enumerate(sorted(cqs))]
            for cq, prio in targets:
                seq += 1
                cache.add_workload(workload_of(cq, seq, _pod_sets(seq, count, cpu, gpu), prio))
        elif op[0] == "cycle":
            r = sched.schedule()
            log.append(("heads", r.heads, r.changed))
            log.append(
                ("admitted", [(d.workload.key, d.cluster_queue, d.admission) for d in r.admitted])
            )
            log.append(
                (
                    "preempted",
                    [
                        (p.workload.key, p.cluster_queue, p.by, p.reason, p.message)
                        for p in r.preempted
                    ],
                )
            )
            log.append(("pending", {k: (s.reason, s.message) for k, s in r.pending.items()}))
            for p in r.preempted:
                cache.evicted(p.workload.key)
        elif op[0] == "finish":
            admitted = sorted(cache.admitted)
            if admitted:
                cache.finish(admitted[op[1] % len(admitted)])
        elif op[0] == "quota":
            _, cq, nominal = op
            spec = cqs[cq]
            group = spec.resource_groups[0]
            first = group.flavors[0]
            resources = {
                r: replace(q, nominal=nominal * (1000 if r == "cpu" else 1), lending_limit=None)
                for r, q in first.resources.items()
            }
            flavors_now = [replace(first, resources=resources), *group.flavors[1:]]
            cqs = {**cqs, cq: replace(spec, resource_groups=[replace(group, flavors=flavors_now)])}
            cache.update_objects(cluster_queues=cqs)
    log.append(("status", {k: (s.reason, s.message) for k, s in sorted(cache.status.items())}))
    log.append(
        ("groups", {k: (s.reason, s.message) for k, s in sorted(cache.group_status.items())})
    )
    log.append(("admitted at the end", sorted(cache.admitted.items())))
    return log


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_shortcuts_decide_and_explain_as_the_general_paths(w: tuple) -> None:
    cqs, cohorts, ops = w
    fast = decisions(cqs, cohorts, ops)
    with general_paths():
        general = decisions(cqs, cohorts, ops)
    assert fast == general


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.data())
def test_admitted_rows_kept_for_the_cycle_give_every_search_its_candidates(
    w: tuple, data: st.DataObject
) -> None:
    """The rows are read once per snapshot; later searches of the same cycle, by
    preemptors of other priorities and after victims were taken, still list exactly
    the workloads (and variants, in order) that classifying each one gives."""
    cqs, _, _ = w
    cache, seq = _filled(w)
    snap = Snapshot(cache.tree)
    pre = Preemptor(cache)
    admitted = sorted(cache.admitted)
    for _ in range(3):
        cq = data.draw(st.sampled_from(sorted(cqs)))
        flavor = cqs[cq].resource_groups[0].flavors[0].name
        preemptor = _workload(cq, 9999, 1, 1, 0, data.draw(st.integers(0, 3)))
        preemptor.creation_time = data.draw(st.floats(0, float(seq + 1)))
        frs = {(flavor, "cpu")}
        advantage = data.draw(st.booleans())
        assert_candidates_as_classified(pre, snap, preemptor, cq, sorted(cqs), frs, advantage)
        if admitted:  # the next search runs after this one took a victim
            snap.victims.add(data.draw(st.sampled_from(admitted)))


def _available_now(tree: CohortTree) -> dict[tuple[str, FlavorResource], int]:
    """What every ClusterQueue has available, kept values used where valid..."""
    frs = [(f, r) for f in FLAVORS for r in ("cpu", "nvidia.com/gpu")]
    return {(n, fr): node.available(fr) for n, node in tree.queues.items() for fr in frs}


def _available_fresh(tree: CohortTree) -> dict[tuple[str, FlavorResource], int]:
    """... and worked out along the whole path, ignoring them."""
    with mock.patch.object(QuotaNode, "available", _available_every_time):
        return _available_now(tree)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.data())
def test_kept_available_follows_every_change_of_usage(w: tuple, data: st.DataObject) -> None:
    """Usage changes of every kind a cycle makes (charges, releases, a search's scratch
    block and its restore, reserveEvictingCapacity's keep-larger block, the next
    cycle's working copy) leave no stale kept value behind."""
    cache, _ = _filled(w)
    snap = Snapshot(cache.tree)
    tree = snap.tree
    keys = sorted(cache.admitted)
    assert _available_now(tree) == _available_fresh(tree)
    if not keys:
        return
    for _ in range(6):
        key = data.draw(st.sampled_from(keys))
        cq, usage = cache.admitted[key], cache.usage_of[key]
        step = data.draw(st.sampled_from(["remove", "add", "scratch", "keep_larger"]))
        if step == "remove":
            tree.remove_usage(cq, usage)
        elif step == "add":
            tree.add_usage(cq, usage)
        else:
            with tree.scratch() if step == "scratch" else tree.keep_larger():
                tree.remove_usage(cq, usage)
                assert _available_now(tree) == _available_fresh(tree)
                tree.add_usage(data.draw(st.sampled_from(sorted(tree.queues))), usage)
                assert _available_now(tree) == _available_fresh(tree)
        assert _available_now(tree) == _available_fresh(tree), step
    snap.release()
    cache.finish(keys[0])  # the live tree changes: the next cycle's copy follows it
    again = Snapshot(cache.tree)
    assert _available_now(again.tree) == _available_fresh(again.tree)
    again.release()
