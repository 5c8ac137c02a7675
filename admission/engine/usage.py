"""Decayed usage history: Admission Fair Sharing between LocalQueues and credits
between ClusterQueues and Cohorts.

* **Admission Fair Sharing** (Kueue, §4.9), per LocalQueue of a ClusterQueue with
  ``admissionScope.admissionMode: UsageBasedAdmissionFairSharing``: the consumed
  resources decay with a half-life and are sampled every interval; an *entry penalty*
  (``alpha(samplingInterval)·requests``) is added the moment a workload is admitted so
  a burst cannot slip in before the next sample. The ClusterQueue's queue takes the
  LocalQueue with the lowest weighted usage first.
* **Cohort credits** (our extension, ``cohortCredits``): every ClusterQueue and Cohort
  keeps a decayed, resource-weighted usage rate ū; its credit is
  ``τ·(w/Σw·C − ū)`` (see ``queues.fairshare``) in resource-weighted units × seconds.
  Credits decide who borrows idle capacity first; nominal quota is never affected
  (ordering puts non-borrowing workloads first, whatever the credits say).

Amounts are kept in natural units (cpu in cores, everything else whole units) so
resource weights read as in Kueue's configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from admission.engine.cache import Cache
from queues.fairshare import alpha, credit, decay, weighted, window
from queues.model import USAGE_BASED_AFS, FlavorResource, Workload
from queues.quota_node import QuotaNode


class UsageSection(Protocol):
    """What the tracker reads of a usage section of the configuration
    (``admissionFairSharing`` or ``cohortCredits``; parsed by :mod:`admission.config.schema`)."""

    @property
    def resourceWeights(self) -> dict[str, float]: ...  # noqa: N802 (Kueue's field name)

    def half_life(self) -> float: ...

    def sampling(self) -> float: ...


def natural(resource: str, units: float) -> float:
    """Engine units to natural units (cpu milli-cores to cores)."""
    return units / 1000.0 if resource == "cpu" else float(units)


def by_resource(usage: Mapping[FlavorResource, int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for (_flavor, r), v in usage.items():
        out[r] = out.get(r, 0.0) + natural(r, v)
    return out


class UsageTracker:
    """Sampled, decayed usage for LocalQueues (AFS) and tree nodes (credits)."""

    def __init__(
        self,
        cache: Cache,
        *,
        admission_fair_sharing: UsageSection | None,
        cohort_credits: UsageSection | None,
        evaluated_at: float | None,
        now: float,
    ) -> None:
        """``evaluated_at`` is ``plan --now``: LocalQueues' recorded consumption is
        decayed from its ``lastUpdate`` to that time (None: taken as current)."""
        self.cache = cache
        self.afs = admission_fair_sharing
        self.credits_cfg = cohort_credits
        self.last_sample = now
        # AFS: LocalQueue key -> resource -> consumed (natural units), and penalties.
        self.consumed: dict[str, dict[str, float]] = {}
        self.penalty: dict[str, dict[str, float]] = {}
        # Credits: ("cq"|"cohort", name) -> decayed weighted usage rate.
        self.rate: dict[tuple[str, str], float] = {}
        if self.afs is not None:
            hl = self.afs.half_life()
            current = self._lq_current_usage()
            for key, lq in cache.local_queues.items():
                consumed = {r: natural(r, v) for r, v in lq.consumed_resources.items()}
                if lq.last_update is not None and evaluated_at is not None and consumed:
                    elapsed = evaluated_at - lq.last_update
                    cur = current.get(key, {})
                    consumed = {
                        r: decay(consumed.get(r, 0.0), cur.get(r, 0.0), elapsed, hl)
                        for r in set(consumed) | set(cur)
                    }
                self.consumed[key] = consumed

    # -- sampling ---------------------------------------------------------------

    def _lq_current_usage(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        cache = self.cache
        for key in cache.admitted:
            wl = cache.workloads.get(key)
            if wl is None:
                continue
            lq = f"{wl.namespace}/{wl.queue_name}"
            acc = out.setdefault(lq, {})
            for r, v in by_resource(cache.usage_of[key]).items():
                acc[r] = acc.get(r, 0.0) + v
        return out

    def _node_weighted_usage(self) -> dict[tuple[str, str], float]:
        """Full (not just bubbled) weighted usage of every ClusterQueue and Cohort."""
        assert self.credits_cfg is not None
        w = self.credits_cfg.resourceWeights
        tree = self.cache.tree
        out: dict[tuple[str, str], float] = {}
        for name, node in tree.queues.items():
            u = weighted(by_resource(node.usage), w)
            out[("cq", name)] = u
            anc = node.parent
            while anc is not None:
                out[("cohort", anc.name)] = out.get(("cohort", anc.name), 0.0) + u
                anc = anc.parent
        for name in tree.cohorts:
            out.setdefault(("cohort", name), 0.0)
        return out

    def sample(self, now: float) -> None:
        """One sampling tick: decay history towards the current usage."""
        elapsed = now - self.last_sample
        if elapsed <= 0:
            return
        if self.afs is not None:
            hl = self.afs.half_life()
            current = self._lq_current_usage()
            for key in set(self.consumed) | set(current):
                old, cur = self.consumed.get(key, {}), current.get(key, {})
                self.consumed[key] = {
                    r: decay(old.get(r, 0.0), cur.get(r, 0.0), elapsed, hl)
                    for r in set(old) | set(cur)
                }
            self.penalty.clear()  # the admitted usage is in the samples now
        if self.credits_cfg is not None:
            hl = self.credits_cfg.half_life()
            for node_key, u in self._node_weighted_usage().items():
                self.rate[node_key] = decay(self.rate.get(node_key, 0.0), u, elapsed, hl)
        self.last_sample = now

    def sampling_interval(self) -> float | None:
        intervals = [s.sampling() for s in (self.afs, self.credits_cfg) if s is not None]
        return min(intervals) if intervals else None

    # -- admission fair sharing ---------------------------------------------------

    def afs_enabled(self, cq: str) -> bool:
        spec = self.cache.cluster_queues.get(cq)
        return self.afs is not None and spec is not None and spec.admission_mode == USAGE_BASED_AFS

    def on_admit(self, wl: Workload, cq: str, usage: Mapping[FlavorResource, int]) -> None:
        if not self.afs_enabled(cq):
            return
        assert self.afs is not None
        a = alpha(self.afs.sampling(), self.afs.half_life())
        pen = self.penalty.setdefault(f"{wl.namespace}/{wl.queue_name}", {})
        for r, v in by_resource(usage).items():
            pen[r] = pen.get(r, 0.0) + a * v

    def lq_usage(self, lq_key: str) -> float:
        """Σ_r weight_r·(consumed_r + penalty_r) / LocalQueue weight (Kueue's LQ usage)."""
        assert self.afs is not None
        lq = self.cache.local_queues.get(lq_key)
        weight = lq.fair_weight if lq is not None else 1.0
        if weight <= 0:
            return float("inf")
        amounts = dict(self.consumed.get(lq_key, {}))
        for r, v in self.penalty.get(lq_key, {}).items():
            amounts[r] = amounts.get(r, 0.0) + v
        return weighted(amounts, self.afs.resourceWeights) / weight

    def lq_order_function(self, cq: str) -> Callable[[str], float] | None:
        """For a ClusterQueue with AFS: LocalQueue key -> usage (lower goes first)."""
        if not self.afs_enabled(cq):
            return None
        return self.lq_usage

    def afs_usage_of(self, wl: Workload, cq: str) -> float:
        if not self.afs_enabled(cq):
            return 0.0
        return self.lq_usage(f"{wl.namespace}/{wl.queue_name}")

    # -- credits --------------------------------------------------------------------

    def credit_of_node(self, name: str, *, cohort: bool = False) -> float:
        """A ClusterQueue's (or Cohort's) credit; 0 without ``cohortCredits``."""
        if self.credits_cfg is None:
            return 0.0
        tree = self.cache.tree
        node = (tree.cohorts if cohort else tree.queues).get(name)
        if node is None:
            return 0.0
        return self._credit(node)

    def _credit(self, node: QuotaNode) -> float:
        assert self.credits_cfg is not None
        tau = window(self.credits_cfg.half_life())
        parent = node.parent
        if parent is None:
            share, capacity = 1.0, self._pool_capacity(node)
        else:
            siblings = list(parent.children)
            total = sum(c.fair_weight for c in siblings)
            # All-zero weights: an equal split, so siblings' credits still add up.
            share = node.fair_weight / total if total > 0 else 1.0 / len(siblings)
            capacity = self._pool_capacity(parent)
        rate = self.rate.get(("cohort" if node.is_cohort else "cq", node.name), 0.0)
        return credit(share=share, capacity=capacity, rate=rate, tau=tau)

    def _pool_capacity(self, pool: QuotaNode) -> float:
        """Weighted capacity of a pool as its members see it: its subtree quota plus what
        its children keep back with lending limits (their usage counts too)."""
        assert self.credits_cfg is not None
        amounts: dict[FlavorResource, int] = dict(pool.subtree_quota)
        for child in pool.children:
            for fr, kept in child.local_quota.items():
                amounts[fr] = amounts.get(fr, 0) + kept
        return weighted(by_resource(amounts), self.credits_cfg.resourceWeights)

    def report(self) -> dict[str, dict[str, float]]:
        """Credit balances (resource-weighted units × seconds) for plan and simulate."""
        out: dict[str, dict[str, float]] = {"clusterQueues": {}, "cohorts": {}, "localQueues": {}}
        tree = self.cache.tree
        if self.credits_cfg is not None:
            for name in sorted(tree.queues):
                out["clusterQueues"][name] = round(self._credit(tree.queues[name]), 3)
            for name in sorted(tree.cohorts):
                out["cohorts"][name] = round(self._credit(tree.cohorts[name]), 3)
        if self.afs is not None:
            tau = window(self.afs.half_life())
            for key, lq in sorted(self.cache.local_queues.items()):
                if not self.afs_enabled(lq.cluster_queue):
                    continue
                siblings = [
                    x
                    for x in self.cache.local_queues.values()
                    if x.cluster_queue == lq.cluster_queue
                ]
                total = sum(x.fair_weight for x in siblings)
                node = tree.queues.get(lq.cluster_queue)
                capacity = weighted(
                    by_resource({fr: q.nominal for fr, q in node.quotas.items()}) if node else {},
                    self.afs.resourceWeights,
                )
                rate = weighted(self.consumed.get(key, {}), self.afs.resourceWeights)
                share = lq.fair_weight / total if total > 0 else 0.0
                out["localQueues"][key] = round(
                    credit(share=share, capacity=capacity, rate=rate, tau=tau), 3
                )
        return out
