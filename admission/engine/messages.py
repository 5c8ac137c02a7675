"""Every message the engine writes: pending reasons' messages and preemption messages.

The engine decides with the words of :mod:`admission.engine.vocabulary`; what it tells
a person (the ``QuotaReserved=False`` message of a pending workload, a ``Preempted``
condition's message, an event) is worded here and only here, so rewording one touches
this file. Where Kueue has a wording (flavor assignment, preemption, namespace
selectors) it is Kueue's; the numeric explanations (which podSet, resource and flavor
is short, by how much, and which limit binds) are this project's, and read the limit
from the quota tree (:meth:`queues.quota_node.QuotaNode.available_limit`,
:meth:`~queues.quota_node.QuotaNode.potential_limit`), which is where the arithmetic lives.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from admission.engine.vocabulary import PreemptionReason
from queues.api import labels
from queues.model import AdmissionCheckState, FlavorResource, ResourceFlavor, Taint, Workload
from queues.quantity import format_quantity
from queues.quota_node import QuotaNode

# -- queue and routing state ----------------------------------------------------------


def cluster_queue_stopped(name: str) -> str:
    return f"ClusterQueue {name} is stopped"


def cluster_queue_inactive(name: str, why: str) -> str:
    return f"ClusterQueue {name} is inactive: {why}"


def flavors_not_found(names: Iterable[str]) -> str:
    return f"flavor {', '.join(names)} not found"


def topology_not_found(topology: str, flavor: str) -> str:
    return f"Topology {topology} of flavor {flavor} not found"


def admission_checks_missing(names: Iterable[str]) -> str:
    """Kueue's ClusterQueue message part for ``AdmissionCheckNotFound``."""
    return f"references missing AdmissionCheck(s): {','.join(names)}"


def admission_checks_inactive(names: Iterable[str]) -> str:
    """Kueue's ClusterQueue message part for ``AdmissionCheckInactive``."""
    return f"references inactive AdmissionCheck(s): {','.join(names)}"


def checks_in_state(checks: Iterable[AdmissionCheckState], state: str) -> str:
    """Kueue's ``buildAdmissionChecksMessage``: ``AdmissionCheck in Retry state: "a"
    (its message); "b"`` (``checks``: AdmissionCheckStates, sorted by name here)."""
    ordered = sorted(checks, key=lambda c: c.name)
    parts = [f"{json.dumps(c.name)} ({c.message})" if c.message else json.dumps(c.name)
             for c in ordered]  # fmt: skip
    noun = "AdmissionChecks" if len(ordered) > 1 else "AdmissionCheck"
    return f"{noun} in {state} state: {'; '.join(parts)}"


def waiting_for_checks(cluster_queue: str, waiting: Iterable[AdmissionCheckState]) -> str:
    """A reservation that waits for its AdmissionChecks (``why``, ``list``, the dashboard)."""
    parts = [f"{c.name} ({c.state}{': ' + c.message if c.message else ''})" for c in waiting]
    return (
        f"Quota reserved in ClusterQueue {cluster_queue}; waiting for AdmissionChecks: "
        + ", ".join(parts)
    )


def evicted_by_checks(detail: str) -> str:
    """The ``Evicted`` message of a workload whose checks asked to retry."""
    return f"Evicted due to {detail}"


def check_reset_after_eviction(previous: str) -> str:
    return f"Reset to Pending after eviction. Previously: {previous}"


def local_queue_stopped(key: str) -> str:
    return f"LocalQueue {key} is stopped"


NO_QUEUE_NAME = "Workload has no queue name (spec.queueName / label kueue.x-k8s.io/queue-name)"


def local_queue_missing(name: str, namespace: str) -> str:
    return f"LocalQueue {name} doesn't exist in namespace {namespace}"


def cluster_queue_missing(name: str) -> str:
    return f"ClusterQueue {name} doesn't exist"


def namespace_missing(namespace: str) -> str:
    return f"namespace {namespace} not found"


def namespace_not_selected(namespace: str, cq: str) -> str:
    return (
        f"Workload namespace {namespace} is not selected: ClusterQueue {cq} has no "
        "namespaceSelector, so it admits no namespace (namespaceSelector: {} admits all)"
    )


def namespace_mismatch(namespace: str, cq: str) -> str:
    return f"Workload namespace {namespace} doesn't match ClusterQueue {cq} namespaceSelector"


def resource_validation_errors(wl: Workload) -> str:
    """Kueue's validateResources: container requests may not exceed their limits.
    "" when valid, else the Misconfigured message (Kueue's wording)."""
    errors = [
        f"spec.podSets[{i}].template.spec.{field}[{j}]: Invalid value: "
        f"{json.dumps(list(resources))}: requests must not exceed its limits"
        for i, ps in enumerate(wl.pod_sets)
        for field, j, resources in ps.limit_violations
    ]
    return f"resources validation failed: {'; '.join(errors)}" if errors else ""


# -- the cycle --------------------------------------------------------------------------

NO_LONGER_FITS = "Workload no longer fits after processing another workload"


# Thousands of heads of a cycle fail the same way once a cohort is full (the same
# resource, request and nothing left): their texts are made once and shared (strings
# are immutable), in tables that start over when they grow large.
_WORDED_LIMIT = 4096
_no_longer_fits_worded: dict[str, str] = {}
_short_worded: dict[tuple[FlavorResource, int, int], str] = {}


def no_longer_fits(why: str) -> str:
    """Kueue's "no longer fits", with what is short."""
    text = _no_longer_fits_worded.get(why)
    if text is None:
        if len(_no_longer_fits_worded) >= _WORDED_LIMIT:
            _no_longer_fits_worded.clear()
        text = _no_longer_fits_worded[why] = f"{NO_LONGER_FITS}: {why}"
    return text


def short_after_earlier_admissions(fr: FlavorResource, requested: int, left: int) -> str:
    if left < 0:
        left = 0
    key = (fr, requested, left)
    text = _short_worded.get(key)
    if text is None:
        if len(_short_worded) >= _WORDED_LIMIT:
            _short_worded.clear()
        r = fr[1]
        text = _short_worded[key] = (
            f"{r} on flavor {fr[0]}: requested {format_quantity(r, requested)}, "
            f"{format_quantity(r, left)} left after this cycle's earlier admissions"
        )
    return text


TARGETS_TAKEN = (
    "preemption targets overlap with those of a workload processed earlier in this cycle, "
    "and no other victims would do"
)


def waiting_for_preempted(keys: Iterable[str], then: str = "") -> str:
    """``then``: what the preemption waits for beyond that (progress-aware notices)."""
    names = sorted(keys)
    return f"Pending the preemption of {len(names)} workload(s): {', '.join(names)}{then}"


def pending_not_nominated(ahead: int, cq: str) -> str:
    """``plan``: a workload no cycle looked at before the cycles ran out."""
    place = f"{ahead} workload(s) ahead of it" if ahead else "it is next"
    return (
        f"not yet nominated: one workload per ClusterQueue per cycle and the cycles "
        f"ran out; {place} in ClusterQueue {cq}"
    )


def blocked_behind_strict_head(head: str, cq: str) -> str:
    return f"blocked behind {head}, the head of StrictFIFO ClusterQueue {cq}"


# -- preemption -------------------------------------------------------------------------

_HUMAN_REASON = {
    PreemptionReason.IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    PreemptionReason.IN_COHORT_RECLAMATION: "reclamation within the cohort",
    PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
    PreemptionReason.IN_COHORT_FAIR_SHARING: "fair sharing within the cohort",
}


def node_path(node: QuotaNode) -> str:
    return "/" + "/".join(reversed([n.name for n in node.path_to_root()]))


def preempted(
    *,
    preemptor: Workload,
    reason: PreemptionReason,
    preemptor_node: QuotaNode,
    victim_node: QuotaNode,
) -> str:
    """The victim's ``Preempted`` condition message (Kueue's wording)."""
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid or preemptor.key}, "
        f"JobUID: {preemptor.labels.get(labels.JOB_UID, 'UNKNOWN')}) due to "
        f"{_HUMAN_REASON[reason]}; preemptor path: {node_path(preemptor_node)}; "
        f"preemptee path: {node_path(victim_node)}"
    )


# -- flavor assignment --------------------------------------------------------------


def resource_not_covered(resource: str, cq: str) -> str:
    return f"resource {resource} unavailable in ClusterQueue {cq}"


def flavor_not_found(name: str) -> str:
    return f"flavor {name} not found"


def flavor_affinity_mismatch(flavor: str) -> str:
    return f"flavor {flavor} doesn't match node affinity"


def untolerated_taint(taint: Taint, flavor: str) -> str:
    return f"untolerated taint {{{taint.key}: {taint.value}, effect {taint.effect}}} in flavor {flavor}"


def flavor_lacks_topology(flavor: ResourceFlavor) -> str:
    return f'Flavor "{flavor.name}" does not support TopologyAwareScheduling'


def tas_information_missing(flavor: str) -> str:
    return f'Flavor "{flavor}" information missing in TAS cache'


def topology_level_missing(flavor: ResourceFlavor) -> str:
    return f'Flavor "{flavor.name}" does not contain the requested level'


def topology_domain_gone(key: tuple[str, ...], flavor: str) -> str:
    return f"topology domain {'/'.join(key)} of flavor {flavor} is gone"


def topology_domain_short(
    key: tuple[str, ...], flavor: str, resource: str, requested: int, free: int
) -> str:
    """A placed podSet no longer fits its topology domain (this cycle's earlier admissions)."""
    return (
        f"topology domain {'/'.join(key)} of flavor {flavor}: {resource} requested "
        f"{format_quantity(resource, requested)}, "
        f"{format_quantity(resource, max(0, free))} left after this cycle's earlier admissions"
    )


def flavor_only_topology(flavor: ResourceFlavor) -> str:
    return f'Flavor "{flavor.name}" supports only TopologyAwareScheduling'


def pod_set_unassigned(pod_set: str, why: Iterable[str]) -> str:
    return f"couldn't assign flavors to podSet {pod_set}: {', '.join(why)}"


def _asked(r: str, val: int, earlier: int) -> str:
    text = format_quantity(r, val)
    if earlier:
        text += (
            f" ({format_quantity(r, val - earlier)} for this podSet + "
            f"{format_quantity(r, earlier)} for earlier podSets)"
        )
    return text


def exceeds_max_capacity(
    node: QuotaNode, fr: FlavorResource, val: int, earlier: int, *, explain: bool
) -> str:
    """NoFit: the request is more than the ClusterQueue could ever hold."""
    r = fr[1]
    if not explain:
        return f"insufficient quota for {r} in flavor {fr[0]}"
    return (
        f"insufficient quota for {r} in flavor {fr[0]}, request > maximum capacity "
        f"({_asked(r, val, earlier)} > {format_quantity(r, node.potential_available(fr))}; "
        f"{explain_max_capacity(node, fr)})"
    )


def insufficient_unused_quota(
    node: QuotaNode, fr: FlavorResource, val: int, earlier: int, *, explain: bool
) -> str:
    """The request does not fit what is unused now."""
    r = fr[1]
    if not explain:
        return f"insufficient unused quota for {r} in flavor {fr[0]}"
    available = node.available(fr)
    return (
        f"insufficient unused quota for {r} in flavor {fr[0]}, "
        f"{format_quantity(r, val - available)} more needed "
        f"(requested {_asked(r, val, earlier)}, available {format_quantity(r, max(0, available))}; "
        f"{explain_available(node, fr)})"
    )


def _kind(n: QuotaNode) -> str:
    return "Cohort" if n.is_cohort else "ClusterQueue"


def explain_max_capacity(node: QuotaNode, fr: FlavorResource) -> str:
    """Why a ClusterQueue can never hold more than potential_available of fr."""
    r = fr[1]
    limit = node.potential_limit(fr)
    n = limit.node
    if not limit.at_root:
        q = n.quotas[fr]
        return (
            f"{_kind(n)} {n.name} quota {format_quantity(r, n.subtree_quota.get(fr, 0))} + "
            f"borrowingLimit {format_quantity(r, q.borrowing_limit or 0)} binds"
        )
    parts = [f"{_kind(n)} {n.name} subtree quota {format_quantity(r, limit.amount)}"]
    kept = _lending_kept(n, fr, node)
    if kept:
        parts.append("kept back by lendingLimit: " + ", ".join(kept))
    return ", ".join(parts)


def explain_available(node: QuotaNode, fr: FlavorResource) -> str:
    """Which level of the cohort tree is short of fr, and which limit binds."""
    r = fr[1]

    def q(v: int) -> str:
        return format_quantity(r, v)

    parts = [
        f"ClusterQueue {node.name} nominal {q(node.nominal(fr))}, in use {q(node.usage.get(fr, 0))}"
    ]
    limit = node.available_limit(fr)
    n = limit.node
    if not limit.at_root:
        bl = n.quotas[fr].borrowing_limit or 0
        parent = n.parent
        assert parent is not None
        parts.append(
            f"borrowingLimit {q(bl)} of {_kind(n)} {n.name} binds: "
            f"at most {q(n.borrowable(fr))} more can be borrowed from Cohort {parent.name}"
        )
        return "; ".join(parts)
    if n is node:  # a ClusterQueue without a cohort: its own quota is all there is
        return "; ".join(parts)
    parts.append(
        f"Cohort {n.name} (root) has {q(max(0, limit.amount))} unused of subtree quota "
        f"{q(n.subtree_quota.get(fr, 0))}"
    )
    kept = _lending_kept(n, fr, node)
    if kept:
        parts.append("kept back by lendingLimit: " + ", ".join(kept))
    return "; ".join(parts)


def _lending_kept(root: QuotaNode, fr: FlavorResource, requester: QuotaNode) -> list[str]:
    """Capacity that lending limits keep away from ``requester``: what other subtrees
    keep for themselves (what the requester or its ancestors keep is its own)."""
    memo_key = ("lending_kept", fr)
    memo = root.memo.get(memo_key)
    kept_all: list[tuple[QuotaNode, int]]
    if isinstance(memo, list):
        kept_all = memo
    else:
        kept_all = []
        stack = [root]
        while stack:
            n = stack.pop()
            for c in n.children:
                amount = c.local_quota.get(fr, 0)
                if amount:
                    kept_all.append((c, amount))
                if c.is_cohort:
                    stack.append(c)
        root.memo[memo_key] = kept_all
    if not kept_all:
        return []
    own = {id(n) for n in requester.path_to_root()}
    out = []
    for c, amount in kept_all:
        if id(c) in own:
            continue
        out.append(f"{_kind(c)} {c.name} {format_quantity(fr[1], amount)}")
    return sorted(out)
