"""Flavor assignment: which ResourceFlavor each podSet of a workload gets.

Kueue's FlavorAssigner (docs/semantics.md §4.4): for every resource group a podSet
needs, try the ClusterQueue's flavors in list order; a flavor must match the podSet's
node selector / required affinity (on the keys the flavor labels) and its taints must
be tolerated; then each resource is tested against the cohort tree (``available`` and
``potential_available``). Fungibility decides whether to stop at the first viable
flavor or keep looking for a better one. All podSets of a workload are assigned
together (gang semantics): the workload's mode is its worst podSet's mode.

This module only *reads* the tree. Whether preemption could free enough quota is asked
of an ``oracle`` callback so that the preemption strategy stays a separate concern.
What it answers is :mod:`admission.engine.assignment`; whether a flavor's nodes can
take a podSet, :mod:`admission.engine.flavor_match`; how the flavors of a resource
group compare, :mod:`admission.engine.fungibility`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from admission.engine import messages
from admission.engine.assignment import (
    Assignment,
    PodSetAssignmentResult,
    PreemptionOracle,
    no_preemption,
)
from admission.engine.flavor_match import flavor_matches
from admission.engine.fungibility import (
    FlavorCandidate,
    is_preferred,
    no_fit_reason,
    should_try_next,
    worse_reason,
)
from admission.engine.tas.admission import (
    TOPOLOGY_PLACEMENT_FAILED,
    PlacementCheck,
    TasCharge,
    place_workload,
    placement_requests,
)
from admission.engine.tas.domains import TopologyState, Usage
from admission.engine.tas.request import requests_tas
from admission.engine.vocabulary import AssignmentMode, PendingReason
from queues.model import (
    ClusterQueue,
    FlavorResource,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    Workload,
    covered_resources,
    pod_set_requests,
)
from queues.quota_node import QuotaNode

# Short names for the vocabulary's members, as the assigner reads them.
NO_FIT = AssignmentMode.NO_FIT
NO_CANDIDATES = AssignmentMode.NO_CANDIDATES
PREEMPT = AssignmentMode.PREEMPT
RECLAIM = AssignmentMode.RECLAIM
FIT = AssignmentMode.FIT

WAITING_FOR_QUOTA = PendingReason.WAITING_FOR_QUOTA
EXCEEDS_MAX_QUOTA = PendingReason.EXCEEDS_MAX_QUOTA
NO_MATCHING_FLAVOR = PendingReason.NO_MATCHING_FLAVOR


class _ResourceFit(NamedTuple):
    mode: AssignmentMode
    borrow: int
    message: str
    reason: PendingReason | None


class FlavorAssigner:
    """Assigns flavors for one ClusterQueue against the current tree."""

    def __init__(
        self,
        *,
        cq: ClusterQueue,
        node: QuotaNode,
        flavors: Mapping[str, ResourceFlavor],
        oracle: PreemptionOracle = no_preemption,
        can_preempt_while_borrowing: bool = False,
        can_preempt_within_cq: bool = False,
        explain: bool = True,
        topology: TopologyState | None = None,
        tas_charges: Mapping[str, Sequence[TasCharge]] | None = None,
    ) -> None:
        self.cq = cq
        self.topology = topology
        self.tas_charges = tas_charges if tas_charges is not None else {}
        # set by the nominator: the cycle's uncommitted TAS usage (taken for placement),
        # and the flavors a recomputed placement keeps (Kueue's NominationMapping)
        self.tas_assumed: Mapping[str, Mapping[tuple[str, ...], Usage]] = {}
        self.only_flavors: frozenset[str] | None = None
        self.node = node
        self.flavors = flavors
        self.oracle = oracle
        self.can_preempt_while_borrowing = can_preempt_while_borrowing
        self.can_preempt_within_cq = can_preempt_within_cq
        self.explain = explain
        self._wl: Workload | None = None
        self.covered = covered_resources(cq)
        # A ClusterQueue of one resource group: every covered resource is in group 0;
        # with one flavor in it, that group and flavor (see _assign_fitting).
        self.one_group = len(cq.resource_groups) == 1
        self.sole_flavor: tuple[ResourceGroup, str] | None = None
        # With one flavor: each covered resource's (flavor, resource) pair, made once
        # (the keys of every usage the sole-flavor path builds, kept answers included).
        self._sole_frs: dict[str, FlavorResource] = {}
        if self.one_group and len(cq.resource_groups[0].flavors) == 1:
            self.sole_flavor = (cq.resource_groups[0], cq.resource_groups[0].flavors[0].name)
            self._sole_frs = {r: (self.sole_flavor[1], r) for r in self.covered}
        # Kueue's IsTASOnly: every flavor of the ClusterQueue has a topology.
        names = [fq.name for g in cq.resource_groups for fq in g.flavors]
        topological = [
            (f := flavors.get(n)) is not None and f.topology_name is not None for n in names
        ]
        self.tas_only = bool(names) and all(topological)
        self.cq_has_tas = any(topological)

    def assign(self, wl: Workload, counts: Mapping[str, int] | None = None) -> Assignment:
        """Assign all podSets of ``wl`` (with optional reduced counts) at once."""
        self._wl = wl
        if self.sole_flavor is not None and len(wl.pod_sets) == 1:
            fitting = self._assign_fitting(wl, counts)
            if fitting is not None:
                return fitting
        assumed: dict[FlavorResource, int] = {}
        results: list[PodSetAssignmentResult] = []
        out = Assignment(pod_sets=results)
        self._assign_pod_sets(wl, counts, assumed, out)
        if self._needs_placement(wl):
            self._place_topology(wl, results, out)
        for res in results:
            if res.mode < out.mode:
                out.mode = res.mode
            if res.borrow > out.borrow:
                out.borrow = res.borrow
        if out.mode >= NO_CANDIDATES:  # every podSet has a flavor: the would-be usage
            out.usage = assumed
        failing = [r for r in results if r.mode < FIT]
        if failing:
            worst = min(failing, key=lambda r: r.mode)
            out.reason = worst.reason or WAITING_FOR_QUOTA
            out.message = "; ".join(
                messages.pod_set_unassigned(r.name, r.messages) for r in failing
            )
        return out

    def _assign_fitting(self, wl: Workload, counts: Mapping[str, int] | None) -> Assignment | None:
        """The assignment of a workload of one podSet to a ClusterQueue of one flavor
        (the common head of a large cluster), exactly what the general path gives it
        (``tests/unit/engine/test_nominate_fast_paths.py``): when it fits, without the
        candidates, groups and reasons the general path builds; when a request is short,
        with that flavor's candidate only. None for anything else (a resource not covered, a
        flavor that does not match, a podSet to place by topology)."""
        if self._needs_placement(wl):
            return None
        ps = wl.pod_sets[0]
        count = _count(wl, ps, counts)
        covered = self.covered
        requests = pod_set_requests(ps, count, covered)
        for r in requests:
            if r not in covered:
                return None
        group, name = self.sole_flavor  # type: ignore[misc]
        if self._mismatch(name, group, [ps]) is not None:
            return None
        frs = self._sole_frs
        usage = {frs[r]: val for r, val in requests.items()}
        borrow, short = self.node.fits_now(usage.items())
        if short is None:
            flavors = dict.fromkeys(requests, name)
            chosen = PodSetAssignmentResult(ps.name, count, flavors, requests, borrow=borrow)
            return Assignment(pod_sets=[chosen], borrow=borrow, usage=usage)
        # Short: the sole flavor's candidate, as _only_flavor and _assign_requests take it.
        cand = self._flavor_candidate(name, list(requests), requests, {})
        res = PodSetAssignmentResult(name=ps.name, count=count, mode=cand.mode)
        out = Assignment(pod_sets=[res], mode=cand.mode)
        if cand.mode == NO_FIT:
            res.reason = no_fit_reason({cand.reason})
        else:  # short on quota: a mode below FIT
            res.flavors = dict.fromkeys(requests, name)
            res.usage = dict(requests)
            res.reason = cand.reason or WAITING_FOR_QUOTA
            res.borrow = out.borrow = max(0, cand.borrow)
            out.frs_need_preemption.update(cand.need_preemption)
            if cand.mode >= NO_CANDIDATES:
                out.usage = usage
        res.messages.extend(cand.messages)
        out.reason = res.reason
        out.message = messages.pod_set_unassigned(ps.name, res.messages)
        return out

    def _assign_pod_sets(
        self,
        wl: Workload,
        counts: Mapping[str, int] | None,
        assumed: dict[FlavorResource, int],
        out: Assignment,
    ) -> None:
        """Flavors for every podSet, into ``out.pod_sets``. A single podSet is its own
        unit of assignment whether or not it names a podSet group, so it skips
        working out the units (most heads of a large cluster have one podSet);
        ``tests/unit/engine/test_cycle_fast_paths.py`` checks the two ways agree."""
        pod_sets = wl.pod_sets
        if len(pod_sets) == 1:
            ps = pod_sets[0]
            out.pod_sets.append(self._assign_pod_set(ps, _count(wl, ps, counts), assumed, out))
        else:
            self._assign_units(wl, counts, assumed, out)

    def _needs_placement(self, wl: Workload) -> bool:
        """Whether the TAS step has a podSet to place (or to refuse): only with a
        topology state, in a TAS-only ClusterQueue or for a podSet that asks for TAS;
        without one :meth:`_place_topology` changes nothing."""
        if self.topology is None:
            return False
        if self.tas_only:
            return True
        for ps in wl.pod_sets:  # (a loop, not any() over a generator: once per head)
            if requests_tas(ps.topology):
                return True
        return False

    def _assign_units(
        self,
        wl: Workload,
        counts: Mapping[str, int] | None,
        assumed: dict[FlavorResource, int],
        out: Assignment,
    ) -> None:
        """Several podSets, in units of assignment: one podSet, or every podSet of a
        podSet group (topologyRequest.podSetGroupName), which gets one flavor for its
        summed requests. The results go to ``out.pod_sets`` in the workload's order."""
        results = out.pod_sets
        units: list[list[tuple[PodSet, int]]] = []
        grouped: dict[str, list[tuple[PodSet, int]]] = {}
        for ps in wl.pod_sets:
            count = _count(wl, ps, counts)
            group = ps.topology.pod_set_group_name if ps.topology is not None else None
            if group is None:
                units.append([(ps, count)])
            elif group in grouped:
                grouped[group].append((ps, count))
            else:
                grouped[group] = [(ps, count)]
                units.append(grouped[group])
        if not grouped:
            for unit in units:
                results.append(self._assign_pod_set(unit[0][0], unit[0][1], assumed, out))
            return
        by_name: dict[str, PodSetAssignmentResult] = {}
        for unit in units:
            if len(unit) == 1:
                by_name[unit[0][0].name] = self._assign_pod_set(
                    unit[0][0], unit[0][1], assumed, out
                )
            else:
                for res in self._assign_group(unit, assumed, out):
                    by_name[res.name] = res
        results.extend(by_name[ps.name] for ps in wl.pod_sets)

    def _place_topology(
        self, wl: Workload, results: list[PodSetAssignmentResult], out: Assignment
    ) -> None:
        """Kueue's TAS step of assignFlavors: place the TAS podSets once their flavors
        are chosen (see admission.engine.tas.admission)."""
        assert self.topology is not None
        errors: dict[str, str] = {}
        reqs = placement_requests(
            wl,
            results,
            self.flavors,
            tas_only=self.tas_only,
            errors=errors,
            cq_has_tas=self.cq_has_tas,
        )
        by_name = {r.name: r for r in results}
        for name, why in errors.items():  # no placement can help: the workload does not fit
            r = by_name[name]
            if r.mode == NO_FIT:
                continue  # no flavor fits it anyway (Kueue skips podSets in error)
            r.mode = NO_FIT
            r.reason = TOPOLOGY_PLACEMENT_FAILED
            r.messages.append(why)
        if not reqs:
            return
        mode = min(r.mode for r in results)

        def fail(name: str, new_mode: AssignmentMode, why: str) -> None:
            # Kueue: WaitingForQuota while preemption could make room, TopologyPlacementFailed
            # when the podSet does not fit even with no TAS workload admitted.
            r = by_name[name]
            r.mode = min(r.mode, new_mode)
            if new_mode == NO_FIT:
                r.reason = TOPOLOGY_PLACEMENT_FAILED
            elif not r.reason:
                r.reason = WAITING_FOR_QUOTA
            if why not in r.messages:
                r.messages.append(why)

        if mode == FIT:
            assumed = self.tas_assumed
            placed, failure = place_workload(self.topology, self.flavors, reqs, assumed=assumed)
            if failure is None:
                for name, ta in placed.items():
                    by_name[name].topology = ta
                return
            fail(failure[0], PREEMPT, failure[1])
            mode = PREEMPT
        if not mode.needs_preemption:
            return
        _, failure = place_workload(self.topology, self.flavors, reqs, simulate_empty=True)
        if failure is not None:  # does not fit even on empty nodes
            fail(failure[0], NO_FIT, failure[1])
            return
        for lst in reqs.values():
            for req in lst:
                r = by_name[req.name]
                r.mode = min(r.mode, PREEMPT)
                out.frs_need_preemption.update((f, res) for res, f in r.flavors.items())
        check = PlacementCheck(self.topology, self.flavors, reqs, self.tas_charges)
        check.assumed, out.placement = self.tas_assumed, check

    def _assign_group(
        self, members: list[tuple[PodSet, int]], assumed: dict[FlavorResource, int], out: Assignment
    ) -> list[PodSetAssignmentResult]:
        """A podSet group: the summed requests get one flavor per resource group, and
        each member takes that flavor for the resources it requests."""
        requests: dict[str, int] = {}
        total = 0
        for ps, count in members:
            total += count
            for r, v in ps.requests.items():
                if v or r in self.covered:
                    requests[r] = requests.get(r, 0) + v * count
        joint = self._assign_requests(
            [ps for ps, _ in members], members[0][0].name, total, requests, assumed, out
        )
        results = []
        for ps, count in members:
            own = pod_set_requests(ps, count, self.covered)
            flavors = {r: f for r, f in joint.flavors.items() if r in own}
            if not any(v for r, v in ps.requests.items() if r != "pods"):
                # Kueue's resolvePodSetFlavors: a member requesting none of the group's
                # resources (an LWS leader) takes the group's TAS flavor(s) to be placed
                flavors = {
                    r: f
                    for r, f in joint.flavors.items()
                    if (flv := self.flavors.get(f)) is not None and flv.topology_name is not None
                }
            results.append(
                PodSetAssignmentResult(
                    name=ps.name,
                    count=count,
                    flavors=flavors,
                    usage={r: v for r, v in own.items() if r in joint.flavors},
                    mode=joint.mode,
                    borrow=joint.borrow,
                    reason=joint.reason,
                    messages=list(joint.messages),
                )
            )
        return results

    def _assign_pod_set(
        self, ps: PodSet, count: int, assumed: dict[FlavorResource, int], out: Assignment
    ) -> PodSetAssignmentResult:
        # Kueue: a zero request still gets a flavor when covered, else it is ignored.
        covered = self.covered
        requests = {r: v * count for r, v in ps.requests.items() if v or r in covered}
        return self._assign_requests([ps], ps.name, count, requests, assumed, out)

    def _assign_requests(
        self,
        pod_sets: list[PodSet],
        name: str,
        count: int,
        requests: dict[str, int],
        assumed: dict[FlavorResource, int],
        out: Assignment,
    ) -> PodSetAssignmentResult:
        res = PodSetAssignmentResult(name=name, count=count)
        covered = self.covered
        if "pods" in covered:
            requests["pods"] = count
        by_group = self._resource_groups_of(requests) if self.one_group else None
        if by_group is None:
            groups: dict[int, list[str]] = {}
            for r in requests:
                gi = covered.get(r)
                if gi is None:
                    res.mode = NO_FIT
                    res.reason = NO_MATCHING_FLAVOR
                    res.messages.append(messages.resource_not_covered(r, self.cq.name))
                    continue
                groups.setdefault(gi, []).append(r)
            if res.mode == NO_FIT:
                return res
            by_group = [groups[gi] for gi in sorted(groups)]
        for resources in by_group:
            best = self._choose_flavor(pod_sets, resources, requests, assumed)
            if best.mode == NO_FIT:
                res.mode = NO_FIT
                res.reason = worse_reason(res.reason, best.reason)
                res.messages.extend(best.messages)
                continue
            for r in resources:
                fr = (best.flavor, r)
                res.flavors[r] = best.flavor
                res.usage[r] = requests[r]
                assumed[fr] = assumed.get(fr, 0) + requests[r]
            if best.mode < FIT:
                res.mode = min(res.mode, best.mode)
                res.reason = worse_reason(res.reason, best.reason)
                res.messages.extend(best.messages)
            res.borrow = max(res.borrow, best.borrow)
            out.frs_need_preemption.update(best.need_preemption)
        return res

    def _resource_groups_of(self, requests: Mapping[str, int]) -> list[list[str]] | None:
        """The requested resources by resource group, in group order, when the
        ClusterQueue has one group and covers every one of them (the common head: one
        group, no dictionary of groups to build and sort); else None, and the general
        loop works them out and says what is not covered."""
        covered = self.covered
        for r in requests:
            if r not in covered:
                return None
        return [list(requests)] if requests else []

    def _choose_flavor(
        self,
        pod_sets: list[PodSet],
        resources: list[str],
        requests: Mapping[str, int],
        assumed: Mapping[FlavorResource, int],
    ) -> FlavorCandidate:
        """Kueue's findFlavorForPodSetResource: the best flavor of the resource group
        of ``resources``, trying them in list order as fungibility says."""
        group = self.cq.resource_groups[self.covered[resources[0]]]
        if len(group.flavors) == 1:
            return self._only_flavor(group, pod_sets, resources, requests, assumed)
        return self._best_flavor(group, pod_sets, resources, requests, assumed)

    def _best_flavor(
        self,
        group: ResourceGroup,
        pod_sets: list[PodSet],
        resources: list[str],
        requests: Mapping[str, int],
        assumed: Mapping[FlavorResource, int],
    ) -> FlavorCandidate:
        """Try the group's flavors in order; keep the preferred candidate."""
        best: FlavorCandidate | None = None
        why_not: list[str] = []
        reasons: set[PendingReason | None] = set()
        only = self.only_flavors
        for fq in group.flavors if only is None else [f for f in group.flavors if f.name in only]:
            why = self._mismatch(fq.name, group, pod_sets)
            if why is not None:
                why_not.append(why)
                reasons.add(NO_MATCHING_FLAVOR)
                continue
            cand = self._flavor_candidate(fq.name, resources, requests, assumed)
            if cand.mode < FIT:
                why_not.extend(cand.messages)
                reasons.add(cand.reason)
            if best is None or is_preferred(cand, best, self.cq.flavor_fungibility.preference):
                best = cand
            if not should_try_next(cand, self.cq):
                break
        if best is None or best.mode == NO_FIT:
            reason = no_fit_reason(reasons)
            return FlavorCandidate(best.flavor if best else "", NO_FIT, 0, reason, why_not, [])
        if best.mode < FIT:
            best.reason = best.reason or WAITING_FOR_QUOTA
            best.messages = why_not
        return best

    def _only_flavor(
        self,
        group: ResourceGroup,
        pod_sets: list[PodSet],
        resources: list[str],
        requests: Mapping[str, int],
        assumed: Mapping[FlavorResource, int],
    ) -> FlavorCandidate:
        """:meth:`_choose_flavor` for a resource group of one flavor (the common
        ClusterQueue): nothing to compare, so no list of reasons to collect; the same
        candidate, reason and messages (``tests/unit/engine/test_cycle_fast_paths.py``)."""
        name = group.flavors[0].name
        why = self._mismatch(name, group, pod_sets)
        if why is not None:
            return FlavorCandidate("", NO_FIT, 0, NO_MATCHING_FLAVOR, [why], [])
        cand = self._flavor_candidate(name, resources, requests, assumed)
        if cand.mode == NO_FIT:
            reason = no_fit_reason({cand.reason})
            return FlavorCandidate(name, NO_FIT, 0, reason, list(cand.messages), [])
        if cand.mode < FIT:
            cand.reason = cand.reason or WAITING_FOR_QUOTA
        return cand

    def _mismatch(self, name: str, group: ResourceGroup, pod_sets: list[PodSet]) -> str | None:
        """Why the flavor ``name`` cannot take these podSets (missing, node affinity,
        taints, topology), or None."""
        flavor = self.flavors.get(name)
        if flavor is None:
            return messages.flavor_not_found(name)
        for ps in pod_sets:
            why = flavor_matches(
                flavor,
                ps,
                tas_only=self.tas_only,
                topology=self.topology,
                covered=group.covered_resources,
            )
            if why is not None:
                return why
        return None

    def _flavor_candidate(
        self,
        name: str,
        resources: list[str],
        requests: Mapping[str, int],
        assumed: Mapping[FlavorResource, int],
    ) -> FlavorCandidate:
        """How ``resources`` fit on the flavor ``name``: the worst mode, the highest
        borrowing level, and what is short on each resource that does not fit."""
        cand = FlavorCandidate(name, FIT, 0, None, [], [])
        for r in resources:
            if not requests[r]:
                continue  # a zero request fits any flavor (it only names one)
            fr = (name, r)
            earlier = assumed.get(fr, 0)
            val = earlier + requests[r]
            mode, borrow, msg, reason = self._fits_resource_quota(fr, val, earlier)
            if mode < FIT:
                cand.messages.append(msg)
                cand.reason = worse_reason(cand.reason, reason)
                if mode in (PREEMPT, RECLAIM, NO_CANDIDATES):
                    cand.need_preemption.append(fr)
            cand.mode = min(cand.mode, mode)
            cand.borrow = max(cand.borrow, borrow)
        return cand

    def _fits_resource_quota(self, fr: FlavorResource, val: int, earlier: int = 0) -> _ResourceFit:
        """Kueue's fitsResourceQuota; ``earlier`` is what earlier podSets of the same
        workload already take of ``val`` on this flavor (for the message)."""
        node = self.node
        if val > node.potential_available(fr):
            msg = messages.exceeds_max_capacity(node, fr, val, earlier, explain=self.explain)
            return _ResourceFit(NO_FIT, 0, msg, EXCEEDS_MAX_QUOTA)
        # The borrowing level (a walk to the root) is worked out only where the answer
        # needs it: the height of a fit, or whether a request beyond nominal may reclaim.
        if val <= node.available(fr):
            return _ResourceFit(
                FIT, node.height_of_lowest_subtree_that_fits(fr, val).height, "", None
            )
        msg = messages.insufficient_unused_quota(node, fr, val, earlier, explain=self.explain)
        # Kueue: only a request within nominal quota (or one that may reclaim lower in the
        # hierarchy, or a queue that may preempt while borrowing) may preempt, even at home.
        if (
            val <= node.nominal(fr)
            or self.can_preempt_while_borrowing
            or node.height_of_lowest_subtree_that_fits(fr, val).may_reclaim
        ):
            assert self._wl is not None  # set by assign()
            answer = self.oracle(self._wl, node, fr, val)
            return _ResourceFit(answer.mode, answer.borrow, msg, WAITING_FOR_QUOTA)
        return _ResourceFit(NO_FIT, 0, msg, WAITING_FOR_QUOTA)


def _count(wl: Workload, ps: PodSet, counts: Mapping[str, int] | None) -> int:
    """The pods of ``ps`` to assign: its count (or the reduced one of partial
    admission), less its ``status.reclaimablePods`` (pods that no longer need quota)."""
    count = counts[ps.name] if counts is not None else ps.count
    reclaimable = wl.reclaimable_pods
    if reclaimable:
        count = max(0, count - reclaimable.get(ps.name, 0))
    return count
