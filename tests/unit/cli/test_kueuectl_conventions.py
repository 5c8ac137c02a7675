"""The kueuectl verbs keep kubectl's habits.

A table in a pipe as on a terminal; ``-o wide`` adds columns; ``-o`` offers no empty
choice; ``version`` and ``create --dry-run=client`` work without a cluster; Ctrl-C
exits 130 without a traceback; ``stop``/``resume`` say what they did; JOB TYPE is
never cut; ``--status`` names every valid value.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli import main as cli_main
from admission.cli.common import version
from admission.cli.main import _parser, main
from admission.kube.client import kueuectl_calls as api
from admission.kube.client import resources as k
from tests.support.kube_harness import (
    cluster_queue,
    flavor,
    local_queue,
    namespace,
    stack,
    workload,
)
from tests.unit.cli.test_kueuectl import cli, table

UNREACHABLE = """\
apiVersion: v1
kind: Config
current-context: team
contexts: [{name: team, context: {cluster: c, user: u, namespace: team-z}}]
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _subparsers(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, Any]]:
    out = [(prefix, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _subparsers(sub, f"{prefix} {name}".strip())
    return out


def test_no_output_flag_offers_an_empty_choice() -> None:
    checked = 0
    for name, parser in _subparsers(_parser()):
        for action in parser._actions:
            if "-o" in action.option_strings and action.choices is not None:
                checked += 1
                assert "" not in action.choices, name
                assert "{," not in parser.format_help(), name
    assert checked > 10


def test_version_prints_the_client_version_without_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, err = run(capsys, "version")
    assert (code, out) == (0, f"Client Version: v{version()}\n")
    assert "Traceback" not in err
    code, out, err = run(capsys, "version", "--client")
    assert (code, out, err) == (0, f"Client Version: v{version()}\n", "")
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(UNREACHABLE)
    code, out, err = run(capsys, "version", "--kubeconfig", str(kubeconfig))
    assert (code, out) == (0, f"Client Version: v{version()}\n")
    assert err.startswith("no server version: Cannot connect to host 127.0.0.1:1")


def test_create_dry_run_client_prints_the_object_without_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, err = run(
        capsys, "create", "localqueue", "lq", "-c", "cq", "--dry-run=client", "-o", "yaml"
    )
    assert (code, err) == (0, "")
    assert yaml.safe_load(out) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": "default"},
        "spec": {"clusterQueue": "cq"},
    }
    # the context's namespace, read from a kubeconfig whose server is never contacted
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(UNREACHABLE)
    code, out, err = run(
        capsys,
        "create",
        "lq",
        "lq",
        "-c",
        "cq",
        "--dry-run=client",
        "--kubeconfig",
        str(kubeconfig),
    )
    assert (code, out, err) == (0, "localqueue.kueue.x-k8s.io/lq created (dry run)\n", "")
    code, out, _ = run(
        capsys, "create", "lq", "lq", "-c", "cq", "--dry-run", "-o", "json",
        "--kubeconfig", str(kubeconfig),
    )  # fmt: skip
    assert code == 0 and '"namespace": "team-z"' in out


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "workloads"],
        ["version"],
        ["plan", "-f", "manifests/examples"],
        ["simulate"],
    ],
)
def test_ctrl_c_exits_130_without_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    def interrupted(*_a: Any, **_k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(api.UserApi, "connect", interrupted)
    monkeypatch.setattr(cli_main, "cmd_plan", interrupted)
    monkeypatch.setattr(cli_main, "cmd_simulate", interrupted)
    monkeypatch.setattr("admission.cli.kueuectl.client_version", interrupted)
    code, _, err = run(capsys, *argv)
    assert code == 130
    assert "Traceback" not in err


def test_status_names_every_valid_value_in_its_help_and_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(UNREACHABLE)  # the flag is checked before any request
    code, _, err = run(capsys, "list", "wl", "--status", "running", "--kubeconfig", str(kubeconfig))
    values = ["all", "pending", "quotareserved", "admitted", "finished"]
    assert code == 2
    assert err.strip() == (
        "quartermaster: invalid status value (running). "
        'Must be "all", "pending", "quotareserved", "admitted" or "finished"'
    )
    with pytest.raises(SystemExit):
        _parser().parse_args(["list", "wl", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"one of {', '.join(values)}" in help_text


def test_an_unreachable_server_is_one_line_in_kubectls_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(UNREACHABLE)
    code, out, err = run(capsys, "list", "workloads", "--kubeconfig", str(kubeconfig))
    assert (code, out) == (1, "")
    assert len(err.splitlines()) == 1
    assert err.startswith("Unable to connect to the server: Cannot connect to host 127.0.0.1:1")


OBJECTS = [
    namespace("team-a"),
    flavor("f", pool="a"),
    cluster_queue("cq", {"f": {"cpu": 2}}, cohort="research"),
    local_queue("team-a", "lq", "cq"),
]


def test_live_verbs_print_tables_in_a_pipe_wide_columns_and_whole_job_types(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS) as s:
            kc = s.kubeconfig(tmp_path / "kc", namespace="team-a")
            wl = workload("team-a", "w0", queue="lq", pod_sets=[("main", 1, "1")])
            wl["metadata"]["ownerReferences"] = [
                {"apiVersion": "batch.example.com/v1", "kind": "TrainingRun",
                 "name": "llm", "uid": "u1", "controller": True},
            ]  # fmt: skip
            await s.user.create(k.WORKLOADS, wl, namespace="team-a")
            # stdout is a pipe here: still kubectl's table
            code, out, err = await cli(kc, "list", "workloads")
            assert code == 0, err
            (row,) = table(out)
            assert row["JOB TYPE"] == "trainingrun.batch.example.com"
            assert "PRIORITY" not in row

            code, out, err = await cli(kc, "list", "workloads", "-o", "wide")
            assert code == 0, err
            (row,) = table(out)
            assert set(row) >= {"PRIORITY", "PRIORITY CLASS", "REASON"}
            assert row["JOB TYPE"] == "trainingrun.batch.example.com"

            code, out, err = await cli(kc, "list", "clusterqueues", "-o", "wide")
            (row,) = table(out)
            assert row["FLAVORS"] == "f"
            assert row["STOP POLICY"] == "None"
            assert row["QUEUEING STRATEGY"] == "BestEffortFIFO"

            code, out, err = await cli(kc, "list", "localqueues", "-o", "wide")
            (row,) = table(out)
            assert row["STOP POLICY"] == "None"

            code, out, err = await cli(kc, "list", "resourceflavors", "-o", "wide")
            (row,) = table(out)
            assert {"NODE TAINTS", "TOPOLOGY"} <= set(row)

            code, out, err = await cli(kc, "stop", "localqueue", "lq", "--keep-already-running")
            assert (code, out) == (0, "localqueue.kueue.x-k8s.io/lq stopped\n"), err
            code, out, err = await cli(kc, "stop", "clusterqueue", "cq", "--dry-run=server")
            assert out == "clusterqueue.kueue.x-k8s.io/cq stopped (server dry run)\n", err
            code, out, err = await cli(kc, "resume", "localqueue", "lq")
            assert (code, out) == (0, "localqueue.kueue.x-k8s.io/lq resumed\n"), err

    asyncio.run(main())
