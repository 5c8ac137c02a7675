"""queues.backoff: one exponential backoff policy for requeues and retries."""

from __future__ import annotations

import pytest

from queues.backoff import BackoffPolicy


def test_delays_double_from_base_up_to_cap() -> None:
    p = BackoffPolicy(base=0.1, cap=1.0)
    assert [p.delay(n) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_factor() -> None:
    assert BackoffPolicy(base=1.0, cap=100.0, factor=3.0).delay(3) == 27.0


@pytest.mark.parametrize(
    ("count", "delay"), [(0, 60.0), (1, 60.0), (2, 120.0), (3, 240.0), (6, 1920.0), (7, 3600.0)]
)
def test_requeue_delay_is_base_for_the_first_requeue(count: int, delay: float) -> None:
    assert BackoffPolicy(base=60.0, cap=3600.0).requeue_delay(count) == delay


def test_same_delays_as_the_formulas_it_replaced() -> None:
    p = BackoffPolicy(base=60.0, cap=3600.0)
    for count in range(40):
        assert p.requeue_delay(count) == min(60.0 * 2 ** max(0, count - 1), 3600.0)
    q = BackoffPolicy(base=0.2, cap=30.0)
    for n in range(31):
        assert q.delay(n) == min(30.0, 0.2 * (2**n))
