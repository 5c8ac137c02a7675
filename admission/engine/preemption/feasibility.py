"""Deficit-bounded parking (``parkUntilFeasible``, our extension) and quota-only facts.

Kueue parks a BestEffortFIFO head that neither fits nor can preempt, and wakes every
parked head of a cohort tree on *any* release of quota in it (a finish, an eviction, a
deletion). In a tree of thousands of ClusterQueues every release then brings thousands
of heads back, most of which a release of a few cpu cannot help. With
``parkUntilFeasible: true`` a parked head carries its *deficit*, as usage thresholds: how
far the usage of given nodes must fall before it can possibly be admitted; a release
wakes exactly the heads whose threshold it reaches (``WakeIndex``), and an admission
into the head's own ClusterQueue of a workload it could preempt wakes it too. Heads
whose admissibility cannot be bounded this way are parked and woken as Kueue does.

The bound (``blocking``)
------------------------
For a head ``w`` (priority ``p``) of ClusterQueue ``c``, a podSet of it and one of its
resource groups, each flavor ``f`` of the group that the podSet may use and each resource
``r`` it requests (``v`` = the podSet's own request, a lower bound of what the workload
needs of ``(f, r)``: other podSets may add to it, partial admission counts ``minCount``
pods), let ``U_n`` be node ``n``'s usage of ``fr = (f, r)`` — the sum of its subtree's
ClusterQueue usage, as long as no node of the tree keeps usage locally (a lending limit
below the subtree quota; such an ``fr`` never blocks) — ``cap_n`` the most ``n`` may use
(subtree quota plus borrowing limit; the root's subtree quota), ``N_c`` ``c``'s nominal
quota and ``P`` the usage of ``c``'s own workloads ``withinClusterQueue`` lets ``w``
preempt (priority below ``p``, or up to ``p`` for ``LowerOrNewerEqualPriority``; none
for ``Never``)::

    Q1   = min over capped n on the path of (cap_n - U_n) + P    (= available(c) + P)
    Q2   = N_c - U_c + P
    Q3_m = subtreeQuota_m - U_m       for each node m of the path below the root

    B_fr = Q1                              reclaimWithinCohort Never, or no cohort
         = max(Q1, Q2, max_m Q3_m)         borrowWithinCohort Never
         (not bounded)                     borrowWithinCohort set

``w`` can take ``v`` of ``fr`` only if ``v <= B_fr``, by the engine's own rules
(``flavors.py``, ``preemption.py``): it fits (``v <= available(c) <= Q1``), or a victim
search for the single-``fr`` request succeeds (flavor assignment asks the preemption
oracle resource by resource; a flavor with one resource answered NoCandidates is not
chosen). Victims from ``c`` alone raise ``available(c)`` by at most what they hold,
``P`` (Q1). Victims from other ClusterQueues are usable only (a) in the search's attempt
without borrowing, which needs ``U_c - (own victims) + v <= N_c`` (Q2), or (b) with a
hierarchical advantage, which needs the request to fit the subtree quota of a node
below the root (Q3); with ``borrowWithinCohort`` any of them may be, and nothing is
bounded. A flavor is *blocked* when some ``fr`` of it has ``v > B_fr`` (or ``v`` exceeds
``potentialAvailable``); a group whose flavors are all blocked (or that has no flavor
the podSet may use, or a resource the ClusterQueue does not cover) makes the head
inadmissible.

Evidence, and why a head need not be woken before it is met
-----------------------------------------------------------
For each blocked flavor the evidence names one blocking ``fr`` and, per way in, a node
and a threshold: ``(n1, cap_n1 + P - v)`` where ``n1`` is the node of Q1's minimum,
``(c, N_c + P - v)`` and ``(m, subtreeQuota_m - v)`` for Q2 and Q3 when they apply. At
park time every node is above its threshold. Until the head is woken:

* ``Q1(t) <= cap_n1 - U_n1(t) + P(t)``, ``Q2(t) = N_c - U_c(t) + P(t)`` and
  ``Q3_m(t) = subtreeQuota_m - U_m(t)``: each way in depends on one node's usage and
  on ``P``;
* ``P`` grows only when a workload ``w`` could preempt comes to hold quota in ``c``
  (an admission, or a priority change of an admitted workload): ``WakeIndex.admitted``
  wakes the head then. Otherwise ``P(t) <= P`` (at park) and each way in stays shut
  while its node's usage stays above its threshold;
* usage falls only by releases (finish, eviction, deletion, reclaimable pods): after
  each, the nodes on the releasing ClusterQueue's path are checked against the entries
  waiting on them, and a node whose usage reaches a threshold wakes its heads;
* quotas, limits, flavors, policies and topology change only through spec events,
  which wake everything (``requeue_all``).

So a head not woken has, for every flavor, a pair still with ``v > B_fr``: it is still
inadmissible (``tests/unit/engine/test_feasibility.py`` checks this against the engine's full
nomination after every step of random runs). Waking when *any one* entry is reached is
conservative: another pair or way in may still block. Where the bound is doubtful the
head is parked as Kueue parks it (woken by any release in its tree): topology-aware
ClusterQueues and podSets (placement is not quota alone), and schedulers with fair
sharing or admission fair sharing (``build_scheduler`` does not enable the index then).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from admission.engine.flavor_match import flavor_matches
from admission.engine.wake_index import NEVER_ADMISSIBLE, Evidence, own_key
from queues.model import (
    NEVER,
    FlavorResource,
    PodSet,
    ResourceGroup,
    covered_resources,
    pod_set_requests,
)
from queues.quota_node import QuotaNode

if TYPE_CHECKING:
    from admission.engine.cache import Cache
    from queues.model import Workload


def kept_locally(root: QuotaNode) -> frozenset[FlavorResource]:
    """The pairs some node under ``root`` (itself included) keeps to itself (a lending
    limit below its subtree quota): for them a node's usage is not its subtree's sum.
    For every other pair usage bubbles up whole, so the root's usage is the tree's.
    Quotas only, so kept in the root's memo."""
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


def _own_preemptable(cache: Cache, cq: str, fr: FlavorResource, priority: int) -> int:
    """P: the usage of ``cq``'s own workloads ``withinClusterQueue`` lets a head of
    ``priority`` preempt (every priority it could ever preempt, whatever the tie-break)."""
    within = cache.cluster_queues[cq].preemption.within_cluster_queue
    if within == NEVER:
        return 0
    own = 0
    for prio, usage in cache.prio_usage.get(cq, {}).items():
        if prio <= own_key(within, priority):
            own += usage.get(fr, 0)
    return own


def _components(
    cache: Cache, c: QuotaNode, fr: FlavorResource, v: int, priority: int
) -> list[tuple[QuotaNode, int]] | None:
    """Why ``v`` of ``fr`` cannot be taken in ``c`` now, as (node, threshold) pairs:
    each says "while this node's usage of fr stays above the threshold, one way in stays
    shut" and every way in is shut (``B_fr < v``). [] when ``v`` exceeds what the tree
    ever admits; None when a way in is open, or the pair cannot be bounded."""
    root = c.root()
    if fr in kept_locally(root):
        return None
    if v > c.potential_available(fr):
        return []
    own = _own_preemptable(cache, c.name, fr, priority)
    # Q1 = min over capped nodes of (cap_n - U_n) + P, and the node n1 of the minimum
    room: int | None = None
    n1 = c
    cap1 = 0
    for n in c.path_to_root():
        cap = n.subtree_quota.get(fr, 0) if n.parent is None else n.borrowing_cap(fr)
        if cap is None:
            continue
        r = cap - n.usage.get(fr, 0)
        if room is None or r < room:
            room, n1, cap1 = r, n, cap
    assert room is not None  # the root is always capped
    if room + own >= v:
        return None
    out = [(n1, cap1 + own - v)]
    spec = cache.cluster_queues[c.name].preemption
    if c.parent is None or spec.reclaim_within_cohort == NEVER:
        return out
    if spec.borrow_within_cohort != NEVER:
        return None  # any other queue's workload may be a victim: not bounded
    # Q2 = N_c - U_c + P (victims elsewhere, ending within nominal)
    n_c = c.subtree_quota.get(fr, 0)
    if n_c - c.usage.get(fr, 0) + own >= v:
        return None
    out.append((c, n_c + own - v))
    # Q3: a subtree below the root that the request fits (hierarchical advantage)
    for m in c.path_to_root():
        if m.parent is None:
            break
        sq = m.subtree_quota.get(fr, 0)
        if sq - m.usage.get(fr, 0) >= v:
            return None
        if m is not c:  # at c, Q2's threshold is the higher one
            out.append((m, sq - v))
    return out


def blocking(cache: Cache, cq: str, wl: Workload) -> Evidence | None:
    """Why ``wl`` cannot be admitted in ``cq`` until enough quota is freed (see the
    module docstring): the evidence entries of one blocked resource group of one podSet
    ([] when only a spec change can help); None when the bound does not show it
    inadmissible (or cannot be trusted here): park it as Kueue does."""
    spec = cache.cluster_queues[cq]
    c = cache.tree.queues.get(cq)
    if c is None or cq in cache.inactive:
        return None
    flavors = cache.flavors
    if any(
        (flv := flavors.get(fq.name)) is not None and flv.topology_name is not None
        for g in spec.resource_groups
        for fq in g.flavors
    ):
        return None  # topology-aware: placement, not only quota, decides
    covered = covered_resources(spec)
    reclaimable = wl.reclaimable_pods
    for ps in wl.pod_sets:
        if ps.topology is not None:
            return None
        count = ps.min_count if ps.min_count is not None else ps.count
        if reclaimable:
            count = max(0, count - reclaimable.get(ps.name, 0))
        requests = pod_set_requests(ps, count, covered)
        by_group: dict[int, list[str]] = {}
        for r in requests:
            gi = covered.get(r)
            if gi is None:
                return []  # a resource the ClusterQueue does not cover: never
            by_group.setdefault(gi, []).append(r)
        for gi in sorted(by_group):
            group = spec.resource_groups[gi]
            evidence = _blocked_group(cache, c, group, ps, by_group[gi], requests, wl.priority)
            if evidence is not None:
                return evidence
    return None


def _blocked_group(
    cache: Cache,
    c: QuotaNode,
    group: ResourceGroup,
    ps: PodSet,
    resources: list[str],
    requests: Mapping[str, int],
    priority: int,
) -> Evidence | None:
    """Evidence that no flavor of ``group`` can take the podSet, or None."""
    evidence: Evidence = []
    for fq in group.flavors:
        flavor = cache.flavors.get(fq.name)
        if flavor is None:
            continue  # not there: never chosen (the ClusterQueue is inactive meanwhile)
        if flavor_matches(flavor, ps, covered=group.covered_resources) is not None:
            continue  # the podSet may not use it (labels, taints): spec changes only
        chosen: list[tuple[QuotaNode, FlavorResource, int]] | None = None
        margin = 0.0
        for r in resources:
            v = requests[r]
            if not v:
                continue  # a zero request fits any flavor
            fr = (fq.name, r)
            parts = _components(cache, c, fr, v, priority)
            if parts is None:
                continue
            if not parts:
                chosen, margin = [], NEVER_ADMISSIBLE  # never by this pair: the flavor is out
                break
            # the pair furthest from opening (the least usage drop, relative to v)
            near = min(n.usage.get(fr, 0) - t for n, t in parts) / v
            if chosen is None or near > margin:
                chosen, margin = [(n, fr, t) for n, t in parts if t >= 0], near
        if chosen is None:
            return None  # this flavor may work: nothing proven
        evidence.extend(chosen)
    return evidence
