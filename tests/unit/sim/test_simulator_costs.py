"""The simulator's real-cost options: measured cycle CPU and an API budget/latency model."""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest

from admission.config.schema import Config
from admission.engine.cache import Cache
from admission.sim.api_model import ApiModel
from admission.sim.simulator import Simulator, simulate
from queues.model import LOWER_PRIORITY
from tests.support.sim_helpers import cq, scenario, wl

MS = 1_000  # µs


def by_name(result: Any) -> dict[str, Any]:
    return {r.sim.workload.name: r for r in result.records}


def test_an_admission_runs_from_when_its_write_lands() -> None:
    sc = scenario([cq("a", 4)], [wl("w", "a", arrival=0, runtime=10)])
    r = by_name(simulate(sc, api=ApiModel(qps=50, burst=10, latency=0.25)))["w"]
    # decided at t=0, sent when the 1 ms cycle returns, answered 250 ms later
    assert r.admitted_us == 251 * MS
    assert r.finished_us == 10_251 * MS


def test_the_client_budget_spaces_the_admissions() -> None:
    sc = scenario([cq("a", 10)], [wl(f"w{i}", "a", arrival=0, runtime=100) for i in range(10)])
    result = simulate(sc, api=ApiModel(qps=10, burst=2, latency=0.0))
    landed = sorted(r.admitted_us for r in result.records)
    # two from the burst, then one every 100 ms: 10 writes need at least 0.8 s
    assert landed[-1] - landed[0] >= 800 * MS
    assert result.api_writes == 10
    assert result.api_wait_seconds > 0


def test_a_victim_releases_its_quota_when_its_eviction_lands() -> None:
    sc = scenario(
        [cq("a", 2, within=LOWER_PRIORITY)],
        [
            wl("low", "a", arrival=0, runtime=100, cpu=2, priority=0),
            wl("high", "a", arrival=5, runtime=1, cpu=2, priority=10),
        ],
    )
    r = by_name(simulate(sc, api=ApiModel(qps=100, burst=10, latency=0.5)))
    # preempted in the cycle at t=5, the eviction is sent when it returns (5.001 s) and
    # lands at 5.501 s; high's admission is decided in the cycle then, sent at 5.502 s,
    # and lands at 6.002 s
    assert r["low"].evictions == 1
    assert r["high"].admitted_us == 6_002 * MS


class _Slow:
    """The real engine, each cycle burning 20 ms of CPU first (a slow policy)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def schedule(self) -> Any:
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
        return self._inner.schedule()


class _SlowConfig:
    def make_scheduler(self, cache: Cache, *, clock: Any, explain: bool = True) -> Any:
        return _Slow(Config().make_scheduler(cache, clock=clock, explain=explain))


def test_measured_cycle_cost_makes_a_slow_policy_cost_simulated_time() -> None:
    sc = scenario([cq("a", 3)], [wl(f"w{i}", "a", arrival=0, runtime=1) for i in range(3)])
    fixed = by_name(Simulator(sc, config=_SlowConfig()).run())  # type: ignore[arg-type]
    measured = Simulator(sc, config=_SlowConfig(), cycle_cost="measured").run()  # type: ignore[arg-type]
    slow = by_name(measured)
    # one head per cycle, back to back: the third waits for two cycles of >= 20 ms, not 1 ms
    assert fixed["w2"].admitted_us == 2 * MS
    assert slow["w2"].admitted_us >= 2 * 20 * MS
    assert measured.cycle_cpu_seconds >= 0.02 * measured.stats["cycles"]


def test_bad_cost_options_are_refused() -> None:
    sc = scenario([cq("a", 1)], [])
    with pytest.raises(ValueError, match="cycle_cost"):
        Simulator(sc, cycle_cost="wall")
    with pytest.raises(ValueError, match="qps"):
        ApiModel(qps=0)


class _Watching:
    """The real engine, recording whether the cyclic collector could run during each
    cycle, and making cyclic garbage (as the engine's tree copies do)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.collector_on: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def schedule(self) -> Any:
        self.collector_on.append(gc.isenabled())
        for _ in range(1000):
            a: list[Any] = []
            a.append(a)
        return self._inner.schedule()


class _WatchingConfig:
    def __init__(self) -> None:
        self.scheduler: _Watching | None = None

    def make_scheduler(self, cache: Cache, *, clock: Any, explain: bool = True) -> Any:
        self.scheduler = _Watching(Config().make_scheduler(cache, clock=clock, explain=explain))
        return self.scheduler


@pytest.mark.parametrize(("cost", "held_off"), [("measured", True), ("fixed", False)])
def test_measured_cycles_are_not_charged_for_the_garbage_collector(
    cost: str, held_off: bool
) -> None:
    """The collector's passes walk the simulator's records too: in a measured cycle it
    waits until the cycle returns (and then runs), so no cycle is charged for one.
    The run hands every object it froze back to the collector at the end."""
    sc = scenario([cq("a", 3)], [wl(f"w{i}", "a", arrival=i, runtime=1) for i in range(3)])
    config = _WatchingConfig()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    collected_before = sum(s["collected"] for s in gc.get_stats())
    Simulator(sc, config=config, cycle_cost=cost).run()  # type: ignore[arg-type]
    assert config.scheduler is not None and config.scheduler.collector_on
    assert all(on is not held_off for on in config.scheduler.collector_on)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.collect()
    assert sum(s["collected"] for s in gc.get_stats()) > collected_before  # none leaked


def test_the_collector_is_back_on_when_a_measured_cycle_raises() -> None:
    class _Failing(_Watching):
        def schedule(self) -> Any:
            raise RuntimeError("engine bug")

    class _FailingConfig:
        def make_scheduler(self, cache: Cache, *, clock: Any, explain: bool = True) -> Any:
            return _Failing(Config().make_scheduler(cache, clock=clock, explain=explain))

    sc = scenario([cq("a", 1)], [wl("w", "a", arrival=0, runtime=1)])
    with pytest.raises(RuntimeError, match="engine bug"):
        Simulator(sc, config=_FailingConfig(), cycle_cost="measured").run()  # type: ignore[arg-type]
    assert gc.isenabled() and gc.get_freeze_count() == 0
