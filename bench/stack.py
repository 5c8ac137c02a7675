"""Kueue's scheduler-performance harness around the whole service (docs/benchmarks.md).

Three processes, like Kueue's ``minimalkueue`` against envtest:

* an API server — the in-repo double (``double``: in this process, in a thread) or a
  real kube-apiserver + etcd from ``KUBEBUILDER_ASSETS`` (``real``: the test harness's
  control plane, CRDs and RBAC installed as ``manifests/README.md`` says);
* ``python -m admission serve`` — the real service, under its service-account identity
  on the real server, with ``clientConnection.qps/burst`` from a Configuration file;
* ``python -m bench.kueue_runner`` — Kueue's runner (generator, reconciler, recorder),
  started the moment the service process is (as Kueue's runner starts minimalkueue and
  its generator together).

``wallMs`` is Kueue's: from the service process's start to the recorder's stop
condition. The service's requests come from its own metrics
(``quartermaster_api_requests_total`` by call): ``serviceRequestsPerWorkload`` counts
all of them, ``budgetedRequestsPerWorkload`` those through the client's token bucket
(Events have their own bucket, as client-go's recorder has its own client — Kueue's
published wall time is bounded by its bucket alone), and ``impliedFloorMs`` is
``workloads × budgeted requests per workload ÷ qps``: no run under that bucket can be
shorter. Kueue's published numbers ride along **only** for the real backend at Kueue's
50 QPS / 100 burst (the one like-for-like row); the double is a regression benchmark.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.sim import scenario_dir

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-controller"
USERNAME = "system:serviceaccount:quartermaster-system:quartermaster"
EVENT_CALL = "create core/events"
KUEUE_BUDGET = (50.0, 100)  # minimalkueue's client (the published runs)
KUEUE_DEFAULT_BUDGET = (300.0, 500)  # Kueue's Configuration default since kueue#12440
KUEUE = {
    "baseline": {"wallMs": 351116, "usagePercent": 55.9,
                 "averageTimeToAdmissionMs": {"large": 16501, "medium": 76768, "small": 215468}},
    "large-scale": {"wallMs": 1179411, "usagePercent": 38.64,
                    "averageTimeToAdmissionMs": {"large": 105604, "medium": 256413, "small": 700379}},
}  # fmt: skip
"""Kueue's published means (``*.rangespec.yaml`` comments): minimalkueue, envtest, 50/100."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback
            return resp.status, resp.read().decode()
    except OSError:
        return 0, ""


def _proc_status(pid: int) -> tuple[float, float]:
    """(peak RSS MiB, CPU seconds) of a running process."""
    rss = 0.0
    cpu = 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                rss = round(int(line.split()[1]) / 1024, 1)
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    return rss, round(cpu, 3)


def labelled(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one labelled counter in a Prometheus text page."""
    return {
        line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{")
    }


def _total(text: str, name: str) -> float:
    return sum(labelled(text, name).values())


@contextlib.contextmanager
def double_backend() -> Iterator[dict[str, Any]]:
    from admission.apiserver_double import start_apiserver

    with (
        tempfile.TemporaryDirectory(prefix="qm-stack-") as tmp,
        start_apiserver(
            objects=[],
            tokens={TOKEN: USERNAME},
            watch_window=500_000,
            record_requests=False,
            bookmark_interval=5.0,
        ) as api,
    ):
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig", token=TOKEN)
        yield {"name": "double", "url": api.url, "kubeconfig": kubeconfig, "token": None,
               "ca_file": None, "tmp": Path(tmp)}  # fmt: skip


@contextlib.contextmanager
def load_average() -> Iterator[dict[str, float]]:
    """The machine's 1-minute load average over a run: at its start, its end, and the
    highest seen (sampled every 10 s): requests per workload depend on it (a starved
    service or API server answers later, and more writes meet a moved object)."""
    out = {"start": round(os.getloadavg()[0], 2)}
    peak = [out["start"]]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(10.0):
            peak.append(os.getloadavg()[0])

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield out
    finally:
        done.set()
        t.join()
        out["end"] = round(os.getloadavg()[0], 2)
        out["max"] = round(max(peak + [out["end"]]), 2)


@contextlib.contextmanager
def real_backend(*, priority_and_fairness: bool = False) -> Iterator[dict[str, Any]]:
    from tests.support.realserver.cluster import RealCluster
    from tests.support.realserver.controlplane import (
        ADMIN_TOKEN,
        SERVICE_TOKEN,
        assets_dir,
        skip_reason,
    )

    assets = assets_dir()
    if assets is None:
        raise RuntimeError(f"the real backend needs a control plane: {skip_reason()}")
    cluster = RealCluster(assets, priority_and_fairness=priority_and_fairness)
    try:
        cp = cluster.cp
        yield {"name": "real", "url": cp.url,
               "kubeconfig": cp.kubeconfig(SERVICE_TOKEN, name="service"),
               "token": ADMIN_TOKEN, "ca_file": str(cp.workdir / "ca.crt"),
               "tmp": cp.workdir}  # fmt: skip
    finally:
        cluster.stop()


def run_harness(
    scenario: str,
    *,
    backend: str = "double",
    qps: float = KUEUE_BUDGET[0],
    burst: int = KUEUE_BUDGET[1],
    budget_seconds: float = 3600,
    priority_and_fairness: bool = False,
) -> dict[str, Any]:
    """One run of Kueue's harness: ``scenario`` (baseline | large-scale) on ``backend``
    (``priority_and_fairness``: the real API server with API Priority and Fairness on,
    as real clusters run it, instead of max-in-flight)."""
    config_path = scenario_dir() / f"{scenario}.yaml"
    server = (
        double_backend()
        if backend == "double"
        else real_backend(priority_and_fairness=priority_and_fairness)
    )
    with server as be, load_average() as load:
        tmp: Path = be["tmp"]
        cfg = tmp / "config.yaml"
        cfg.write_text(
            "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
            f"clientConnection:\n  qps: {qps}\n  burst: {burst}\n"
        )
        health, metrics = _free_port(), _free_port()
        env = {**os.environ, "QUARTERMASTER_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
        log_path = tmp / "serve.log"
        keep = os.environ.get("QM_STACK_KEEP")
        if keep:
            log_path = Path(keep) / f"serve-{scenario}-{backend}-{int(qps)}.log"
        started = time.time()
        serve = subprocess.Popen(
            [sys.executable, "-m", "admission", "serve", "--kubeconfig", str(be["kubeconfig"]),
             "--config", str(cfg), "--cert-dir", str(tmp / "certs"), "--host", "127.0.0.1",
             "--webhook-port", str(_free_port()), "--metrics-port", str(metrics),
             "--health-port", str(health)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"),
        )  # fmt: skip
        try:
            runner_cmd = [sys.executable, "-m", "bench.kueue_runner", "--url", be["url"],
                          "--config", str(config_path), "--timeout", str(budget_seconds)]  # fmt: skip
            if be["token"]:
                runner_cmd += ["--token", be["token"]]
            if be["ca_file"]:
                runner_cmd += ["--ca-file", be["ca_file"]]
            runner = subprocess.run(
                runner_cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                timeout=budget_seconds + 300,
            )  # fmt: skip
            if runner.returncode != 0:
                raise RuntimeError(
                    f"runner failed:\n{runner.stderr[-3000:]}\nserve:\n"
                    + log_path.read_text(errors="replace")[-2000:]
                )
            result = json.loads(runner.stdout.strip().splitlines()[-1])
            _, text = _get(f"http://127.0.0.1:{metrics}/metrics", timeout=30)
            peak, cpu = _proc_status(serve.pid)
        finally:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
    by_call = labelled(text, "quartermaster_api_requests_total")
    requests = sum(by_call.values())
    events = by_call.get(f'call="{EVENT_CALL}"', 0.0)
    budgeted = requests - events
    workloads = result["workloads"] or 1
    per_workload = budgeted / workloads
    out: dict[str, Any] = {
        "backend": backend,
        "priorityAndFairness": backend == "real" and priority_and_fairness,
        "loadAverage": load,
        "clientConnection": {"qps": qps, "burst": burst},
        "wallMs": round((result["stopEpoch"] - started) * 1000),
        "timedOut": result["timedOut"],
        "workloads": result["workloads"],
        "workloadClasses": result["workloadClasses"],
        "clusterQueueClasses": result["clusterQueueClasses"],
        "admissions": int(_total(text, "kueue_admitted_workloads_total")),
        "preemptions": int(_total(text, "kueue_preempted_workloads_total")),
        "evictions": labelled(text, "kueue_evicted_workloads_total"),
        "serviceRequests": int(requests),
        "serviceRequestsPerWorkload": round(requests / workloads, 3),
        "budgetedRequestsPerWorkload": round(per_workload, 3),
        "eventsPerWorkload": round(events / workloads, 3),
        "impliedFloorMs": round(workloads * per_workload / qps * 1000),
        "timeline": _timeline(result, started, text, budgeted, qps, burst),
        "serviceWrites": labelled(text, "quartermaster_api_writes_total"),
        "serviceRequestsByCall": by_call,
        # requests sent again after a 429 (or 5xx) with Retry-After, by call and status:
        # each is in serviceRequests too (a token each, as client-go's retries take)
        "serviceRetries": labelled(text, "quartermaster_api_retries_total"),
        # answers that were not 2xx, by call and status (409 conflicts, 429 throttling)
        "serviceErrors": labelled(text, "quartermaster_api_errors_total"),
        "runnerRequests": result["runnerRequests"],
        "runnerErrors": result["runnerErrors"],
        "cpuSeconds": cpu,  # the service process's (the runner and API server excluded)
        "peakRssMiB": peak,
    }
    if backend == "real" and (qps, burst) == KUEUE_BUDGET:
        kueue = KUEUE[scenario]
        out["kueue"] = {
            **kueue,
            "requestsPerWorkloadAtMost": round(kueue["wallMs"] / 1000 * qps / workloads, 3),
        }
    return out


def _timeline(
    result: dict[str, Any],
    started: float,
    metrics_text: str,
    budgeted: float,
    qps: float,
    burst: int,
) -> dict[str, Any]:
    """Where the wall time went, in ms from the service process's start: the runner's
    start, the end of generation, the first and the last admission it saw, the last
    finish it saw (from there to the stop: the ClusterQueue statuses), the stop.
    ``budgetIdleMs`` is the wall time the bucket could have sent requests and did not
    (wall − (budgeted − burst) ÷ qps); ``rateLimitWaitSeconds`` is what requests spent
    waiting for tokens (the service's histogram sums, by priority)."""

    def ms(epoch: float | None) -> int | None:
        return None if epoch is None else round((epoch - started) * 1000)

    wall = result["stopEpoch"] - started
    waited = {
        k.split('"')[1]: round(v, 1)
        for k, v in labelled(
            metrics_text, "quartermaster_client_rate_limit_wait_seconds_sum"
        ).items()
    }
    return {
        "runnerStartMs": ms(result.get("startEpoch")),
        "generatedMs": ms(result.get("generatedEpoch")),
        "firstAdmissionMs": ms(result.get("firstAdmissionEpoch")),
        "lastAdmissionMs": ms(result.get("lastAdmissionEpoch")),
        "lastFinishMs": ms(result.get("lastFinishEpoch")),
        "stopMs": ms(result["stopEpoch"]),
        "budgetIdleMs": round((wall - max(0.0, budgeted - burst) / qps) * 1000),
        "rateLimitWaitSeconds": waited,
    }


def run_baseline() -> dict[str, Any]:
    return run_harness("baseline", budget_seconds=1800)


def run_large() -> dict[str, Any]:
    return run_harness("large-scale", budget_seconds=5400)


def _kueue_rows(scenario: str, budget: float) -> dict[str, Any]:
    rows = {
        "kueueBudget": run_harness(scenario, backend="real", qps=KUEUE_BUDGET[0],
                                   burst=KUEUE_BUDGET[1], budget_seconds=budget),
        "kueueDefault": run_harness(scenario, backend="real", qps=KUEUE_DEFAULT_BUDGET[0],
                                    burst=KUEUE_DEFAULT_BUDGET[1], budget_seconds=budget),
        # Kueue's budget again, the API server with API Priority and Fairness on
        "kueueBudgetPriorityAndFairness": run_harness(
            scenario, backend="real", qps=KUEUE_BUDGET[0], burst=KUEUE_BUDGET[1],
            budget_seconds=budget, priority_and_fairness=True),
    }  # fmt: skip
    return {"rows": rows, "cpuSeconds": sum(r["cpuSeconds"] for r in rows.values()),
            "peakRssMiB": max(r["peakRssMiB"] for r in rows.values())}  # fmt: skip


def run_kueue_baseline() -> dict[str, Any]:
    return _kueue_rows("baseline", 1800)


def run_kueue_large() -> dict[str, Any]:
    return _kueue_rows("large-scale", 5400)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.stack")
    p.add_argument("scenario", choices=["baseline", "large-scale"])
    p.add_argument("--backend", choices=["double", "real"], default="double")
    p.add_argument("--qps", type=float, default=KUEUE_BUDGET[0])
    p.add_argument("--burst", type=int, default=KUEUE_BUDGET[1])
    p.add_argument("--budget-seconds", type=float, default=5400)
    p.add_argument(
        "--priority-and-fairness",
        action="store_true",
        help="the real API server with API Priority and Fairness on",
    )
    args = p.parse_args(argv)
    out = run_harness(args.scenario, backend=args.backend, qps=args.qps, burst=args.burst,
                      budget_seconds=args.budget_seconds,
                      priority_and_fairness=args.priority_and_fairness)  # fmt: skip
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
