"""``stress``: hostile clients against a running ``serve`` (docs/benchmarks.md,
``webhook-hostile``; issue 13 items 5-6). Not a test: bounded, and it reports figures.

The service runs as in a cluster: a subprocess with leader election on (its Lease in the
in-repo API-server double), its webhooks over TLS with its own certificate. Three attacker
processes (:func:`attack`, ``python -m bench.stress --attack KIND``, their
``RLIMIT_NOFILE`` raised as needed) then, for ``QM_STRESS_SECONDS`` (60):

* keeps trying to hold 2,000 idle TLS connections (reconnecting as the server closes
  them: the server's cap and idle timeout decide how many it holds);
* sends compression bombs: 1 MiB ``Content-Encoding: deflate`` bodies that would
  inflate to 1 GiB, from 4 connections in a loop;
* runs a slowloris wave: 400 connections sending their headers one byte a second.

Each attack comes from its own loopback address (``127.0.0.2``-``.4``: in a cluster a
hostile pod has its own IP, and the API server its own), the valid client from
``127.0.0.1``; ``QM_STRESS_SAME_SOURCE=1`` sends every attack from ``127.0.0.1`` too
(the worst case: attackers behind the API server's own address).

``multi-idle`` (``python -m bench stress-sources``, or ``QM_STRESS_KINDS=multi-idle``) is
the multi-source attack: ``QM_STRESS_IDLE_SOURCES`` (6) addresses (``127.0.1.1``...)
each keep trying to hold 300 idle TLS connections, more than the per-source cap
(250), so together they hold the global cap (1,000) whatever it refuses.

Meanwhile this process sends valid AdmissionReviews (a queued Job, 20 a second, one
keep-alive connection as the API server keeps one; and 5 a second each on a new
connection, as the API server opens one when its pool grows or a connection was
closed), polls ``/healthz`` as the kubelet
would (2 s timeout, every 0.5 s), reads the Lease's ``renewTime`` from the double, and
samples the service's RSS. One JSON object: each figure for the quiet baseline (10 s)
and under attack, and the targets (valid p99 < 1 s, 0 healthz failures, renewals on
their period, RSS < 512 MiB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from bench.serve_process import ROOT, ServeProcess
from bench.stack import TOKEN, USERNAME

ATTACK_SECONDS = 60.0
BASELINE_SECONDS = 10.0
IDLE_CONNECTIONS = 2000
IDLE_PER_SOURCE = 300  # multi-idle: above the per-source cap (250)
IDLE_SOURCES = 6
FRESH_REVIEWS_PER_SECOND = 5
SLOWLORIS = 400
BOMBERS = 4
REVIEWS_PER_SECOND = 20
LEASE = ("quartermaster-system", "quartermaster-leader-election")
RETRY_PERIOD = 2.0  # the Lease is renewed every retryPeriod (Kueue's default, ours)
MUTATE_JOB = "/mutate-batch-v1-job"


# -- the attacker (its own process: its sockets and CPU are not the measurer's) ------------


def _bomb() -> bytes:
    """A raw deflate stream of 1 GiB of zeros (~1 MiB)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = b"\0" * (64 << 20)
    out = [c.compress(chunk) for _ in range(16)]
    out.append(c.flush())
    return b"".join(out)


SOURCES = {"idle": "127.0.0.2", "bombs": "127.0.0.3", "slowloris": "127.0.0.4"}
KINDS = (*SOURCES, "multi-idle")
_sources = ["127.0.0.1"]


def idle_sources(n: int) -> str:
    """The multi-idle attack's ``n`` loopback addresses, comma-separated."""
    return ",".join(f"127.0.1.{i}" for i in range(1, n + 1))


async def _open(
    port: int, ctx: ssl.SSLContext, i: int = 0
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    source = _sources[i % len(_sources)]
    return await asyncio.wait_for(
        asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1", local_addr=(source, 0)
        ),
        10,
    )


async def _attack(port: int, seconds: float, kinds: tuple[str, ...]) -> dict[str, Any]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    bomb = await asyncio.to_thread(_bomb) if "bombs" in kinds else b""  # before the clock
    stop = time.monotonic() + seconds
    stats = {"idleOpened": 0, "idleClosedByServer": 0, "idleRefused": 0, "idleHeldMax": 0,
             "bombsSent": 0, "bombAnswers": {}, "slowlorisOpened": 0, "slowlorisCut": 0,
             "slowlorisBytes": 0}  # fmt: skip
    held = 0

    async def idle(i: int = 0) -> None:
        nonlocal held
        while time.monotonic() < stop:
            try:
                reader, writer = await _open(port, ctx, i)
            except (OSError, ssl.SSLError, TimeoutError):
                stats["idleRefused"] += 1
                await asyncio.sleep(0.2)
                continue
            stats["idleOpened"] += 1
            held += 1
            stats["idleHeldMax"] = max(stats["idleHeldMax"], held)
            try:
                left = stop - time.monotonic()
                data = await asyncio.wait_for(reader.read(1), max(left, 0.01))
                if not data:
                    stats["idleClosedByServer"] += 1
            except (TimeoutError, OSError, ssl.SSLError):
                pass
            finally:
                held -= 1
                writer.transport.abort()

    head = (
        f"POST {MUTATE_JOB} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Encoding: deflate\r\nContent-Length: {len(bomb)}\r\n\r\n"
    ).encode()

    async def bomber() -> None:
        while time.monotonic() < stop:
            try:
                reader, writer = await _open(port, ctx)
                writer.write(head + bomb)
                stats["bombsSent"] += 1
                line = await asyncio.wait_for(reader.readline(), 10)
                code = line.split(b" ")[1].decode() if line.count(b" ") >= 1 else "closed"
                stats["bombAnswers"][code] = stats["bombAnswers"].get(code, 0) + 1  # type: ignore[attr-defined]
                writer.transport.abort()
            except (OSError, ssl.SSLError, TimeoutError, IndexError):
                stats["bombAnswers"]["error"] = stats["bombAnswers"].get("error", 0) + 1  # type: ignore[attr-defined]
                await asyncio.sleep(0.1)

    async def slowloris() -> None:
        try:
            _, writer = await _open(port, ctx)
        except (OSError, ssl.SSLError, TimeoutError):
            return
        stats["slowlorisOpened"] += 1
        request = (
            f"POST {MUTATE_JOB} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".encode() + b"a" * 10_000
        )
        try:
            for byte in request:
                if time.monotonic() > stop:
                    return
                writer.write(bytes([byte]))
                await writer.drain()
                stats["slowlorisBytes"] += 1
                await asyncio.sleep(1.0)
                if writer.transport.is_closing():
                    break
            stats["slowlorisCut"] += 1
        except (OSError, ssl.SSLError):
            stats["slowlorisCut"] += 1
        finally:
            writer.transport.abort()

    tasks = []
    if "idle" in kinds:
        tasks += [asyncio.create_task(idle()) for _ in range(IDLE_CONNECTIONS)]
    if "multi-idle" in kinds:  # round robin over the sources
        n = IDLE_PER_SOURCE * len(_sources)
        tasks += [asyncio.create_task(idle(i)) for i in range(n)]
    if "bombs" in kinds:
        tasks += [asyncio.create_task(bomber()) for _ in range(BOMBERS)]
    if "slowloris" in kinds:
        await asyncio.sleep(min(5.0, seconds / 4))  # the wave comes on top of the rest
        tasks += [asyncio.create_task(slowloris()) for _ in range(SLOWLORIS)]
    await asyncio.gather(*tasks, return_exceptions=True)
    return {k: v for k, v in stats.items() if v not in (0, {})}


def attack(port: int, seconds: float, kinds: tuple[str, ...], source: str) -> dict[str, Any]:
    global _sources
    _sources = source.split(",")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(IDLE_CONNECTIONS, IDLE_PER_SOURCE * len(_sources)) + SLOWLORIS + BOMBERS + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))
    out = asyncio.run(_attack(port, seconds, kinds))
    out["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    out["source"] = source
    return out


# -- the measurer ---------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 1)


class Probes:
    """Threads sampling the service while the phases run; ``phase`` tags each sample."""

    def __init__(self, serve: ServeProcess, api: Any, ca_file: Path) -> None:
        self.serve = serve
        self.api = api
        self.ca_file = ca_file
        self.phase = "baseline"
        self.reviews: dict[str, list[float]] = {"baseline": [], "attack": []}
        self.review_failures: dict[str, int] = {"baseline": 0, "attack": 0}
        self.fresh: dict[str, list[float]] = {"baseline": [], "attack": []}
        self.fresh_failures: dict[str, int] = {"baseline": 0, "attack": 0}
        self.healthz: dict[str, list[float]] = {"baseline": [], "attack": []}
        self.healthz_failures: dict[str, int] = {"baseline": 0, "attack": 0}
        self.renewals: list[tuple[float, str, str]] = []  # (seen at, renewTime, phase)
        self.rss: dict[str, float] = {"baseline": 0.0, "attack": 0.0}
        self.lag: dict[str, dict[str, Any]] = {}
        self._lag_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=f, daemon=True)
            for f in (
                self._review_loop,
                self._fresh_review_loop,
                self._healthz_loop,
                self._lease_loop,
                self._rss_loop,
            )
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def loop_lag(self, phase: str) -> None:
        """The service's own event-loop lag figures for the phase just ended (read from
        its /metrics: ``quartermaster_event_loop_lag_seconds``), as counts over bounds."""
        text = self.serve.metrics()
        counts: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("quartermaster_event_loop_lag_seconds_bucket{"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                counts[le] = float(line.rsplit(" ", 1)[1])
        total = counts.get("+Inf", 0.0)
        delta = {le: n - self._lag_seen.get(le, 0.0) for le, n in counts.items()}
        self._lag_seen = counts
        n = delta.get("+Inf", 0.0)
        if not total:
            return
        worst = self.serve.metric("quartermaster_event_loop_lag_max_seconds", text)
        self.lag[phase] = {
            "loopLagSamples": int(n),
            "loopLagOver100ms": int(n - delta.get("0.1", 0.0)),
            "loopLagOver1s": int(n - delta.get("1.0", 0.0)),
            "loopLagMaxSinceStartS": round(worst, 3),
        }

    def _review_loop(self, *, fresh: bool = False) -> None:
        """Valid reviews on one keep-alive connection, or (``fresh``) each on a new one
        with no retry: a refused connection is a failed review."""
        from tests.support.webhook_server import ReviewClient, make_review

        client = ReviewClient(self.serve.ports["webhook"], self.ca_file, timeout=10)
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "j", "namespace": "team-a",
                            "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
               "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                   {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}}  # fmt: skip
        body = json.dumps(make_review("Job", job, namespace="team-a")).encode()
        latencies, failures = (self.fresh, self.fresh_failures) if fresh else (
            self.reviews, self.review_failures)  # fmt: skip
        period = 1.0 / (FRESH_REVIEWS_PER_SECOND if fresh else REVIEWS_PER_SECOND)
        while not self._stop.is_set():
            t0 = time.monotonic()
            phase = self.phase
            try:
                status, data = client.request("POST", MUTATE_JOB, body, retry=not fresh)
                ok = status == 200 and json.loads(data)["response"]["allowed"] is True
            except Exception:  # noqa: BLE001 - a failure is a figure here
                ok = False
            if fresh or not ok:
                client.close()
            dt = time.monotonic() - t0
            if ok:
                latencies[phase].append(dt)
            else:
                failures[phase] += 1
            self._stop.wait(max(0.0, period - dt))

    def _fresh_review_loop(self) -> None:
        self._review_loop(fresh=True)

    def _healthz_loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            phase = self.phase
            code = self.serve.health("healthz", timeout=2.0)  # the Deployment's probe timeout
            dt = time.monotonic() - t0
            if code == 200:
                self.healthz[phase].append(dt)
            else:
                self.healthz_failures[phase] += 1
            self._stop.wait(0.5)

    def _lease_loop(self) -> None:
        ns, name = LEASE
        last = ""
        while not self._stop.is_set():
            lease = self.api.call(lambda s: s.get_object("leases", name, ns))
            renew = ((lease or {}).get("spec") or {}).get("renewTime") or ""
            if renew and renew != last:
                self.renewals.append((time.monotonic(), renew, self.phase))
                last = renew
            self._stop.wait(0.25)

    def _rss_loop(self) -> None:
        while not self._stop.is_set():
            phase = self.phase
            self.rss[phase] = max(self.rss[phase], self.serve.rss_mib())
            self._stop.wait(0.5)

    def figures(self, phase: str) -> dict[str, Any]:
        from queues.times import rfc3339_seconds

        times = [rfc3339_seconds(r) for _, r, p in self.renewals if p == phase]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False) if a and b]
        lat, fresh = self.reviews[phase], self.fresh[phase]
        tried = len(fresh) + self.fresh_failures[phase]
        return {
            "validReviews": len(lat),
            "validReviewFailures": self.review_failures[phase],
            "validP50Ms": _percentile(lat, 0.50),
            "validP99Ms": _percentile(lat, 0.99),
            "validMaxMs": round(max(lat) * 1000, 1) if lat else None,
            "freshConnectionReviews": tried,
            "freshConnectionSuccessRate": round(len(fresh) / tried, 4) if tried else None,
            "freshConnectionP50Ms": _percentile(fresh, 0.50),
            "freshConnectionP99Ms": _percentile(fresh, 0.99),
            "freshConnectionMaxMs": round(max(fresh) * 1000, 1) if fresh else None,
            "healthzChecks": len(self.healthz[phase]) + self.healthz_failures[phase],
            "healthzFailures": self.healthz_failures[phase],
            "healthzMaxMs": round(max(self.healthz[phase]) * 1000, 1)
            if self.healthz[phase]
            else None,
            "leaseRenewals": len(times),
            "leaseGapMeanS": round(statistics.mean(gaps), 2) if gaps else None,
            "leaseGapMaxS": round(max(gaps), 2) if gaps else None,
            "rssMaxMiB": self.rss[phase],
            **self.lag.get(phase, {}),
        }


def run_multi_source() -> dict[str, Any]:
    """``stress-sources``: only the multi-source idle attack (``multi-idle``)."""
    return run(kinds=("multi-idle",))


def run(kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
    from admission.apiserver_double import DEFAULT_NAMESPACES, start_apiserver
    from tests.support.kube_harness import cluster_queue, flavor, local_queue, namespace

    seconds = float(os.environ.get("QM_STRESS_SECONDS", ATTACK_SECONDS))
    if kinds is None:
        kinds = tuple(os.environ.get("QM_STRESS_KINDS", "idle,bombs,slowloris").split(","))
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"QM_STRESS_KINDS: unknown attack(s) {unknown}; known: {list(KINDS)}")
    same_source = os.environ.get("QM_STRESS_SAME_SOURCE", "") not in ("", "0")
    sources = {**SOURCES, "multi-idle": idle_sources(int(os.environ.get(
        "QM_STRESS_IDLE_SOURCES", IDLE_SOURCES)))}  # fmt: skip
    objects = [
        namespace("team-a"),
        flavor("default"),
        cluster_queue("cq", {"default": {"cpu": 8}}),
        local_queue("team-a", "lq", "cq"),
    ]
    with (
        tempfile.TemporaryDirectory(prefix="qm-stress-") as tmp,
        start_apiserver(
            objects=objects,
            tokens={TOKEN: USERNAME},
            namespaces=(*DEFAULT_NAMESPACES, LEASE[0]),
            record_requests=False,
        ) as api,
    ):
        work = Path(tmp)
        kubeconfig = api.write_kubeconfig(work / "kubeconfig", token=TOKEN)
        serve = ServeProcess(
            kubeconfig=kubeconfig, workdir=work, args=("--leader-elect",),
            env={"POD_NAME": "stress-0"},
        )  # fmt: skip
        serve.start()
        probes = Probes(serve, api, serve.cert_dir / "ca.crt")
        try:
            probes.start()
            time.sleep(BASELINE_SECONDS)
            probes.loop_lag("baseline")
            probes.phase = "attack"
            cpu0 = serve.cpu_seconds()
            attackers = [  # one process per kind: none starves the others of CPU
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bench.stress",
                        "--attack",
                        kind,
                        "--port",
                        str(serve.ports["webhook"]),
                        "--seconds",
                        str(seconds),
                        "--source",
                        "127.0.0.1" if same_source else sources[kind],
                    ],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for kind in kinds
            ]
            outputs = [a.communicate(timeout=seconds + 300) for a in attackers]
            service_cpu = round(serve.cpu_seconds() - cpu0, 2)
            time.sleep(1.0)
            probes.loop_lag("attack")
        finally:
            probes.stop()
            alive = serve.alive()
            log_tail = serve.log_tail(6000)
            serve.stop()
        attack_stats: dict[str, Any] = {}
        for a, (out, err) in zip(attackers, outputs, strict=True):
            if a.returncode != 0:
                raise RuntimeError(f"an attacker failed:\n{err[-3000:]}")
            attack_stats.update(json.loads(out.strip().splitlines()[-1]))
    under = probes.figures("attack")
    if not alive:
        print(f"stress: serve died under attack:\n{log_tail}", file=sys.stderr, flush=True)
    return {
        "attackSeconds": seconds,
        "attacks": list(kinds),
        "attackSources": "127.0.0.1 (as the valid client)"
        if same_source
        else {k: sources[k] for k in kinds},
        "baseline": probes.figures("baseline"),
        "underAttack": under,
        "attack": attack_stats,
        "serviceCpuSecondsUnderAttack": service_cpu,
        "serviceSurvived": alive,
        "serviceExitCode": None if alive else serve.proc.returncode if serve.proc else None,
        "leaseRetryPeriodS": RETRY_PERIOD,
        "targets": {
            "validP99Ms": 1000,
            "freshConnectionSuccessRate": 1.0,
            "healthzFailures": 0,
            "leaseGapMaxS": f"about {RETRY_PERIOD} (lease 15 s, renew deadline 10 s)",
            "rssMaxMiB": 512,
        },
        "met": {
            "validP99": (under["validP99Ms"] or 1e9) < 1000 and under["validReviewFailures"] == 0,
            "freshConnections": under["freshConnectionSuccessRate"] == 1.0,
            "healthz": under["healthzFailures"] == 0,
            "lease": (under["leaseGapMaxS"] or 1e9) < 2 * RETRY_PERIOD + 1,
            "rss": under["rssMaxMiB"] < 512,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stress")
    p.add_argument("--attack", choices=KINDS, help="be an attacker")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--seconds", type=float, default=ATTACK_SECONDS)
    p.add_argument(
        "--source", default="127.0.0.1", help="the local address(es) to connect from (a,b,...)"
    )
    args = p.parse_args(argv)
    if args.attack:
        out = attack(args.port, args.seconds, (args.attack,), args.source)
        print(json.dumps(out), flush=True)
    else:
        print(json.dumps(run()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
