"""Quota-only facts about a cohort tree that stay true until its quotas change.

``kept_locally(root)``: the (flavor, resource) pairs some node of ``root``'s tree keeps
to itself (a lending limit below its subtree quota). For every other pair usage
"bubbles" all the way up: each node's usage is the sum of its subtree's ClusterQueue
usages, so the root's usage is the whole tree's, and a sum over thousands of
ClusterQueues is one lookup.
"""

from __future__ import annotations

from queues.model import FlavorResource
from queues.tree import QuotaNode


def kept_locally(root: QuotaNode) -> frozenset[FlavorResource]:
    """The pairs some node under ``root`` (itself included) keeps locally: for them a
    node's usage is not its subtree's sum. Quotas only, so kept in the root's memo."""
    got = root.memo.get("kept-locally")
    if got is not None:
        return got  # type: ignore[return-value]
    out: set[FlavorResource] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        out.update(fr for fr, v in n.local_quota.items() if v > 0)
        stack.extend(n.child_cohorts)
        stack.extend(n.child_queues)
    frozen = frozenset(out)
    root.memo["kept-locally"] = frozen
    return frozen
