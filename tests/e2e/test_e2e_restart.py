"""Restart safety: ``quartermaster serve`` SIGKILLed at random points and started again.

The service runs as a real subprocess (``python -m admission serve --kubeconfig …``)
against the API-server double in this process. The test plays the Job controller
(a started Job completes) and kills the service after a seeded random number of its
writes, five times, restarting it each time. Every Workload write is checked as it
happens (``tests.support.kube_invariants``): no ClusterQueue ever has more quota in use than
it owns, and no Workload is ever admitted twice. In the end every job ran exactly once.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from admission.apiserver_double import ApiServerThread, start_apiserver
from tests.support.kube_harness import (
    CONTROLLER_TOKEN,
    SA_USERNAME,
    admitted,
    cluster_queue,
    flavor,
    is_true,
    job,
    local_queue,
    namespace,
)
from tests.support.kube_invariants import InvariantChecker, quotas_of

ROOT = Path(__file__).resolve().parents[2]
QUEUES = [cluster_queue(f"cq-{i}", {"f": {"cpu": 4}}) for i in range(3)]
JOBS = 24
KILLS = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def objects(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [namespace(f"ns-{i}") for i in range(3)]
    out += [flavor("f"), *QUEUES, *(local_queue(f"ns-{i}", "lq", f"cq-{i}") for i in range(3))]
    out += [
        job(f"ns-{i % 3}", f"job-{i}", queue="lq", cpu=str(rng.choice([1, 2, 3])), suspend=True)
        for i in range(JOBS)
    ]
    return out


class Serve(subprocess.Popen[bytes]):
    """A ``serve`` process and the port of its health endpoint."""

    health_port: int


def wait_until_serving(proc: Serve, log: Path, seconds: float = 60) -> None:
    """Until ``/healthz`` answers: only then is SIGTERM a graceful drain (a signal that
    arrives while Python still imports the service ends the process by the signal)."""
    import urllib.request

    end = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, f"serve exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{proc.health_port}/healthz", timeout=2):
                return
        except OSError:
            assert time.monotonic() < end, f"serve never healthy:\n{log.read_text()[-3000:]}"
            time.sleep(0.1)


def start_service(kubeconfig: Path, cert_dir: Path, log: Path) -> Serve:
    env = {
        **os.environ,
        "QUARTERMASTER_LOG_LEVEL": "WARNING",
        "QUARTERMASTER_USERNAME": SA_USERNAME,
    }
    env["PYTHONPATH"] = str(ROOT)
    cmd = [
        sys.executable, "-m", "admission", "serve",
        "--kubeconfig", str(kubeconfig), "--cert-dir", str(cert_dir), "--host", "127.0.0.1",
        "--webhook-port", str(free_port()), "--metrics-port", str(free_port()),
        "--health-port", str(health_port := free_port()),
    ]  # fmt: skip
    proc = Serve(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("ab"))
    proc.health_port = health_port
    return proc


def play_job_controller(api: ApiServerThread) -> int:
    """Started jobs complete (as the Job controller would report); returns how many did."""
    done = 0
    for j in api.list_objects("jobs"):
        if j["spec"].get("suspend") or (j.get("status") or {}).get("conditions"):
            continue
        j["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
        api.put_object(j)
        done += 1
    return done


def writes(api: ApiServerThread) -> int:
    return api.request_count(verb="patch") + api.request_count(verb="create")


class DoubleRun:
    """The restart run against the double: the store's hooks check every write."""

    # writes (patches and creates of every kind) between kills: the five gaps (55 writes
    # with this seed) end well before a run's last write, however few status writes it makes
    kill_after = (4, 16)

    def __init__(self, api: ApiServerThread) -> None:
        self.api = api
        self.checker = api.call(lambda s: InvariantChecker(quotas_of(QUEUES)).install(s))

    def kubeconfig(self, tmp_path: Path) -> Path:
        return self.api.write_kubeconfig(tmp_path / "kubeconfig", token=CONTROLLER_TOKEN)

    def writes(self) -> int:
        return writes(self.api)

    def workloads(self) -> list[dict[str, Any]]:
        return self.api.list_objects("workloads")

    def play_job_controller(self) -> None:
        play_job_controller(self.api)

    def close(self) -> None:
        pass


class RealRun:
    """The restart run against a real API server: a watch checks every Workload event;
    the Job controller (or the test, without one) finishes started Jobs."""

    kill_after = (2, 8)  # Workload events between kills (fewer than all writes)

    def __init__(self, cluster: Any) -> None:
        cluster.reset()
        self.cluster = cluster
        self.view = cluster.view
        for obj in objects(seed=9):
            if obj["kind"] == "Namespace":
                self.view.ensure_namespace(obj)
            else:
                self.view.create(obj)
        self.checker = InvariantChecker(quotas_of(QUEUES))
        self.events = 0
        self._stop = threading.Event()
        self._failure: list[BaseException] = []

        def on_event(*args: Any) -> None:
            self.events += 1
            self.checker.on_event(*args)

        def watch() -> None:
            try:
                self.view.watch("workloads", on_event, self._stop)
            except BaseException as exc:  # noqa: BLE001 - reported by close()
                self._failure.append(exc)

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()

    def kubeconfig(self, tmp_path: Path) -> Path:
        from tests.support.realserver.controlplane import SERVICE_TOKEN

        return self.cluster.cp.kubeconfig(SERVICE_TOKEN, name="service")

    def writes(self) -> int:
        return self.events  # every Workload write is one watch event

    def workloads(self) -> list[dict[str, Any]]:
        return self.view.list_objects("workloads")

    def play_job_controller(self) -> None:
        from admission.apiserver_double.jobcontroller import finish_patches

        for j in self.view.list_objects("jobs"):
            if j["spec"].get("suspend") or any(
                c.get("type") in ("Complete", "Failed")
                for c in (j.get("status") or {}).get("conditions") or []
            ):
                continue
            meta = j["metadata"]
            if not self.cluster.controller_manager:
                for patch in finish_patches(j):
                    self.view.request(
                        "PATCH", self.view.path("jobs", meta["name"], meta["namespace"]) + "/status",
                        patch, content_type="application/merge-patch+json",
                    )  # fmt: skip
                continue
            pods = self.view.request(
                "GET", self.view.path("pods", None, meta["namespace"]),
                query={"labelSelector": f"job-name={meta['name']}"},
            )["items"]  # fmt: skip
            for pod in pods:
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                self.view.request(
                    "PATCH", self.view.path("pods", pod["metadata"]["name"], meta["namespace"]) + "/status",
                    {"status": {"phase": "Succeeded"}}, content_type="application/merge-patch+json",
                )  # fmt: skip

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._failure:
            raise self._failure[0]


@contextlib.contextmanager
def restart_run(backend: Any) -> Iterator[DoubleRun | RealRun]:
    if isinstance(backend, str):
        with start_apiserver(
            objects=objects(seed=9), tokens={CONTROLLER_TOKEN: SA_USERNAME}
        ) as api:
            yield DoubleRun(api)
        return
    run = RealRun(backend)
    try:
        yield run
    finally:
        run.close()


def test_sigkilled_service_restarts_without_double_admission_or_leaked_quota(
    tmp_path: Path, backend: Any
) -> None:
    with restart_run(backend) as api:
        checker = api.checker
        kubeconfig = api.kubeconfig(tmp_path)
        log = tmp_path / "serve.log"
        rng = random.Random(21)
        kills = 0
        deadline = time.monotonic() + 240
        proc = start_service(kubeconfig, tmp_path / "certs", log)
        try:
            target = api.writes() + rng.randint(*api.kill_after)
            while True:
                assert time.monotonic() < deadline, (
                    f"no convergence; log:\n{log.read_text()[-3000:]}"
                )
                assert proc.poll() is None, (
                    f"serve exited {proc.returncode}:\n{log.read_text()[-3000:]}"
                )
                api.play_job_controller()
                wls = api.workloads()
                if len(wls) == JOBS and all(is_true(w, "Finished") for w in wls):
                    break
                if kills < KILLS and api.writes() >= target:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    proc = start_service(kubeconfig, tmp_path / "certs", log)
                    target = api.writes() + rng.randint(*api.kill_after)
                time.sleep(0.01 if isinstance(api, DoubleRun) else 0.1)
            wait_until_serving(proc, log)  # it may have been restarted just now
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0  # graceful drain exits 0
        finally:
            if proc.poll() is None:
                proc.kill()
        time.sleep(0.5 if isinstance(api, RealRun) else 0)  # the watch catches up
        assert kills == KILLS
        assert checker.violations == []
        wls = api.workloads()
        assert len(wls) == JOBS
        assert all(admitted(w) and is_true(w, "Finished") for w in wls)
        assert checker.twice() == {}
        assert sorted(checker.admissions.values()) == [1] * JOBS
