"""Speeds and durations: parsed to base units and formatted back; the Duration settings type."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel, ValidationError

from graywire.collectors.units import (
    Duration,
    PositiveDuration,
    format_duration,
    format_speed,
    parse_duration,
    parse_speed,
)

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


class _Timing(BaseModel):
    every: PositiveDuration = timedelta(seconds=10)
    wait: Duration = timedelta(0)
    limit: PositiveDuration | None = None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("1.5m", timedelta(seconds=90)),
        (" 2d ", timedelta(days=2)),
        ("90", timedelta(seconds=90)),
        ("0.25s", timedelta(milliseconds=250)),
        (timedelta(hours=1), timedelta(hours=1)),
    ],
)
def test_duration_reads_the_grammar_and_timedeltas(value: str | timedelta, expected: timedelta) -> None:
    assert _Timing(wait=value).wait == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "not a duration: 'soon'"),
        ("-5s", "not a duration: '-5s'"),
        (10, "not a duration: 10"),  # a bare YAML number: no unit, refused rather than guessed
        (1.5, "not a duration: 1.5"),
        (True, "not a duration: True"),
        (timedelta(seconds=-1), "never negative"),
    ],
)
def test_duration_refuses_anything_else_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as e:
        _Timing(wait=value)
    assert e.value.errors()[0]["loc"] == ("wait",)


def test_positive_duration_refuses_zero_but_duration_takes_it() -> None:
    assert _Timing(wait="0s").wait == timedelta(0)
    with pytest.raises(ValidationError, match="must be a positive duration") as e:
        _Timing(every="0s")
    assert e.value.errors()[0]["loc"] == ("every",)
    assert _Timing(limit=None).limit is None
    with pytest.raises(ValidationError, match="must be a positive duration"):
        _Timing(limit="0m")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(seconds=90), "90s"),
        (timedelta(minutes=5), "5m"),
        (timedelta(hours=72), "3d"),
        (timedelta(hours=36), "36h"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(microseconds=1), "0.000001s"),
        (timedelta(seconds=1_234_567), "1234567s"),
    ],
)
def test_format_duration(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
    assert timedelta(seconds=parse_duration(text)) == value


def test_duration_dumps_as_text_in_json_and_reads_back() -> None:
    t = _Timing(every="1.5m", wait="72h", limit="250")
    assert t.model_dump() == {
        "every": timedelta(seconds=90),
        "wait": timedelta(days=3),
        "limit": timedelta(seconds=250),
    }
    dumped = t.model_dump(mode="json")
    assert dumped == {"every": "90s", "wait": "3d", "limit": "250s"}
    assert _Timing.model_validate(dumped) == t
    assert _Timing.model_validate_json(t.model_dump_json()) == t
    assert _Timing.model_json_schema()["properties"]["wait"]["type"] == "string"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("1m500ms", 60.5),
        ("2w", 1_209_600.0),
        ("1y", 31_536_000.0),
        ("1d2h3m4s", 93_784.0),
    ],
)
def test_parse_duration_speaks_prometheus_grammar(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["30m1h", "1h1h", "ms", "5mss", "1h 30m", " "])
def test_units_come_largest_first_and_once(bad: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(bad)


@pytest.mark.parametrize(
    "value", [timedelta(milliseconds=500), timedelta(minutes=90), timedelta(seconds=1.5)]
)
def test_format_duration_reads_back(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value.total_seconds()
    assert format_duration(timedelta(milliseconds=500)) == "500ms"
