"""The quota tree's kept working copy (``CohortTree.working_copy``) in a tree of several
levels: handed out again it holds exactly the live tree's usage, refilled in place
(the same dicts every time, never the live tree's own)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from queues.model import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    ResourceGroup,
    ResourceQuota,
)
from queues.tree import CohortTree
from tests.support.tree_ops import charge

FR = ("default", "cpu")
QUEUES = ["a1", "a2", "b1", "top1"]


def _cq(name: str, cohort: str) -> ClusterQueue:
    return ClusterQueue(
        name=name,
        cohort=cohort,
        namespace_selector=LabelSelector(),
        resource_groups=[
            ResourceGroup(
                covered_resources=["cpu"],
                flavors=[FlavorQuotas("default", {"cpu": ResourceQuota(nominal=4000)})],
            )
        ],
    )


def three_levels() -> CohortTree:
    """top <- a <- (a1, a2); top <- b <- b1; top <- top1: two queues share every node
    of their path but themselves, two more share only the root."""
    cohorts = {"top": Cohort("top"), "a": Cohort("a", parent="top"), "b": Cohort("b", parent="top")}
    cqs = {c.name: c for c in (_cq("a1", "a"), _cq("a2", "a"), _cq("b1", "b"), _cq("top1", "top"))}
    return CohortTree(cqs, cohorts)


def usage(tree: CohortTree) -> dict[str, dict]:
    return {name: dict(n.usage) for name, n in (*tree.queues.items(), *tree.cohorts.items())}


def usage_dicts(tree: CohortTree) -> dict[str, dict]:
    return {name: n.usage for name, n in (*tree.queues.items(), *tree.cohorts.items())}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.booleans(),  # on the working copy (else on the live tree)
                st.sampled_from(QUEUES),
                st.integers(-6, 6),  # cpu to add (negative: remove)
            ),
            max_size=10,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_a_kept_working_copy_is_the_live_usage_refilled_in_place(cycles: list) -> None:
    tree = three_levels()
    held = dict.fromkeys(QUEUES, 0)  # what the live tree holds (removals stay valid)
    first = tree.working_copy()
    dicts = usage_dicts(first)
    tree.give_back(first)
    for ops in cycles:
        copy = tree.working_copy()
        assert copy is first
        assert usage(copy) == usage(tree.clone())
        assert usage_dicts(copy) == dicts and all(
            d is dicts[name] for name, d in usage_dicts(copy).items()
        )
        live = usage_dicts(tree)
        assert all(d is not live[name] for name, d in usage_dicts(copy).items())
        mine = dict(held)
        for on_copy, name, cpu in ops:
            target, acc = (copy, mine) if on_copy else (tree, held)
            charge(target, acc, name, cpu, FR)
        tree.give_back(copy)
    assert usage(tree.working_copy()) == usage(tree.clone())
