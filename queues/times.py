"""RFC 3339 times as the Kubernetes API writes them, read into epoch seconds.

The one place that turns ``2026-01-01T12:00:00Z`` into a number: lenient readers for
timestamps the API server wrote (``None`` when absent or unreadable) and a strict one
for times a user or a job wrote, which must carry a date, a time and a zone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def parse_rfc3339(text: str) -> datetime:
    """``text`` as a datetime, ``Z`` read as UTC; ValueError when it is no ISO time."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def rfc3339_datetime(value: Any) -> datetime | None:
    """The datetime of a timestamp string; None when it is absent, empty or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        return None


def rfc3339_seconds(value: Any) -> float | None:
    """Epoch seconds of a timestamp string; None when it is absent, empty or unreadable."""
    parsed = rfc3339_datetime(value)
    return None if parsed is None else parsed.timestamp()


def aware_seconds(value: datetime) -> float:
    """Epoch seconds of a datetime, one without a zone taken as UTC (YAML loaders
    turn unquoted timestamps into such datetimes)."""
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def strict_rfc3339_seconds(value: Any) -> float:
    """Epoch seconds of an RFC 3339 time (fractions and offsets allowed, ``Z`` or ``z``
    for UTC) or of a datetime; ValueError, saying what is wrong, for anything else."""
    if isinstance(value, datetime):
        return aware_seconds(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be an RFC 3339 time, got {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{value!r} is not an RFC 3339 time like 2026-01-01T12:00:00Z") from None
    if t.tzinfo is None or "T" not in text.upper():
        raise ValueError(f"{value!r} is not an RFC 3339 time: it needs a date, a time and a zone")
    return t.timestamp()
