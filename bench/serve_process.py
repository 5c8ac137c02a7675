"""``quartermaster serve`` as a subprocess, for the benchmarks that measure the service.

The stack benchmarks (:mod:`bench.stack`), the memory benchmark, the stress benchmark
and the invariant run all need the same thing: the real service started from the
command line against an API server, its readiness, its RSS and CPU from ``/proc``, its
Prometheus text, a clean stop (SIGTERM) or a ``kill -9``. One class does that.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback
            return int(resp.status), resp.read().decode()
    except OSError:
        return 0, ""


def _metric_sum(text: str, name: str) -> float:
    """The sum of a Prometheus metric's samples over all its label sets."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def proc_status_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``); 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (``/proc/<pid>/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class ServeProcess:
    """One ``python -m admission serve`` against ``kubeconfig``, in ``workdir``."""

    def __init__(
        self,
        *,
        kubeconfig: Path,
        workdir: Path,
        name: str = "serve",
        config: dict[str, Any] | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        log_level: str = "WARNING",
    ) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.name = name
        self.config = config
        self.args = args
        self.env = env or {}
        self.log_level = log_level
        self.cert_dir = workdir / f"{name}-certs"
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.starts = 0

    def start(self, *, ready_timeout: float = 300.0, wait_ready: bool = True) -> ServeProcess:
        self.ports = {"webhook": _free_port(), "metrics": _free_port(), "health": _free_port()}
        cmd = [sys.executable, "-m", "admission", "serve", "--kubeconfig", str(self.kubeconfig),
               "--cert-dir", str(self.cert_dir), "--host", "127.0.0.1",
               "--webhook-port", str(self.ports["webhook"]),
               "--metrics-port", str(self.ports["metrics"]),
               "--health-port", str(self.ports["health"]), *self.args]  # fmt: skip
        if self.config is not None:
            path = self.workdir / f"{self.name}-config.yaml"
            path.write_text(yaml.safe_dump(self.config))
            cmd += ["--config", str(path)]
        env = {
            **os.environ,
            "QUARTERMASTER_LOG_LEVEL": self.log_level,
            "PYTHONPATH": str(ROOT),
            **self.env,
        }
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
        log.close()
        self.starts += 1
        if wait_ready:
            self.wait_ready(timeout=ready_timeout)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, *, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self.health("readyz") != 200:
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not become ready:\n{self.log_tail()}")
            time.sleep(0.1)

    def health(self, path: str = "healthz", timeout: float = 5.0) -> int:
        return _get(f"http://127.0.0.1:{self.ports['health']}/{path}", timeout=timeout)[0]

    def metrics(self, timeout: float = 30.0) -> str:
        return _get(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=timeout)[1]

    def metric(self, name: str, text: str | None = None) -> float:
        return _metric_sum(self.metrics() if text is None else text, name)

    def rss_mib(self) -> float:
        return round(proc_status_kib(self.pid, "VmRSS") / 1024, 1)

    def peak_rss_mib(self) -> float:
        return round(proc_status_kib(self.pid, "VmHWM") / 1024, 1)

    def cpu_seconds(self) -> float:
        return round(proc_cpu_seconds(self.pid), 2)

    def wait_quiet(self, *, quiet_for: float = 5.0, timeout: float = 1800.0) -> float:
        """Wait until the service has made no API request for ``quiet_for`` seconds;
        returns the seconds waited."""
        t0 = time.monotonic()
        last = -1.0
        since = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited:\n{self.log_tail()}")
            n = self.metric("quartermaster_api_requests_total")
            if n != last:
                last, since = n, time.monotonic()
            elif time.monotonic() - since >= quiet_for:
                return round(time.monotonic() - t0, 1)
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} never went quiet in {timeout} s")

    def stop(self, *, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """``kill -9``: no drain, no Lease release."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""
