"""The simulator on tiny scenarios whose timelines are computed by hand.

Cycles cost 1 ms of simulated time and their decisions are stamped with the cycle's
start; a finish or an eviction triggers a cycle at once (or when the previous cycle
ends), so the expected times below follow directly from the scenario.
"""

from __future__ import annotations

from typing import Any

import pytest

from admission.engine.cache import Cache
from admission.engine.decisions import CycleResult
from admission.sim.metrics import lower_bound, summarize
from admission.sim.records import WorkloadRecord
from admission.sim.simulator import Simulator, simulate
from queues.model import ANY, LOWER_PRIORITY, STRICT_FIFO
from tests.support.sim_helpers import cq, scenario, wl

MS = 1_000  # µs


def by_name(result: Any) -> dict[str, WorkloadRecord]:
    return {r.sim.workload.name: r for r in result.records}


def test_workloads_are_admitted_on_arrival_and_wait_for_quota_released_by_finishes() -> None:
    sc = scenario(
        [cq("a", 2)],
        [
            wl("w1", "a", arrival=0, runtime=10, cpu=2),
            wl("w2", "a", arrival=1, runtime=5, cpu=1),
            wl("w3", "a", arrival=2, runtime=1, cpu=1),
        ],
    )
    r = by_name(simulate(sc))
    assert (r["w1"].admitted_us, r["w1"].finished_us) == (0, 10_000 * MS)
    # w1's finish at t=10 s frees the quota: w2 (older) goes in that cycle, w3 one cycle later.
    assert (r["w2"].admitted_us, r["w2"].finished_us) == (10_000 * MS, 15_000 * MS)
    assert (r["w3"].admitted_us, r["w3"].finished_us) == (10_001 * MS, 11_001 * MS)
    summary = summarize(simulate(sc), lower_bound(sc))
    assert summary["makespanMs"] == 15_000
    assert (
        summary["workloadClasses"]["default"]["averageTimeToAdmissionMs"]
        == (0 + 9_000 + 8_001) // 3
    )


def test_a_preempted_workload_is_requeued_and_reruns_its_whole_runtime() -> None:
    sc = scenario(
        [cq("a", 2, within=LOWER_PRIORITY)],
        [
            wl("low", "a", arrival=0, runtime=10, cpu=2, priority=0, cls="low"),
            wl("high", "a", arrival=4, runtime=3, cpu=2, priority=10, cls="high"),
        ],
    )
    result = simulate(sc)
    r = by_name(result)
    # t=4: high preempts low (eviction completes at once); t=4.001 high is admitted.
    assert r["high"].admitted_us == 4_001 * MS
    assert r["high"].finished_us == 7_001 * MS
    # low reruns all 10 s from its readmission when high finishes.
    assert r["low"].evictions == 1
    assert r["low"].first_admitted_us == 0
    assert r["low"].admitted_us == 7_001 * MS
    assert r["low"].finished_us == 17_001 * MS
    summary = summarize(result, lower_bound(sc))
    assert summary["workloadClasses"]["low"]["totalEvictions"] == 1
    assert summary["workloadClasses"]["low"]["averageTimeToAdmissionMs"] == 7_001  # last admission
    assert summary["engine"]["preemptions"] == 1
    assert summary["makespanMs"] == 17_001


def test_eviction_latency_delays_the_preemptor_without_spinning_cycles() -> None:
    sc = scenario(
        [cq("a", 2, within=LOWER_PRIORITY)],
        [
            wl("low", "a", arrival=0, runtime=10, cpu=2, priority=0),
            wl("high", "a", arrival=4, runtime=3, cpu=2, priority=10),
        ],
    )
    result = Simulator(sc, eviction_latency=0.5).run()
    r = by_name(result)
    assert r["high"].admitted_us == 4_500 * MS
    assert r["low"].admitted_us == 7_500 * MS
    assert r["low"].finished_us == 17_500 * MS
    # While the victim terminates the preemptor just waits: no cycle every millisecond.
    assert result.stats["cycles"] < 20


def test_a_queue_borrows_unused_quota_of_its_cohort() -> None:
    sc = scenario(
        [cq("a", 1, cohort="c"), cq("b", 1, cohort="c")],
        [wl("big", "a", arrival=0, runtime=1, cpu=2)],
    )
    result = simulate(sc)
    assert by_name(result)["big"].admitted_us == 0
    assert result.queues["a"].peak["cpu"] == 2_000  # twice its nominal quota


def test_a_gang_waits_until_all_its_pods_fit() -> None:
    sc = scenario(
        [cq("a", 4)],
        [
            wl("running", "a", arrival=0, runtime=5, cpu=2),
            wl("gang", "a", arrival=1, runtime=2, cpu=1, pods=4),
        ],
    )
    result = simulate(sc)
    r = by_name(result)
    assert r["gang"].admitted_us == 5_000 * MS  # not at t=1 with 2 of its 4 pods
    assert r["gang"].finished_us == 7_000 * MS
    assert result.queues["a"].peak["cpu"] == 4_000


def test_strict_fifo_head_blocks_and_the_simulator_waits_for_the_next_event() -> None:
    sc = scenario(
        [cq("a", 2, strategy=STRICT_FIFO)],
        [
            wl("w1", "a", arrival=0, runtime=100, cpu=2),
            wl("w2", "a", arrival=1, runtime=1, cpu=2),
            wl("w3", "a", arrival=2, runtime=1, cpu=1),
        ],
    )
    result = simulate(sc)
    r = by_name(result)
    assert r["w2"].admitted_us == 100_000 * MS
    assert r["w3"].admitted_us == 101_000 * MS
    assert result.stats["cycles"] < 20  # no busy cycles during the 100 s wait


def test_usage_percent_is_kueues_formula() -> None:
    # One queue of 2 cpu: 2 cpu for 10 s, then 1 cpu for 10 s, over 20 s elapsed -> 75 %.
    sc = scenario(
        [cq("a", 2)],
        [wl("w1", "a", arrival=0, runtime=10, cpu=2), wl("w2", "a", arrival=0, runtime=10, cpu=1)],
    )
    summary = summarize(simulate(sc), lower_bound(sc))
    assert summary["makespanMs"] == 20_000
    assert summary["clusterQueueClasses"]["a"]["usagePercent"] == 75.0


def test_lower_bound_is_arrival_plus_runtime_for_a_lone_workload_and_is_met() -> None:
    sc = scenario([cq("a", 1)], [wl("w", "a", arrival=3, runtime=2)])
    b = lower_bound(sc)
    assert b.ms == 5_000
    assert summarize(simulate(sc), b)["makespanMs"] == 5_000


def test_lower_bound_is_total_work_over_capacity_when_the_queue_is_saturated() -> None:
    sc = scenario(
        [cq("a", 2)],
        [wl("w1", "a", arrival=0, runtime=1, cpu=2), wl("w2", "a", arrival=0, runtime=1, cpu=2)],
    )
    b = lower_bound(sc)
    assert b.ms == 2_000
    assert b.cohort_work_us == 2_000 * MS
    assert summarize(simulate(sc), b)["makespanMs"] == 2_000


def test_lower_bound_counts_the_whole_cohort_capacity_with_borrowing() -> None:
    sc = scenario(
        [cq("a", 1, cohort="c"), cq("b", 1, cohort="c")],
        [wl(f"w{i}", "a", arrival=0, runtime=1, cpu=1) for i in range(4)],
    )
    b = lower_bound(sc)
    assert b.ms == 2_000  # 4 cpu·s over the cohort's 2 cpu, all borrowable by a
    makespan = summarize(simulate(sc), b)["makespanMs"]
    assert 2_000 <= makespan <= 2_002  # only cycle latency separates them


def test_lower_bound_respects_a_borrowing_limit() -> None:
    sc = scenario(
        [cq("a", 2, cohort="c", borrowing=0), cq("b", 2, cohort="c")],
        [wl(f"w{i}", "a", arrival=0, runtime=1, cpu=1) for i in range(4)],
    )
    b = lower_bound(sc)
    assert b.cohort_work_us == 1_000 * MS  # the cohort could do it in 1 s ...
    assert b.queue_work_us == 2_000 * MS  # ... but a may never hold more than 2 cpu
    assert b.ms == 2_000
    assert 2_000 <= summarize(simulate(sc), b)["makespanMs"] <= 2_002  # one head per cycle


def test_lower_bound_uses_the_work_arriving_after_each_instant() -> None:
    # 1 cpu queue: a 1 s job at t=0, then three 1 s jobs at t=10 -> at least 10 + 3 s.
    sc = scenario(
        [cq("a", 1)],
        [wl("early", "a", arrival=0, runtime=1)]
        + [wl(f"late{i}", "a", arrival=10, runtime=1) for i in range(3)],
    )
    b = lower_bound(sc)
    assert b.ms == 13_000
    makespan = summarize(simulate(sc), b)["makespanMs"]
    assert 13_000 <= makespan <= 13_002


def test_workloads_that_can_never_fit_are_left_out_of_the_bound_and_reported() -> None:
    sc = scenario(
        [cq("a", 1)],
        [wl("ok", "a", arrival=0, runtime=1), wl("huge", "a", arrival=0.5, runtime=100, cpu=5)],
    )
    b = lower_bound(sc)
    assert b.excluded == 1
    assert b.ms == 1_000
    summary = summarize(simulate(sc), b)
    assert summary["neverAdmitted"] == 1
    assert summary["makespanMs"] == 1_000


def test_a_scenario_can_be_simulated_twice_with_the_same_result() -> None:
    sc = scenario(
        [cq("a", 2, within=LOWER_PRIORITY, cohort="c", reclaim=ANY), cq("b", 1, cohort="c")],
        [
            wl(
                f"w{i}",
                "a" if i % 3 else "b",
                arrival=i * 0.3,
                runtime=1 + i % 4,
                cpu=1 + i % 2,
                priority=i % 3,
            )
            for i in range(30)
        ],
    )
    first = summarize(simulate(sc), lower_bound(sc))
    second = summarize(simulate(sc), lower_bound(sc))
    for summary in (first, second):  # CPU times are measured, not simulated
        summary["engine"].pop("cpuSeconds")
        summary["engine"].pop("cycleCpuSeconds")
    assert first == second


class _Spinner:
    """A scheduler stub that claims to change something in every cycle."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.cycle_count = 0
        self.stats = {"cycles": 0, "admissions": 0, "preemptions": 0, "nominations": 0}

    def schedule(self) -> CycleResult:
        self.cycle_count += 1
        self.stats["cycles"] += 1
        return CycleResult(
            cycle=self.cycle_count, changed=True, pending={"x": _status(self.cycle_count)}
        )


def _status(n: int) -> Any:
    from admission.engine.queue_manager import PendingStatus

    return PendingStatus("WaitingForQuota", f"attempt {n}")


class _SpinnerConfig:
    def make_scheduler(self, cache: Cache, *, clock: Any, explain: bool = True) -> _Spinner:
        return _Spinner(cache)


def test_an_engine_that_never_settles_is_stopped_and_reported() -> None:
    sc = scenario([cq("a", 1)], [wl("w", "a", arrival=0, runtime=1)])
    result = Simulator(sc, config=_SpinnerConfig(), livelock_cycles=50).run()  # type: ignore[arg-type]
    assert result.livelock_breaks == 1
    assert result.stats["cycles"] == 50
    assert "livelockBreaks" in summarize(result, lower_bound(sc))


def test_sampling_records_usage_and_pending_and_calls_the_hook() -> None:
    seen: list[float] = []
    sc = scenario(
        [cq("a", 1)],
        [wl("w1", "a", arrival=0, runtime=10), wl("w2", "a", arrival=0, runtime=10)],
    )
    result = Simulator(sc, sample_interval=5, on_sample=seen.append, epoch=0.0).run()
    s = result.samples
    assert s.times_us[:4] == [0, 5_000_000, 10_000_000, 15_000_000]
    assert s.usage[0][1] == 1_000 and s.pending[0][1] == 1  # w1 runs, w2 waits
    assert s.usage[0][3] == 1_000 and s.pending[0][3] == 0  # w2 runs
    assert seen[:2] == [0.0, 5.0]


def test_invalid_simulator_options_are_rejected() -> None:
    sc = scenario([cq("a", 1)], [])
    with pytest.raises(ValueError, match="cycle_latency"):
        Simulator(sc, cycle_latency=0)
    with pytest.raises(ValueError, match="eviction_latency"):
        Simulator(sc, eviction_latency=-1)


def test_lower_bound_holds_when_a_workload_is_admitted_partially() -> None:
    s = wl("elastic", "a", arrival=0, runtime=1, cpu=1, pods=4)
    s.workload.pod_sets[0].min_count = 1
    sc = scenario([cq("a", 2)], [s])
    b = lower_bound(sc)
    result = simulate(sc)
    assert result.records[0].usage == {} and result.records[0].finished_us == 1_000 * MS
    assert result.queues["a"].peak["cpu"] == 2_000  # ran with 2 of its 4 pods
    assert b.ms == 1_000 <= summarize(result, b)["makespanMs"]
