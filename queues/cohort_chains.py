"""Chains of Cohorts: cycles, and how deep a chain may go.

Cohorts name their parents, so an edit can close a cycle or build a chain as long as
the objects it is made of. The quota tree (:mod:`queues.tree`) disables the Cohorts on
a cycle and those beyond :data:`MAX_COHORT_DEPTH`, with a reason its ClusterQueues'
Active condition says; the Cohort webhook refuses either edit
(:func:`depth_through`). Everything here walks in loops: a chain reached from the API
may be of any length, and Python's stack is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queues.model import Cohort
    from queues.quota_node import QuotaNode as Node

MAX_COHORT_DEPTH = 64
"""The most Cohorts on a path from a root Cohort down to a ClusterQueue's Cohort.

Every admission, preemption search and fair-sharing comparison walks a ClusterQueue's
path to the root, so the depth multiplies the cost of each of them. Kueue documents
no bound; real hierarchies (organisation, department, team, project) are a handful of
levels, and 64 leaves room for any of them. The Cohort webhook refuses a deeper chain;
one that reaches the service anyway disables the Cohorts beyond the bound (their
ClusterQueues are inactive, saying why)."""


def disable_cycles(cohorts: Mapping[str, Node]) -> None:
    """Disable every Cohort on a cycle of parents, saying which (from its least name,
    whichever Cohort it is read from), and cut the cycle so that walks up end.

    Each Cohort is walked once (a chain of any length costs its length)."""
    done: set[str] = set()
    for name in sorted(cohorts):
        walk: list[Node] = []
        on_walk: set[str] = set()
        node: Node | None = cohorts[name]
        while node is not None and node.name not in done and node.name not in on_walk:
            walk.append(node)
            on_walk.add(node.name)
            node = node.parent
        if node is not None and node.name in on_walk:  # the walk came back: a cycle
            cycle = walk[walk.index(node) :]
            first = min(range(len(cycle)), key=lambda i: cycle[i].name)
            ring = cycle[first:] + cycle[:first]
            text = " -> ".join(n.name for n in (*ring, ring[0]))
            for n in cycle:
                n.disabled_reason = f"Cohort {n.name} is part of a cycle: {text}"
            for n in cycle:
                n.parent = None  # cut the cycle so traversals terminate
        done.update(on_walk)


def disable_too_deep(cohorts: Mapping[str, Node]) -> None:
    """Disable each Cohort that is the first beyond :data:`MAX_COHORT_DEPTH` on its path
    from the root (what is below it is disabled with it): the webhook refuses such a
    chain, and one that reached the service anyway makes its ClusterQueues inactive
    with this reason instead of slowing every admission below it."""
    stack = [(n, 1) for n in cohorts.values() if n.parent is None]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_COHORT_DEPTH:
            if not node.disabled_reason:
                node.disabled_reason = too_deep_reason(node.name, depth)
            continue  # below it: disabled with it
        stack.extend((c, depth + 1) for c in node.child_cohorts)


def inherit_disabled(roots: Iterable[Node]) -> None:
    """Everything below a disabled Cohort is disabled too (the nearest reason wins)."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        for child in node.children:
            if not child.disabled_reason and node.disabled_reason:
                child.disabled_reason = node.disabled_reason
            stack.append(child)


def too_deep_reason(name: str, depth: int) -> str:
    return (
        f"Cohort {name} is {depth} Cohorts deep (counting the root): at most "
        f"{MAX_COHORT_DEPTH} are supported"
    )


def depth_through(name: str, parent: str | None, cohorts: Mapping[str, Cohort]) -> int:
    """How many Cohorts the deepest path from a root through Cohort ``name`` would hold
    if ``name``'s parent were ``parent`` (the other Cohorts as in ``cohorts``): its
    ancestors, itself, and the longest chain of Cohorts below it. A cycle ends a walk
    (it is refused on its own)."""
    up = 0
    seen = {name}
    current = parent
    while current and current not in seen:
        seen.add(current)
        up += 1
        node = cohorts.get(current)
        current = node.parent if node is not None else None
    children: dict[str, list[str]] = {}
    for other, cohort in cohorts.items():
        if other != name and cohort.parent:
            children.setdefault(cohort.parent, []).append(other)
    down = 0
    level = [name]
    visited = {name}
    while True:
        level = [c for n in level for c in children.get(n, ()) if c not in visited]
        if not level:
            break
        visited.update(level)
        down += 1
    return up + 1 + down
