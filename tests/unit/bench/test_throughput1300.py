"""``throughput-1300``'s scenario and the simulator's refill (figures come from
``python -m bench throughput-1300``, never from here).

The cluster is the shape the benchmark says it is, and the drain probe on the simulated
clock shows the difference refill exists for: Kueue's rules admit a backlog one
workload per cycle, refill admits it in one cycle. Times are simulated (fixed cycle
cost), so the assertions are about decisions, not speed."""

from __future__ import annotations

from admission.sim.scenario import US_PER_S
from bench import throughput1300 as tp


def test_the_cluster_is_1300_nodes_of_8_gpus_under_40_queues_in_8_cohorts() -> None:
    sc = tp.scenario(minutes=1, small_per_minute=0, burst=3)
    assert len(sc.nodes) == 1300
    assert {n.allocatable["nvidia.com/gpu"] for n in sc.nodes.values()} == {8}
    assert len(sc.cluster_queues) == 40
    assert len({cq.cohort for cq in sc.cluster_queues.values()}) == 8
    backlog = [s for s in sc.workloads if s.workload.name.startswith("backlog-")]
    assert len(backlog) == 3 and {s.workload.namespace for s in backlog} == {tp.BUSY}


def _backlog_admitted_s(refill: bool) -> list[float]:
    result, *_ = tp._simulate(refill, 2.4, 1, api=False, minutes=1, small_per_minute=0, burst=30)
    return sorted(
        r.first_admitted_us / US_PER_S
        for r in result.records
        if r.sim.workload.name.startswith("backlog-")
    )


def test_kueues_rules_drain_a_backlog_one_per_cycle_and_refill_in_one_cycle() -> None:
    off, on = _backlog_admitted_s(False), _backlog_admitted_s(True)
    assert len(off) == len(on) == 30
    assert len(set(off)) == 30  # one cycle each
    assert off[-1] >= 29 * 2.4
    assert set(on) == {0.0}  # all in the first cycle
