"""The scenario runner itself: a typo in a table must fail, not drop a check."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.support.scenario_runner import run_scenario_spec, validate_spec
from tests.support.scenario_shorthand import base_objects, object_key, scenario_objects

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"expectt": {}}, "scenario"),
        ({"expect": {"admited": {}}}, "expect"),
        ({"expect": {"pending": {"ns/a": {"reasn": "X"}}}}, "expect.pending[ns/a]"),
        ({"workloads": [{"name": "a", "priorty": 3}]}, "workloads[0]"),
        ({"workloads": [{"name": "a", "podSets": [{"cout": 2}]}]}, "workloads[0].podSets[0]"),
        ({"workloads": [{"name": "a", "admitted": {"cq": "x"}}]}, "workloads[0].admitted"),
    ],
)
def test_unknown_keys_are_rejected(spec: dict, where: str) -> None:
    with pytest.raises(AssertionError, match=rf"{where.replace('[', '.').replace(']', '.')}"):
        validate_spec(spec)


def test_known_keys_pass() -> None:
    validate_spec(
        {
            "description": "d",
            "workloads": [{"name": "a", "podSets": [{"count": 1, "requests": {"cpu": 1}}]}],
            "expect": {"admitted": {"default/a": {"cycle": 1}}, "left": {}, "inadmissibleLeft": {}},
        }
    )


def _cq(name: str, **spec: object) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": "pool",
            "namespaceSelector": {},
            **spec,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "10"}]}
                    ],
                }
            ],
        },
    }


def test_a_scenario_object_replaces_the_base_object_of_its_name() -> None:
    mine = _cq("cq-a", preemption={"reclaimWithinCohort": "LowerPriority"})
    objects = scenario_objects({"bases": ["cohort-pair"], "objects": [mine]})
    cqs = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert [o["metadata"]["name"] for o in cqs] == ["cq-a", "cq-b"]
    assert cqs[0] is mine
    assert len(objects) == len(base_objects("cohort-pair"))


def test_a_later_base_overlays_an_earlier_one() -> None:
    objects = scenario_objects({"bases": ["cohort-trio", "cq-a-reclaims-any"]})
    (cq_a,) = [o for o in objects if object_key(o) == ("ClusterQueue", "", "cq-a")]
    assert cq_a["spec"]["preemption"] == {"reclaimWithinCohort": "Any"}
    assert len(objects) == len(base_objects("cohort-trio"))


def test_a_replacement_identical_to_the_base_is_refused() -> None:
    with pytest.raises(AssertionError, match="same as in base 'cohort-pair'; leave it out"):
        scenario_objects({"bases": ["cohort-pair"], "objects": [_cq("cq-b")]})


def test_an_unknown_base_is_refused_with_the_known_ones() -> None:
    with pytest.raises(AssertionError, match="no base 'cohort-pairs'.*cohort-pair"):
        scenario_objects({"bases": ["cohort-pairs"]})


@pytest.mark.parametrize(
    "wrong",
    [
        # The parked workload claimed to be still in the heap, ...
        {"left": {"other-alpha": ["eng-alpha/incoming"]}, "inadmissibleLeft": {}},
        # ... parked in another ClusterQueue, or not left at all.
        {"left": {}, "inadmissibleLeft": {"other-beta": ["eng-alpha/incoming"]}},
        {"left": {}, "inadmissibleLeft": {}},
    ],
)
def test_a_wrong_left_or_inadmissible_left_fails_the_table(wrong: dict, tmp_path: Path) -> None:
    path = SCENARIOS / "kueue" / "only-a-workload-within-nominal-may-preempt.yaml"
    spec = yaml.safe_load(path.read_text())
    (tmp_path / "right").mkdir()
    (tmp_path / "wrong").mkdir()
    run_scenario_spec(copy.deepcopy(spec), tmp_path / "right")  # the table as written passes
    spec["expect"].update(wrong)
    with pytest.raises(AssertionError, match=r"(left|inadmissibleLeft): "):
        run_scenario_spec(spec, tmp_path / "wrong")
