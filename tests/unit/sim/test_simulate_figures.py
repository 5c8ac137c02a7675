"""``simulate``'s figures say what they measure: units, counts, titles and chart axes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from admission.cli.main import main
from admission.cli.simulate import load_scenario, simulate_summary
from tests.support.sim_helpers import GENERATOR_SMALL


def table(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["simulate", "-o", "table", *argv]) == 0
    return capsys.readouterr().out


def section(out: str, title: str) -> list[dict[str, str]]:
    """The rows of one table of ``simulate -o table``, as header -> cell."""
    lines = out.splitlines()
    start = lines.index(title) + 1
    header = lines[start]
    # columns are separated by two spaces or more; headers are words with single spaces
    starts = [0] + [i + 2 for i in range(len(header) - 2) if header[i : i + 2] == "  "
                    and header[i + 2] != " "]  # fmt: skip
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(GENERATOR_SMALL)
    return path


def test_average_usage_is_written_in_the_unit_of_the_nominal_quota(
    capsys: pytest.CaptureFixture[str], small: Path
) -> None:
    rows = section(table(capsys, str(small)), "CLUSTERQUEUE CLASSES")
    (row,) = rows
    assert row["RESOURCE"] == "cpu" and row["NOMINAL"] == "16"  # cores
    average = float(row["AVG USAGE"])  # cores too, not milli-cores
    assert average == pytest.approx(float(row["USAGE %"]) * 16 / 100, rel=0.01)


def test_never_admitted_counts_only_the_workloads_that_arrived(
    capsys: pytest.CaptureFixture[str], small: Path
) -> None:
    summary, result = simulate_summary(load_scenario(str(small)), max_cycles=5)
    assert summary["truncated"]
    arrived = summary["stoppedEarly"]["arrivedWorkloads"]
    assert 0 < arrived < summary["workloads"]
    arrived_not_admitted = sum(
        1
        for r in result.records
        if r.sim.arrival_us <= result.stopped_at_us and r.admitted_us is None
    )
    assert summary["neverAdmitted"] == arrived_not_admitted
    assert sum(c["neverAdmitted"] for c in summary["workloadClasses"].values()) == (
        arrived_not_admitted
    )
    rows = section(table(capsys, str(small), "--max-cycles", "5"), "WORKLOAD CLASSES")
    assert sum(int(r["NEVER ADMITTED"]) for r in rows) == arrived_not_admitted


def test_the_workload_table_has_a_max_beside_the_p95(capsys: pytest.CaptureFixture[str]) -> None:
    from admission.sim.metrics import format_duration

    out = table(capsys)
    header = out.splitlines()[out.splitlines().index("WORKLOAD CLASSES") + 1].split("  ")
    header = [h.strip() for h in header if h.strip()]
    assert header[header.index("P95 TO ADMISSION") + 1] == "MAX TO ADMISSION"
    summary, _ = simulate_summary(load_scenario(None))
    rows = {r["CLASS"]: r for r in section(out, "WORKLOAD CLASSES")}
    for name, w in summary["workloadClasses"].items():
        assert rows[name]["MAX TO ADMISSION"] == format_duration(w["maxTimeToAdmissionMs"])


def test_the_report_tables_have_a_max_beside_the_p95(tmp_path: Path) -> None:
    summary, _ = simulate_summary(load_scenario(None), report=str(tmp_path))
    page = (tmp_path / "index.html").read_text()
    assert "<th>p95</th><th>max</th>" in page
    for w in summary["workloadClasses"].values():
        assert f'<td><span title="{w["maxTimeToAdmissionMs"]} ms">' in page


def test_the_gpu_hours_line_names_only_the_gpu_resources_present(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenario = os.path.join("admission", "scenarios", "gpu-preemption.yaml")
    out = table(capsys, scenario)
    (line,) = [x for x in out.splitlines() if "GPU-hours lost" in x]
    assert "(nvidia.com/gpu)" in line and "amd.com/gpu" not in line


def charts_drawn(monkeypatch: pytest.MonkeyPatch, out_dir: Path) -> dict[str, Any]:
    """Run the bundled day's report, keeping each chart's axes as it is saved."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    axes: dict[str, Any] = {}
    save = Figure.savefig

    def keep(fig: Figure, fname: Any, *args: Any, **kwargs: Any) -> None:
        fig.canvas.draw()
        axes[os.path.basename(str(fname))] = fig.axes[0]
        save(fig, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    simulate_summary(load_scenario(None), report=str(out_dir))
    return axes


def test_charts_of_counts_have_whole_number_ticks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    axes = charts_drawn(monkeypatch, tmp_path)
    ax = axes["pending.png"]
    low, high = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if low <= t <= high]
    assert len(ticks) >= 2
    assert all(float(t).is_integer() for t in ticks), ticks
