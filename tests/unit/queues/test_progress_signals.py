"""The progress signals (queues.api.progress), the progressAwarePreemption configuration,
and how plan shows notices (-o table, --what-if)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml

from admission.cli.main import main
from admission.config.load import parse_config
from admission.config.schema import ConfigError
from queues.api.progress import (
    CHECKPOINT_ANNOTATION,
    CHECKPOINTED_CONDITION,
    DEADLINE_ANNOTATION,
    NOTICE_CONDITION,
    ProgressError,
    parse_time,
    without_progress,
    workload_progress,
)
from tests.support.scenario_shorthand import scenario_objects


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("1970-01-01T01:00:00Z", 3600.0),
        ("1970-01-01T01:00:00.5Z", 3600.5),
        ("1970-01-01T02:00:00+01:00", 3600.0),
        ("1970-01-01t01:00:00z", 3600.0),
    ],
)
def test_rfc3339_times(text: str, epoch: float) -> None:
    assert parse_time(text, "f") == epoch


@pytest.mark.parametrize("bad", ["yesterday", "1970-01-01", "1970-01-01T01:00:00", "", 5, None])
def test_bad_times_name_the_field(bad: object) -> None:
    with pytest.raises(ProgressError, match="^metadata.annotations\\[x\\]: "):
        parse_time(bad, "metadata.annotations[x]")


def _wl(annotations: dict, conditions: list) -> dict:
    return {"metadata": {"annotations": annotations}, "status": {"conditions": conditions}}


def test_the_latest_of_annotation_and_condition_counts() -> None:
    got = workload_progress(
        _wl(
            {CHECKPOINT_ANNOTATION: "1970-01-01T00:10:00Z"},
            [
                {
                    "type": CHECKPOINTED_CONDITION,
                    "status": "True",
                    "lastTransitionTime": "1970-01-01T00:20:00Z",
                }
            ],
        )
    )
    assert (got.checkpoint, got.noticed_at, got.deadline) == (1200.0, None, None)


def test_a_notice_needs_its_deadline_after_it() -> None:
    notice = {
        "type": NOTICE_CONDITION,
        "status": "True",
        "lastTransitionTime": "1970-01-01T00:10:00Z",
    }
    with pytest.raises(ProgressError, match="Required value"):
        workload_progress(_wl({}, [notice]))
    with pytest.raises(ProgressError, match="before the notice"):
        workload_progress(_wl({DEADLINE_ANNOTATION: "1970-01-01T00:05:00Z"}, [notice]))
    got = workload_progress(_wl({DEADLINE_ANNOTATION: "1970-01-01T00:15:00Z"}, [notice]))
    assert (got.noticed_at, got.deadline) == (600.0, 900.0)
    # a notice that ended (status False) is no notice
    ended = {**notice, "status": "False"}
    assert workload_progress(_wl({}, [ended])).noticed_at is None


def test_without_progress_keeps_everything_else() -> None:
    obj = _wl(
        {CHECKPOINT_ANNOTATION: "bad", "other": "x"},
        [{"type": CHECKPOINTED_CONDITION, "status": "True"}, {"type": "QuotaReserved"}],
    )
    clean = without_progress(obj)
    assert clean["metadata"]["annotations"] == {"other": "x"}
    assert clean["status"]["conditions"] == [{"type": "QuotaReserved"}]
    assert workload_progress(clean).checkpoint is None
    assert obj["metadata"]["annotations"][CHECKPOINT_ANNOTATION] == "bad"  # a copy


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"noticeWindow": "25h"},
            "progressAwarePreemption.noticeWindow: '25h' is longer than the bound of 24h",
        ),
        (
            {"noticeWindow": "soon"},
            "progressAwarePreemption.noticeWindow: 'soon' is not a duration",
        ),
        (
            {"clusterQueues": {"gpu": {"minimumRuntime": "-1m"}}},
            "progressAwarePreemption.clusterQueues.gpu.minimumRuntime:",
        ),
        (
            {"requeuingStrategy": {"backoffLimitCount": -1}},
            "progressAwarePreemption.requeuingStrategy.backoffLimitCount:",
        ),
        (
            {"requeuingStrategy": {"backoffBaseSeconds": 100, "backoffMaxSeconds": 10}},
            "backoffMaxSeconds (10) must not be less than backoffBaseSeconds (100)",
        ),
        ({"localQueues": {"lq": {}}}, "'lq': LocalQueues are keyed <namespace>/<name>"),
        (
            {"localQueues": {"a/lq": {"noticeWindow": "1m"}}},
            "localQueues.a/lq.noticeWindow: unknown field",
        ),
        (
            {"victimOrder": "Cheapest"},
            "progressAwarePreemption.victimOrder: Input should be 'Kueue' or 'LostWork'",
        ),
        ({"lostWorkResources": []}, "lostWorkResources: must list at least one resource name"),
        ({"noticWindow": "1m"}, "progressAwarePreemption.noticWindow: unknown field"),
    ],
)
def test_bad_configuration_names_the_field(section: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"progressAwarePreemption": section})
    assert message in str(err.value)


def test_per_queue_values_override_the_defaults() -> None:
    policy = parse_config(
        {
            "progressAwarePreemption": {
                "noticeWindow": "1m",
                "minimumRuntime": "5m",
                "requeuingStrategy": {"backoffBaseSeconds": 10},
                "clusterQueues": {"research": {"noticeWindow": "10m"}},
                "localQueues": {"ci/runners": {"requeuingStrategy": {"backoffLimitCount": 0}}},
            }
        }
    ).progress
    assert policy is not None
    research, other = policy.for_cq("research"), policy.for_cq("prod")
    assert (research.notice, research.minimum_runtime) == (600.0, 300.0)  # inherits the rest
    assert (other.notice, other.minimum_runtime) == (60.0, 300.0)
    assert research.requeue is not None and research.requeue.backoff_base == 10.0
    assert parse_config({}).progress is None


def _plan(tmp_path: Path, spec_file: str, *extra: str) -> tuple[int, str]:
    spec = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "scenarios" / "checkpoint" / spec_file).read_text()
    )
    objs = tmp_path / "objects.yaml"
    objs.write_text(yaml.safe_dump_all(scenario_objects(spec), sort_keys=False))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(spec["config"]))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["plan", "-f", str(objs), "--config", str(cfg), *spec["args"], *extra])
    return code, out.getvalue()


def test_plan_table_shows_notices_and_deadlines(tmp_path: Path) -> None:
    code, out = _plan(tmp_path, "notice-reserves-the-preemptors-quota.yaml", "-o", "table")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("WORKLOAD") and "BY" in line)
    assert "NOTICE DEADLINE" in header and "REQUEUE" in header
    row = next(line for line in out.splitlines() if line.startswith("default/trainer"))
    assert "1970-01-01T01:05:00Z (running)" in row
    assert "at the latest 1970-01-01T01:05:00Z" in out
    assert out.startswith("Cycles: 1\n")  # waiting on a notice is quiescence, not 10000 cycles


def test_plan_table_shows_requeue_decisions(tmp_path: Path) -> None:
    code, out = _plan(tmp_path, "requeue-backoff-after-preemption.yaml", "-o", "table")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("default/trainer"))
    assert "backoff until 1970-01-01T01:02:00Z" in row


def test_what_if_includes_notices(tmp_path: Path) -> None:
    urgent = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "urgent",
            "namespace": "default",
            "uid": "u",
            "creationTimestamp": "1970-01-01T00:55:00Z",
        },
        "spec": {
            "queueName": "lq",
            "priority": 20,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "x",
                                    "resources": {"requests": {"nvidia.com/gpu": "8"}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }
    what_if = tmp_path / "whatif.yaml"
    what_if.write_text(yaml.safe_dump(urgent))
    code, out = _plan(
        tmp_path,
        "notice-reserves-the-preemptors-quota.yaml",
        "-o",
        "table",
        "--what-if",
        str(what_if),
    )
    assert code == 0
    changes = out.split("WHAT-IF CHANGES", 1)[1]
    row = next(line for line in changes.splitlines() if line.startswith("default/trainer"))
    assert (
        "preempted by default/inference (InClusterQueue, noticed until 1970-01-01T01:05:00Z)" in row
    )
    assert "preempted by default/urgent (InClusterQueue, noticed until 1970-01-01T01:05:00Z)" in row
