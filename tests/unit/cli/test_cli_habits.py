"""The command line behaves as a kubectl user expects.

``-f -``, ``-R``, ``-n``, ``-o yaml``/``-o wide``, ``--version``, help on every flag;
warnings (skipped kinds, cohort cycles, dangling LocalQueues, unused flavors,
configuration fields that have no effect) on stderr without changing the exit code;
``serve`` failing to start says why in one line; ``simulate --seed`` does something;
the report prints durations as the terminal does.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.common import version
from admission.cli.main import _parser, main
from tests.unit.drivers.test_loader import CLUSTER_QUEUE, FLAVOR, LOCAL_QUEUE, workload_doc, write

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "manifests" / "examples"


def cli(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "admission", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=timeout,
    )


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


# -- help, version ---------------------------------------------------------------------------


def _actions(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [(f"{name} {n}", a) for n, a in _actions(sub)]
        else:
            out.append((action.dest, action))
    return out


def test_every_flag_and_argument_has_help() -> None:
    missing = [name for name, a in _actions(_parser()) if not a.help or a.help == argparse.SUPPRESS]
    assert missing == []


@pytest.mark.parametrize("command", ["plan", "simulate", "serve"])
def test_help_mentions_scenario_config_report_and_defaults(command: str) -> None:
    res = cli(command, "--help")
    assert res.returncode == 0
    assert "--config FILE" in res.stdout and "Kueue Configuration" in res.stdout
    if command == "simulate":
        for text in ("SCENARIO", "generator config", "--report DIR", "index.html", "--seed N"):
            assert text in res.stdout
    if command == "plan":
        assert "-R, --recursive" in res.stdout and "-n NAMESPACE" in res.stdout
        assert "{json,table,wide,yaml}" in res.stdout


def test_version() -> None:
    res = cli("--version")
    assert res.returncode == 0
    assert res.stdout.strip() == f"quartermaster {version()} (Kueue API kueue.x-k8s.io/v1beta2)"
    assert version()[0].isdigit()


# -- inputs ----------------------------------------------------------------------------------------


def test_dash_reads_standard_input_through_the_real_command() -> None:
    text = "---".join([FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE, workload_doc("w1", namespace="team-a")])
    res = cli("plan", "-f", "-", "-o", "json", stdin=text)
    assert res.returncode == 0, res.stderr
    assert [a["workload"] for a in json.loads(res.stdout)["admitted"]] == ["team-a/w1"]


def test_standard_input_cannot_be_read_twice() -> None:
    res = cli("plan", "-f", "-", "--what-if", "-", stdin="")
    assert res.returncode == 2 and "standard input can be read only once" in res.stderr


def test_recursive_and_namespace_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(
        tmp_path / "queues.yaml",
        FLAVOR,
        CLUSTER_QUEUE,
        LOCAL_QUEUE.replace(", namespace: team-a", ""),
    )
    (tmp_path / "jobs").mkdir()
    write(tmp_path / "jobs" / "w.yaml", workload_doc("w1").replace(", namespace: team-b", ""))
    code, out, err = plan(capsys, "-f", str(tmp_path), "-o", "json")
    assert code == 0 and json.loads(out)["admitted"] == []  # not read without -R
    code, out, err = plan(capsys, "-f", str(tmp_path), "-R", "-n", "ml", "-o", "json")
    assert code == 0, err
    assert [a["workload"] for a in json.loads(out)["admitted"]] == ["ml/w1"]


def test_an_empty_directory_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan(capsys, "-f", str(tmp_path))
    assert code == 2 and f"{tmp_path}: no objects found" in err


def test_plan_runs_without_the_cyclic_collector_and_restores_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """plan is a batch command (admission.drivers.batch): the collector is off while it
    runs, and as it was afterwards, also when the command fails."""
    import gc

    import admission.drivers.plan as plan_module

    seen: list[bool] = []
    real = plan_module.run_plan

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_module, "run_plan", recording)
    assert gc.isenabled()
    code, _, err = plan(capsys, "-f", str(EXAMPLES), "-o", "json")
    assert code == 0, err
    assert seen == [False] and gc.isenabled()
    code, _, _ = plan(capsys, "-f", "/nonexistent/input.yaml")
    assert code == 2 and gc.isenabled()


# -- output formats ----------------------------------------------------------------------------------


def test_yaml_output_is_the_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    _, as_json, _ = plan(capsys, "-f", str(EXAMPLES), "-o", "json")
    _, as_yaml, _ = plan(capsys, "-f", str(EXAMPLES), "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_wide_output_has_a_row_per_pod_set_and_the_preemption_messages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, doc_text, _ = plan(capsys, "-f", str(EXAMPLES), "-o", "json")
    doc = json.loads(doc_text)
    _, table, _ = plan(capsys, "-f", str(EXAMPLES), "-o", "table")
    _, wide, _ = plan(capsys, "-f", str(EXAMPLES), "-o", "wide")
    assert "PODSET" not in table
    header = next(
        line for line in wide.splitlines() if line.startswith("WORKLOAD") and "PODSET" in line
    )
    assert header.split() == [
        "WORKLOAD",
        "CLUSTERQUEUE",
        "CYCLE",
        "PODSET",
        "COUNT",
        "FLAVORS",
        "USAGE",
    ]
    rows = sum(len(a["podSetAssignments"]) for a in doc["admitted"])
    admitted_section = wide.split("ADMITTED\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(admitted_section) == 1 + rows


def test_the_borrowing_limit_message_says_what_binds_in_plain_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = plan(capsys, "-f", str(EXAMPLES), "-o", "json")
    messages = [p["message"] for p in json.loads(out)["pending"]]
    text = next(m for m in messages if "borrowingLimit 16 of ClusterQueue inference-prod" in m)
    assert "binds: at most 16 more can be borrowed from Cohort production" in text
    assert "may come from" not in text


# -- warnings ------------------------------------------------------------------------------------------

CYCLE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: x}
spec: {parentName: y}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: y}
spec: {parentName: x}
"""


def test_problems_no_workload_meets_yet_are_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cq = CLUSTER_QUEUE.replace("namespaceSelector: {}", "namespaceSelector: {}\n  cohortName: x")
    dangling = LOCAL_QUEUE.replace("lq", "orphan").replace("clusterQueue: cq", "clusterQueue: gone")
    spot = FLAVOR.replace("default", "spot")
    file = write(tmp_path / "org.yaml", FLAVOR, spot, CYCLE, cq, LOCAL_QUEUE, dangling)
    code, out, err = plan(capsys, "-f", file, "-o", "json")
    assert code == 0 and json.loads(out)["pending"] == []
    assert err.splitlines() == [
        "quartermaster plan: warning: Cohort cycle x -> y -> x: every Cohort on it and below "
        "it is inactive; ClusterQueue cq is inactive",
        "quartermaster plan: warning: LocalQueue team-a/orphan points at ClusterQueue gone, "
        "which does not exist: its workloads stay pending (Misconfigured)",
        "quartermaster plan: warning: ResourceFlavor spot is not used by any ClusterQueue or "
        "Cohort: no workload can be admitted on it",
    ]


def test_configuration_fields_without_effect_are_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "featureGates": {"TopologyAwareScheduling": True},
                "objectRetentionPolicies": {"workloads": {"afterFinished": "1h"}},
                "fairSharing": {"preemptionStrategies": ["LessThanInitialShare"]},
            }
        )
    )
    code, _, err = plan(capsys, "-f", str(EXAMPLES), "--config", str(config), "-o", "json")
    assert code == 0
    lines = [line for line in err.splitlines() if "has no effect" in line]
    assert lines == [
        f"quartermaster plan: warning: {config}: featureGates.TopologyAwareScheduling: has no "
        "effect (Quartermaster has no feature gates)",
        f"quartermaster plan: warning: {config}: objectRetentionPolicies: has no effect "
        "(Workloads are not deleted automatically)",
    ]


def test_a_typo_in_the_configuration_is_still_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("resources:\n  transformation: []\n")
    code, _, err = plan(capsys, "-f", str(EXAMPLES), "--config", str(config))
    assert code == 2 and "resources.transformation: unknown field" in err


# -- serve: one line, no traceback ------------------------------------------------------------------------


def _busy_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def test_serve_with_a_missing_kubeconfig_says_so_in_one_line(tmp_path: Path) -> None:
    res = cli("serve", "--kubeconfig", str(tmp_path / "nope"))
    assert res.returncode == 2
    assert res.stderr == f"quartermaster serve: --kubeconfig {tmp_path / 'nope'}: no such file\n"
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    res = cli("serve", "--kubeconfig", str(broken))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith(
        f"quartermaster serve: --kubeconfig {broken}: not a usable kubeconfig"
    )
    assert len(res.stderr.splitlines()) == 1


def test_serve_without_any_kubeconfig_says_so_in_one_line(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "admission", "serve"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "kc")},
        timeout=60,
    )
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"quartermaster serve: no cluster to talk to: not running in a pod (no service account) "
        f"and KUBECONFIG={tmp_path / 'kc'} is not a usable kubeconfig (no such file); pass "
        "--kubeconfig FILE"
    ]


def test_serve_on_a_busy_port_says_so_in_one_line(tmp_path: Path) -> None:
    """The health server cannot bind: the service stops at once instead of running
    without its probes, and says which port."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n"
        "users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n"
        "current-context: c\n"
    )
    sock, port = _busy_port()
    with sock:
        res = cli(
            "serve", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1",
            "--health-port", str(port), "--metrics-port", "0", "--webhook-port", "0",
            "--cert-dir", str(tmp_path / "certs"),
        )  # fmt: skip
    assert res.returncode == 1
    lines = [line for line in res.stderr.splitlines() if line.startswith("quartermaster serve:")]
    assert lines == [
        f"quartermaster serve: cannot listen on 127.0.0.1:{port} (health port): Address already in use"
    ]
    assert "Traceback" not in res.stderr


def test_webhooks_only_on_a_busy_port_says_so_in_one_line(tmp_path: Path) -> None:
    sock, port = _busy_port()
    with sock:
        res = cli(
            "serve", "--webhooks-only", "-f", str(EXAMPLES), "--host", "127.0.0.1",
            "--webhook-port", str(port), "--cert-dir", str(tmp_path),
        )  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith("quartermaster serve: cannot listen:") and str(port) in line


def test_serve_listens_where_the_configuration_says_unless_a_flag_does(tmp_path: Path) -> None:
    from admission.cli.main import _listen_flags

    config = tmp_path / "config.yaml"
    config.write_text(
        "webhook: {port: 9555, certDir: /certs, host: 127.0.0.2}\n"
        "metrics: {bindAddress: ':8443'}\nhealth: {healthProbeBindAddress: '127.0.0.1:8082'}\n"
    )
    args = _parser().parse_args(["serve", "--config", str(config), "--metrics-port", "9000"])
    _listen_flags(args)
    assert (args.webhook_port, args.metrics_port, args.health_port) == (9555, 9000, 8082)
    assert (args.cert_dir, args.host) == ("/certs", "127.0.0.2")
    plain = _parser().parse_args(["serve"])
    _listen_flags(plain)
    assert (plain.webhook_port, plain.metrics_port, plain.health_port) == (9443, 8080, 8081)


# -- simulate: --seed, -o yaml, the report ------------------------------------------------------------------


def simulate(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["simulate", *args, "-o", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    for key in [k for k in doc["engine"] if "CpuSeconds" in k or k == "cpuSeconds"]:
        doc["engine"].pop(key)  # measured, not simulated
    return doc


def test_seed_draws_another_day_of_the_bundled_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    from admission.cli.simulate import load_scenario

    bundled = load_scenario(None)
    same = load_scenario(None, seed=2026)  # the generator's own seed: the checked-in day
    other = load_scenario(None, seed=7)
    key = [(s.workload.key, s.arrival_us, s.runtime_us) for s in bundled.workloads]
    assert [(s.workload.key, s.arrival_us, s.runtime_us) for s in same.workloads] == key
    assert [(s.workload.key, s.arrival_us) for s in other.workloads] != [k[:2] for k in key]
    first = simulate(capsys, "--seed", "7")
    again = simulate(capsys, "--seed", "7")
    assert first == again and first["seed"] == 7
    assert first["makespanMs"] != simulate(capsys)["makespanMs"]


def test_seed_breaks_ties_between_equal_workloads_by_drawn_uids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ten equal workloads arrive at once and only one fits at a time: which goes first
    is the name without a seed, the seed's draw with one."""
    from admission.cli.simulate import load_scenario, simulate_summary

    entries = [
        {"name": f"w{i}", "namespace": "team-a", "localQueue": "lq", "arrival": 0, "runtime": 10,
         "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "10"}}]}
        for i in range(10)
    ]  # fmt: skip
    trace = tmp_path / "trace.yaml"
    trace.write_text(
        "---".join([FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE])
        + "---\n"
        + yaml.safe_dump({"trace": entries})
    )

    def order(seed: int | None) -> list[str]:
        _, result = simulate_summary(load_scenario(str(trace)), seed=seed)
        done = sorted(result.records, key=lambda r: r.admitted_us)
        return [r.sim.workload.name for r in done]

    assert order(None) == [f"w{i}" for i in range(10)]
    assert order(1) == order(1)
    assert order(1) != order(None) and sorted(order(1)) == sorted(order(None))
    assert order(1) != order(2)


def test_simulate_yaml_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-o", "yaml"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["scenario"] == "gpu-cluster" and "workloadClasses" in doc


def test_the_report_prints_durations_as_the_terminal_does(tmp_path: Path) -> None:
    from admission.cli.simulate import load_scenario, simulate_summary
    from admission.sim.metrics import format_duration

    summary, _ = simulate_summary(load_scenario(None), report=str(tmp_path))
    page = (tmp_path / "index.html").read_text()
    makespan = format_duration(summary["makespanMs"])
    assert makespan.endswith("h")
    assert f'<span title="{summary["makespanMs"]} ms">{makespan}</span>' in page
    assert f"{summary['makespanMs']} ms</b>" not in page
    for w in summary["workloadClasses"].values():
        assert f">{format_duration(w['p95TimeToAdmissionMs'])}</span>" in page


def admission_waits(result: Any) -> list[float]:
    """Every admitted workload's last admission − creation, in seconds."""
    return [
        (r.admitted_us - r.sim.arrival_us) / 1e6
        for r in result.records
        if r.admitted_us is not None
    ]


def test_the_time_to_admission_axis_starts_at_the_data_and_shows_zero_waits() -> None:
    from admission.cli.simulate import load_scenario, simulate_summary
    from admission.sim.report import time_to_admission_axis

    _, result = simulate_summary(load_scenario(None))
    axis = time_to_admission_axis(result)
    waits = admission_waits(result)
    shown = [w for w in waits if w >= axis.low]
    assert axis.xlim[0] < axis.zero_x < axis.low <= min(shown) < axis.low * 100
    assert axis.xlim[1] >= max(waits)
    for _label, xs, ys in axis.lines:
        assert all(x >= axis.zero_x for x in xs) and ys[-1] == 100
    zero_classes = [label for label, xs, _ in axis.lines if xs[-1] == axis.zero_x]
    assert zero_classes, "the bundled day has a class admitted at once (drawn at 0, not 1 ms)"


def test_the_time_to_admission_axis_spends_little_of_its_length_below_a_second() -> None:
    """The bundled day's shortest non-zero waits are 1 ms (one scheduling cycle); its
    real waits run from seconds to hours. The axis shows the waits that matter."""
    from admission.cli.simulate import load_scenario, simulate_summary
    from admission.sim.report import time_to_admission_axis

    _, result = simulate_summary(load_scenario(None))
    axis = time_to_admission_axis(result)
    waits = admission_waits(result)
    assert min(w for w in waits if w > 0) <= 0.001
    low, high = (math.log10(x) for x in axis.xlim)
    below_a_second = (math.log10(1.0) - low) / (high - low)
    assert below_a_second < 0.25, f"{below_a_second:.0%} of the axis is under one second"
    assert axis.xlim[1] >= max(waits)
    # waits below the axis' lower bound are drawn with the zeros, labelled as such
    for _label, xs, ys in axis.lines:
        assert all(x == axis.zero_x or x >= axis.low for x in xs) and ys[-1] == 100
    assert axis.zero_label == f"<{axis.low:g}"
