"""Every example and every test fixture validates against the generated CRDs as the API server would.

The examples users apply, the scenario bases and the accepted scenario fixtures must pass
the generated schemas (``tests.support.crd_validation``), and the bad-input fixtures whose
problem a schema can see must be refused by the CRDs too, so the tests and a real cluster
agree on what is valid.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.support.crd_validation import (
    EXAMPLES,
    GROUP,
    LOADER,
    REPO,
    SCENARIO_BASES,
    SCENARIOS,
    V1BETA2,
    Obj,
    assert_valid,
    crd_problems,
    load_all,
)
from tests.support.scenario_shorthand import scenario_objects


def _kueue_objects(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if str(d.get("apiVersion", "")).startswith(f"{GROUP}/")]


def test_every_example_validates_against_the_crds() -> None:
    paths = sorted(EXAMPLES.rglob("*.yaml"))
    objs = [(p, o) for p in paths for o in _kueue_objects(load_all(p))]
    assert {o["kind"] for _, o in objs} >= {
        "ResourceFlavor",
        "ClusterQueue",
        "Cohort",
        "LocalQueue",
        "WorkloadPriorityClass",
    }
    for path, obj in objs:
        assert_valid(obj, str(path.relative_to(REPO)))


def _scenario_files() -> list[Path]:
    return sorted(SCENARIOS.rglob("*.yaml"))


@cache
def _scenario(path: Path) -> Obj:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=LOADER)


def _fixture_objects(path: Path) -> list[Obj]:
    spec = _scenario(path)
    return scenario_objects(spec) + list(spec.get("whatIf") or [])


def _accepted_fixture(path: Path) -> bool:
    return _scenario(path).get("expect", {}).get("exit", 0) == 0


def test_every_scenario_base_validates_against_the_crds() -> None:
    paths = sorted(SCENARIO_BASES.glob("*.yaml"))
    assert paths
    for path in paths:
        for obj in _kueue_objects(load_all(path)):
            assert_valid(obj, str(path.relative_to(REPO)))


def test_every_accepted_scenario_fixture_validates_against_the_crds() -> None:
    seen: set[str] = set()  # the scenario bases repeat in many fixtures: check each once
    failures: list[str] = []
    for path in _scenario_files():
        if not _accepted_fixture(path):
            continue
        for obj in _kueue_objects(_fixture_objects(path)):
            if obj["apiVersion"] != V1BETA2:  # v1beta1 input is for plan; no cluster serves it
                continue
            key = json.dumps(obj, sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                name = f"{path.relative_to(REPO)}: {obj['kind']} {obj['metadata']['name']}"
                failures += [f"{name}: {where}: {msg}" for where, msg in crd_problems(obj)]
    assert not failures, "\n".join(failures)
    assert len(seen) > 300


# (fixture, path, message) — bad-input scenarios whose problem the CRDs can see.
REJECTED_FIXTURES = [
    (
        "bad-input-unknown-field-in-cluster-queue",
        "spec.queueingStrategyy",
        'unknown field "queueingStrategyy"',
    ),
    ("bad-input-wrong-type", "spec.clusterQueue", "is not of type 'string'"),
    ("bad-input-unparseable-quantity", "spec.resourceGroups[0].flavors[0]", "does not match"),
    ("bad-input-borrowing-limit-without-cohort", "spec", "borrowingLimit must be nil"),
    ("bad-input-two-podsets-with-min-count", "spec.podSets", "at most one podSet"),
]


@pytest.mark.parametrize(("fixture", "path", "message"), REJECTED_FIXTURES)
def test_bad_input_fixtures_are_rejected_by_the_crds_too(
    fixture: str, path: str, message: str
) -> None:
    (file,) = SCENARIOS.rglob(f"{fixture}.yaml")
    problems = [p for o in _kueue_objects(_fixture_objects(file)) for p in crd_problems(o)]
    assert any(p.startswith(path) and message in m for p, m in problems), problems
