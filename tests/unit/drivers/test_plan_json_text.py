"""``plan -o json`` writes exactly what ``json.dumps(doc, indent=2)`` writes, whichever
encoder wrote it (orjson for the documents it writes byte for byte the same)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from admission.drivers.plan import plan_json_text

DOCS: list[Any] = [
    {},
    {"admitted": [], "preempted": [], "pending": [], "usage": {}},
    {"admitted": [{"workload": "ns/a", "cycle": 3, "podSetAssignments": [{"count": 2}]}]},
    {"pending": [{"message": 'quote " backslash \\ slash / tab \t nul \x00 esc \x1b'}]},
    {"pending": [{"message": "DEL \x7f"}]},  # escaped by the standard encoder only
    {"pending": [{"message": "non-ASCII é — \u2028"}]},  # escaped by the standard encoder only
    {"fairSharing": {"clusterQueues": {"a": 1e-05, "b": 0.5, "c": 1e16}}},  # float formats
    {"credits": {"a": float("inf")}},
    {"usage": {1: "an integer key"}},  # the standard encoder makes it a string
    {"cycles": 2**70},  # beyond 64 bits
    {"cycles": True, "whatIf": {"files": ["x.yaml"], "changes": [{"before": None}]}},
]


@pytest.mark.parametrize("doc", DOCS)
def test_the_text_is_the_standard_encoders(doc: Any) -> None:
    assert plan_json_text(doc) == json.dumps(doc, indent=2)
