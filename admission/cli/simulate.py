"""``quartermaster simulate``: load a scenario, run the simulator, print and report.

The command of CLI.md: ``SCENARIO`` is a Kueue generator config or a trace (detected
from the file), the bundled GPU-cluster day when omitted. Bad input (an unreadable
or invalid scenario or configuration) raises ``admission.cli.common.BadInput`` (exit 2).
A progress bar is drawn on stderr only when stdout is a terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from admission.cli.common import EXIT_OK, BadInput, warn, write_yaml
from admission.config.load import load_config
from admission.config.schema import ConfigError
from admission.sim.metrics import lower_bound, summarize, summary_table
from admission.sim.placement import (
    FragmentationProbe,
    has_topology,
    intended_levels,
    placement_quality,
    placement_table,
    topology_blind,
)
from admission.sim.scenario import (
    US_PER_S,
    Scenario,
    ScenarioError,
    is_generator_format,
    parse_generator,
)
from admission.sim.simulator import Simulator
from admission.sim.trace import load_trace, read_documents

BUNDLED_SCENARIO = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios", "gpu-cluster.yaml"
)


BUNDLED_GENERATOR = os.path.join(os.path.dirname(BUNDLED_SCENARIO), "generate_gpu_cluster.py")


def load_scenario(
    path: str | None, *, trace_path: str | None = None, seed: int | None = None
) -> Scenario:
    """The scenario in ``path`` (generator format or trace), or the bundled one.

    Without ``path``, ``seed`` draws another day of the bundled GPU cluster from its
    generator (the checked-in file is the day of the generator's own seed).
    """
    if trace_path is not None:
        if not os.path.exists(trace_path):
            raise ScenarioError(f"--trace {trace_path}: no such file")
        if os.path.isdir(trace_path):
            raise ScenarioError(f"--trace {trace_path}: is a directory; give a JSON-lines file")
        if path is None:
            raise ScenarioError(
                "--trace: give the SCENARIO whose queue objects the trace's workloads use "
                "(the bundled scenario has its own trace)"
            )
    if path is None and seed is not None:
        return _bundled_day(seed)
    if path is None:
        path = BUNDLED_SCENARIO
    if os.path.isdir(path):
        raise ScenarioError(f"{path}: is a directory; give one scenario file")
    if not os.path.exists(path):
        raise ScenarioError(f"{path}: no such file")
    docs = read_documents(path)
    present = [d for d in docs if d is not None]
    if not present:
        raise ScenarioError(f"{path}: empty file")
    name = os.path.splitext(os.path.basename(path))[0]
    if is_generator_format(present[0]):
        if len(present) > 1:
            raise ScenarioError(f"{path}: document 1: a generator config is a single document")
        if trace_path is not None:
            raise ScenarioError(
                f"{path}: --trace applies to trace scenarios, not to a generator config"
            )
        return parse_generator(present[0], source=path, name=name)
    return load_trace(path, docs, trace_path=trace_path)


def _bundled_day(seed: int) -> Scenario:
    """The bundled GPU-cluster scenario, generated with ``seed``."""
    import importlib.util
    import tempfile

    spec = importlib.util.spec_from_file_location("_qm_gpu_cluster", BUNDLED_GENERATOR)
    if spec is None or spec.loader is None:  # pragma: no cover - shipped with the package
        raise ScenarioError(f"{BUNDLED_GENERATOR}: the bundled scenario's generator is missing")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    with tempfile.TemporaryDirectory(prefix="qm-day-") as tmp:
        path = os.path.join(tmp, "gpu-cluster.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(generator.render(seed=seed))
        scenario = load_trace(path, read_documents(path), trace_path=None)
    scenario.source = f"{BUNDLED_SCENARIO} (seed {seed})"
    return scenario


def seed_uids(scenario: Scenario, seed: int) -> None:
    """Give every workload a UID drawn from ``seed``, as the API server gives random ones.

    The engine orders pending workloads by priority, then creation time, then UID: in a
    cluster, which of two equal workloads created in the same instant goes first is
    luck. Without a seed the simulator breaks such ties by name; with one, by the drawn
    UIDs, so several seeds show how much an outcome depends on that luck.
    """
    import random
    import uuid

    rng = random.Random(seed)
    for s in scenario.workloads:
        s.workload.uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))


class ProgressBar:
    """A one-line progress bar on a terminal stream, redrawn at most ten times a second."""

    def __init__(self, stream: TextIO, *, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self._last = 0.0

    def __call__(self, done: int, total: int, now_us: int) -> None:
        wall = time.monotonic()
        if done < total and wall - self._last < 0.1:
            return
        self._last = wall
        frac = done / total if total else 1.0
        filled = int(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(
            f"\r[{bar}] {frac * 100:5.1f}%  {done}/{total} finished  t={now_us / US_PER_S:,.1f}s simulated"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def run_simulate_command(args: argparse.Namespace) -> int:
    """The ``simulate`` subcommand (CLI.md); returns the exit code."""
    limits: dict[str, Any] = {}
    max_cycles = getattr(args, "max_cycles", None)
    if max_cycles is not None:
        if max_cycles < 1:
            raise BadInput(f"--max-cycles: must be a positive number of cycles, got {max_cycles}")
        limits["max_cycles"] = max_cycles
    cpu_limit = getattr(args, "cpu_limit", None)
    if cpu_limit is not None:
        if not cpu_limit > 0 or cpu_limit == float("inf"):
            raise BadInput(
                f"--cpu-limit: must be a positive number of CPU seconds, got {cpu_limit}"
            )
        limits["cpu_limit"] = cpu_limit
    try:
        scenario = load_scenario(
            args.scenario, trace_path=getattr(args, "trace", None), seed=args.seed
        )
        config = load_config(args.config)
    except (ScenarioError, ConfigError) as e:
        raise BadInput(str(e)) from e
    if args.report:
        _prepare_report_dir(args.report)
    warn("simulate", config.warnings)
    bar = ProgressBar(sys.stderr) if sys.stdout.isatty() else None
    summary, _ = simulate_summary(
        scenario,
        config=config,
        report=args.report,
        progress=bar,
        seed=args.seed,
        # run once: the engine may use the scenario's own objects (no copy of every
        # workload) unless the topology comparison runs the scenario again; the
        # per-queue series are drawn only by the report
        copy_workloads=has_topology(scenario),
        samples=bool(args.report),
        **limits,
    )
    if bar is not None:
        bar.close()
    fmt = args.output or ("table" if sys.stdout.isatty() else "json")
    if fmt == "json":
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif fmt == "yaml":
        write_yaml(summary)
    else:
        sys.stdout.write(summary_table(summary))
        sys.stdout.write(placement_table(summary))
        if args.report:
            sys.stdout.write(f"\nReport: {os.path.join(args.report, 'index.html')}\n")
    return EXIT_OK


def _prepare_report_dir(path: str) -> None:
    """Create ``--report DIR`` before the run, so that a path that cannot hold the
    report, or a missing ``[report]`` extra, is refused at once (exit 2, one line) and
    not after the whole simulation."""
    try:
        import matplotlib  # noqa: F401  (the report's charts; an optional extra)
    except ImportError:
        raise BadInput(
            "--report needs matplotlib, which is not installed: pip install 'quartermaster[report]'"
        ) from None
    if os.path.exists(path) and not os.path.isdir(path):
        raise BadInput(f"--report {path}: exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--report {path}: cannot create the directory: {e.strerror or e}") from e
    if not os.access(path, os.W_OK | os.X_OK):
        raise BadInput(f"--report {path}: the directory is not writable")


def simulate_summary(
    scenario: Scenario,
    *,
    config: Any = None,
    report: str | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    seed: int | None = None,
    **options: Any,
) -> tuple[dict[str, Any], Any]:
    """Run ``scenario``; return (summary, SimResult), writing the report if asked.

    ``seed`` (recorded in the summary) draws the workloads' UIDs (:func:`seed_uids`);
    without it ties are broken by name. Either way a run is reproducible.
    """
    if seed is not None:
        seed_uids(scenario, seed)
    bound = lower_bound(scenario)
    tas = has_topology(scenario) and "on_sample" not in options
    probe = FragmentationProbe(scenario, intended_levels(scenario)) if tas else None
    sim = Simulator(scenario, config=config, progress=progress, on_sample=probe, **options)
    if probe is not None:
        probe.sim = sim
    result = sim.run()
    summary = summarize(result, bound)
    summary["seed"] = seed
    if probe is not None:
        summary["topology"] = topology_comparison(scenario, result, probe, config, options)
    if report:
        from admission.sim.report import write_report

        write_report(result, summary, bound, report)
    return summary, result


def topology_comparison(
    scenario: Scenario, result: Any, probe: Any, config: Any, options: dict[str, Any]
) -> dict[str, Any]:
    """Placement quality of the run and of the same workload topology-blind (one more
    simulation, every topology request removed), side by side."""
    levels = intended_levels(scenario)
    blind_sc = topology_blind(scenario)
    blind_probe = FragmentationProbe(blind_sc, levels)
    blind_sim = Simulator(blind_sc, config=config, on_sample=blind_probe, **options)
    blind_probe.sim = blind_sim
    blind = blind_sim.run()
    blind_summary = summarize(blind, lower_bound(blind_sc))
    keep = ("makespanMs", "usagePercent", "averageTimeToAdmissionMs", "preemptions")
    return {
        "aware": placement_quality(result, levels, probe),
        "blind": {
            **placement_quality(blind, levels, blind_probe),
            **{k: blind_summary[k] for k in keep if k in blind_summary},
        },
    }
