"""``sim-baseline`` and ``sim-large``: Kueue's scheduler-performance scenarios on the
simulated clock (docs/benchmarks.md) — a **policy-quality** benchmark.

The generator configs are Kueue's, shipped in ``admission/scenarios/kueue-perf/`` (or
read from ``$QM_KUEUE_PERF_DIR``). The headline run charges every scheduling cycle the
CPU time it really took (``cycle_cost="measured"``) and has no API: its makespan is
compared with the scenario's lower bound only (no scheduler can finish earlier), never
with Kueue's wall time, which is set by a client rate limit this run does not have.
Two more runs ride along: ``fixedCycle`` (every cycle 1 ms: the policy alone, the
number earlier rows recorded) and ``withApi`` (measured cycles, and every decision a
write through a 50 QPS / 100 burst bucket landing 5 ms later — Kueue's budget; its
makespan is bounded by admissions ÷ 50 QPS, so it says what the budget costs, not how
good the policy is; baseline only). ``preemptions`` is the engine's count in each run.

``policyVariants`` (baseline only, fixed 1 ms cycles) says what Kueue's preemption rules
cost against the lower bound, which knows nothing of priorities: the same scenario with
``reclaimWithinCohort: Never`` (``noReclaim``), with no preemption at all
(``noPreemption``), and with this project's opt-in ``progressAwarePreemption``
``minimumRuntime: 1s`` (``minimumRuntime1s``: no workload is preempted in its first
second — every workload of the scenario runs at most that long). They are not Kueue's
behaviour and not the headline figure; they show how much of the makespan above the
bound is the work the preemptions Kueue's rules require throw away.

``progressAware`` (baseline only, measured cycle costs like the headline) is the
scenario under this project's opt-in ``progressAwarePreemption`` with a 1 s
``noticeWindow``: a victim runs on for up to 1 s after it is chosen (every workload of
the scenario runs at most that long), so most finish instead of being thrown away. Its
target: makespan ÷ lower bound ≤ 1.05 with the high class's (``large``) time to admission
no worse than under Kueue's rules plus the notice window, statistic by statistic
(average, p95 and max, each against the same statistic of the Kueue run):
``largeAverageTimeToAdmissionMsOverKueuePlusNotice`` (and the p95 and max ones) is that
margin, ≤ 0 when met, and ``targetsMet`` says which hold. ``progressAwareReserveEvicting``
adds ``reserveEvictingCapacity: true`` (another opt-in): the quota a noticed victim frees
by finishing goes to its preemptor, not to whichever head comes first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def scenario_dir() -> Path:
    env = os.environ.get("QM_KUEUE_PERF_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "admission" / "scenarios" / "kueue-perf"


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    classes = summary["workloadClasses"]
    out = {
        "makespanMs": summary["makespanMs"],
        "makespanOverLowerBound": summary.get("makespanOverLowerBound"),
        "averageTimeToAdmissionMs": {c: v["averageTimeToAdmissionMs"] for c, v in classes.items()},
        "p95TimeToAdmissionMs": {c: v["p95TimeToAdmissionMs"] for c, v in classes.items()},
        "maxTimeToAdmissionMs": {c: v["maxTimeToAdmissionMs"] for c, v in classes.items()},
        "totalEvictions": {c: v["totalEvictions"] for c, v in classes.items()},
        "usagePercent": summary["clusterQueueClasses"]["cq"]["usagePercent"],
        "cycles": summary["engine"]["cycles"],
        "preemptions": summary["engine"]["preemptions"],
        "cycleCpuSeconds": summary["engine"]["cycleCpuSeconds"],
    }
    if "api" in summary:
        out["api"] = summary["api"]
    return out


def run_scenario(name: str, *, with_api: bool = True) -> dict[str, Any]:
    from admission.cli.simulate import load_scenario, simulate_summary
    from admission.sim.api_model import ApiModel

    path = scenario_dir() / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: Kueue's {name} generator config not found (set QM_KUEUE_PERF_DIR)"
        )
    t0 = time.process_time()
    scenario = load_scenario(str(path))
    summary, _ = simulate_summary(scenario, cycle_cost="measured")
    cpu = time.process_time() - t0
    fixed, _ = simulate_summary(scenario)
    out = {
        "lowerBoundMs": summary["lowerBoundMs"],
        **_figures(summary),
        "cpuSeconds": round(cpu, 3),
        "fixedCycle": _figures(fixed),
    }
    if with_api:
        api, _ = simulate_summary(
            scenario, cycle_cost="measured", api=ApiModel(qps=50, burst=100, latency=0.005)
        )
        out["withApi"] = _figures(api)
    return out


VARIANTS: dict[str, tuple[tuple[tuple[str, str], ...], str | None]] = {
    # name: (replacements in the generator config, progressAwarePreemption section)
    "noReclaim": ((("reclaimWithinCohort: Any", "reclaimWithinCohort: Never"),), None),
    "noPreemption": (
        (
            ("reclaimWithinCohort: Any", "reclaimWithinCohort: Never"),
            ("withinClusterQueue: LowerPriority", "withinClusterQueue: Never"),
        ),
        None,
    ),
    "minimumRuntime1s": ((), "minimumRuntime: 1s"),
}


def policy_variants(name: str) -> dict[str, Any]:
    """The scenario under the policies of ``VARIANTS`` (fixed 1 ms cycles)."""
    import tempfile

    from admission.cli.simulate import load_scenario, simulate_summary
    from admission.config.load import parse_config

    text = (scenario_dir() / f"{name}.yaml").read_text()
    out: dict[str, Any] = {}
    for variant, (replacements, section) in VARIANTS.items():
        changed = text
        for old, new in replacements:
            if old not in changed:
                raise ValueError(f"{name}.yaml: {old!r} not found (variant {variant})")
            changed = changed.replace(old, new)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(changed)
            scenario = load_scenario(str(path))
        config = None
        if section is not None:
            key, value = section.split(": ", 1)
            config = parse_config(
                {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
                 "progressAwarePreemption": {key: value}},
                source=f"bench variant {variant}",
            )  # fmt: skip
        summary, _ = simulate_summary(scenario, config=config)
        out[variant] = _figures(summary)
    return out


# The opt-in row: every victim gets a notice window as long as any workload of the
# scenario runs (1 s), so a victim that would finish within it is not thrown away.
PROGRESS_AWARE = {"noticeWindow": "1s"}
NOTICE_MS = 1000
MAKESPAN_TARGET = 1.05
HIGH_CLASS = "large"


def progress_aware(name: str, kueue: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """``name`` under ``progressAwarePreemption: PROGRESS_AWARE`` with measured cycle costs,
    beside ``kueue`` (the same run under Kueue's rules): its figures, and the high
    class's time to admission against Kueue's rules plus the notice window."""
    from admission.cli.simulate import load_scenario, simulate_summary
    from admission.config.load import parse_config

    config = parse_config(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
         "progressAwarePreemption": PROGRESS_AWARE, **extra},
        source="bench progressAware",
    )  # fmt: skip
    summary, _ = simulate_summary(
        load_scenario(str(scenario_dir() / f"{name}.yaml")), config=config, cycle_cost="measured"
    )
    out = {"section": {"progressAwarePreemption": PROGRESS_AWARE, **extra}, **_figures(summary)}
    met = {"makespanOverLowerBound": out["makespanOverLowerBound"] <= MAKESPAN_TARGET}
    for key in ("averageTimeToAdmissionMs", "p95TimeToAdmissionMs", "maxTimeToAdmissionMs"):
        ours, theirs = out[key][HIGH_CLASS], kueue[key][HIGH_CLASS]
        name = f"{HIGH_CLASS}{key[0].upper()}{key[1:]}"
        out[f"{name}OverKueuePlusNotice"] = margin = ours - (theirs + NOTICE_MS)
        met[name] = margin <= 0
    out["targetsMet"] = met
    return out


def run_baseline() -> dict[str, Any]:
    kueue = run_scenario("baseline")
    return {
        **kueue,
        "progressAware": progress_aware("baseline", kueue),
        "progressAwareReserveEvicting": progress_aware(
            "baseline", kueue, reserveEvictingCapacity=True
        ),
        "policyVariants": policy_variants("baseline"),
    }


def run_large() -> dict[str, Any]:
    # no withApi row: under the budget every finish lands alone and costs a 1,000-queue
    # cycle of its own (50,000 of them), more CPU than the benchmark is worth
    return run_scenario("large-scale", with_api=False)
