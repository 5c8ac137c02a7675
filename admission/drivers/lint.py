"""Warnings about a set of queue objects that Kueue accepts but that are probably mistakes.

A cohort cycle or a Cohort chain deeper than the service handles, a LocalQueue naming a ClusterQueue that does not exist, a flavor that
no ClusterQueue uses: each is valid input (the API server and Kueue's webhooks accept
it) and changes nothing until a workload arrives, which is exactly when it hurts — the
cycle makes its ClusterQueues inactive, the LocalQueue's workloads wait as
``Misconfigured``, the flavor's nodes stay empty. ``plan`` says so up front, on stderr,
even when no workload is affected (CLI.md: warnings never change the exit code).
"""

from __future__ import annotations

from admission.drivers.inputs import Inputs
from queues.tree import CohortTree

__all__ = ["input_warnings"]


def input_warnings(inputs: Inputs) -> list[str]:
    """One line per problem, in a stable order: cycles, LocalQueues, flavors."""
    return [*_cycles(inputs), *_dangling_local_queues(inputs), *_unused_flavors(inputs)]


def _cycles(inputs: Inputs) -> list[str]:
    if not inputs.cohorts:
        return []
    tree = CohortTree(inputs.cluster_queues, inputs.cohorts)
    reasons: dict[str, list[str]] = {}  # cycle description -> Cohorts on it
    for name, node in sorted(tree.cohorts.items()):
        if node.disabled_reason and node.disabled_reason.startswith(
            f"Cohort {name} is part of a cycle: "
        ):
            names = node.disabled_reason.partition(": ")[2].split(" -> ")[:-1]
            start = names.index(min(names))  # the same cycle, however it was walked
            ring = names[start:] + names[:start]
            reasons.setdefault(" -> ".join([*ring, ring[0]]), []).append(name)
    out = []
    for cycle in sorted(reasons):
        on_cycle = set(reasons[cycle])
        below = sorted(
            n
            for n, node in tree.queues.items()
            if any(anc.name in on_cycle for anc in list(node.path_to_root())[1:])
        )
        affected = ""
        if below:
            plural = "s" if len(below) > 1 else ""
            verb = "are" if len(below) > 1 else "is"
            affected = f"; ClusterQueue{plural} {', '.join(below)} {verb} inactive"
        out.append(f"Cohort cycle {cycle}: every Cohort on it and below it is inactive{affected}")
    for name, node in sorted(tree.cohorts.items()):
        reason = node.disabled_reason
        if reason and reason.startswith(f"Cohort {name} is ") and " Cohorts deep " in reason:
            out.append(f"{reason}: it and everything below it is inactive")
    return out


def _dangling_local_queues(inputs: Inputs) -> list[str]:
    return [
        f"LocalQueue {key} points at ClusterQueue {lq.cluster_queue}, which does not exist: "
        "its workloads stay pending (Misconfigured)"
        for key, lq in sorted(inputs.local_queues.items())
        if lq.cluster_queue not in inputs.cluster_queues
    ]


def _unused_flavors(inputs: Inputs) -> list[str]:
    groups = [g for cq in inputs.cluster_queues.values() for g in cq.resource_groups]
    groups += [g for cohort in inputs.cohorts.values() for g in cohort.resource_groups]
    used = {fq.name for group in groups for fq in group.flavors}
    return [
        f"ResourceFlavor {name} is not used by any ClusterQueue or Cohort: no workload "
        "can be admitted on it"
        for name in sorted(inputs.flavors)
        if name not in used
    ]
