"""queues.api.conditions: the one reader of status conditions."""

from __future__ import annotations

from typing import Any

import pytest

from queues.api.conditions import condition, conditions, is_true

ADMITTED = {"type": "Admitted", "status": "True", "reason": "Admitted"}
EVICTED = {"type": "Evicted", "status": "False"}
WL = {"status": {"conditions": [ADMITTED, "not an object", EVICTED, {"type": "Admitted"}]}}


def test_conditions_keeps_the_entries_that_are_objects() -> None:
    assert conditions(WL) == [ADMITTED, EVICTED, {"type": "Admitted"}]


@pytest.mark.parametrize(
    "obj",
    [None, {}, {"status": None}, {"status": "x"}, {"status": {"conditions": {"a": 1}}}],
)
def test_malformed_status_reads_as_no_conditions(obj: Any) -> None:
    assert conditions(obj) == []
    assert condition(obj, "Admitted") is None
    assert not is_true(obj, "Admitted")


def test_condition_is_the_first_of_its_type() -> None:
    assert condition(WL, "Admitted") is ADMITTED
    assert condition(WL, "Finished") is None


def test_is_true_only_for_status_true() -> None:
    assert is_true(WL, "Admitted")
    assert not is_true(WL, "Evicted")
    assert not is_true(WL, "Finished")
