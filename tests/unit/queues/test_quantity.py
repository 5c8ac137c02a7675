"""Kubernetes quantity parsing, engine units and canonical printing."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queues.quantity import (
    MAX_DECIMAL_EXPONENT,
    QuantityError,
    format_quantity,
    parse_quantity,
    to_units,
)

RESOURCES = ["cpu", "memory", "nvidia.com/gpu", "pods"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("+1", Fraction(1)),
        ("-1", Fraction(-1)),
        ("007", Fraction(7)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("1.5", Fraction(3, 2)),
        ("-.25", Fraction(-1, 4)),
        ("500m", Fraction(1, 2)),
        ("2500m", Fraction(5, 2)),
        ("1n", Fraction(1, 10**9)),
        ("3u", Fraction(3, 10**6)),
        ("1k", Fraction(1000)),
        ("2M", Fraction(2 * 10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("1.5Ki", Fraction(1536)),
        ("64Mi", Fraction(64 * 2**20)),
        ("512Gi", Fraction(512 * 2**30)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("2Ei", Fraction(2 * 2**60)),
        (".5Gi", Fraction(2**29)),
        ("1e3", Fraction(1000)),
        ("1E-2", Fraction(1, 100)),
        ("1.5e+6", Fraction(1_500_000)),
        ("12e-1", Fraction(6, 5)),
        ("1e07", Fraction(10**7)),
        ("0e999999", Fraction(0)),
        ("-0", Fraction(0)),
    ],
)
def test_parse_quantity_hand_computed_values(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


def test_parse_quantity_rounds_sub_nano_magnitudes_up_like_apimachinery() -> None:
    assert parse_quantity("0.1n") == Fraction(1, 10**9)
    assert parse_quantity("1e-10") == Fraction(1, 10**9)
    assert parse_quantity("1.0000000001") == 1 + Fraction(1, 10**9)
    assert parse_quantity("-0.1n") == Fraction(-1, 10**9)  # magnitude rounds away from zero
    assert parse_quantity("1e-99999999999") == Fraction(1, 10**9)  # no huge power computed


def test_parse_quantity_takes_ints_exactly_and_floats_through_repr() -> None:
    assert parse_quantity(3) == 3
    assert parse_quantity(-(10**30)) == -(10**30)
    assert parse_quantity(0.1) == Fraction(1, 10)
    assert parse_quantity(2.5) == Fraction(5, 2)
    assert parse_quantity(1e-7) == Fraction(1, 10**7)
    assert parse_quantity(1e16) == 10**16


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        " 1",
        "1 ",
        "1\n",
        "1.2.3",
        "1Kb",
        "1K",
        "1ki",
        "1KiB",
        "1mi",
        "e3",
        "E3",
        "--1",
        "+-1",
        "+",
        "-",
        ".",
        "1e",
        "1e+",
        "1e1.5",
        "1.5.e3",
        "1m1",
        "Ki",
        "0x10",
        "1_000",
        "１",
        "NaN",
        "inf",
        "one",
        "1,5",
    ],
)
def test_parse_quantity_rejects_malformed_strings_quoting_them(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert json.dumps(text, ensure_ascii=False) in str(info.value)


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), float("-inf"), True, False, None, [1]]
)
def test_parse_quantity_rejects_non_finite_floats_bools_and_other_types(value: object) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(value)  # type: ignore[arg-type]


def test_parse_quantity_rejects_out_of_range_exponents() -> None:
    with pytest.raises(QuantityError, match='"1e1001"'):
        parse_quantity(f"1e{MAX_DECIMAL_EXPONENT + 1}")
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity("1e99999999999999999999")
    assert parse_quantity(f"1e{MAX_DECIMAL_EXPONENT}") == 10**MAX_DECIMAL_EXPONENT


def test_quantity_error_is_a_value_error() -> None:
    assert issubclass(QuantityError, ValueError)


def test_to_units_counts_cpu_in_millicores_rounding_up() -> None:
    assert to_units("cpu", "1") == 1000
    assert to_units("cpu", "500m") == 500
    assert to_units("cpu", "0.1") == 100
    assert to_units("cpu", "1.0001") == 1001  # 1000.1m rounds up like MilliValue()
    assert to_units("cpu", "1n") == 1
    assert to_units("cpu", 2) == 2000
    assert to_units("cpu", 0.25) == 250


def test_to_units_counts_other_resources_in_whole_units_rounding_up() -> None:
    assert to_units("memory", "64Gi") == 64 * 2**30
    assert to_units("memory", "1.5") == 2
    assert to_units("memory", "500m") == 1
    assert to_units("nvidia.com/gpu", "4") == 4
    assert to_units("nvidia.com/gpu", "0.5") == 1
    assert to_units("pods", 3) == 3
    assert to_units("ephemeral-storage", "1k") == 1000


def test_to_units_rounds_negative_values_toward_positive_infinity() -> None:
    assert to_units("memory", "-1.5") == -1
    assert to_units("cpu", "-1.0001") == -1000
    assert to_units("memory", "-500m") == 0


def test_to_units_accepts_fractions_unchanged() -> None:
    assert to_units("cpu", Fraction(1, 3)) == 334
    assert to_units("memory", Fraction(7, 2)) == 4


@pytest.mark.parametrize(
    ("units", "expected"),
    [
        (0, "0"),
        (500, "500m"),
        (1000, "1"),
        (2500, "2500m"),
        (64000, "64"),
        (1, "1m"),
        (-1500, "-1500m"),
        (-2000, "-2"),
    ],
)
def test_format_quantity_cpu(units: int, expected: str) -> None:
    assert format_quantity("cpu", units) == expected


@pytest.mark.parametrize(
    ("units", "expected"),
    [
        (0, "0"),
        (1, "1"),
        (999, "999"),
        (1000, "1k"),
        (1024, "1Ki"),
        (1536, "1536"),
        (2048, "2Ki"),
        (3 * 2**20, "3Mi"),
        (64 * 2**30, "64Gi"),
        (2**40, "1Ti"),
        (2**50, "1Pi"),
        (2**60, "1Ei"),
        (2**70, "1024Ei"),
        (1024000, "1024k"),  # shorter than 1000Ki
        (8 * 10**9, "8G"),  # shorter than 7812500Ki
        (3 * 2**30, "3Gi"),
        (5 * 10**6, "5M"),
        (10**9 + 1000, "1000001k"),
        (-2048, "-2Ki"),
        (-3000, "-3k"),
    ],
)
def test_format_quantity_memory_takes_the_shortest_exact_form(units: int, expected: str) -> None:
    assert format_quantity("memory", units) == expected


def test_format_quantity_applies_the_same_rule_to_gpus_and_pods() -> None:
    assert format_quantity("nvidia.com/gpu", 8) == "8"
    assert format_quantity("pods", 2000) == "2k"


def test_format_quantity_rejects_non_integers() -> None:
    with pytest.raises(TypeError):
        format_quantity("cpu", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        format_quantity("memory", True)


@given(resource=st.sampled_from(RESOURCES), units=st.integers())
def test_format_then_to_units_round_trips_every_integer(resource: str, units: int) -> None:
    assert to_units(resource, format_quantity(resource, units)) == units


@given(
    units=st.integers(min_value=-(2**70), max_value=2**70),
    resource=st.sampled_from(RESOURCES),
)
def test_formatted_quantities_parse_back_to_the_same_value(resource: str, units: int) -> None:
    text = format_quantity(resource, units)
    scale = 1000 if resource == "cpu" else 1
    assert parse_quantity(text) == Fraction(units, scale)


_SUFFIX_VALUES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


@st.composite
def _valid_quantity(draw: st.DrawFn) -> tuple[str, Fraction]:
    """A random valid quantity string and its value computed independently."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    digits = st.text("0123456789", min_size=1, max_size=8)
    form = draw(st.sampled_from(["int", "int.", "int.frac", ".frac"]))
    int_digits = draw(digits) if form != ".frac" else ""
    frac_digits = draw(digits) if form in ("int.frac", ".frac") else ""
    number = int_digits + ("" if form == "int" else ".") + frac_digits
    magnitude = Fraction(int(int_digits or "0"))
    if frac_digits:
        magnitude += Fraction(int(frac_digits), 10 ** len(frac_digits))
    if draw(st.booleans()):
        exponent = draw(st.integers(min_value=-12, max_value=12))
        marker = draw(st.sampled_from(["e", "E"]))
        plus = "+" if exponent >= 0 and draw(st.booleans()) else ""
        suffix, factor = f"{marker}{plus}{exponent}", Fraction(10) ** exponent
    else:
        suffix = draw(st.sampled_from(sorted(_SUFFIX_VALUES)))
        factor = _SUFFIX_VALUES[suffix]
    value = magnitude * factor
    if (value * 10**9).denominator != 1:
        value = Fraction(math.ceil(value * 10**9), 10**9)  # apimachinery's nano round-up
    return f"{sign}{number}{suffix}", -value if sign == "-" else value


@given(_valid_quantity())
def test_parse_quantity_matches_an_independent_evaluation_of_valid_forms(
    case: tuple[str, Fraction],
) -> None:
    text, expected = case
    assert parse_quantity(text) == expected


@given(st.text(max_size=12))
def test_parse_quantity_either_parses_or_raises_quantity_error_quoting_input(text: str) -> None:
    try:
        parse_quantity(text)
    except QuantityError as err:
        assert json.dumps(text, ensure_ascii=False) in str(err)


@given(
    st.text(alphabet="abcdfghjlopqrstvwxyzABCDFHJLNOQRSUVWXYZ!@#%^&*()_= ", min_size=1, max_size=4)
)
def test_strings_with_foreign_characters_are_rejected(junk: str) -> None:
    text = f"1{junk}"
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert text in str(info.value)


def test_a_quantity_text_is_parsed_once_and_a_bad_one_fails_every_time() -> None:
    """Strings are remembered per text (manifests repeat them); errors are not."""
    assert parse_quantity("1500m") == parse_quantity("1500m") == Fraction(3, 2)
    assert to_units("cpu", "1500m") == 1500 and to_units("memory", "1500m") == 2
    for _ in range(2):
        with pytest.raises(QuantityError):
            parse_quantity("1.5.0")
