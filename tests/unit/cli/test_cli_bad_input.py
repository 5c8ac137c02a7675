"""A newcomer's mistakes get one clear line and exit 2, never a traceback.

A malformed or missing kubeconfig, a ``--report`` path that cannot hold a report, a
duration in the Configuration that does not parse: each is refused naming the file or
the field, before anything runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from admission.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "manifests" / "examples"

BAD_KUBECONFIGS = {
    "yaml-syntax": "apiVersion: v1\nkind: Config\nclusters: [[[\n",
    "not-yaml": "this is: not: a kubeconfig\n",
    "a-list": "- a\n- b\n",
    "empty": "",
    "clusters-a-number": "apiVersion: v1\nclusters: 5\ncontexts: 7\ncurrent-context: x\n",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("name", sorted(BAD_KUBECONFIGS))
@pytest.mark.parametrize("verb", [["list", "workloads"], ["list", "cq"], ["why", "x"]])
def test_a_malformed_kubeconfig_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, verb: list[str]
) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(BAD_KUBECONFIGS[name])
    code, out, err = run(capsys, *verb, "--kubeconfig", str(path))
    assert code == 2
    assert out == ""
    line = one_line(err)
    assert f"--kubeconfig {path}: not a usable kubeconfig" in line


def test_a_missing_kubeconfig_is_one_line_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    code, out, err = run(capsys, "list", "workloads", "--kubeconfig", str(missing))
    assert code == 2
    assert out == ""  # no stray "Config not found"
    assert one_line(err) == f"quartermaster: --kubeconfig {missing}: no such file"


def test_a_malformed_kubeconfig_from_the_environment_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config"
    path.write_text(BAD_KUBECONFIGS["clusters-a-number"])
    monkeypatch.setenv("KUBECONFIG", str(path))
    code, _, err = run(capsys, "list", "workloads")
    assert code == 2
    assert str(path) in one_line(err)


def test_serve_with_a_malformed_kubeconfig_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_KUBECONFIGS["not-yaml"])
    code, _, err = run(capsys, "serve", "--kubeconfig", str(path))
    assert code == 2
    assert f"--kubeconfig {path}: not a usable kubeconfig: invalid YAML at line 1" in one_line(err)


# -- simulate --report --------------------------------------------------------------------------


def test_simulate_report_at_an_existing_file_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "summary.txt"
    target.write_text("keep me")
    code, out, err = run(capsys, "simulate", "--report", str(target), "-o", "json")
    assert code == 2
    assert out == ""
    assert one_line(err) == (
        f"quartermaster simulate: --report {target}: exists and is not a directory"
    )
    assert target.read_text() == "keep me"


def test_simulate_report_at_a_path_that_cannot_be_created_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = run(capsys, "simulate", "--report", str(blocker / "report"), "-o", "json")
    assert code == 2
    assert out == ""
    assert f"--report {blocker / 'report'}: cannot create the directory" in one_line(err)


def test_simulate_report_without_matplotlib_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    target = tmp_path / "report"
    code, out, err = run(capsys, "simulate", "--report", str(target), "-o", "json")
    assert code == 2
    assert out == ""
    assert one_line(err) == (
        "quartermaster simulate: --report needs matplotlib, which is not installed: "
        "pip install 'quartermaster[report]'"
    )
    assert not target.exists()


# -- durations in the Configuration -------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("waitForPodsReady:\n  enable: true\n  timeout: banana\n", "waitForPodsReady.timeout"),
        ("waitForPodsReady:\n  recoveryTimeout: 3 days\n", "waitForPodsReady.recoveryTimeout"),
        (
            "objectRetentionPolicies:\n  workloads:\n    afterFinished: soon\n",
            "objectRetentionPolicies.workloads.afterFinished",
        ),
        (
            "controller:\n  cacheSyncTimeout: 2 minutes\n",
            "controller.cacheSyncTimeout",
        ),
    ],
)
@pytest.mark.parametrize("command", ["plan", "serve"])
def test_a_duration_that_does_not_parse_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, field: str, command: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(section)
    argv = ["plan", "-f", str(EXAMPLES)] if command == "plan" else ["serve"]
    code, out, err = run(capsys, *argv, "--config", str(config))
    assert code == 2
    assert out == ""
    line = one_line(err)
    assert line.startswith(f"quartermaster {command}: {config}: {field}: ")
    assert "is not a duration" in line
