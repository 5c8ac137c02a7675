"""A workload that issued preemptions goes first in later cycles.

Without it three workloads can evict each other forever (Kueue #13662): V borrows in
vision; C reclaims its llm nominal from V; B (llm, higher priority) preempts C; once C
is gone both V and B fit, V is older and wins, and C reclaims from V again…
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from admission.cli.main import main

TRACE = Path(__file__).resolve().parents[2] / "support" / "data" / "three-way-preemption.yaml"


def test_three_workloads_do_not_evict_each_other_forever() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", str(TRACE), "-o", "json"]) == 0
    summary = json.loads(out.getvalue())
    assert summary["engine"]["preemptions"] == 2  # C reclaims from V, B preempts C: once each
    assert not summary.get("livelockBreaks")
    assert summary["workloadClasses"]["default"]["neverAdmitted"] == 0
