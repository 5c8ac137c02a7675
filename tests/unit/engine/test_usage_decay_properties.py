"""Property tests of usage decay, which fair sharing's historical usage is built on.

**Decay** (docs/semantics.md §4.9): ``alpha``/``decay`` follow the half-life formula:
one half-life with nothing in use halves the history; the result is monotone in the
elapsed time and lies between the old value and the current usage; sampling more often
at constant usage changes nothing, and a zero half-life resets to the current usage.
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from queues.fairshare import alpha, decay

# -- (b) decay ------------------------------------------------------------------------

finite = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


@given(st.floats(1, 1e7), finite)
def test_one_half_life_with_nothing_in_use_halves_the_history(
    half_life: float, consumed: float
) -> None:
    assert math.isclose(
        decay(consumed, 0.0, half_life, half_life), consumed / 2, rel_tol=1e-9, abs_tol=1e-9
    )
    assert math.isclose(alpha(half_life, half_life), 0.5, rel_tol=1e-12)


@given(st.floats(1, 1e7), st.floats(0, 1e8), finite, finite)
def test_decay_matches_the_half_life_formula(
    half_life: float, elapsed: float, consumed: float, current: float
) -> None:
    a = 1 - 0.5 ** (elapsed / half_life)
    want = consumed * (1 - a) + current * a
    assert math.isclose(
        decay(consumed, current, elapsed, half_life), want, rel_tol=1e-9, abs_tol=1e-6
    )


@given(st.floats(1, 1e7), st.floats(0, 1e7), st.floats(0, 1e7), finite, finite)
def test_decay_is_monotone_in_elapsed_time_and_between_old_and_current(
    half_life: float, t1: float, t2: float, consumed: float, current: float
) -> None:
    short, long = sorted((t1, t2))
    d_short = decay(consumed, current, short, half_life)
    d_long = decay(consumed, current, long, half_life)
    lo, hi = min(consumed, current), max(consumed, current)
    tol = 1e-9 * max(1.0, hi)
    for d in (d_short, d_long):
        assert lo - tol <= d <= hi + tol
    # The longer the time, the closer to the current usage.
    assert abs(d_long - current) <= abs(d_short - current) + tol
    assert 0.0 <= alpha(short, half_life) <= alpha(long, half_life) <= 1.0


@given(st.floats(1, 1e6), finite, finite, st.floats(0, 1e6), st.floats(0, 1e6))
def test_two_samples_equal_one_sample_over_the_sum_at_constant_usage(
    half_life: float, consumed: float, current: float, dt1: float, dt2: float
) -> None:
    """Sampling more often does not change the result while usage stays constant."""
    two = decay(decay(consumed, current, dt1, half_life), current, dt2, half_life)
    one = decay(consumed, current, dt1 + dt2, half_life)
    assert math.isclose(two, one, rel_tol=1e-9, abs_tol=1e-6)


def test_zero_half_life_resets_to_current_usage() -> None:
    assert decay(100.0, 3.0, 1.0, 0.0) == 3.0
    assert decay(100.0, 3.0, 0.0, 60.0) == 100.0  # no time passed: nothing changes
