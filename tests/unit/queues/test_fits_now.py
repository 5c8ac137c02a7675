"""``QuotaNode.fits_now``: the one answer of the engine's single-flavor paths (a head's
assignment, a kept answer, a woken head) to "do these requests fit now, and at which
borrowing level", checked against the node's own questions it is made of."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from queues.model import ClusterQueue, Cohort, FlavorQuotas, ResourceGroup, ResourceQuota
from queues.tree import CohortTree

CPU = ("default", "cpu")
MEM = ("default", "memory")


def _tree(nominal: int, limit: int | None, sibling: int) -> CohortTree:
    def cq(name: str, quota: int, bl: int | None) -> ClusterQueue:
        quotas = {
            "cpu": ResourceQuota(nominal=quota, borrowing_limit=bl),
            "memory": ResourceQuota(nominal=quota),
        }
        group = ResourceGroup(["cpu", "memory"], [FlavorQuotas("default", quotas)])
        return ClusterQueue(name=name, cohort="team", resource_groups=[group])

    cqs = {"a": cq("a", nominal, limit), "b": cq("b", sibling, None)}
    return CohortTree(cqs, {"team": Cohort("team", parent="org"), "org": Cohort("org")})


def test_within_own_quota_borrowing_and_short() -> None:
    tree = _tree(nominal=10, limit=5, sibling=10)
    a = tree.queues["a"]
    assert a.fits_now([(CPU, 4), (MEM, 2)]) == (0, None)
    assert a.fits_now([(CPU, 14)]) == (1, None)  # borrows from the team Cohort
    assert a.fits_now([(CPU, 16)]) == (-1, (CPU, 16))  # beyond its borrowingLimit
    tree.add_usage("b", {CPU: 8})
    assert a.fits_now([(MEM, 1), (CPU, 13)]) == (-1, (CPU, 13))  # 10 + 2 unused: short now
    assert a.fits_now([(CPU, 0), (MEM, 10)]) == (0, None)  # a zero request fits anywhere


@settings(max_examples=200, deadline=None)
@given(
    nominal=st.integers(0, 20),
    limit=st.none() | st.integers(0, 20),
    sibling=st.integers(0, 20),
    used=st.integers(0, 30),
    other=st.integers(0, 30),
    cpu=st.integers(0, 50),
    mem=st.integers(0, 50),
)
def test_agrees_with_the_questions_it_is_made_of(
    nominal: int, limit: int | None, sibling: int, used: int, other: int, cpu: int, mem: int
) -> None:
    tree = _tree(nominal, limit, sibling)
    tree.add_usage("a", {CPU: used})
    tree.add_usage("b", {CPU: other, MEM: other})
    a = tree.queues["a"]
    requests = [(CPU, cpu), (MEM, mem)]
    level, short = a.fits_now(requests)
    expected_short = next(
        (
            (fr, v)
            for fr, v in requests
            if v and (v > a.potential_available(fr) or v > a.available(fr))
        ),
        None,
    )
    assert short == expected_short
    if short is None:
        heights = [a.height_of_lowest_subtree_that_fits(fr, v).height for fr, v in requests if v]
        assert level == max(heights, default=0)
    else:
        assert level == -1
