"""The scheduler's policy is passed in once, by the one factory (issue 12, "The shape").

``Scheduler(...)`` takes its preemption strategy, entry order, usage tracker and clock
as keyword-only arguments and never lets them change; ``admission.engine.build.build_scheduler``
picks them from a configuration, and every driver (plan, what-if, simulate, serve and
the webhook's impact warnings through the what-if) gets its scheduler from it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import admission.config.schema as config_module
from admission.config.load import parse_config
from admission.config.schema import ConfigError
from admission.engine.build import build_scheduler
from admission.engine.cache import Cache
from admission.engine.ordering import classical_order
from admission.engine.preemption.classical import Preemptor
from admission.engine.preemption.fair_sharing import (
    FairPreemptor,
    Tournament,
    less_than_initial_share,
    less_than_or_equal_to_final_share,
    parse_strategies,
)
from admission.engine.scheduler import Scheduler
from queues.fairshare import Share
from tests.unit.engine._support import cq, make_cache, workload


@pytest.mark.parametrize("attribute", ["cache", "clock", "preemptor", "order", "usage", "explain"])
def test_a_built_scheduler_cannot_be_rewired(attribute: str) -> None:
    sched = Scheduler(make_cache(cq("cq", 1)))
    with pytest.raises(AttributeError):
        setattr(sched, attribute, None)


def test_a_scheduler_has_no_room_for_new_attributes() -> None:
    sched = Scheduler(make_cache(cq("cq", 1)))
    with pytest.raises(AttributeError):
        sched.entry_order = classical_order  # type: ignore[attr-defined]


def test_the_clock_passed_in_stamps_admissions() -> None:
    cache = make_cache(cq("cq", 4))
    cache.add_workload(workload("a", "cq", 1))
    (d,) = Scheduler(cache, clock=lambda: 1234.5).schedule().admitted
    assert d.workload.admission_time == 1234.5


def _config(doc: dict[str, Any]) -> config_module.Config:
    return parse_config(doc)


def test_the_factory_builds_the_classical_policy_by_default() -> None:
    sched = build_scheduler(_config({}).engine_policy(), make_cache(cq("cq", 1)), clock=lambda: 0.0)
    assert type(sched.preemptor) is Preemptor
    assert sched.order is classical_order
    assert sched.usage is None


def test_the_factory_builds_fair_sharing_with_parsed_strategies() -> None:
    cfg = _config({"fairSharing": {"preemptionStrategies": ["LessThanInitialShare"]}})
    sched = build_scheduler(cfg.engine_policy(), make_cache(cq("cq", 1)), clock=lambda: 0.0)
    assert isinstance(sched.preemptor, FairPreemptor)
    assert isinstance(sched.order, Tournament)
    assert sched.preemptor._strategies == (less_than_initial_share,)


def test_the_factory_builds_one_tracker_for_order_and_preemption() -> None:
    cfg = _config({"cohortCredits": {"usageHalfLifeTime": "1h"}})
    sched = build_scheduler(cfg.engine_policy(), make_cache(cq("cq", 1)), clock=lambda: 0.0)
    assert sched.usage is not None
    assert sched.preemptor.tracker is sched.usage
    assert sched.order is not classical_order  # credits order borrowers


def test_strategies_are_parsed_into_rules_once() -> None:
    assert parse_strategies(["LessThanOrEqualToFinalShare", "LessThanInitialShare"]) == (
        less_than_or_equal_to_final_share,
        less_than_initial_share,
    )
    low, high = Share(100.0, 1.0, True), Share(300.0, 1.0, True)
    assert less_than_initial_share(low, high, None)
    assert not less_than_initial_share(high, low, None)
    assert less_than_or_equal_to_final_share(low, high, low)
    assert not less_than_or_equal_to_final_share(high, high, low)
    with pytest.raises(ValueError):
        parse_strategies(["MostRecent"])
    with pytest.raises(ConfigError, match="preemptionStrategies"):
        parse_config({"fairSharing": {"preemptionStrategies": ["MostRecent"]}})


def test_fair_preemption_refuses_an_empty_strategy_list() -> None:
    with pytest.raises(ValueError, match="at least one strategy"):
        FairPreemptor(make_cache(cq("cq", 1)), strategies=())


# -- every driver gets its scheduler from the one factory ---------------------------


@pytest.fixture()
def built(monkeypatch: pytest.MonkeyPatch) -> list[Scheduler]:
    """The schedulers ``build_scheduler`` makes on the test's thread while the test runs
    (a service left running by an earlier test, on its own thread, may build some too)."""
    made: list[Scheduler] = []
    real = config_module.build_scheduler
    test_thread = threading.get_ident()

    def recording(config: Any, cache: Cache, *, clock: Callable[[], float], **kw: Any) -> Any:
        s = real(config, cache, clock=clock, **kw)
        if threading.get_ident() == test_thread:
            made.append(s)
        return s

    monkeypatch.setattr(config_module, "build_scheduler", recording)
    return made


def _inputs() -> Any:
    from admission.drivers.inputs import Inputs

    cache_cq = cq("cq", 4)
    lqs = make_cache(cache_cq).local_queues
    return Inputs(
        flavors={"default": make_cache(cache_cq).flavors["default"]},
        cluster_queues={"cq": cache_cq},
        cohorts={},
        local_queues=lqs,
        namespaces={},
        workloads=[workload("a", "cq", 1)],
    )


def test_plan_uses_the_factory(built: list[Scheduler]) -> None:
    from admission.drivers.plan import run_plan

    result = run_plan(_inputs(), config=_config({"fairSharing": {}}))
    assert [result.scheduler] == built
    assert isinstance(built[0].preemptor, FairPreemptor)


def test_what_if_and_the_webhook_impact_use_the_factory(built: list[Scheduler]) -> None:
    from admission.drivers.impact import impact_of_snapshot
    from admission.drivers.whatif import what_if

    what_if(_inputs(), _inputs(), config=_config({"fairSharing": {}}))
    assert len(built) == 2 and all(isinstance(s.preemptor, FairPreemptor) for s in built)
    built.clear()
    impact_of_snapshot(_inputs(), "ClusterQueue", cq("cq", 8), config=_config({"fairSharing": {}}))
    assert len(built) == 2 and all(isinstance(s.preemptor, FairPreemptor) for s in built)


def test_the_simulator_uses_the_factory_without_explanations(built: list[Scheduler]) -> None:
    from admission.sim.simulator import Simulator
    from tests.support.sim_helpers import cq as sim_cq
    from tests.support.sim_helpers import scenario, wl

    sc = scenario([sim_cq("a", 1)], [wl("w", "a", arrival=0, runtime=1)])
    Simulator(sc, config=_config({"fairSharing": {}})).run()
    assert len(built) == 1
    assert isinstance(built[0].preemptor, FairPreemptor)
    assert built[0].explain is False
