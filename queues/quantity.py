"""Kubernetes ``resource.Quantity`` strings <-> the engine's integer units.

Every quota, request and usage the engine touches is an ``int``: CPU in milli-cores,
every other resource in whole units. Kubernetes and Kueue write them as quantity
strings ("500m", "64Gi", "1.5e3"), so this module is the one place that parses and
prints them, exactly:

* ``parse_quantity`` follows the apimachinery grammar (optional sign, digits with an
  optional fraction, one decimal SI / binary SI / decimal-exponent suffix) and returns
  a ``Fraction``, never a float. Like ``resource.ParseQuantity`` it rounds a non-zero
  magnitude below one nano-unit up to the next nano-unit ("0.1n" is "1n").
* ``to_units`` turns a value into the engine integer the way Kueue's
  ``ResourceValue`` does (``MilliValue()`` for cpu, ``Value()`` otherwise), rounding up.
* ``format_quantity`` prints an engine integer as a canonical quantity string, so
  ``to_units(r, format_quantity(r, x)) == x`` for every integer ``x``.

Deliberate difference from apimachinery: values beyond int64 are kept exact instead of
being capped or wrapped (Kubernetes is inconsistent there), and decimal exponents above
``MAX_DECIMAL_EXPONENT`` are rejected so a hostile "1e999999999" cannot exhaust memory.
"""

from __future__ import annotations

import functools
import json
import math
import re
from fractions import Fraction

__all__ = [
    "MAX_DECIMAL_EXPONENT",
    "MAX_DIGITS",
    "MAX_MAGNITUDE",
    "QuantityError",
    "format_quantity",
    "parse_quantity",
    "to_units",
]

MAX_DECIMAL_EXPONENT = 1000
"""Largest power of ten a quantity may scale its digits by (no real quota comes close)."""

CPU = "cpu"

_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# Printing order: largest suffix first.
_BINARY_BY_POWER = sorted(((2**bits, s) for s, bits in _BINARY_SUFFIXES.items()), reverse=True)
_DECIMAL_BY_POWER = sorted(
    ((10**exp, s) for s, exp in _DECIMAL_SUFFIXES.items() if exp > 0), reverse=True
)

_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-])?"
    r"(?:(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]*))?|\.(?P<frac_only>[0-9]+))"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exp>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]))?",
    re.ASCII,
)

_NANO = 10**9

MAX_DIGITS = 4000
"""Most significant digits accepted (Python refuses int() on much longer strings)."""


MAX_MAGNITUDE = 2**63 - 1
"""The largest magnitude a Kubernetes ``resource.Quantity`` may represent ("no quantity
may represent a number greater than 2^63-1 in magnitude", its API reference): the
queue objects' quantities beyond it are refused (:func:`check_magnitude`), so a quota
the API server's pattern lets through never reaches arithmetic that cannot hold it."""


class QuantityError(ValueError):
    """A value is not a valid Kubernetes quantity. The message quotes the value."""


def _quote(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _invalid(value: object, why: str) -> QuantityError:
    return QuantityError(f"invalid quantity {_quote(value)}: {why}")


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity exactly.

    ``int`` is taken as is; ``float`` goes through its ``repr`` (so ``0.1`` is exactly
    1/10); ``str`` must match the apimachinery grammar with nothing around it. Raises
    ``QuantityError`` (quoting the value) for anything else, including bools, NaN and
    infinities.

    A string is parsed once per distinct text (manifests repeat a handful of quantities
    over thousands of objects; a ``Fraction`` is immutable, and a text that fails is
    not remembered, as ``lru_cache`` keeps no exceptions).
    """
    if type(value) is str:
        return _parse_text(value)
    return _parse(value)


def check_magnitude(text: str | int | float) -> Fraction:
    """``text`` parsed, refused (QuantityError quoting it) when it is beyond
    :data:`MAX_MAGNITUDE` in magnitude."""
    value = parse_quantity(text)
    if abs(value) > MAX_MAGNITUDE:
        raise _invalid(
            text,
            f"more than 2^63-1 ({MAX_MAGNITUDE}) in magnitude, the most a Kubernetes "
            "resource.Quantity represents",
        )
    return value


def _parse(value: str | int | float) -> Fraction:
    if isinstance(value, bool):
        raise _invalid(value, "a boolean is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(value, "not a finite number")
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise _invalid(value, f"expected a string or a number, got {type(value).__name__}")

    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise _invalid(
            value,
            "must match <sign?><digits>[.<digits>]<suffix?> where the suffix is one of "
            "n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<integer>",
        )
    int_digits = match["int"] or ""
    frac_digits = match["frac"] if match["int"] is not None else match["frac_only"]
    frac_digits = frac_digits or ""
    significant = (int_digits + frac_digits).lstrip("0")
    if not significant:
        return Fraction(0)
    if len(significant) > MAX_DIGITS:
        raise _invalid(value, f"more than {MAX_DIGITS} significant digits")
    mantissa = int(significant)
    negative = match["sign"] == "-"

    if match["binary"] is not None:
        magnitude = Fraction(mantissa << _BINARY_SUFFIXES[match["binary"]], 10 ** len(frac_digits))
    else:
        if match["exp"] is not None:
            exp_text = match["exp"].lstrip("+-").lstrip("0")
            if len(exp_text) > 18:  # beyond int64, like strconv.ParseInt
                raise _invalid(value, "decimal exponent is out of range")
            exponent = int(match["exp"])
        else:
            exponent = _DECIMAL_SUFFIXES[match["decimal"] or ""]
        if exponent > MAX_DECIMAL_EXPONENT:
            raise _invalid(value, f"decimal exponent above {MAX_DECIMAL_EXPONENT} is out of range")
        scale = exponent - len(frac_digits)  # magnitude = mantissa * 10**scale
        if scale >= 0:
            magnitude = Fraction(mantissa * 10**scale)
        elif scale + len(significant) < -9:
            # Entirely below one nano-unit: apimachinery rounds it up to 1n.
            magnitude = Fraction(1, _NANO)
        else:
            magnitude = Fraction(mantissa, 10**-scale)

    if magnitude.denominator != 1:
        # apimachinery keeps at most nano precision, rounding the magnitude up.
        nanos = math.ceil(magnitude * _NANO)
        magnitude = Fraction(nanos, _NANO)
    return -magnitude if negative else magnitude


_parse_text = functools.lru_cache(maxsize=4096)(_parse)


def to_units(resource: str, value: str | int | float | Fraction) -> int:
    """The engine integer for ``value`` of ``resource``, rounded up (toward +inf).

    cpu is counted in milli-cores (like ``Quantity.MilliValue()``), every other resource
    in whole units (like ``Quantity.Value()``). Negative values are allowed here.
    """
    if type(value) is str:
        return _text_units(resource == CPU, value)
    amount = value if isinstance(value, Fraction) else parse_quantity(value)
    if resource == CPU:
        amount *= 1000
    return math.ceil(amount)


@functools.lru_cache(maxsize=4096)
def _text_units(milli: bool, text: str) -> int:
    amount = _parse_text(text)
    return math.ceil(amount * 1000 if milli else amount)


def format_quantity(resource: str, units: int) -> str:
    """The canonical quantity string for an engine integer.

    cpu: whole cores when exact ("2", "64"), else milli-cores ("500m", "2500m").
    Other resources: the shortest exact form among the largest binary suffix ("64Gi"),
    the largest decimal suffix ("8G") and the plain integer; binary wins a tie.
    """
    if isinstance(units, bool) or not isinstance(units, int):
        raise TypeError(f"format_quantity expects an int, got {type(units).__name__}")
    if resource == CPU:
        if units % 1000 == 0:
            return str(units // 1000)
        return f"{units}m"
    if units == 0:
        return "0"
    best = str(units)
    for table in (_BINARY_BY_POWER, _DECIMAL_BY_POWER):  # binary first: it wins a tie
        for power, suffix in table:
            if units % power == 0:
                form = f"{units // power}{suffix}"
                if len(form) < len(best):
                    best = form
                break
    return best
