"""The simulator's training-progress model (admission.sim.progress): checkpoints,
resumption, lost work per eviction, notices (deadline, yield, finish during notice),
requeue policies after preemption, and the preemption-loss benchmark's targets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.simulate import load_scenario, simulate_summary
from admission.config.load import parse_config
from admission.sim.progress import checkpoint_offset
from admission.sim.scenario import US_PER_S, ScenarioError
from admission.sim.trace import load_trace

OBJECTS = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100"},
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpus"},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}],
                        }
                    ],
                }
            ],
        },
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": "ml"},
        "spec": {"clusterQueue": "gpus"},
    },
]


def _job(name: str, arrival: float, runtime: float, priority: int, **extra: Any) -> dict:
    return {
        "name": name,
        "namespace": "ml",
        "localQueue": "lq",
        "arrival": arrival,
        "runtime": runtime,
        "priority": priority,
        "podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 8}}],
        **extra,
    }


def _run(tmp_path: Path, jobs: list[dict], section: dict | None = None) -> tuple[dict, Any]:
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump_all([*OBJECTS, {"trace": jobs}], sort_keys=False))
    config = parse_config({"progressAwarePreemption": section} if section is not None else {})
    return simulate_summary(load_scenario(str(path)), config=config)


def _rec(result: Any, name: str) -> Any:
    return next(r for r in result.records if r.sim.workload.name == name)


def _s(us: int | None) -> float:
    assert us is not None
    return us / US_PER_S


def test_an_evicted_workload_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    summary, result = _run(
        tmp_path,
        [
            _job("trainer", 0, 1000, 0, checkpointInterval=300),
            _job("serve", 700, 100, 10),
        ],
    )
    loss = summary["preemptionLoss"]
    # checkpoints at 300 and 600 s; preempted at 700: 8 GPUs × 100 s lost
    assert loss["evictions"] == 1
    assert loss["gpuHoursLost"] == round(8 * 100 / 3600, 3)
    trainer = _rec(result, "trainer")
    # readmitted once "serve" finishes (~800 s), it runs the 400 s it had left
    assert _s(trainer.finished_us) == pytest.approx(1200, abs=0.1)
    assert loss["preemptors"] == 1
    assert 0 <= loss["preemptorAverageTimeToAdmissionMs"] < 10


def test_without_checkpoints_a_victim_reruns_and_loses_its_whole_run(tmp_path: Path) -> None:
    # an empty section reports the figures and changes nothing else
    summary, result = _run(tmp_path, [_job("trainer", 0, 1000, 0), _job("serve", 700, 100, 10)], {})
    assert summary["preemptionLoss"]["gpuHoursLost"] == round(8 * 700 / 3600, 3)
    assert _s(_rec(result, "trainer").finished_us) == pytest.approx(1800, abs=0.1)


def test_no_progress_figures_without_checkpoints_or_the_section(tmp_path: Path) -> None:
    summary, result = _run(tmp_path, [_job("a", 0, 10, 0), _job("b", 1, 10, 10)])
    assert "preemptionLoss" not in summary and result.loss is None


def test_a_noticed_victim_that_saves_on_notice_yields_early(tmp_path: Path) -> None:
    summary, result = _run(
        tmp_path,
        [
            _job("trainer", 0, 1000, 0, checkpointInterval=300, checkpointOnNotice=30),
            _job("serve", 700, 100, 10),
        ],
        {"noticeWindow": "120s"},
    )
    loss = summary["preemptionLoss"]
    assert (loss["notices"], loss["yieldedOnCheckpoint"], loss["evictions"]) == (1, 1, 1)
    assert loss["gpuHoursLost"] == 0.0  # evicted at its fresh checkpoint
    assert loss["noticeWaitSeconds"] == pytest.approx(30, abs=0.01)
    assert loss["wastedNoticeSeconds"] == 0.0
    serve = _rec(result, "serve")
    assert _s(serve.first_admitted_us) == pytest.approx(730, abs=0.1)
    assert loss["preemptorAverageTimeToAdmissionMs"] == pytest.approx(30_000, abs=20)


def test_a_regular_checkpoint_inside_the_window_also_yields(tmp_path: Path) -> None:
    summary, result = _run(
        tmp_path,
        [_job("trainer", 0, 2000, 0, checkpointInterval=300), _job("serve", 700, 100, 10)],
        {"noticeWindow": "5m"},
    )
    loss = summary["preemptionLoss"]
    assert loss["yieldedOnCheckpoint"] == 1 and loss["gpuHoursLost"] == 0.0
    assert _s(_rec(result, "serve").first_admitted_us) == pytest.approx(900, abs=0.1)


def test_a_victim_ignoring_the_notice_is_evicted_at_the_deadline(tmp_path: Path) -> None:
    summary, result = _run(
        tmp_path,
        [_job("trainer", 0, 2000, 0, checkpointInterval=300), _job("serve", 700, 100, 10)],
        {"noticeWindow": "120s"},
    )
    loss = summary["preemptionLoss"]
    assert (loss["notices"], loss["yieldedOnCheckpoint"]) == (1, 0)
    # deadline 820 s, before its next checkpoint (900 s): 8 GPUs × (820 − 600) s lost
    assert loss["gpuHoursLost"] == round(8 * 220 / 3600, 3)
    assert loss["wastedNoticeSeconds"] == pytest.approx(120, abs=0.01)
    assert _s(_rec(result, "serve").first_admitted_us) == pytest.approx(820, abs=0.1)


def test_a_victim_finishing_during_its_notice_just_finishes(tmp_path: Path) -> None:
    summary, result = _run(
        tmp_path,
        [_job("trainer", 0, 750, 0), _job("serve", 700, 100, 10)],
        {"noticeWindow": "120s"},
    )
    loss = summary["preemptionLoss"]
    assert (loss["notices"], loss["evictions"]) == (1, 0)
    trainer = _rec(result, "trainer")
    assert trainer.evictions == 0 and _s(trainer.finished_us) == pytest.approx(750, abs=0.01)
    assert _s(_rec(result, "serve").first_admitted_us) == pytest.approx(750, abs=0.1)


def test_requeue_backoff_after_preemption(tmp_path: Path) -> None:
    jobs = [_job("trainer", 0, 1000, 0), _job("serve", 700, 20, 10)]
    _, result = _run(tmp_path, jobs, {"requeuingStrategy": {"backoffBaseSeconds": 60}})
    trainer = _rec(result, "trainer")
    assert trainer.sim.workload.requeue_count == 1
    # "serve" is done at ~720 s; the trainer waits out its backoff until 760 s
    assert _s(trainer.admitted_us) == pytest.approx(760, abs=0.1)
    _, result = _run(tmp_path, jobs)
    assert _s(_rec(result, "trainer").admitted_us) == pytest.approx(720, abs=0.1)


def test_never_requeue_after_preemption_deactivates(tmp_path: Path) -> None:
    summary, result = _run(
        tmp_path,
        [_job("trainer", 0, 1000, 0), _job("serve", 700, 20, 10)],
        {"requeuingStrategy": {"backoffLimitCount": 0}},
    )
    trainer = _rec(result, "trainer")
    assert summary["preemptionLoss"]["deactivated"] == 1
    assert trainer.finished_us is None and not trainer.sim.workload.active


def test_checkpoint_jitter_is_bounded_and_deterministic() -> None:
    offsets = [checkpoint_offset("ml/a", i, 600, 60) for i in range(200)]
    assert all(540 <= o <= 660 for o in offsets)
    assert len(set(offsets)) > 10
    assert offsets == [checkpoint_offset("ml/a", i, 600, 60) for i in range(200)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"checkpointInterval": 0}, "checkpointInterval: must be positive"),
        ({"checkpointJitter": 5}, "checkpointJitter: needs a checkpointInterval"),
        (
            {"checkpointInterval": 10, "checkpointJitter": 10},
            "must be less than checkpointInterval",
        ),
        ({"checkpointOnNotice": -1}, "checkpointOnNotice: must not be negative"),
    ],
)
def test_bad_checkpoint_fields_name_the_entry_and_field(extra: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as err:
        load_trace("t.yaml", [*OBJECTS, {"trace": [_job("x", 0, 10, 0, **extra)]}])
    assert "trace[0]" in str(err.value)


def test_preemption_loss_benchmark_meets_the_targets() -> None:
    from bench.preemption_loss import NOTICE_SECONDS, run

    out = run()
    p = out["policies"]
    assert set(p) == {"kueue", "checkpointAware", "notice"}
    assert out["noticeSeconds"] == NOTICE_SECONDS
    for figures in p.values():
        assert figures["preemptions"] > 20  # priority preemption is frequent
        assert figures["neverAdmitted"] == 0
    assert p["checkpointAware"]["gpuHoursLost"] < p["kueue"]["gpuHoursLost"]
    assert p["notice"]["gpuHoursLost"] <= p["kueue"]["gpuHoursLost"] / 2
    extra = (
        p["notice"]["preemptorAverageTimeToAdmissionMs"]
        - p["kueue"]["preemptorAverageTimeToAdmissionMs"]
    )
    assert extra <= NOTICE_SECONDS * 1000


def test_kueue_generator_templates_take_checkpoint_fields() -> None:
    from admission.sim.scenario import parse_generator

    doc = {
        "cohorts": [
            {
                "className": "c",
                "count": 1,
                "queuesSets": [
                    {
                        "className": "q",
                        "count": 1,
                        "nominalQuota": "4",
                        "workloadsSets": [
                            {
                                "count": 1,
                                "creationIntervalMs": 10,
                                "workloads": [
                                    {
                                        "className": "train",
                                        "runtimeMs": 1000,
                                        "request": "1",
                                        "checkpointIntervalMs": 100,
                                        "checkpointJitterMs": 10,
                                        "checkpointOnNoticeMs": 5,
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    (w,) = parse_generator(doc).workloads
    assert (w.checkpoint_interval_us, w.checkpoint_jitter_us, w.checkpoint_on_notice_us) == (
        100_000,
        10_000,
        5_000,
    )
    tmpl = doc["cohorts"][0]["queuesSets"][0]["workloadsSets"][0]["workloads"][0]
    tmpl["checkpointJitterMs"] = 100
    with pytest.raises(ScenarioError, match=r"workloads\[0\]\.checkpointJitterMs: must be less"):
        parse_generator(doc)
