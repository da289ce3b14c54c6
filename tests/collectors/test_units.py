"""Speed parsing and formatting: everything to bits per second and back."""

from __future__ import annotations

import pytest

from graywire.collectors.units import format_speed, parse_duration, parse_speed

G = 10**9


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("800G", 800 * G),
        ("400Gb/s", 400 * G),
        ("400gb/s", 400 * G),
        ("100000Mbps", 100 * G),
        ("25 Gbps", 25 * G),
        ("200Gbit/s", 200 * G),
        ("1.6T", 1600 * G),
        ("0.1G", 100_000_000),
        ("10k", 10_000),
        ("  56G  ", 56 * G),
        ("1000", 1000),
        ("53.125G", 53_125_000_000),
        (".5G", 500_000_000),
    ],
)
def test_parse_speed_strings(text: str, bps: int) -> None:
    assert parse_speed(text) == bps


def test_parse_speed_decimal_fractions_are_exact() -> None:
    # 4.1 * 10**9 is 4099999999.9999995 in binary floating point; truncating it loses a bit/s.
    assert parse_speed("4.1G") == 4_100_000_000


def test_parse_speed_numbers() -> None:
    assert parse_speed(800 * G) == 800 * G
    assert parse_speed(4e11) == 400 * G
    assert parse_speed(0) == 0


@pytest.mark.parametrize("bad", ["fast", "800X", "800 G b", "", "G", "-5G", "1e9", "800Gbyte"])
def test_parse_speed_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError, match="not a speed"):
        parse_speed(bad)


def test_parse_speed_rejects_negative_and_bool() -> None:
    with pytest.raises(ValueError, match="negative speed"):
        parse_speed(-1)
    with pytest.raises(ValueError, match="not a speed"):
        parse_speed(True)


@pytest.mark.parametrize(
    ("bps", "text"),
    [
        (800 * G, "800G"),
        (1.5 * G, "1.5G"),
        (25 * G, "25G"),
        (100 * 10**6, "100M"),
        (1600 * G, "1.6T"),
        (1234, "1.234K"),
        (999, "999"),
        (0, "0"),
    ],
)
def test_format_speed(bps: float, text: str) -> None:
    assert format_speed(bps) == text


@pytest.mark.parametrize("text", ["800G", "400G", "1.6T", "100M", "25G"])
def test_format_parse_round_trip(text: str) -> None:
    assert format_speed(parse_speed(text)) == text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("5m", 300.0), ("1h", 3600.0), ("2d", 172800.0), ("90", 90.0), ("1.5m", 90.0), (7, 7.0)],
)
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "5x", "m", "1.2.3m", "-5s", "5 min"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(bad)
