"""The scenario runner itself: a typo in a table must fail, not drop a check."""

from __future__ import annotations

import pytest

from tests.scenario_runner import validate_spec


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
