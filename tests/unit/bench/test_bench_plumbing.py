"""The benchmarks' plumbing (speed is measured by ``python -m bench``, never here).

One small run of the stack harness (the real service, Kueue's runner, the double) on a
tiny Kueue generator config must admit every workload and report figures consistent
with each other (requests per workload, the timeline of where the wall time went); the
simulator benchmark's policy variants must change what they say they change."""

from __future__ import annotations

from pathlib import Path

import pytest

TINY = """\
cohorts:
  - className: cohort
    count: 1
    queuesSets:
    - className: cq
      count: 2
      nominalQuota: 2
      borrowingLimit: 2
      reclaimWithinCohort: Any
      withinClusterQueue: LowerPriority
      workloadsSets:
      - count: 8
        creationIntervalMs: 600
        workloads:
        - className: small
          runtimeMs: 100
          priority: 50
          request: 1
      - count: 1
        creationIntervalMs: 1
        workloads:
        - className: long
          runtimeMs: 8000
          priority: 50
          request: 1
"""


def test_a_tiny_harness_run_admits_everything_and_its_timeline_adds_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.stack import run_harness

    (tmp_path / "baseline.yaml").write_text(TINY)
    monkeypatch.setenv("QM_KUEUE_PERF_DIR", str(tmp_path))
    # the budget only stops a hung run (about 10 s alone, several times that on a
    # loaded machine): what is checked is what the run did, not how long it took
    r = run_harness("baseline", backend="double", budget_seconds=600)
    assert not r["timedOut"]
    # (the long one holds quota past the end of generation, so the recorder sees the
    # last small ones before its stop condition, as in Kueue's runner on a long run)
    assert r["workloads"] == 18 and r["admissions"] == 18
    # every admission is one budgeted write at least
    assert r["budgetedRequestsPerWorkload"] >= 1.0
    t = r["timeline"]
    assert 0 <= t["runnerStartMs"] <= t["firstAdmissionMs"] <= t["lastAdmissionMs"] <= t["stopMs"]
    # the long one finishes 8 s after its admission, before the stop (all must finish)
    assert t["lastAdmissionMs"] <= t["lastFinishMs"] <= t["stopMs"]
    assert t["stopMs"] == r["wallMs"]
    # 8 workloads per queue are generated 600 ms apart: the runner cannot stop earlier
    assert t["generatedMs"] - t["runnerStartMs"] >= 7 * 600
    assert t["budgetIdleMs"] <= r["wallMs"]


def test_the_sim_policy_variants_change_what_they_say_in_the_shipped_baseline() -> None:
    """``bench sim-baseline``'s policyVariants rewrite Kueue's generator config: each
    replacement must exist in the shipped copy (else the variant would silently be
    Kueue's policy again)."""
    from bench.sim import VARIANTS, scenario_dir

    text = (scenario_dir() / "baseline.yaml").read_text()
    for variant, (replacements, _section) in VARIANTS.items():
        for old, _new in replacements:
            assert old in text, variant


LARGE = """\
cohorts:
  - className: cohort
    count: 1
    queuesSets:
    - className: cq
      count: 2
      nominalQuota: 4
      borrowingLimit: 4
      reclaimWithinCohort: Any
      withinClusterQueue: LowerPriority
      workloadsSets:
      - count: 20
        creationIntervalMs: 100
        workloads:
        - className: small
          runtimeMs: 300
          priority: 50
          request: 2
      - count: 3
        creationIntervalMs: 900
        workloads:
        - className: large
          runtimeMs: 500
          priority: 200
          request: 4
"""


def test_the_progress_aware_row_checks_each_statistic_against_kueue_plus_the_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``progressAware``'s target is met statistic by statistic: each of the high class's
    average, p95 and max time to admission against the same statistic under Kueue's
    rules plus the notice window, and the makespan against 1.05 × the bound."""
    from bench.sim import NOTICE_MS, progress_aware

    (tmp_path / "baseline.yaml").write_text(LARGE)
    monkeypatch.setenv("QM_KUEUE_PERF_DIR", str(tmp_path))
    stats = ("averageTimeToAdmissionMs", "p95TimeToAdmissionMs", "maxTimeToAdmissionMs")
    # Kueue's figures as if its average were far lower than ours could be: that one misses
    kueue = {s: {"large": 10_000} for s in stats}
    kueue["averageTimeToAdmissionMs"]["large"] = -NOTICE_MS - 1
    row = progress_aware("baseline", kueue)
    met = row["targetsMet"]
    assert set(met) == {
        "makespanOverLowerBound",
        "largeAverageTimeToAdmissionMs",
        "largeP95TimeToAdmissionMs",
        "largeMaxTimeToAdmissionMs",
    }
    for s in stats:
        name = f"large{s[0].upper()}{s[1:]}"
        margin = row[f"{name}OverKueuePlusNotice"]
        assert margin == row[s]["large"] - (kueue[s]["large"] + NOTICE_MS)
        assert met[name] is (margin <= 0)
    assert met["largeAverageTimeToAdmissionMs"] is False
    assert met["largeP95TimeToAdmissionMs"] is met["largeMaxTimeToAdmissionMs"] is True
    assert met["makespanOverLowerBound"] is (row["makespanOverLowerBound"] <= 1.05)
