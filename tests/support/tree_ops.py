"""One random usage change on a quota tree, as the working-copy property tests apply it.

The tests hold, per ClusterQueue, the cpu they charged (``held``) so that a removal never
takes more than is there: what a release of an admitted workload does."""

from __future__ import annotations

from queues.model import FlavorResource
from queues.tree import CohortTree


def charge(tree: CohortTree, held: dict[str, int], name: str, cpu: int, fr: FlavorResource) -> None:
    """Add ``cpu`` (whole cpus) to ``name``'s usage on ``tree``, or remove up to ``-cpu``
    of what ``held`` says it holds; ``held`` follows."""
    if cpu < 0:
        amount = min(-cpu, held[name])
        tree.remove_usage(name, {fr: amount * 1000})
        held[name] -= amount
    else:
        tree.add_usage(name, {fr: cpu * 1000})
        held[name] += cpu
