"""``quartermaster simulate`` end to end: output, report files, bundled scenario."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from admission.cli.main import main
from admission.cli.simulate import ProgressBar
from tests.support.sim_helpers import GENERATOR_SMALL, TRACE_OBJECTS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def strip_cpu(doc: dict) -> dict:
    doc["engine"].pop("cpuSeconds")
    doc["engine"].pop("cycleCpuSeconds")
    return doc


def test_the_bundled_gpu_cluster_scenario_runs_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "-o", "json")
    assert code == 0, err
    assert err == ""  # no progress bar when stdout is not a terminal
    doc = json.loads(out)
    assert doc["scenario"] == "gpu-cluster"
    for key in ("makespanMs", "lowerBoundMs", "workloadClasses", "clusterQueueClasses", "engine"):
        assert key in doc
    assert doc["makespanMs"] >= doc["lowerBoundMs"] > 0
    classes = doc["workloadClasses"]
    assert {"system-critical", "production-high", "production", "research", "development"} <= set(
        classes
    )
    for c in classes.values():
        assert {
            "count",
            "averageTimeToAdmissionMs",
            "p95TimeToAdmissionMs",
            "totalEvictions",
        } <= set(c)
    assert doc["neverAdmitted"] == 0
    # It exercises preemption, borrowing and gangs that wait for their full size.
    assert doc["engine"]["preemptions"] > 0
    assert sum(c["totalEvictions"] for c in classes.values()) > 0
    # research-llm runs near its nominal quota all day (and borrows at peaks). Since a
    # workload that must borrow may no longer preempt in its own ClusterQueue (Kueue's
    # fitsResourceQuota), its day-long average is ~86%, no longer above 100%.
    assert max(q["usagePercent"] for q in doc["clusterQueueClasses"].values()) > 80
    assert classes["research"]["p95TimeToAdmissionMs"] > 0
    assert set(doc["clusterQueueClasses"]["research-vision"]["usagePercentByResource"]) >= {
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
    }


def test_same_scenario_and_seed_give_the_same_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gen.yaml"
    path.write_text(GENERATOR_SMALL)
    first = run(capsys, str(path), "--seed", "7", "-o", "json")
    second = run(capsys, str(path), "--seed", "7", "-o", "json")
    assert first[0] == second[0] == 0
    a, b = json.loads(first[1]), json.loads(second[1])
    assert a["seed"] == 7
    assert strip_cpu(a) == strip_cpu(b)


def test_report_writes_csvs_charts_and_an_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gen.yaml"
    path.write_text(GENERATOR_SMALL)
    out_dir = tmp_path / "report"
    code, out, err = run(capsys, str(path), "--report", str(out_dir), "-o", "json")
    assert code == 0, err
    summary = json.loads((out_dir / "summary.json").read_text())
    assert strip_cpu(summary) == strip_cpu(json.loads(out))
    rows = (out_dir / "workloads.csv").read_text().splitlines()
    assert rows[0].startswith("workload,class,clusterQueue,")
    assert len(rows) == 1 + 4 * 25
    qrows = (out_dir / "queues.csv").read_text().splitlines()
    assert qrows[0] == "timeMs,clusterQueue,class,resource,usage,nominal,usagePercent,pending"
    assert len(qrows) > 4
    charts = ["usage.png", "pending.png", "time_to_admission.png"]
    for name in charts:
        data = (out_dir / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        with Image.open(out_dir / name) as img:
            img.verify()
            assert img.size[0] > 100 and img.size[1] > 100
    index = (out_dir / "index.html").read_text()
    for name in charts:
        assert f'src="{name}"' in index
    assert "How the lower bound is computed" in index


def test_table_output_is_for_people(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gen.yaml"
    path.write_text(GENERATOR_SMALL)
    code, out, _ = run(capsys, str(path), "-o", "table")
    assert code == 0
    assert "WORKLOAD CLASSES" in out and "CLUSTERQUEUE CLASSES" in out and "lower bound" in out


def test_bad_scenario_exits_2_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gen.yaml"
    path.write_text(GENERATOR_SMALL.replace("nominalQuota: 4", "nominalQuota: four"))
    code, out, err = run(capsys, str(path), "-o", "json")
    assert code == 2
    assert out == ""
    assert str(path) in err and "cohorts[0].queuesSets[0].nominalQuota" in err


def test_bad_trace_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.yaml"
    path.write_text(TRACE_OBJECTS + "---\ntrace:\n- {namespace: team-a}\n")
    code, _, err = run(capsys, str(path))
    assert code == 2
    assert "trace[0]: localQueue: Required value" in err


def test_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("notAField: 1\n")
    code, _, err = run(capsys, "--config", str(cfg))
    assert code == 2
    assert "notAField" in err


def test_progress_bar_draws_a_line_and_ends_it() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, width=10)
    bar(5, 10, 2_500_000)
    bar.close()
    text = stream.getvalue()
    assert text.startswith("\r[#####.....]  50.0%  5/10 finished")
    assert text.endswith("\n")


def test_the_bundled_scenario_file_is_what_its_generator_writes() -> None:
    import importlib.util

    scenarios = Path(__file__).resolve().parents[3] / "admission" / "scenarios"
    spec = importlib.util.spec_from_file_location(
        "generate_gpu_cluster", scenarios / "generate_gpu_cluster.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (scenarios / "gpu-cluster.yaml").read_text()
    assert module.render() == text
    assert len(text) < 1_000_000


def test_cohort_credits_are_sampled_and_charted_when_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("cohortCredits:\n  usageHalfLifeTime: 1s\n  usageSamplingInterval: 100ms\n")
    path = tmp_path / "gen.yaml"
    path.write_text(GENERATOR_SMALL)
    out_dir = tmp_path / "report"
    code, _, err = run(
        capsys, str(path), "--config", str(cfg), "--report", str(out_dir), "-o", "json"
    )
    assert code == 0, err
    assert (out_dir / "credits.png").read_bytes().startswith(PNG_SIGNATURE)
    assert 'src="credits.png"' in (out_dir / "index.html").read_text()
