"""Unit tests of the fair-share arithmetic in ``queues.fairshare`` (docs/semantics.md
§4.8–4.9, issue 4), with values worked out by hand, and of how ``plan`` reports them.

Dominant resource share: per resource, what a node borrows above its subtree quota,
×1000, over what its parent could lend (summed over flavors), maximum over resources,
divided by the fair-sharing weight; a zero-weight borrower is infinitely unfair.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from queues.fairshare import (
    Share,
    alpha,
    borrowing_on,
    credit,
    decay,
    dominant_resource_share,
    lendable,
    weighted,
    window,
)
from queues.model import ClusterQueue, Cohort, FlavorQuotas, ResourceGroup, ResourceQuota
from queues.tree import CohortTree
from tests.support.scenario_runner import run_plan_cli

MAX_INT64 = 9223372036854775807


def _rg(quotas: dict[str, dict[str, ResourceQuota]]) -> list[ResourceGroup]:
    """flavor -> resource -> quota, as one resource group."""
    resources = sorted({r for per in quotas.values() for r in per})
    return [
        ResourceGroup(
            covered_resources=resources,
            flavors=[FlavorQuotas(name=f, resources=per) for f, per in quotas.items()],
        )
    ]


def _q(n: int, *, bl: int | None = None, ll: int | None = None) -> ResourceQuota:
    return ResourceQuota(nominal=n, borrowing_limit=bl, lending_limit=ll)


def _pair(weight_a: float = 1.0, *, gpu: bool = False) -> CohortTree:
    """cq-a and cq-b in cohort pool: 10 cpu each (engine units: milli-cores), 4 GPUs each."""

    def res() -> dict[str, ResourceQuota]:
        out = {"cpu": _q(10_000)}
        if gpu:
            out["nvidia.com/gpu"] = _q(4)
        return out

    cqs = {
        "cq-a": ClusterQueue(
            name="cq-a", cohort="pool", resource_groups=_rg({"f": res()}), fair_weight=weight_a
        ),
        "cq-b": ClusterQueue(name="cq-b", cohort="pool", resource_groups=_rg({"f": res()})),
    }
    return CohortTree(cqs, {})


# -- dominant resource share ------------------------------------------------------------


def test_share_is_borrowed_times_1000_over_lendable() -> None:
    tree = _pair()
    tree.add_usage("cq-a", {("f", "cpu"): 14_000})  # borrows 4 of the 20 the pool can lend
    share = dominant_resource_share(tree.queues["cq-a"])
    assert share.borrowing and share.dominant == "cpu"
    assert share.ratio == 4_000 * 1000 / 20_000 == 200.0
    assert share.weighted == 200.0 and share.rounded() == 200


def test_share_is_divided_by_the_weight() -> None:
    tree = _pair(weight_a=2.0)
    tree.add_usage("cq-a", {("f", "cpu"): 14_000})
    share = dominant_resource_share(tree.queues["cq-a"])
    assert share.ratio == 200.0  # unweighted
    assert share.weighted == 100.0


def test_share_within_nominal_is_zero_and_not_borrowing() -> None:
    tree = _pair()
    tree.add_usage("cq-a", {("f", "cpu"): 10_000})
    share = dominant_resource_share(tree.queues["cq-a"])
    assert share == Share(0.0, 1.0, False)
    assert share.rounded() == 0


def test_share_counts_the_workload_being_considered() -> None:
    tree = _pair()
    tree.add_usage("cq-a", {("f", "cpu"): 9_000})
    node = tree.queues["cq-a"]
    assert not dominant_resource_share(node).borrowing
    with_wl = dominant_resource_share(node, {("f", "cpu"): 3_000})
    assert with_wl.ratio == 2_000 * 1000 / 20_000 == 100.0
    assert node.usage[("f", "cpu")] == 9_000  # nothing was added to the tree


def test_dominant_resource_is_the_largest_ratio() -> None:
    tree = _pair(gpu=True)
    # cpu: 2 of 20 borrowed (100); gpu: 3 of 8 borrowed (375).
    tree.add_usage("cq-a", {("f", "cpu"): 12_000, ("f", "nvidia.com/gpu"): 7})
    share = dominant_resource_share(tree.queues["cq-a"])
    assert share.dominant == "nvidia.com/gpu"
    assert share.ratio == 3 * 1000 / 8 == 375.0


def test_equal_ratios_pick_the_alphabetically_first_resource() -> None:
    tree = _pair(gpu=True)
    # cpu: 5 of 20 (250); gpu: 2 of 8 (250).
    tree.add_usage("cq-a", {("f", "cpu"): 15_000, ("f", "nvidia.com/gpu"): 6})
    share = dominant_resource_share(tree.queues["cq-a"])
    assert share.ratio == 250.0 and share.dominant == "cpu"


def test_borrowing_is_summed_over_flavors_of_one_resource() -> None:
    cqs = {
        n: ClusterQueue(
            name=n,
            cohort="pool",
            resource_groups=_rg({"f1": {"cpu": _q(10_000)}, "f2": {"cpu": _q(10_000)}}),
        )
        for n in ("cq-a", "cq-b")
    }
    tree = CohortTree(cqs, {})
    tree.add_usage("cq-a", {("f1", "cpu"): 12_000, ("f2", "cpu"): 11_000})
    share = dominant_resource_share(tree.queues["cq-a"])
    # (2 + 1) borrowed over 40 lendable (both flavors of the pool).
    assert lendable(tree.cohorts["pool"]) == {"cpu": 40_000}
    assert share.ratio == 3_000 * 1000 / 40_000 == 75.0


def test_lendable_is_what_the_parent_could_hold_at_most() -> None:
    """A sub-cohort with a borrowing limit lends its children only subtree + limit."""
    cohorts = {
        "root": Cohort(name="root"),
        "left": Cohort(
            name="left", parent="root", resource_groups=_rg({"f": {"cpu": _q(0, bl=2_000)}})
        ),
    }
    cqs = {
        "cq-a": ClusterQueue(
            name="cq-a", cohort="left", resource_groups=_rg({"f": {"cpu": _q(10_000)}})
        ),
        "cq-b": ClusterQueue(
            name="cq-b", cohort="root", resource_groups=_rg({"f": {"cpu": _q(30_000)}})
        ),
    }
    tree = CohortTree(cqs, cohorts)
    assert lendable(tree.cohorts["root"]) == {"cpu": 40_000}
    assert lendable(tree.cohorts["left"]) == {"cpu": 12_000}
    tree.add_usage("cq-a", {("f", "cpu"): 12_000})
    assert dominant_resource_share(tree.queues["cq-a"]).ratio == 2_000 * 1000 / 12_000
    assert dominant_resource_share(tree.cohorts["left"]).ratio == 2_000 * 1000 / 40_000 == 50.0


def test_a_node_without_parent_has_no_share() -> None:
    tree = CohortTree(
        {"solo": ClusterQueue(name="solo", resource_groups=_rg({"f": {"cpu": _q(1_000)}}))}, {}
    )
    tree.add_usage("solo", {("f", "cpu"): 1_000})
    share = dominant_resource_share(tree.queues["solo"], {("f", "cpu"): 5_000})
    assert share.ratio == 0.0 and not share.borrowing


# -- zero weight, comparison, rounding --------------------------------------------------


def test_zero_weight_borrower_has_infinite_share() -> None:
    tree = _pair(weight_a=0.0)
    tree.add_usage("cq-a", {("f", "cpu"): 10_001})
    share = dominant_resource_share(tree.queues["cq-a"])
    assert share.zero_weight_borrows
    assert share.weighted == math.inf
    assert share.rounded() == MAX_INT64


def test_zero_weight_without_borrowing_is_zero() -> None:
    tree = _pair(weight_a=0.0)
    tree.add_usage("cq-a", {("f", "cpu"): 10_000})
    share = dominant_resource_share(tree.queues["cq-a"])
    assert not share.zero_weight_borrows
    assert share.weighted == 0.0 and share.rounded() == 0


def test_zero_weight_borrowers_sort_after_everyone_and_among_themselves_by_ratio() -> None:
    """Kueue's CompareDRS."""
    huge = Share(999_000.0, 0.001, True)
    small_zero = Share(1.0, 0.0, True)
    big_zero = Share(5.0, 0.0, True)
    assert huge.sort_key() < small_zero.sort_key() < big_zero.sort_key()
    assert Share(0.0, 0.0, False).sort_key() == Share(0.0, 1.0, False).sort_key()


def test_rounded_share_is_the_ceiling_of_the_weighted_share() -> None:
    assert Share(1000 / 3, 1.0, True).rounded() == 334
    assert Share(200.0, 3.0, True).rounded() == 67
    assert Share(200.0, 2.0, True).rounded() == 100


def test_borrowing_on_looks_only_at_requested_resources() -> None:
    tree = _pair(gpu=True)
    tree.add_usage("cq-a", {("f", "nvidia.com/gpu"): 6})  # borrows GPUs, not cpu
    node = tree.queues["cq-a"]
    assert not borrowing_on(node, {("f", "cpu"): 1_000}, {})
    assert borrowing_on(node, {("f", "nvidia.com/gpu"): 1}, {})
    assert borrowing_on(node, {("f", "cpu"): 1_000}, {("f", "cpu"): 11_000})
    assert not borrowing_on(node, {("f", "nvidia.com/gpu"): 0}, {})  # zero requests don't count


# -- decay, window, credits ----------------------------------------------------------------


def test_alpha_is_the_weight_of_the_newest_sample() -> None:
    assert alpha(3600, 3600) == 0.5
    assert alpha(7200, 3600) == 0.75
    assert alpha(0, 3600) == 0.0
    assert alpha(60, 0) == 1.0  # zero half-life: usage reset immediately (documented meaning)


def test_decay_moves_history_towards_current_usage() -> None:
    assert decay(100.0, 0.0, 3600, 3600) == 50.0
    assert decay(100.0, 20.0, 7200, 3600) == 100 * 0.25 + 20 * 0.75
    assert decay(8.0, 8.0, 12345, 3600) == 8.0


def test_window_is_half_life_over_ln2() -> None:
    assert window(3600) == 3600 / math.log(2)
    assert window(0) == 0.0


def test_weighted_defaults_unlisted_resources_to_one() -> None:
    assert weighted({"cpu": 4.0, "nvidia.com/gpu": 2.0}, {"nvidia.com/gpu": 10.0}) == 24.0
    assert weighted({"cpu": 4.0}, {"cpu": 0.0}) == 0.0


def test_credit_is_the_share_of_capacity_minus_usage_over_the_window() -> None:
    tau = window(3600)
    # Half of a 10-GPU pool, using 3 GPUs on average: owed 2 GPUs over the window.
    assert credit(share=0.5, capacity=10, rate=3, tau=tau) == tau * 2
    assert credit(share=0.5, capacity=10, rate=8, tau=tau) == -tau * 3


# -- plan output ----------------------------------------------------------------------------

_OBJECTS = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq-a}
spec:
  cohortName: pool
  namespaceSelector: {}
  fairSharing: {weight: 0}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: "10"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq-b}
spec:
  cohortName: pool
  namespaceSelector: {}
  fairSharing: {weight: 3}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: "20"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: team}
spec: {clusterQueue: cq-a}
"""


def _plan(tmp_path: Path, config: dict, *, workloads: str = "") -> dict:
    (tmp_path / "objects.yaml").write_text(_OBJECTS + workloads)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    code, doc, err = run_plan_cli(
        ["-f", str(tmp_path / "objects.yaml"), "--config", str(tmp_path / "config.yaml")]
    )
    assert code == 0, err
    assert doc is not None
    json.dumps(doc)  # the report must be valid JSON (no infinities)
    return doc


_ADMITTED = """
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: big, namespace: team, uid: big, creationTimestamp: "2025-01-01T00:00:00Z"}
spec:
  queueName: lq
  podSets:
  - name: main
    count: 1
    template: {spec: {containers: [{name: c, image: busybox, resources: {requests: {cpu: "13"}}}]}}
status:
  admission:
    clusterQueue: cq-a
    podSetAssignments:
    - {name: main, count: 1, flavors: {cpu: default}, resourceUsage: {cpu: "13"}}
  conditions:
  - {type: QuotaReserved, status: "True", reason: QuotaReserved, message: "", lastTransitionTime: "2025-01-01T00:00:00Z"}
"""


def test_plan_reports_weighted_shares_rounded_up_and_maxint_for_zero_weight(tmp_path: Path) -> None:
    doc = _plan(tmp_path, {"fairSharing": {}}, workloads=_ADMITTED)
    shares = doc["fairSharing"]
    assert shares["clusterQueues"] == {"cq-a": MAX_INT64, "cq-b": 0}
    assert shares["cohorts"] == {"pool": 0}  # the root has no share


def test_plan_reports_credit_balances_per_weight(tmp_path: Path) -> None:
    doc = _plan(tmp_path, {"cohortCredits": {"usageHalfLifeTime": "1h"}})
    credits = doc["credits"]
    tau = window(3600)
    # No usage history: a credit is the weighted share of the 30-cpu pool over the window
    # (cq-a weight 0, cq-b weight 3 of 3); the root owns the whole pool.
    assert credits["clusterQueues"] == {"cq-a": 0.0, "cq-b": round(tau * 30, 3)}
    assert credits["cohorts"] == {"pool": round(tau * 30, 3)}
    assert "fairSharing" not in doc  # shares are reported only with fair sharing on
