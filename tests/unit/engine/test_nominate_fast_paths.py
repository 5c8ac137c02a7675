"""The per-head shortcuts of nomination and processing decide exactly what the general
paths decide (issue 16, ``cycle-5k`` deep: 5,000 heads a cycle, ~150 admitted).

The shortcuts: a workload of one podSet that simply fits a ClusterQueue of one flavor
is assigned without candidates (``FlavorAssigner._assign_fitting``); a ClusterQueue of
one resource group skips building and sorting a dictionary of groups
(``_resource_groups_of``); the tree's ``_available_with`` and
``height_of_lowest_subtree_that_fits`` are written out instead of calling the small
methods they stand for; and the "no longer fits" texts are made once per distinct
shortage and shared. Each test replaces a shortcut by the general path (or by the
code it was written from) and compares every decision, status and message of random
worlds (``explain=True``), or the values themselves, both ways.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.engine import messages
from admission.engine.flavors import FlavorAssigner
from queues.model import FlavorResource
from queues.quantity import format_quantity
from queues.quota_node import BorrowingLevel, QuotaNode
from tests.unit.engine.test_cycle_fast_paths import decisions, general_paths
from tests.unit.engine.test_engine_properties import FLAVORS, RESOURCES, world
from tests.unit.engine.test_preemption_properties import _filled


def _no_fitting_shortcut(self: FlavorAssigner, *_args: object) -> None:
    return None


def _groups_worked_out(self: FlavorAssigner, _requests: object) -> None:
    return None


# -- the code the tree's written-out methods were written from -------------------------


def _available_with_by_methods(self: QuotaNode, parent_available: int, fr: FlavorResource) -> int:
    q = self.quotas.get(fr)
    if q is not None and q.borrowing_limit is not None:
        headroom = self._headroom(fr, q.borrowing_limit)
        if headroom < parent_available:
            parent_available = headroom
    return self.local_available(fr) + parent_available


def _height_by_methods(self: QuotaNode, fr: FlavorResource, val: int) -> BorrowingLevel:
    if self.parent is None or not self.borrowing_with(fr, val):
        return BorrowingLevel(0, self.parent is not None)
    remaining = val - self.local_available(fr)
    node: QuotaNode | None = self.parent
    while node is not None:
        if not node.borrowing_with(fr, remaining):
            return BorrowingLevel(node.height(), node.parent is not None)
        remaining -= node.local_available(fr)
        node = node.parent
    return BorrowingLevel(self.root().height(), False)


def _no_longer_fits_formatted(why: str) -> str:
    return f"{messages.NO_LONGER_FITS}: {why}"


def _short_formatted(fr: FlavorResource, requested: int, left: int) -> str:
    r = fr[1]
    return (
        f"{r} on flavor {fr[0]}: requested {format_quantity(r, requested)}, "
        f"{format_quantity(r, max(0, left))} left after this cycle's earlier admissions"
    )


@contextmanager
def general_nomination() -> Iterator[None]:
    """The earlier shortcuts' general paths, and every shortcut of this file's too."""
    with ExitStack() as stack:
        stack.enter_context(general_paths())
        for owner, name, general in (
            (FlavorAssigner, "_assign_fitting", _no_fitting_shortcut),
            (FlavorAssigner, "_resource_groups_of", _groups_worked_out),
            (QuotaNode, "_available_with", _available_with_by_methods),
            (QuotaNode, "height_of_lowest_subtree_that_fits", _height_by_methods),
            (messages, "no_longer_fits", _no_longer_fits_formatted),
            (messages, "short_after_earlier_admissions", _short_formatted),
        ):
            stack.enter_context(mock.patch.object(owner, name, general))
        yield


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_nomination_shortcuts_decide_and_explain_as_the_general_paths(w: tuple) -> None:
    cqs, cohorts, ops = w
    fast = decisions(cqs, cohorts, ops)
    with general_nomination():
        general = decisions(cqs, cohorts, ops)
    assert fast == general


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_fitting_shortcut_gives_the_general_assignment(w: tuple) -> None:
    """For every ClusterQueue and every workload of the world, at the tree the world's
    cycles left: the same Assignment, field by field, whether the shortcut answers or
    gives up (it must give up on whatever does not simply fit)."""
    cache, _ = _filled(w)
    tree = cache.tree
    workloads = [wl for wl in cache.workloads.values() if len(wl.pod_sets) == 1]
    for name, spec in sorted(cache.cluster_queues.items()):
        assigner = FlavorAssigner(
            cq=spec, node=tree.queues[name], flavors=cache.flavors, explain=True
        )
        for wl in workloads:
            fast = assigner.assign(wl)
            with mock.patch.object(FlavorAssigner, "_assign_fitting", _no_fitting_shortcut):
                general = assigner.assign(wl)
            assert fast == general, (name, wl.key)
            for counts in ({wl.pod_sets[0].name: 1}, {wl.pod_sets[0].name: 0}):
                fast = assigner.assign(wl, counts)
                with mock.patch.object(FlavorAssigner, "_assign_fitting", _no_fitting_shortcut):
                    general = assigner.assign(wl, counts)
                assert fast == general, (name, wl.key, counts)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world(), st.integers(0, 30_000))
def test_written_out_tree_arithmetic_is_the_methods_arithmetic(w: tuple, val: int) -> None:
    """available and the borrowing level of every node, resource and a request, at
    the usage the world's cycles left (lending limits, borrowing limits, nodes over
    their quota after a quota cut), as the small methods they were written from."""
    cache, _ = _filled(w)
    tree = cache.tree
    frs = [(f, r) for f in FLAVORS for r in RESOURCES]
    nodes = [*tree.cohorts.values(), *tree.queues.values()]
    for node in nodes:
        for fr in frs:
            for v in (val, val // 1000, 0):
                assert node.height_of_lowest_subtree_that_fits(fr, v) == _height_by_methods(
                    node, fr, v
                ), (node, fr, v)
            if node.parent is not None:
                above = node.parent.available(fr)
                assert node._available_with(above, fr) == _available_with_by_methods(
                    node, above, fr
                ), (node, fr)


def test_shortage_texts_are_shared_and_their_table_stays_bounded() -> None:
    fr = ("default", "cpu")
    first = messages.short_after_earlier_admissions(fr, 2000, -5)
    assert first == _short_formatted(fr, 2000, -5)
    assert (
        first == "cpu on flavor default: requested 2, 0 left after this cycle's earlier admissions"
    )
    assert messages.short_after_earlier_admissions(fr, 2000, 0) is first  # made once
    assert messages.no_longer_fits(first) == _no_longer_fits_formatted(first)
    assert messages.no_longer_fits(first) is messages.no_longer_fits(first)
    for left in range(2 * messages._WORDED_LIMIT):  # more distinct texts than the table holds
        text = messages.short_after_earlier_admissions(fr, 2000, left)
        assert text == _short_formatted(fr, 2000, left)
        assert messages.no_longer_fits(text) == _no_longer_fits_formatted(text)
    assert len(messages._short_worded) <= messages._WORDED_LIMIT
    assert len(messages._no_longer_fits_worded) <= messages._WORDED_LIMIT
