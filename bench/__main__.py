"""Run benchmarks, one subprocess each (so peak RSS is the benchmark's own).

Prints one JSON object per benchmark on stdout; ``--record`` appends a dated row per
benchmark to bench/RESULTS.md with nproc, the Python version and the git commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

# name -> "module:function"; each function returns a dict of the keys docs/benchmarks.md lists.
BENCHMARKS = {
    "plan-50k": "bench.plan50k:run",
    "plan-tas": "bench.plan_tas:run",
    "cycle-5k": "bench.cycle5k:run",
    "sim-baseline": "bench.sim:run_baseline",
    "sim-large": "bench.sim:run_large",
    "sim-5k": "bench.sim5k:run",
    "webhook": "bench.webhook_bench:run_webhook",
    "webhook-burst": "bench.webhook_bench:run_webhook_burst",
    "webhook-impact": "bench.whatif_bench:run",
    "stack-baseline": "bench.stack:run_baseline",
    "stack-large": "bench.stack:run_large",
    "kueue-harness-baseline": "bench.stack:run_kueue_baseline",
    "kueue-harness-large": "bench.stack:run_kueue_large",
    "serve-memory": "bench.serve_memory:run",
    "serve-churn": "bench.serve_churn:run",
    "stress": "bench.stress:run",
    "stress-sources": "bench.stress:run_multi_source",
    "invariants": "bench.invariants:run",
    "preemption-loss": "bench.preemption_loss:run",
    "gpu-failures": "bench.gpu_failures:run",
    "dashboard-scale": "bench.dashboard_scale:run",
    "throughput-1300": "bench.throughput1300:run",
    "multikueue": "bench.multikueue:run",
}
RESULTS = Path(__file__).with_name("RESULTS.md")


def run_one(name: str) -> dict:
    """Run one benchmark in this process and add cpuSeconds/peakRssMiB if missing."""
    module, func = BENCHMARKS[name].split(":")
    fn = getattr(importlib.import_module(module), func)
    t0 = time.process_time()
    out = dict(fn())
    out.setdefault("cpuSeconds", round(time.process_time() - t0, 3))
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.setdefault("peakRssMiB", round(rss_kib / 1024, 1))
    return {"benchmark": name, **out}


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(results: list[dict]) -> None:
    new = not RESULTS.exists()
    with RESULTS.open("a", encoding="utf-8") as f:
        if new:
            f.write("# Benchmark results\n\nAppended by `python -m bench --record`.\n\n")
            f.write(
                "| date | benchmark | nproc | python | commit | result |\n|---|---|---|---|---|---|\n"
            )
        for r in results:
            body = {k: v for k, v in r.items() if k != "benchmark"}
            f.write(
                f"| {dt.date.today().isoformat()} | {r['benchmark']} | {os.cpu_count()} | "
                f"{platform.python_version()} | {_commit()} | `{json.dumps(body, sort_keys=True)}` |\n"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    p.add_argument("names", nargs="*", help=f"benchmarks (default: all): {', '.join(BENCHMARKS)}")
    p.add_argument("--record", action="store_true", help="append the results to bench/RESULTS.md")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    names = args.names or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}",
            file=sys.stderr,
        )
        return 2
    if args.in_process:
        for n in names:
            print(json.dumps(run_one(n)), flush=True)
        return 0
    results = []
    for n in names:
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "--in-process", n], capture_output=True, text=True
        )
        if proc.returncode != 0:
            print(f"{n} failed:\n{proc.stderr}", file=sys.stderr)
            return 1
        line = proc.stdout.strip().splitlines()[-1]
        print(line, flush=True)
        results.append(json.loads(line))
    if args.record:
        record(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
