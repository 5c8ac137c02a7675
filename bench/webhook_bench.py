"""``webhook`` and ``webhook-burst`` benchmarks (docs/benchmarks.md).

Three kinds of process, all started from this file so the numbers do not depend on
the test harness:

* a server: either the **bare** aiohttp HTTPS handler that returns a fixed allowed
  review, or the **real** webhook server (``webhooks.server.entry.run_webhook_server``) with a
  small in-memory model; each prints ``ready PORT``;
* the **load generator**, in its own process: asyncio TLS connections with keep-alive
  sending pre-encoded HTTP/1.1 requests, closed-loop (N connections back to back, for
  throughput) or open-loop (a fixed request rate over a pool of connections, for
  latency), printing one JSON summary;
* the caller (``run_webhook`` / ``run_webhook_burst``), which runs bare and real
  alternately and reports the median of the per-pair throughput ratios.

Latency is measured per request from the moment it is written to the socket until its
response is read (in the burst: from the start of the run for each connection's first
request, so the TLS handshake counts).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MUTATE_PATH = "/mutate-batch-v1-job"
VALIDATE_PATH = "/validate-batch-v1-job"
SERVICE_HOST = "quartermaster-webhook-service.quartermaster-system.svc"
THROUGHPUT_CONNECTIONS = 16
LATENCY_CONNECTIONS = 32
BURST_CONNECTIONS = 64
BURST_REVIEWS = 10_000
PAIRS = 3


def job_review(uid: str, *, path: str) -> dict[str, Any]:
    """A realistic Job-creation AdmissionReview (as kube-apiserver sends it)."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train-llm",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "queue-a", "app": "trainer"},
            "annotations": {"kueue.x-k8s.io/job-min-parallelism": "2"},
        },
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.example.com/ml/trainer:2026.1",
                            "args": ["--epochs", "10", "--batch-size", "64"],
                            "resources": {
                                "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            },
        },
    }
    operation = "CREATE"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "requestKind": {"group": "batch", "version": "v1", "kind": "Job"},
            "requestResource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": "train-llm",
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": job,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def _http_request(path: str) -> bytes:
    body = json.dumps(job_review("3f0c1c52-2c2c-4f9d-9a57-6f0d5c1b3e11", path=path)).encode()
    head = (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: {SERVICE_HOST}:443\r\n"
        f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


# ---------------------------------------------------------------- servers (subprocess roles)


def _bare_server(cert_dir: str) -> None:
    from aiohttp import web

    from webhooks.server.certs import ensure_cert_dir, server_ssl_context

    ensure_cert_dir(cert_dir)
    fixed = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "x", "allowed": True},
        },
        separators=(",", ":"),
    ).encode()

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=fixed, content_type="application/json")

    async def main() -> None:
        app = web.Application(client_max_size=3 * 1024 * 1024)
        app.router.add_post(MUTATE_PATH, handle)
        app.router.add_post(VALIDATE_PATH, handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ctx = server_ssl_context(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx, backlog=1024)
        await site.start()
        print(f"ready {runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def _real_server(cert_dir: str) -> None:
    from queues.model import LocalQueue, Namespace, PriorityClass
    from webhooks.config import WebhookConfig
    from webhooks.server.certs import ensure_cert_dir
    from webhooks.server.entry import run_webhook_server
    from webhooks.view import InMemoryView

    ensure_cert_dir(cert_dir)
    view = InMemoryView(
        local_queues={
            "team-a/default": LocalQueue("team-a", "default", "cq"),
            "team-a/queue-a": LocalQueue("team-a", "queue-a", "cq"),
        },
        workload_priority_classes={"default": PriorityClass("default", 100)},
        namespaces={"team-a": Namespace("team-a", {"team": "a"})},
    )

    def ready(port: int) -> None:
        print(f"ready {port}", flush=True)

    asyncio.run(
        run_webhook_server(
            view=view,
            config=WebhookConfig(),
            cert_dir=cert_dir,
            host="127.0.0.1",
            port=0,
            ready_callback=ready,
        )
    )


# ---------------------------------------------------------------- load generator (subprocess role)


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def exchange(self, request: bytes) -> bool:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
                break
        body = await self.reader.readexactly(length)
        return head.startswith(b"HTTP/1.1 200") and b'"allowed":true' in body


async def _connect(port: int, ctx: ssl.SSLContext) -> _Conn:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname=SERVICE_HOST, limit=1 << 20
    )
    return _Conn(reader, writer)


def _summary(latencies: list[float], failures: int, elapsed: float) -> dict[str, Any]:
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 3) if lat else 0.0

    return {
        "count": len(lat),
        "failures": failures,
        "elapsed": elapsed,
        "reviewsPerSecond": round(len(lat) / elapsed, 1) if elapsed else 0.0,
        "p50LatencyMs": pct(0.50),
        "p99LatencyMs": pct(0.99),
        "maxLatencyMs": round(lat[-1] * 1000, 3) if lat else 0.0,
    }


async def _load(args: dict[str, Any]) -> dict[str, Any]:
    ctx = ssl.create_default_context(cafile=args["ca"])
    port = args["port"]
    requests = [_http_request(p) for p in args["paths"]]
    latencies: list[float] = []
    failures = 0
    perf = time.perf_counter

    if args["mode"] == "closed":  # N connections back to back for a fixed duration
        conns = [await _connect(port, ctx) for _ in range(args["connections"])]
        for c in conns:  # warm every connection
            await c.exchange(requests[0])
        deadline = perf() + args["duration"]

        async def worker(conn: _Conn, k: int) -> None:
            nonlocal failures
            i = k
            while perf() < deadline:
                t = perf()
                ok = await conn.exchange(requests[i % len(requests)])
                latencies.append(perf() - t)
                failures += not ok
                i += 1

        start = perf()
        await asyncio.gather(*(worker(c, k) for k, c in enumerate(conns)))
        return _summary(latencies, failures, perf() - start)

    if args["mode"] == "open":  # fixed rate over a pool, for latency at a given load
        pool: asyncio.Queue[_Conn] = asyncio.Queue()
        for _ in range(args["connections"]):
            conn = await _connect(port, ctx)
            await conn.exchange(requests[0])
            pool.put_nowait(conn)
        total = int(args["rate"] * args["duration"])
        interval = 1.0 / args["rate"]
        tasks: list[asyncio.Task[None]] = []

        async def one(conn: _Conn, request: bytes) -> None:
            nonlocal failures
            t = perf()
            ok = await conn.exchange(request)
            latencies.append(perf() - t)
            failures += not ok
            pool.put_nowait(conn)

        start = perf()
        for i in range(total):
            delay = start + i * interval - perf()
            if delay > 0:
                await asyncio.sleep(delay)
            conn = await pool.get()
            tasks.append(asyncio.create_task(one(conn, requests[i % len(requests)])))
        await asyncio.gather(*tasks)
        out = _summary(latencies, failures, perf() - start)
        out["targetRate"] = args["rate"]
        return out

    # burst: C connections opened at once, COUNT reviews split between them
    count, n = args["count"], args["connections"]
    start = perf()

    async def burst_worker(k: int) -> None:
        nonlocal failures
        try:
            conn = await _connect(port, ctx)
        except OSError:
            failures += len(range(k, count, n))
            return
        first = True
        for i in range(k, count, n):
            t = start if first else perf()
            first = False
            try:
                ok = await conn.exchange(requests[i % len(requests)])
            except (OSError, asyncio.IncompleteReadError, ValueError):
                ok = False
            latencies.append(perf() - t)
            failures += not ok

    await asyncio.gather(*(burst_worker(k) for k in range(n)))
    return _summary(latencies, failures, perf() - start)


# ---------------------------------------------------------------- orchestration


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _start_server(role: str, cert_dir: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.webhook_bench", role, cert_dir],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if line[:1] != ["ready"]:
        proc.kill()
        raise RuntimeError(f"{role} server did not start: {line}")
    return proc, int(line[1])


def _run_load(**args: Any) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.webhook_bench", "load", json.dumps(args)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def run_webhook(seconds: float = 12.0) -> dict[str, Any]:
    """Throughput of bare vs real (alternating pairs), then latency at 50 % of peak.

    ``seconds`` is split: half over ``PAIRS`` bare/real throughput pairs, half for the
    open-loop latency run.
    """
    with tempfile.TemporaryDirectory() as cert_dir:
        bare, bare_port = _start_server("bare", cert_dir)
        real, real_port = _start_server("real", cert_dir)
        ca = str(Path(cert_dir) / "ca.crt")
        phase = max(1.0, seconds / (4 * PAIRS))
        try:
            bare_rates, real_rates, ratios, failures = [], [], [], 0
            for _ in range(PAIRS):
                b = _run_load(
                    port=bare_port,
                    ca=ca,
                    mode="closed",
                    connections=THROUGHPUT_CONNECTIONS,
                    duration=phase,
                    paths=[MUTATE_PATH],
                )
                r = _run_load(
                    port=real_port,
                    ca=ca,
                    mode="closed",
                    connections=THROUGHPUT_CONNECTIONS,
                    duration=phase,
                    paths=[MUTATE_PATH],
                )
                bare_rates.append(b["reviewsPerSecond"])
                real_rates.append(r["reviewsPerSecond"])
                ratios.append(r["reviewsPerSecond"] / b["reviewsPerSecond"])
                failures += b["failures"] + r["failures"]
            peak = statistics.median(real_rates)
            lat = _run_load(
                port=real_port,
                ca=ca,
                mode="open",
                connections=LATENCY_CONNECTIONS,
                rate=peak / 2,
                duration=max(1.0, seconds / 2),
                paths=[MUTATE_PATH],
            )
        finally:
            for proc in (bare, real):
                proc.terminate()
                proc.wait(10)
    return {
        "name": "webhook",
        "reviewsPerSecond": {"bare": statistics.median(bare_rates), "webhook": peak},
        "ratio": round(statistics.median(ratios), 3),
        "latencyRate": round(peak / 2, 1),
        "p50LatencyMs": lat["p50LatencyMs"],
        "p99LatencyMs": lat["p99LatencyMs"],
        "maxLatencyMs": lat["maxLatencyMs"],
        "failures": failures + lat["failures"],
    }


def run_webhook_burst() -> dict[str, Any]:
    """10,000 Job-creation reviews (mutate + validate) from 64 concurrent connections."""
    with tempfile.TemporaryDirectory() as cert_dir:
        real, port = _start_server("real", cert_dir)
        try:
            out = _run_load(
                port=port,
                ca=str(Path(cert_dir) / "ca.crt"),
                mode="burst",
                connections=BURST_CONNECTIONS,
                count=BURST_REVIEWS,
                paths=[MUTATE_PATH, VALIDATE_PATH],
            )
        finally:
            real.terminate()
            real.wait(10)
    return {
        "name": "webhook-burst",
        "reviews": out["count"],
        "failures": out["failures"] + (BURST_REVIEWS - out["count"]),
        "maxLatencyMs": out["maxLatencyMs"],
        "p99LatencyMs": out["p99LatencyMs"],
        "wallMs": round(out["elapsed"] * 1000, 1),
    }


def main(argv: list[str]) -> None:
    role = argv[0]
    if role == "bare":
        _bare_server(argv[1])
    elif role == "real":
        _real_server(argv[1])
    elif role == "load":
        print(json.dumps(asyncio.run(_load(json.loads(argv[1])))))
    else:
        raise SystemExit(f"unknown role {role!r}: expected bare, real or load")


if __name__ == "__main__":
    main(sys.argv[1:])
