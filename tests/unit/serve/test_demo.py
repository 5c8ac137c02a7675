"""``quartermaster demo`` end to end: the command as a user runs it, then the real
``kubectl``, the ``quartermaster`` verbs and plain HTTP against what it prints; Ctrl-C
ends it with exit code 130 and nothing left behind."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from admission.apiserver_double import ADMIN_TOKEN
from admission.cli.main import main

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[3]
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
STARTUP = 300.0  # seconds; a guard against a hang on a loaded machine, not a measurement


class Demo:
    """``python -m admission demo ...`` in a subprocess, its stdout read line by line."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.tmpdir = tmp / "tmpdir"
        self.tmpdir.mkdir()
        env = {**os.environ, "TMPDIR": str(self.tmpdir), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "admission", "demo", *args],
            cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def banner(self) -> dict[str, str]:
        """Wait for the printed addresses; ``{"dashboard": url, "kubeconfig": path, ...}``."""
        fields: dict[str, str] = {}
        deadline = time.monotonic() + STARTUP
        while not (self.out and "get --raw" in self.out[-1]):
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.interrupt()
                pytest.fail(f"no banner within {STARTUP:.0f} s; stdout: {self.out}")
            if line is None:
                pytest.fail(f"demo exited {self.proc.wait()}: {self.stderr()}\n{self.out}")
            self.out.append(line)
            for key in ("dashboard", "metrics", "kubeconfig", "visibility API", "API server"):
                if line.startswith(f"  {key} "):
                    fields[key] = line[len(key) + 2 :].split()[0]
        return fields

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def interrupt(self) -> int:
        """Ctrl-C; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=STARTUP)

    def leftovers(self) -> list[str]:
        return sorted(p.name for p in self.tmpdir.iterdir())


def run(*argv: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=STARTUP,
        env={**os.environ, "HOME": str(tmp)},  # kubectl's cache stays in the test's files
    )  # fmt: skip


def until(what: str, check: Callable[[], T | None]) -> T:
    """Poll ``check`` until it returns something (the service catches up with the API
    asynchronously); the deadline only guards against a hang."""
    deadline = time.monotonic() + STARTUP
    while (found := check()) is None:
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)
    return found


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 - loopback
        return resp.status, resp.read().decode()


def test_the_demo_serves_kubectl_the_verbs_and_the_dashboard_then_stops_on_ctrl_c(
    tmp_path: Path,
) -> None:
    kubeconfig_out = tmp_path / "demo.kubeconfig"
    demo = Demo(tmp_path, "--port", "0", "--seed", "7", "--kubeconfig-out", str(kubeconfig_out))
    try:
        shown = demo.banner()
        kc = shown["kubeconfig"]
        assert kc == str(kubeconfig_out) and kubeconfig_out.exists()
        text = "\n".join(demo.out)
        assert "5 ClusterQueue" in text and "8 Job" in text
        assert "not created: JobSet vision-research/vision-eval" in text  # no JobSet CRD
        for line in (
            f"quartermaster list workloads -A --kubeconfig {kc}",
            f"quartermaster why job/vision-pretrain-too-big -n vision-research --kubeconfig {kc}",
            f"quartermaster stop clusterqueue research-cpu --kubeconfig {kc}",
            f"quartermaster resume clusterqueue research-cpu --kubeconfig {kc}",
            f"kubectl --kubeconfig {kc} get workloads -A",
        ):
            assert f"  {line}" in demo.out

        if Path(KUBECTL).exists():
            got = run(KUBECTL, "--kubeconfig", kc, "get", "clusterqueues", tmp=tmp_path)
            assert got.returncode == 0, got.stderr
            names = {row.split()[0] for row in got.stdout.splitlines()[1:]}
            assert names == {
                "inference-prod", "llm-research", "research-cpu", "training-prod",
                "vision-research",
            }  # fmt: skip

            def pending_in_vision_research() -> set[str] | None:
                raw = run(KUBECTL, "--kubeconfig", kc, "get", "--raw", shown["visibility API"],
                          tmp=tmp_path)  # fmt: skip
                assert raw.returncode == 0, raw.stderr
                items = json.loads(raw.stdout)["items"]
                owners = {ref["name"] for wl in items for ref in wl["metadata"]["ownerReferences"]}
                return owners if "vision-pretrain-too-big" in owners else None

            until("the visibility API lists the pending Job", pending_in_vision_research)

        qm = [sys.executable, "-m", "admission"]

        def too_big_row() -> list[str] | None:
            listed = run(*qm, "list", "workloads", "-A", "--kubeconfig", kc, tmp=tmp_path)
            assert listed.returncode == 0, listed.stderr
            rows = [r.split() for r in listed.stdout.splitlines()[1:]]
            return next((r for r in rows if r[3] == "vision-pretrain-too-big"), None)

        row = until("list workloads shows the Job's Workload", too_big_row)
        assert [row[i] for i in (0, 4, 5, 6)] == [
            "vision-research", "team-queue", "vision-research", "PENDING",
        ]  # fmt: skip
        why = run(*qm, "why", "job/vision-pretrain-too-big", "-n", "vision-research",
                  "--kubeconfig", kc, tmp=tmp_path)  # fmt: skip
        assert why.returncode == 0, why.stderr
        assert "ExceedsMaxQuota" in why.stdout

        status, page = get(shown["dashboard"])
        assert status == 200 and "<title>Quartermaster</title>" in page
        until(
            "the dashboard shows the five ClusterQueues",
            lambda: (
                json.loads(get(shown["dashboard"] + "api/summary")[1])["clusterQueues"] == 5 or None
            ),
        )
        _, metrics = get(shown["metrics"])
        assert "kueue_admitted_workloads_total" in metrics

        # the double's well-known admin token opens nothing: loopback is shared
        context = ssl.create_default_context(cafile=None)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        well_known = urllib.request.Request(
            shown["API server"] + "/api/v1/namespaces",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(well_known, timeout=60, context=context)  # noqa: S310
        assert refused.value.code == 401
    finally:
        code = demo.interrupt()
    assert code == 130, demo.stderr()
    assert not kubeconfig_out.exists(), "the kubeconfig it wrote is removed"
    assert demo.leftovers() == [], "its temporary directory is removed"


def test_ctrl_c_while_starting_exits_130_and_leaves_nothing(tmp_path: Path) -> None:
    demo = Demo(tmp_path, "--port", "0", "--no-jobs")
    deadline = time.monotonic() + STARTUP
    while not demo.leftovers():  # its temporary directory: the handlers are in place
        assert demo.proc.poll() is None, demo.stderr()
        assert time.monotonic() < deadline, "the demo never created its directory"
        time.sleep(0.01)
    assert demo.interrupt() == 130, demo.stderr()
    assert demo.leftovers() == []


def test_an_existing_kubeconfig_out_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "config"
    mine.write_text("my kubeconfig\n")
    assert main(["demo", "--kubeconfig-out", str(mine)]) == 2
    assert mine.read_text() == "my kubeconfig\n"
    err = capsys.readouterr().err
    assert err.startswith(f"quartermaster demo: --kubeconfig-out {mine}: the file exists")
    assert err.count("\n") == 1


def test_a_dashboard_port_in_use_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["demo", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"quartermaster demo: cannot listen on 127.0.0.1:{port} (dashboard): Address already "
        "in use (--port 0 picks a free port)\n"
    )


def test_without_the_repositorys_manifests_the_demo_says_what_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Installed without a clone (a wheel), the CRDs, webhook configurations and
    examples are not there: one line says so and how to get them."""
    from admission.serve.demo import DemoOptions, run_demo

    assert run_demo(DemoOptions(manifests=tmp_path / "manifests", port=0)) == 2
    err = capsys.readouterr().err
    assert err == (
        f"quartermaster demo: {tmp_path}/manifests/crd/kustomization.yaml not found: the demo "
        "reads the repository's manifests/ (CRDs, webhook configurations, examples); run it "
        "from a clone installed with `pip install -e .`\n"
    )
    assert list(tmp_path.iterdir()) == []
