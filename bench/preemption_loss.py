"""``preemption-loss``: GPU-hours lost to preemption under three policies, side by side.

The bundled scenario ``admission/scenarios/gpu-preemption.yaml`` (production inference
bursts over research training, most gangs checkpointing) runs three times through the
simulator, the same engine each time, only the ``progressAwarePreemption`` section
differing:

* ``kueue`` — no section: Kueue's victim order (most recently admitted first), evicted
  at once;
* ``checkpointAware`` — ``victimOrder: LostWork``: the victims that lose the least
  work since their last checkpoint, evicted at once;
* ``notice`` — the same victims, noticed ``noticeSeconds`` before their eviction: one
  that saves a checkpoint meanwhile is evicted then, with nothing lost.

Each policy reports ``gpuHoursLost`` (Σ GPUs × time since the last checkpoint, at each
eviction), ``makespanMs``, ``preemptions`` (evictions), the preemptors' average time to
admission, and the notice figures. The target (issue 18): ``notice`` loses at most half
the GPU-hours of ``kueue``, and its preemptors wait at most ``noticeSeconds`` longer.
Simulated time only: the figures do not depend on the machine (CPU seconds do).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

NOTICE_SECONDS = 300
SCENARIO = (
    Path(__file__).resolve().parent.parent / "admission" / "scenarios" / "gpu-preemption.yaml"
)

POLICIES: dict[str, dict[str, Any] | None] = {
    "kueue": None,
    "checkpointAware": {"victimOrder": "LostWork"},
    "notice": {"victimOrder": "LostWork", "noticeWindow": f"{NOTICE_SECONDS}s"},
}


def run_policy(section: dict[str, Any] | None, path: Path = SCENARIO) -> dict[str, Any]:
    from admission.cli.simulate import load_scenario, simulate_summary
    from admission.config.load import parse_config

    config = parse_config({"progressAwarePreemption": section} if section is not None else {})
    summary, _ = simulate_summary(load_scenario(str(path)), config=config)
    loss = summary["preemptionLoss"]
    return {
        "gpuHoursLost": loss["gpuHoursLost"],
        "makespanMs": summary["makespanMs"],
        "preemptions": loss["evictions"],
        "preemptorAverageTimeToAdmissionMs": loss["preemptorAverageTimeToAdmissionMs"],
        "notices": loss["notices"],
        "yieldedOnCheckpoint": loss["yieldedOnCheckpoint"],
        "noticeWaitSeconds": loss["noticeWaitSeconds"],
        "wastedNoticeSeconds": loss["wastedNoticeSeconds"],
        "neverAdmitted": summary["neverAdmitted"],
    }


def run() -> dict[str, Any]:
    t0 = time.process_time()
    policies = {name: run_policy(section) for name, section in POLICIES.items()}
    kueue, notice = policies["kueue"], policies["notice"]
    return {
        "scenario": str(SCENARIO.relative_to(SCENARIO.parent.parent.parent)),
        "noticeSeconds": NOTICE_SECONDS,
        "policies": policies,
        "lostRatioNoticeOverKueue": (
            round(notice["gpuHoursLost"] / kueue["gpuHoursLost"], 3)
            if kueue["gpuHoursLost"]
            else None
        ),
        "preemptorExtraWaitMs": notice["preemptorAverageTimeToAdmissionMs"]
        - kueue["preemptorAverageTimeToAdmissionMs"],
        "cpuSeconds": round(time.process_time() - t0, 3),
    }
