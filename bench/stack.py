"""``stack-baseline`` / ``stack-large``: Kueue's scheduler-performance scenarios in real
time through the whole service (docs/benchmarks.md).

Three processes on the machine, like Kueue's minimalkueue-against-envtest setup:

* this process runs the in-repo API-server double (HTTP, in a thread) holding the
  scenario's namespaces, ResourceFlavor, ClusterQueues and LocalQueues;
* ``python -m admission serve`` — the real service (informers, scheduler, controller,
  webhook server, metrics) talking to it through the official ``kubernetes`` client;
* ``python -m bench.stack_runner`` — creates the Workloads at their intervals and
  finishes each one ``runtimeMs`` after it sees it admitted.

The double does not call the webhooks here (Workloads are created by the runner, as
Kueue's runner does; the webhook server still runs inside ``serve``). Keys: the
runner's wallMs, per-class averageTimeToAdmissionMs, usagePercent; apiRequests (every
request the double served, runner's included), serviceApiRequests and
apiRequestsPerAdmission (the service's own requests per admission), and the service
process's peakRssMiB.
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
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from admission.sim.scenario import Scenario, parse_generator
from bench.sim import scenario_dir
from queues.quantity import format_quantity

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-controller"
USERNAME = "system:serviceaccount:quartermaster-system:quartermaster"
KUEUE = {
    "baseline": {"wallMs": 351116, "usagePercent": 55.9,
                 "averageTimeToAdmissionMs": {"large": 16501, "medium": 76768, "small": 215468}},
    "large-scale": {"wallMs": 1179411, "usagePercent": 38.64,
                    "averageTimeToAdmissionMs": {"large": 105604, "medium": 256413, "small": 700379}},
}  # fmt: skip


def queue_objects(sc: Scenario) -> list[dict[str, Any]]:
    """The scenario's queue objects as Kubernetes objects (what Kueue's runner creates)."""
    objs: list[dict[str, Any]] = []
    for name in sc.flavors:
        objs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": name},
            }
        )
    for name, cq in sc.cluster_queues.items():
        groups = []
        for g in cq.resource_groups:
            flavors = []
            for f in g.flavors:
                rs = []
                for r, q in f.resources.items():
                    entry: dict[str, Any] = {
                        "name": r,
                        "nominalQuota": format_quantity(r, q.nominal),
                    }
                    if q.borrowing_limit is not None:
                        entry["borrowingLimit"] = format_quantity(r, q.borrowing_limit)
                    rs.append(entry)
                flavors.append({"name": f.name, "resources": rs})
            groups.append({"coveredResources": list(g.covered_resources), "flavors": flavors})
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "resourceGroups": groups,
            "preemption": {
                "withinClusterQueue": cq.preemption.within_cluster_queue,
                "reclaimWithinCohort": cq.preemption.reclaim_within_cohort,
            },
        }
        if cq.cohort:
            spec["cohortName"] = cq.cohort
        objs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    for lq in sc.local_queues.values():
        objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lq.namespace}})
        objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"name": lq.name, "namespace": lq.namespace},
                     "spec": {"clusterQueue": lq.cluster_queue}})  # fmt: skip
    return objs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback
            return resp.status, resp.read().decode()
    except OSError:
        return 0, ""


def _peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def _metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run_scenario(name: str, *, budget_seconds: float) -> dict[str, Any]:
    from tests.apiserver import start_apiserver

    path = scenario_dir() / f"{name}.yaml"
    sc = parse_generator(yaml.safe_load(path.read_text()), source=str(path))
    objects = queue_objects(sc)
    keep = os.environ.get("QM_STACK_KEEP")  # keep the work directory (serve.log) for a look
    tmpdir = tempfile.mkdtemp(prefix="qm-stack-") if keep else None
    with (
        (
            contextlib.nullcontext(tmpdir)
            if keep
            else tempfile.TemporaryDirectory(prefix="qm-stack-")
        ) as tmp,
        start_apiserver(
            objects=objects,
            tokens={TOKEN: USERNAME},
            watch_window=500_000,
            record_requests=False,
            bookmark_interval=5.0,
        ) as api,
    ):
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig", token=TOKEN)
        health, metrics = _free_port(), _free_port()
        env = {**os.environ, "QUARTERMASTER_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
        serve = subprocess.Popen(
            [sys.executable, "-m", "admission", "serve", "--kubeconfig", str(kubeconfig),
             "--cert-dir", str(Path(tmp) / "certs"), "--host", "127.0.0.1",
             "--webhook-port", str(_free_port()), "--metrics-port", str(metrics),
             "--health-port", str(health)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "serve.log", "wb"),
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while _get(f"http://127.0.0.1:{health}/readyz")[0] != 200:
                if serve.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "serve did not become ready:\n"
                        + (Path(tmp) / "serve.log").read_text()[-2000:]
                    )
                time.sleep(0.1)
            api.clear_requests()
            runner = subprocess.run(
                [sys.executable, "-m", "bench.stack_runner", "--url", api.url, "--scenario", str(path)],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=budget_seconds,
            )  # fmt: skip
            if runner.returncode != 0:
                raise RuntimeError(f"runner failed:\n{runner.stderr[-3000:]}")
            result = json.loads(runner.stdout.strip().splitlines()[-1])
            _, text = _get(f"http://127.0.0.1:{metrics}/metrics", timeout=30)
            peak = _peak_rss_mib(serve.pid)
        finally:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
        total = api.request_count()
        admissions = _metric_sum(text, "kueue_admitted_workloads_total")
        service_requests = _metric_sum(text, "quartermaster_api_requests_total")
        writes = {
            line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("quartermaster_api_writes_total{")
        }
    ref = KUEUE[name]
    return {
        **result,
        "apiRequests": total,
        "serviceApiRequests": int(service_requests),
        "admissions": int(admissions),
        "apiRequestsPerAdmission": round(service_requests / admissions, 2) if admissions else None,
        "serviceWrites": writes,
        "peakRssMiB": peak,
        "kueueEnvtest": ref,
    }


def run_baseline() -> dict[str, Any]:
    return run_scenario("baseline", budget_seconds=1200)


def run_large() -> dict[str, Any]:
    return run_scenario("large-scale", budget_seconds=3600)


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "baseline"
    print(json.dumps(run_baseline() if which == "baseline" else run_large()))
