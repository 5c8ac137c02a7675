"""Progress-aware preemption on Kueue's baseline scenario, cut to one cohort and a fifth
of its workloads: the high class ("large") is admitted no later than under Kueue's
rules plus the notice window, on every statistic, and the makespan stays within 5 % of
the lower bound. Simulated time only (fixed 1 ms cycles): the figures do not depend on
the machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.simulate import simulate_summary
from admission.config.load import parse_config
from admission.sim.scenario import parse_generator

BASELINE = (
    Path(__file__).resolve().parents[3] / "admission" / "scenarios" / "kueue-perf" / "baseline.yaml"
)
NOTICE_MS = 1000
STATS = ("averageTimeToAdmissionMs", "p95TimeToAdmissionMs", "maxTimeToAdmissionMs")


def _one_cohort() -> dict[str, Any]:
    doc = yaml.safe_load(BASELINE.read_text())
    (cohorts,) = doc["cohorts"]
    cohorts["count"] = 1
    for ws in cohorts["queuesSets"][0]["workloadsSets"]:
        ws["count"] //= 5
    return doc


def _run(section: dict[str, str] | None) -> dict[str, Any]:
    config = parse_config({"progressAwarePreemption": section}) if section else None
    summary, _ = simulate_summary(parse_generator(_one_cohort()), config=config)
    return summary


@pytest.fixture(scope="module")
def runs() -> tuple[dict[str, Any], dict[str, Any]]:
    return _run(None), _run({"noticeWindow": "1s"})


@pytest.mark.parametrize("stat", STATS)
def test_large_waits_no_longer_than_kueue_plus_the_notice(
    runs: tuple[dict[str, Any], dict[str, Any]], stat: str
) -> None:
    kueue, aware = runs
    theirs = kueue["workloadClasses"]["large"][stat]
    ours = aware["workloadClasses"]["large"][stat]
    assert ours <= theirs + NOTICE_MS, f"large {stat}: {ours} ms > {theirs} + {NOTICE_MS} ms"


def test_makespan_within_five_percent_of_the_bound(
    runs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    kueue, aware = runs
    assert aware["makespanOverLowerBound"] <= 1.05 < kueue["makespanOverLowerBound"]
    # the notices save the victims' work: nothing is evicted, every large admitted
    large = aware["workloadClasses"]["large"]
    assert large["neverAdmitted"] == 0
    assert sum(c["totalEvictions"] for c in aware["workloadClasses"].values()) == 0
