"""``parkUntilFeasible`` with notice windows (``progressAwarePreemption.noticeWindow``),
through the simulator's clock: a head parked on quota that a noticed victim still holds.

A noticed victim keeps its quota until its deadline (or an earlier checkpoint, or its
finish), so a head that needs that quota is parked with a wake ticket, and its
threshold is reached only when the victim's quota is released. Each row is one
scenario: the head must not be admitted before that release, must be admitted at it
when the release covers it after the preemptor's share, and the bounded parking must
decide exactly what Kueue's parking (every head woken by any release) decides.

The world: cohort ``pool`` of ClusterQueue ``serving`` (8 GPUs, preempts lower
priorities, reclaims within the cohort) and ``batch`` (no quota: it only borrows).
Unless a row says otherwise the victim (8 GPUs, priority 0) runs in ``serving`` from
0 s, the preemptor (4 GPUs, priority 10) arrives there at 700 s and notices it
(deadline 820 s), and the head (4 GPUs) arrives in ``batch`` at 710 s: it neither fits
nor can preempt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli.simulate import load_scenario
from admission.config.load import parse_config
from admission.sim.scenario import US_PER_S
from admission.sim.simulator import Simulator

HEAD = "ml/head"


def _cq(name: str, gpus: int, **preemption: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "cohortName": "pool",
            "preemption": preemption,
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}],
                        }
                    ],
                }
            ],
        },
    }


def _lq(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"clusterQueue": name},
    }


OBJECTS = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100"},
    },
    _cq("serving", 8, withinClusterQueue="LowerPriority", reclaimWithinCohort="Any"),
    _cq("batch", 0),
    _lq("serving"),
    _lq("batch"),
]


def _job(name: str, queue: str, arrival: float, runtime: float, priority: int, gpus: int,
         **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "name": name,
        "namespace": "ml",
        "localQueue": queue,
        "arrival": arrival,
        "runtime": runtime,
        "priority": priority,
        "podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": gpus}}],
        **extra,
    }


@dataclass(frozen=True)
class Row:
    victim: dict[str, Any]
    released: float  # when the victim's quota is released
    head_admitted: float  # when the head is first admitted
    head_gpus: int = 4
    preemptor_priority: int = 10
    options: dict[str, Any] = field(default_factory=dict)  # the Simulator's


ROWS = {
    "victim-runs-out-its-notice": Row(
        victim=_job("victim", "serving", 0, 2000, 0, 8), released=820, head_admitted=820
    ),
    "victim-checkpoints-on-notice-and-yields-early": Row(
        victim=_job(
            "victim", "serving", 0, 2000, 0, 8, checkpointInterval=300, checkpointOnNotice=30
        ),
        released=730,
        head_admitted=730,
    ),
    "victim-finishes-during-its-notice": Row(
        victim=_job("victim", "serving", 0, 750, 0, 8), released=750, head_admitted=750
    ),
    "eviction-at-the-deadline-takes-5s-to-complete": Row(
        victim=_job("victim", "serving", 0, 2000, 0, 8),
        released=825,
        head_admitted=825,
        options={"eviction_latency": 5.0},
    ),
    "victim-borrows-in-the-heads-queue-and-is-reclaimed-with-notice": Row(
        victim=_job("victim", "batch", 0, 2000, 0, 8),
        preemptor_priority=0,
        released=820,
        head_admitted=820,
    ),
    # the release reaches the head's threshold (the pool empties), but the preemptor
    # takes its 4 GPUs in that cycle: the head needs 8 and waits for the requeued
    # victim (first in order: it does not borrow) to run its 2,000 s again
    "preemptors-share-of-the-release-leaves-too-little-for-the-head": Row(
        victim=_job("victim", "serving", 0, 2000, 0, 8),
        head_gpus=8,
        released=820,
        head_admitted=2920,
    ),
}


@dataclass
class Run:
    first_admitted: dict[str, float]  # seconds, by workload name
    head_tickets: list[tuple[float, int | None]]  # (time, its wake ticket) while parked


def _run(row: Row, tmp_path: Path, *, bounded: bool) -> Run:
    jobs = [
        row.victim,
        _job("preemptor", "serving", 700, 100, row.preemptor_priority, 4),
        _job("head", "batch", 710, 100, 0, row.head_gpus),
    ]
    path = tmp_path / f"trace-{bounded}.yaml"
    path.write_text(yaml.safe_dump_all([*OBJECTS, {"trace": jobs}], sort_keys=False))
    config = parse_config(
        {"parkUntilFeasible": bounded, "progressAwarePreemption": {"noticeWindow": "120s"}}
    )
    tickets: list[tuple[float, int | None]] = []

    def probe(now: float) -> None:
        q = sim.cache.queues["batch"]
        for wl, ticket in q.parked():
            if wl.key == HEAD:
                tickets.append((now - sim.epoch, ticket))

    sim = Simulator(
        load_scenario(str(path)), config=config, sample_interval=10, on_sample=probe, **row.options
    )
    result = sim.run()
    admitted = {
        r.sim.workload.name: r.first_admitted_us / US_PER_S
        for r in result.records
        if r.first_admitted_us is not None
    }
    return Run(admitted, tickets)


@pytest.mark.parametrize("name", list(ROWS))
def test_a_head_parked_on_a_noticed_victims_quota_is_woken_by_its_release(
    name: str, tmp_path: Path
) -> None:
    row = ROWS[name]
    run = _run(row, tmp_path, bounded=True)
    # the preemptor gets its share at the release, not before (the notice holds it)
    assert run.first_admitted["preemptor"] == pytest.approx(row.released, abs=0.01)
    # the head: never while the victim holds the quota; at the release when it covers it
    assert run.first_admitted["head"] == pytest.approx(row.head_admitted, abs=0.01)
    # it waited parked with a wake ticket (bounded, not Kueue's), all through the notice
    during = [(t, ticket) for t, ticket in run.head_tickets if 710 < t < row.released]
    assert during and all(ticket is not None for _, ticket in during), run.head_tickets
    # and the bounded parking decides what Kueue's parking decides
    kueue = _run(row, tmp_path, bounded=False)
    assert kueue.head_tickets and all(ticket is None for _, ticket in kueue.head_tickets)
    assert run.first_admitted == pytest.approx(kueue.first_admitted, abs=0.01)
