"""The event-loop lag monitor (admission/serve/looplag.py): a callback that holds the
loop shows up as lag in the histogram and the max gauge, and a large lag is logged once
per interval, not once per sample."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from admission.kube.control.metrics import Metrics
from admission.serve.looplag import LoopLagMonitor


def _monitor(**kw: float) -> tuple[LoopLagMonitor, CollectorRegistry]:
    m = Metrics(CollectorRegistry())
    return LoopLagMonitor(m.loop_lag, m.loop_lag_max, **kw), m.registry


def test_a_blocked_loop_is_measured_as_lag() -> None:
    mon, reg = _monitor(interval=0.02)

    async def scenario() -> None:
        task = asyncio.create_task(mon.run())
        await asyncio.sleep(0.1)
        time.sleep(0.3)  # hold the loop, as a burst of synchronous work would
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(scenario())
    assert mon.max_lag >= 0.25
    assert reg.get_sample_value("quartermaster_event_loop_lag_max_seconds") == mon.max_lag
    over = reg.get_sample_value("quartermaster_event_loop_lag_seconds_count") or 0
    under = reg.get_sample_value("quartermaster_event_loop_lag_seconds_bucket", {"le": "0.25"})
    assert over - (under or 0) >= 1  # at least one sample above 250 ms


def test_large_lags_are_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    mon, _ = _monitor(warn_after=1.0, warn_every=3600.0)
    caplog.set_level(logging.WARNING, logger="quartermaster.serve")
    for lag in (0.2, 1.5, 2.5, 1.2):
        mon.record(lag)
    lines = [r.getMessage() for r in caplog.records if "event loop lag" in r.getMessage()]
    assert lines == ["event loop lag 1.50 s (the largest since start: 1.50 s)"]
    assert mon.max_lag == 2.5
