"""Go durations ("5m", "1h30m", "90s", "0") as the configuration file writes them."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | int | float) -> float:
    """A Go duration ("5m", "1h30m", "90s", "0") in seconds."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"{text!r} is negative")
        return float(text)
    s = text.strip()
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"{text!r} is not a duration like 5m, 1h30m or 90s")
    return total


def _checked_duration(v: str | float) -> str | float:
    parse_duration(v)
    return v


Duration = Annotated[str | float, AfterValidator(_checked_duration)]
"""A Go duration field ("30m", "1h30m", "90s", or seconds): refused, naming the field,
when it does not parse, so that a typo is caught when the file is read and not when
the value is first used."""
