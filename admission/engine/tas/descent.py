"""Phase 2 of a TAS placement: the domains that take a podSet's pods.

Kueue's ``findLevelWithFitDomains`` and ``updateCountsToMinimum``, on the counts phase 1
(:mod:`admission.engine.tas.counts`) wrote on the snapshot's domains:

* *Level*: ``required`` — the best domain at the requested level must hold every
  slice, else the podSet does not fit; ``preferred`` — go up a level at a time until
  one domain holds it, and at the top spread over the fewest domains;
  ``unconstrained`` (and slice-only or implied requests) — spread from the domains
  with the least free capacity (Kueue's LeastFreeCapacity).
* *Descent*: level by level, give each chosen domain's pods to the fewest children,
  largest first, with *best fit* for the last one (the domain with the least
  capacity that still fits, so big domains stay whole); ties by level values, so
  the same inputs always give the same placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from admission.engine.tas.counts import MAX_COUNT, FillState, PlacementState
from admission.engine.tas.domains import Domain, FlavorSnapshot
from admission.engine.tas.no_fit import not_fit

__all__ = ["Descent"]


class Descent:
    """Phase 2 of one findTopologyAssignment call on one snapshot: the domains that take
    the pods, chosen on the counts phase 1 wrote and rewritten to what each takes."""

    def __init__(self, snap: FlavorSnapshot, per_pod: Mapping[str, int]) -> None:
        self.s = snap
        self._req = per_pod
        self.touched: list[list[Domain]] = []  # the domains phase 2 rewrote

    def done(self) -> None:
        """After phase 2: the domains it rewrote are computed again by the next fill."""
        fs = self.s.fill
        if isinstance(fs, FillState):
            for ds in self.touched:
                fs.dirty.update(ds)
        self.touched = []

    # -- sorting and best fit -----------------------------------------------------

    @staticmethod
    def sorted_with_leader(domains: Sequence[Domain], unconstrained: bool) -> list[Domain]:
        if unconstrained:  # LeastFreeCapacity: the least free first
            return sorted(
                domains,
                key=lambda d: (-d.leader_count, d.slice_count_wl, d.pod_count_wl, d.values),
            )
        return sorted(
            domains, key=lambda d: (-d.leader_count, -d.slice_count_wl, d.pod_count_wl, d.values)
        )

    @staticmethod
    def sorted_domains(domains: Sequence[Domain], unconstrained: bool) -> list[Domain]:
        if unconstrained:
            return sorted(domains, key=lambda d: (d.slice_count, d.pod_count, d.values))
        return sorted(domains, key=lambda d: (-d.slice_count, d.pod_count, d.values))

    @staticmethod
    def best_fit(
        domains: Sequence[Domain], needed: int, leader_count: int, *, slices: bool
    ) -> Domain:
        """The first domain with the smallest count ≥ needed (else the first)."""
        best, best_count = domains[0], MAX_COUNT
        for d in domains:
            if d.leader_count < leader_count:
                continue
            if slices:
                n = d.slice_count_wl if leader_count > 0 else d.slice_count
            else:
                n = d.pod_count_wl if leader_count > 0 else d.pod_count
            if needed <= n < best_count:
                best, best_count = d, n
        return best

    # -- phase 2a: the level ------------------------------------------------------

    def find_level(self, level_idx: int, st: PlacementState) -> tuple[int, list[Domain], str]:
        s = self.s
        domains = s.per_level[level_idx]
        if not domains:
            return 0, [], f"no topology domains at level: {s.levels[level_idx]}"
        ordered = self.sorted_with_leader(domains, st.unconstrained)
        top = ordered[0]
        slice_count = st.count // st.slice_size
        best_fit = not st.unconstrained
        if best_fit and top.slice_count_wl >= slice_count and top.leader_count >= st.leader_count:
            top = self.best_fit(ordered, slice_count, st.leader_count, slices=True)
        if st.unconstrained:  # LeastFreeCapacity
            for cand in ordered:
                capacity = cand.slice_count
                if st.leader_count > 0:
                    if cand.leader_count < st.leader_count:
                        continue
                    capacity = cand.slice_count_wl
                if capacity >= slice_count:
                    return level_idx, [cand], ""
            if st.required:
                return (
                    0,
                    [],
                    not_fit(self.s, self._req, ordered[-1].pod_count, slice_count, st, level_idx),
                )
        if top.slice_count_wl < slice_count or top.leader_count < st.leader_count:
            if st.required:
                return (
                    0,
                    [],
                    not_fit(self.s, self._req, top.slice_count, slice_count, st, level_idx),
                )
            if level_idx > 0 and not st.unconstrained:
                return self.find_level(level_idx - 1, st)
            results: list[Domain] = []
            remaining = slice_count
            remaining_leaders = st.leader_count
            ordered = self.prioritize_leader(
                ordered, st.count, st.leader_count, st.slice_size, True
            )
            idx = 0
            while remaining_leaders > 0 and idx < len(ordered) and ordered[idx].leader_count > 0:
                d = ordered[idx]
                if best_fit and d.slice_count_wl >= remaining:
                    d = self.best_fit(ordered[idx:], remaining, remaining_leaders, slices=True)
                results.append(d)
                remaining_leaders -= d.leader_count
                remaining -= d.slice_count_wl
                idx += 1
            if remaining_leaders > 0:
                return (
                    0,
                    [],
                    not_fit(
                        self.s,
                        self._req,
                        st.leader_count - remaining_leaders,
                        slice_count,
                        st,
                        level_idx,
                    ),
                )
            rest = self.sorted_domains(ordered[idx:], st.unconstrained)
            i = 0
            while remaining > 0 and i < len(rest):
                d = rest[i]
                if best_fit and d.slice_count >= remaining:
                    d = self.best_fit(rest[i:], remaining, 0, slices=True)
                results.append(d)
                remaining -= d.slice_count
                i += 1
            if remaining > 0:
                return (
                    0,
                    [],
                    not_fit(self.s, self._req, slice_count - remaining, slice_count, st, level_idx),
                )
            return level_idx, results, ""
        return level_idx, [top], ""

    # -- phase 2b: the descent ----------------------------------------------------

    @staticmethod
    def prioritize_leader(
        domains: list[Domain], count: int, leader_count: int, slice_size: int, slices: bool
    ) -> list[Domain]:
        if leader_count == 0 or len(domains) < 2:
            return domains
        required = count // slice_size if slices else count
        available = sum(d.slice_count if slices else d.pod_count for d in domains)
        for i, d in enumerate(domains):
            if d.leader_count < leader_count:
                continue
            penalty = (
                (d.slice_count - d.slice_count_wl) if slices else (d.pod_count - d.pod_count_wl)
            )
            if available - penalty < required:
                continue
            if i == 0:
                return domains
            return [d, *domains[:i], *domains[i + 1 :]]
        return domains

    def update_counts_to_minimum(
        self,
        domains: list[Domain],
        count: int,
        leader_count: int,
        slice_size: int,
        unconstrained: bool,
        slices: bool,
    ) -> list[Domain]:
        domains = self.prioritize_leader(domains, count, leader_count, slice_size, slices)
        result: list[Domain] = []
        self.touched.append(result)  # rewritten below: their counts are stale afterwards
        remaining = count // slice_size if slices else count
        remaining_leaders = leader_count
        best_fit = not unconstrained
        for i, dom in enumerate(domains):
            if remaining_leaders > 0:
                d = dom
                with_leader = d.slice_count_wl if slices else d.pod_count_wl
                if best_fit and with_leader >= remaining and d.leader_count >= remaining_leaders:
                    d = self.best_fit(domains[i:], remaining, remaining_leaders, slices=slices)
                    with_leader = d.slice_count_wl if slices else d.pod_count_wl
                unit = slice_size if slices else 1
                if with_leader >= remaining and d.leader_count >= remaining_leaders:
                    self._set_primary(d, remaining, slices)
                    d.leader_count = remaining_leaders
                    d.pod_count = remaining * unit
                    result.append(d)
                    return result
                with_leader = min(with_leader, remaining)
                d.leader_count = min(d.leader_count, remaining_leaders)
                self._set_primary(d, with_leader, slices)
                d.pod_count = with_leader * unit
                remaining_leaders -= d.leader_count
                remaining -= with_leader
                result.append(d)
                continue
            d = dom
            if slices:
                if best_fit and d.slice_count >= remaining:
                    d = self.best_fit(domains[i:], remaining, 0, slices=True)
                d.leader_count = 0
                if d.slice_count >= remaining:
                    d.pod_count = remaining * slice_size
                    d.slice_count = remaining
                    result.append(d)
                    return result
                d.pod_count = d.slice_count * slice_size
                remaining -= d.slice_count
                result.append(d)
                continue
            if best_fit and d.pod_count >= remaining:
                d = self.best_fit(domains[i:], remaining, 0, slices=False)
            d.leader_count = 0
            if d.pod_count >= remaining:
                d.pod_count = remaining
                result.append(d)
                return result
            remaining -= d.pod_count
            result.append(d)
        raise AssertionError(  # Kueue logs "code assumptions violated"
            f"placement left {remaining} of {count} pod(s) unassigned in topology {self.s.topology}"
        )

    @staticmethod
    def _set_primary(d: Domain, value: int, slices: bool) -> None:
        if slices:
            d.slice_count = value
        else:
            d.pod_count = value
