"""queues.times: the one reader of RFC 3339 timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from queues.times import (
    aware_seconds,
    parse_rfc3339,
    rfc3339_datetime,
    rfc3339_seconds,
    strict_rfc3339_seconds,
)

NOON = datetime(2026, 1, 1, 12, tzinfo=UTC).timestamp()


def test_parse_reads_z_as_utc_and_keeps_offsets() -> None:
    assert parse_rfc3339("2026-01-01T12:00:00Z").timestamp() == NOON
    assert parse_rfc3339("2026-01-01T14:00:00+02:00").timestamp() == NOON
    with pytest.raises(ValueError):
        parse_rfc3339("yesterday")


@pytest.mark.parametrize("value", [None, "", 12, "not a time"])
def test_lenient_readers_say_none_for_absent_or_unreadable(value: object) -> None:
    assert rfc3339_seconds(value) is None
    assert rfc3339_datetime(value) is None


def test_lenient_readers_read_fractions() -> None:
    assert rfc3339_seconds("2026-01-01T12:00:00.250000Z") == NOON + 0.25
    assert rfc3339_datetime("2026-01-01T12:00:00Z") == datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_aware_seconds_takes_a_zoneless_datetime_as_utc() -> None:
    assert aware_seconds(datetime(2026, 1, 1, 12)) == NOON
    assert aware_seconds(datetime(2026, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))) == NOON


@pytest.mark.parametrize(
    "value", ["2026-01-01T12:00:00Z", "2026-01-01t12:00:00z", " 2026-01-01T12:00:00+00:00 "]
)
def test_strict_reads_rfc3339(value: str) -> None:
    assert strict_rfc3339_seconds(value) == NOON


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (None, "must be an RFC 3339 time"),
        ("  ", "must be an RFC 3339 time"),
        ("noon", "not an RFC 3339 time like"),
        ("2026-01-01T12:00:00", "needs a date, a time and a zone"),
        ("2026-01-01 12:00:00Z", "needs a date, a time and a zone"),
    ],
)
def test_strict_says_what_is_wrong(value: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        strict_rfc3339_seconds(value)
