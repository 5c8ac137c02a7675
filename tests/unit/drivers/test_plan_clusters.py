"""``plan`` across clusters, scenario by scenario: each directory under
tests/support/cluster_scenarios/ holds a manager's files, worker clusters' files and a
``scenario.yaml`` of runs (a Configuration, which directory each worker reads, and the
decisions expected per workload), run through the ``quartermaster plan`` command line.

``expect`` lists every MultiKueue workload of the manager (exactly those); each entry
checks the keys it gives: ``worker`` and ``reason`` exactly, ``message`` as substrings,
``nominated``, ``round`` and ``dispatcherReasons`` exactly, ``copies`` as the outcome
of the copy on each worker. ``workerUsage`` checks each worker's usage totals after the
run (copies included); ``stderr`` substrings of the warnings.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.main import main

ROOT = Path(__file__).resolve().parents[2] / "support" / "cluster_scenarios"
SCENARIOS = sorted(p.parent for p in ROOT.glob("*/scenario.yaml"))
RUN_KEYS = {"name", "config", "workers", "expect", "workerUsage", "stderr"}
ENTRY_KEYS = {"worker", "reason", "message", "nominated", "round", "dispatcherReasons", "copies"}


def plan(args: list[str]) -> tuple[int, dict[str, Any] | None, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", *args])
    doc = json.loads(out.getvalue()) if code == 0 and args[-1] == "json" else None
    return code, doc, err.getvalue()


def _runs() -> list[Any]:
    out = []
    for d in SCENARIOS:
        spec = yaml.safe_load((d / "scenario.yaml").read_text())
        assert set(spec) <= {"description", "runs"}, f"{d.name}: unknown keys"
        for i, run in enumerate(spec["runs"]):
            out.append(pytest.param(d, run, id=f"{d.name}/{i}-{run['name']}"))
    return out


@pytest.mark.parametrize(("directory", "run"), _runs())
def test_cluster_scenario(directory: Path, run: dict[str, Any], tmp_path: Path) -> None:
    assert set(run) <= RUN_KEYS, f"unknown keys {set(run) - RUN_KEYS}"
    args = ["-f", str(directory / "manager")]
    for name, sub in run["workers"].items():
        args += ["--worker", f"{name}={directory / sub}"]
    if "config" in run:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump(run["config"]))
        args += ["--config", str(cfg)]
    code, doc, err = plan([*args, "-o", "json"])
    assert code == 0, err
    assert doc is not None
    for text in run.get("stderr", []):
        assert text in err
    got = {w["workload"]: w for w in doc["multiKueue"]["workloads"]}
    assert set(got) == set(run["expect"])
    for key, want in run["expect"].items():
        assert set(want) <= ENTRY_KEYS, f"{key}: unknown keys {set(want) - ENTRY_KEYS}"
        have = got[key]
        for field in ("worker", "reason", "nominated", "round", "dispatcherReasons"):
            if field in want:
                assert have.get(field) == want[field], (key, field, have)
        for text in want.get("message", []):
            assert text in have["message"], (key, have["message"])
        if "copies" in want:
            outcomes = {w: c["outcome"] for w, c in have.get("copies", {}).items()}
            assert outcomes == want["copies"], (key, have)
    workers = doc["multiKueue"]["workers"]
    for worker, cqs in run.get("workerUsage", {}).items():
        usage = workers[worker]["plan"]["usage"]
        for cq, flavors in cqs.items():
            for flavor, resources in flavors.items():
                for res, total in resources.items():
                    assert usage[cq][flavor][res]["total"] == total, (worker, usage)


def test_the_worker_that_admits_holds_the_copy_and_the_manager_reserved_it() -> None:
    d = ROOT / "two-workers"
    code, doc, err = plan(
        ["-f", str(d / "manager"), "--worker", f"w1={d / 'w1'}", "--worker", f"w2={d / 'w2'}",
         "-o", "json"]
    )  # fmt: skip
    assert code == 0, err
    assert doc is not None
    reserved = {a["workload"]: a for a in doc["admitted"]}
    assert reserved["team/a"]["admissionChecks"] == ["multikueue"]
    w2 = {a["workload"] for a in doc["multiKueue"]["workers"]["w2"]["plan"]["admitted"]}
    w1 = {a["workload"] for a in doc["multiKueue"]["workers"]["w1"]["plan"]["admitted"]}
    assert "team/a" in w2 and "team/a" not in w1  # the losing copy was removed
    assert "team/b" in w1 and "team/b" not in w2


@pytest.mark.parametrize("fmt", ["table", "wide", "yaml"])
def test_every_output_format_names_the_worker(fmt: str) -> None:
    d = ROOT / "two-workers"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "-f", str(d / "manager"), "--worker", f"w1={d / 'w1'}",
                     "--worker", f"w2={d / 'w2'}", "-o", fmt])  # fmt: skip
    assert code == 0, err.getvalue()
    text = out.getvalue()
    if fmt == "yaml":
        doc = yaml.safe_load(text)
        assert {w["workload"]: w["worker"] for w in doc["multiKueue"]["workloads"]}[
            "team/a"
        ] == "w2"
    else:
        line = next(ln for ln in text.splitlines() if ln.startswith("team/a") and "Admitted" in ln)
        assert " w2 " in line
        assert "WORKER w1" in text and "WORKER w2" in text
        if fmt == "wide":
            assert "fits in flavor default" in text or "AllAtOnce" in text


def test_a_quota_edit_on_a_worker_tried_as_a_what_if(tmp_path: Path) -> None:
    d = ROOT / "two-workers"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "multiKueue:\n  dispatcherName: quartermaster.x-k8s.io/multikueue-dispatcher-fits\n"
    )
    code, doc, err = plan(
        ["-f", str(d / "manager"), "--worker", f"w1={d / 'w1'}", "--worker", f"w2={d / 'w2'}",
         "--what-if-worker", f"w1={d / 'w1-more-quota' / 'queues.yaml'}", "--config", str(cfg),
         "-o", "json"]
    )  # fmt: skip
    assert code == 0, err
    assert doc is not None
    assert doc["whatIf"]["dispatchChanges"] == [
        {"workload": "team/a", "before": {"worker": "w2", "reason": "Admitted"},
         "after": {"worker": "w1", "reason": "Admitted"}},
        {"workload": "team/b", "before": {"worker": "w1", "reason": "Admitted"},
         "after": {"worker": "w2", "reason": "Admitted"}},
    ]  # fmt: skip
    assert doc["whatIf"]["changes"] == []  # nothing changes on the manager
    assert {w["workload"]: w["worker"] for w in doc["multiKueue"]["workloads"]}["team/a"] == "w1"


def test_a_quota_edit_on_the_manager_tried_as_a_what_if(tmp_path: Path) -> None:
    d = ROOT / "two-workers"
    edit = tmp_path / "cq.yaml"
    edit.write_text((d / "manager" / "queues.yaml").read_text().replace('"30"', '"40"'))
    code, doc, err = plan(
        ["-f", str(d / "manager"), "--worker", f"w1={d / 'w1'}", "--worker", f"w2={d / 'w2'}",
         "--what-if", str(edit), "-o", "json"]
    )  # fmt: skip
    assert code == 0, err
    assert doc is not None
    changes = {c["workload"]: c for c in doc["whatIf"]["dispatchChanges"]}
    assert set(changes) == {"team/d"}
    assert changes["team/d"]["before"] == {"worker": None, "reason": "PendingOnManager"}
    # the manager now reserves it; no worker has cpu 2 left (w1 1, w2 1)
    assert changes["team/d"]["after"] == {"worker": None, "reason": "NoWorkerAdmits"}
    assert [c["workload"] for c in doc["whatIf"]["changes"]] == ["team/d"]


def test_the_managers_unqueued_jobs_and_generated_names_are_reported(tmp_path: Path) -> None:
    d = ROOT / "two-workers"
    extra = tmp_path / "jobs.yaml"
    extra.write_text(
        yaml.safe_dump_all([
            {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"generateName": "unqueued-", "namespace": "team"},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "busybox"}]}}}},
        ])
    )  # fmt: skip
    code, doc, err = plan(
        ["-f", str(d / "manager"), "-f", str(extra), "--worker", f"w1={d / 'w1'}", "-o", "json"]
    )
    assert code == 0, err
    assert doc is not None
    assert [g["generateName"] for g in doc["generatedNames"]] == ["unqueued-"]
    assert [n["kind"] for n in doc["notQueued"]] == ["Job"]
