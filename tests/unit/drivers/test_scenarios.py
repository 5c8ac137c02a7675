"""Every YAML fixture under tests/scenarios/ is one test through `quartermaster plan`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scenario_runner import run_scenario

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").rglob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[f"{p.parent.name}/{p.stem}" for p in SCENARIOS])
def test_scenario(path: Path, tmp_path: Path) -> None:
    run_scenario(path, tmp_path)


def test_there_are_scenarios() -> None:
    assert len(SCENARIOS) >= 186  # factoring into bases must not drop any
