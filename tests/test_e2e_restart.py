"""Restart safety: ``quartermaster serve`` SIGKILLed at random points and started again.

The service runs as a real subprocess (``python -m admission serve --kubeconfig …``)
against the API-server double in this process. The test plays the Job controller
(a started Job completes) and kills the service after a seeded random number of its
writes, five times, restarting it each time. Every Workload write is checked as it
happens (``tests.kube_invariants``): no ClusterQueue ever has more quota in use than
it owns, and no Workload is ever admitted twice. In the end every job ran exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.apiserver import ApiServerThread, start_apiserver
from tests.kube_harness import (
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
from tests.kube_invariants import InvariantChecker, quotas_of

ROOT = Path(__file__).resolve().parent.parent
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


def start_service(kubeconfig: Path, cert_dir: Path, log: Path) -> subprocess.Popen[bytes]:
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
        "--health-port", str(free_port()),
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("ab")
    )


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


def test_sigkilled_service_restarts_without_double_admission_or_leaked_quota(
    tmp_path: Path,
) -> None:
    with start_apiserver(objects=objects(seed=9), tokens={CONTROLLER_TOKEN: SA_USERNAME}) as api:
        checker = api.call(lambda s: InvariantChecker(quotas_of(QUEUES)).install(s))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", token=CONTROLLER_TOKEN)
        log = tmp_path / "serve.log"
        rng = random.Random(21)
        kills = 0
        deadline = time.monotonic() + 240
        proc = start_service(kubeconfig, tmp_path / "certs", log)
        try:
            target = writes(api) + rng.randint(4, 30)
            while True:
                assert time.monotonic() < deadline, (
                    f"no convergence; log:\n{log.read_text()[-3000:]}"
                )
                assert proc.poll() is None, (
                    f"serve exited {proc.returncode}:\n{log.read_text()[-3000:]}"
                )
                play_job_controller(api)
                wls = api.list_objects("workloads")
                if len(wls) == JOBS and all(is_true(w, "Finished") for w in wls):
                    break
                if kills < KILLS and writes(api) >= target:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    proc = start_service(kubeconfig, tmp_path / "certs", log)
                    target = writes(api) + rng.randint(4, 30)
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0  # graceful drain exits 0
        finally:
            if proc.poll() is None:
                proc.kill()
        assert kills == KILLS
        assert checker.violations == []
        wls = api.list_objects("workloads")
        assert len(wls) == JOBS
        assert all(admitted(w) and is_true(w, "Finished") for w in wls)
        assert checker.twice() == {}
        assert sorted(checker.admissions.values()) == [1] * JOBS
