"""Impact warnings for quota edits: the engine's what-if, one line per effect."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from admission.drivers.impact import impact_of_edit
from admission.drivers.inputs import Inputs
from admission.drivers.loader import load_paths
from admission.drivers.plan import run_plan
from queues.model import AdmissionCheck

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"


@pytest.fixture()
def live() -> Inputs:
    """The example organisation after the service has admitted what fits."""
    inputs = load_paths([str(EXAMPLES)])
    run_plan(inputs)  # sets status.admission on the workloads it admits
    return inputs


def _impact(inputs: Inputs, kind: str, obj: object, **extra: object) -> list[str]:
    def labels(ns: str) -> dict[str, str]:
        n = inputs.namespaces.get(ns)
        return n.labels if n is not None else {"kubernetes.io/metadata.name": ns}

    return impact_of_edit(
        flavors=inputs.flavors,
        cluster_queues=inputs.cluster_queues,
        cohorts=inputs.cohorts,
        local_queues=inputs.local_queues,
        workloads={w.key: w for w in inputs.workloads},
        namespace_labels=labels,
        kind=kind,
        obj=obj,
        **extra,  # type: ignore[arg-type]
    )


def _set_quota(cq, flavor: str, resource: str, *, nominal: int, borrowing_limit: int | None = None):
    cq = copy.deepcopy(cq)
    for g in cq.resource_groups:
        for f in g.flavors:
            if f.name == flavor and resource in f.resources:
                f.resources[resource].nominal = nominal
                if borrowing_limit is not None:
                    f.resources[resource].borrowing_limit = borrowing_limit
    return cq


def test_a_quota_cut_warns_about_admitted_workloads_left_over_quota(live: Inputs) -> None:
    cq = _set_quota(
        live.cluster_queues["llm-research"], "h100", "nvidia.com/gpu", nominal=4, borrowing_limit=4
    )
    lines = _impact(live, "ClusterQueue", cq)
    assert lines[0] == (
        "ClusterQueue llm-research: admitted workloads use 32 nvidia.com/gpu on flavor h100, 24 over the "
        "new limit 8; they keep running (an edit evicts nothing)"
    )


def test_a_quota_increase_lists_the_pending_workloads_it_admits(live: Inputs) -> None:
    cq = _set_quota(
        live.cluster_queues["inference-prod"], "mig-1g-10gb", "nvidia.com/mig-1g.10gb", nominal=100
    )
    assert _impact(live, "ClusterQueue", cq) == [
        "1 pending workload(s) now fit and will be admitted: 1 in ClusterQueue inference-prod"
    ]


def test_a_cut_below_a_pending_gang_says_it_can_never_fit(live: Inputs) -> None:
    cq = _set_quota(
        live.cluster_queues["inference-prod"],
        "mig-1g-10gb",
        "nvidia.com/mig-1g.10gb",
        nominal=8,
        borrowing_limit=0,
    )
    lines = _impact(live, "ClusterQueue", cq)
    assert (
        "1 pending workload(s) can now never fit (ExceedsMaxQuota): 1 in ClusterQueue inference-prod"
        in lines
    ), lines


def test_an_edit_that_changes_nothing_has_no_warnings(live: Inputs) -> None:
    assert _impact(live, "ClusterQueue", copy.deepcopy(live.cluster_queues["research-cpu"])) == []


def test_at_most_ten_lines(live: Inputs) -> None:
    cq = _set_quota(
        live.cluster_queues["llm-research"], "h100", "nvidia.com/gpu", nominal=0, borrowing_limit=0
    )
    assert 1 <= len(_impact(live, "ClusterQueue", cq)) <= 10


def test_a_queue_with_admission_checks_is_judged_with_them(live: Inputs) -> None:
    """The what-if sees the AdmissionChecks: without them a ClusterQueue naming one would
    look inactive and the edit would seem to admit nothing."""
    checks = {"prov": AdmissionCheck("prov", "example.com/prov", active=True)}
    cq = _set_quota(
        live.cluster_queues["inference-prod"], "mig-1g-10gb", "nvidia.com/mig-1g.10gb", nominal=100
    )
    cq.admission_checks = {"prov": ()}
    live.cluster_queues["inference-prod"].admission_checks = {"prov": ()}
    assert _impact(live, "ClusterQueue", cq, admission_checks=checks) == [
        "1 pending workload(s) now fit and will be admitted: 1 in ClusterQueue inference-prod"
    ]
    assert _impact(live, "ClusterQueue", cq) == []  # the check unknown: the queue is inactive
