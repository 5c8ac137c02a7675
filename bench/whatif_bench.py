"""``webhook-impact``: a quota edit's answer with 20,000 pending workloads, and Job
reviews answered meanwhile (issue 12 bug 3).

The real HTTPS server (``tests.support.webhook_server.WebhookServerThread``) holds a model of
20k pending single-pod workloads in 100 full ClusterQueues; a ClusterQueue edit that
frees quota makes the impact what-if run the engine over the backlog. A separate
process sends Job reviews back to back on one keep-alive connection (so its latency
is the server's, not a client sharing the server's GIL) before, during and after the
edit. Reported per what-if mode (forked child, worker thread): the edit's latency and
its warning, and Job review p50/p99/max during the edit vs idle.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import tempfile
import time
from typing import Any

PENDING = 20_000
JOB_PATH = "/mutate-batch-v1-job"
CQ_PATH = "/validate-kueue-x-k8s-io-v1beta2-clusterqueue"


def _job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team-a"},
        "spec": {"parallelism": 1, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }


def _job_client(port: int, ca: str, seconds: float, out: Any) -> None:
    from tests.support.webhook_server import ReviewClient, make_review

    c = ReviewClient(port, ca)
    samples: list[tuple[float, float]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        status, _ = c.post(JOB_PATH, make_review("Job", _job()))
        assert status == 200
        samples.append((t0, time.monotonic() - t0))
    c.close()
    out.put(samples)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else float("nan")


def _one_mode(mode: str, view: Any, deadline: float) -> dict[str, Any]:
    from tests.support.webhook_server import WebhookServerThread, cluster_queue_doc, make_review
    from webhooks.config import WebhookConfig
    from webhooks.server.site import ServerLimits

    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as d:
        config = WebhookConfig(impact_deadline=deadline)
        limits = ServerLimits(what_if_mode=mode)
        with WebhookServerThread(view=view, config=config, cert_dir=d, limits=limits) as srv:
            q = ctx.Queue()
            p = ctx.Process(
                target=_job_client, args=(srv.port, str(srv.ca_file), 4.0 + deadline, q)
            )
            p.start()
            time.sleep(1.5)  # idle baseline
            edits = srv.client()
            old = cluster_queue_doc("cq-1", cohort="cohort-1", nominal="0")
            new = cluster_queue_doc("cq-1", cohort="cohort-1", nominal="500")
            t0 = time.monotonic()
            status, body = edits.post(
                CQ_PATH, make_review("ClusterQueue", new, old=old, operation="UPDATE")
            )
            t1 = time.monotonic()
            edits.close()
            samples = q.get(timeout=60)
            p.join(30)
    assert status == 200
    idle = [lat for at, lat in samples if at < t0 - 0.1]
    during = [lat for at, lat in samples if t0 <= at <= t1]
    return {
        "editSeconds": round(t1 - t0, 3),
        "editWarnings": body["response"].get("warnings", [])[:2],
        "jobReviewsDuringEdit": len(during),
        "jobP50msDuring": _pct(during, 0.5),
        "jobP99msDuring": _pct(during, 0.99),
        "jobMaxmsDuring": round(1000 * max(during), 2) if during else None,
        "jobP50msIdle": _pct(idle, 0.5),
        "jobP99msIdle": _pct(idle, 0.99),
        "jobMeanmsIdle": round(1000 * statistics.fmean(idle), 2) if idle else None,
    }


def run() -> dict[str, Any]:
    from tests.support.webhook_server import pending_view

    t0 = time.perf_counter()
    view = pending_view(PENDING)
    out: dict[str, Any] = {"pending": PENDING, "buildSeconds": round(time.perf_counter() - t0, 2)}
    for mode in ("process", "thread"):
        out[mode] = _one_mode(mode, view, deadline=2.0)
    # the what-if itself, unbounded, inline (how long the deadline saves the answer from)
    from tests.support.webhook_server import cluster_queue_doc
    from webhooks.handlers.quota import impact_warnings

    t0 = time.perf_counter()
    impact_warnings(
        "ClusterQueue", None, cluster_queue_doc("cq-1", cohort="cohort-1", nominal="500"), view
    )
    out["inlineWhatIfSeconds"] = round(time.perf_counter() - t0, 2)
    return out
