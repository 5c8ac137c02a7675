"""cycle-5k's measurement of kept answers (``QM_CYCLE5K_TIME_KEPT``) on a small world:
the timer changes nothing the cycles decide, and it counts the heads the kept answers
served. (Its times are a measurement, never asserted.)"""

from __future__ import annotations

from typing import Any

import pytest

import bench.cycle5k as cycle5k


@pytest.fixture
def small_world(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cycle5k, "CQS", 40)
    monkeypatch.setattr(cycle5k, "PENDING", 800)
    monkeypatch.setattr(cycle5k, "FINISHES", 6)
    monkeypatch.setattr(cycle5k, "STEADY_ADMISSIONS", 10)
    monkeypatch.setattr(cycle5k, "CYCLES", 6)
    monkeypatch.setattr(cycle5k, "SHAPES", {"flat": (4,), "deep": (2, 2, 1)})
    monkeypatch.setenv("QM_CYCLE5K_FREEZE", "0")  # (no gc.freeze in the test process)


def _decided(out: dict[str, Any]) -> tuple[object, ...]:
    return tuple(
        out[k]
        for k in (
            "fillCycles",
            "steadyCycles",
            "pending",
            "admitted",
            "headsPerCycle",
            "admissionsPerCycle",
            "preemptionsPerCycle",
        )
    )


@pytest.mark.parametrize("shape", ["flat", "deep"])
def test_timing_the_kept_answers_decides_the_same_and_counts_them(
    shape: str, small_world: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QM_CYCLE5K_TIME_KEPT", raising=False)
    plain = cycle5k.run_shape(shape)
    assert plain["keptAnswers"] is None

    hits: list[int] = []
    real_nominate = cycle5k._KeptAnswerTimer.nominate

    def counting(self: cycle5k._KeptAnswerTimer, e: Any, snap: Any, **kw: Any) -> None:
        before = self._nominator.kept.hits
        real_nominate(self, e, snap, **kw)
        hits.append(self._nominator.kept.hits - before)

    monkeypatch.setattr(cycle5k._KeptAnswerTimer, "nominate", counting)
    monkeypatch.setenv("QM_CYCLE5K_TIME_KEPT", "1")
    timed = cycle5k.run_shape(shape)

    assert _decided(timed) == _decided(plain)
    kept = timed["keptAnswers"]
    assert kept is not None
    # every nomination went through the timer, and it counted exactly those the kept
    # answers served (over the fill and the steady cycles; the figure is per steady cycle)
    assert hits and set(hits) <= {0, 1}
    assert 0 < kept["perCycle"] * timed["steadyCycles"] <= sum(hits)
    assert set(kept["evaluationMs"]) == set(kept["cycleLessEvaluationMs"]) == {"p50", "p99"}
