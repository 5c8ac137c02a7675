"""The working copy of the cohort tree a cycle keeps is what a fresh clone would be.

Cycles reuse one working copy of the tree instead of cloning it every time; however the
cycle and the live tree changed since, the kept copy must equal a fresh clone, never be
handed out twice, and the cyclic garbage collector must wait for the cycle and be
restored after it.
"""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.engine.scheduler import Scheduler
from queues.tree import CohortTree
from tests.support.tree_ops import charge
from tests.unit.engine._support import cq, make_cache, usage_of_tree, workload

# -- the kept working copy of the tree is a clone, however both sides changed ---------


def tree_of_two_cohorts() -> CohortTree:
    cqs = {
        c.name: c
        for c in (cq("a1", 4, cohort="a"), cq("a2", 4, cohort="a"), cq("b1", 4, cohort="b"))
    }
    return CohortTree(cqs, {})


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.booleans(),  # on the working copy (else on the live tree)
                st.sampled_from(["a1", "a2", "b1"]),
                st.integers(-6, 6),  # cpu to add (negative: remove)
            ),
            max_size=8,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_a_kept_working_copy_is_what_a_fresh_clone_would_be(cycles: list) -> None:
    """Each "cycle" takes the working copy, changes it and the live tree at will and
    gives it back; the next one must start from exactly the live tree's usage (only
    changed paths are re-copied, so this is what could go wrong)."""
    tree = tree_of_two_cohorts()
    fr = ("default", "cpu")
    held = {"a1": 0, "a2": 0, "b1": 0}  # what the live tree holds (removals stay valid)
    for ops in cycles:
        copy = tree.working_copy()
        assert usage_of_tree(copy) == usage_of_tree(tree.clone())
        mine = dict(held)
        for on_copy, name, cpu in ops:
            target, acc = (copy, mine) if on_copy else (tree, held)
            charge(target, acc, name, cpu, fr)
            if on_copy and cpu % 3 == 0:
                with copy.scratch():  # searches try removals and undo them
                    copy.remove_usage(name, {fr: mine[name] * 1000})
        tree.give_back(copy)
    assert usage_of_tree(tree.working_copy()) == usage_of_tree(tree.clone())


def test_a_working_copy_in_use_is_not_handed_out_twice() -> None:
    tree = tree_of_two_cohorts()
    first = tree.working_copy()
    second = tree.working_copy()  # the kept one is out: a fresh clone
    assert second is not first
    first.add_usage("a1", {("default", "cpu"): 1000})
    assert usage_of_tree(second) == usage_of_tree(tree)
    tree.give_back(second)  # not the kept one: nothing changes
    tree.give_back(first)
    assert tree.working_copy() is first
    assert usage_of_tree(first) == usage_of_tree(tree)


def test_the_collector_waits_for_the_cycle_and_is_restored_after_it() -> None:
    """The cyclic collector is off during a cycle (its short-lived containers are freed
    by reference counting) and as it was afterwards: on after a cycle, still off for a
    caller that had turned it off (``plan``), on again after a cycle that raised."""
    cache = make_cache(cq("cq", 10))
    seen: list[bool] = []
    sched = Scheduler(cache, clock=lambda: seen.append(gc.isenabled()) or 0.0)
    cache.add_workload(workload("a", "cq", 1))
    assert gc.isenabled()
    sched.schedule()
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        cache.add_workload(workload("b", "cq", 1))
        sched.schedule()
        assert not gc.isenabled()
    finally:
        gc.enable()

    def boom() -> float:
        raise RuntimeError("clock")

    failing = Scheduler(cache, clock=boom)
    cache.add_workload(workload("c", "cq", 1))
    with pytest.raises(RuntimeError):
        failing.schedule()
    assert gc.isenabled()
