"""Unit parsing shared by the inventory, the collectors and the service: everything becomes
base units (bit/s, seconds), or a ``timedelta`` for settings (:data:`Duration`)."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, WithJsonSchema

_SPEED = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(?:b(?:ps|/s|it/s)?)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_speed(value: str | int | float) -> int:
    """Bits per second from ``800G``, ``400Gb/s``, ``100000Mbps`` or a plain number of bit/s."""
    if isinstance(value, bool):
        raise ValueError(f"not a speed: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"negative speed: {value!r}")
        return int(value)
    m = _SPEED.match(value)
    if not m:
        raise ValueError(f"not a speed: {value!r} (use e.g. 800G, 400Gb/s, 100000Mbps)")
    return int(Decimal(m.group(1)) * _SCALE[m.group(2).lower()])


def format_speed(bps: int | float) -> str:
    """Human form used in messages: 800G, 25G, 1.5G, 100M."""
    for unit, scale in (("T", 10**12), ("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if bps >= scale:
            v = bps / scale
            return f"{v:g}{unit}"
    return f"{bps:g}"


#: Prometheus's duration units, largest first (``1h30m``, ``500ms``, ``2w``; a year is 365 days).
_DURATION_UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_AMOUNT = r"\d+(?:\.\d+)?"
_DURATION_PATTERN = (
    rf"^\s*(?:(?P<plain>{_AMOUNT})|"
    + "".join(rf"(?:(?P<{'ms' if u == 'ms' else u}>{_AMOUNT}){u})?" for u in _DURATION_UNITS)
    + r")\s*$"
)
_DURATION = re.compile(_DURATION_PATTERN)


def parse_duration(text: str | float | int) -> float:
    """Seconds from Prometheus's duration grammar (``500ms``, ``10s``, ``1h30m``, ``2d``, ``1w``,
    ``1y``: units largest first, each once) or a plain number of seconds. A decimal amount
    (``1.5m``) is accepted too."""
    if isinstance(text, int | float):
        return float(text)
    m = _DURATION.match(text)
    if not m or not any(m.groupdict().values()):
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 10s, 5m, 1h30m, 2d)")
    if m.group("plain") is not None:
        return float(m.group("plain"))
    return sum(
        float(v) * _DURATION_UNITS[u] for u, v in m.groupdict().items() if v is not None and u != "plain"
    )


def format_duration(value: timedelta) -> str:
    """The shortest exact form ``parse_duration`` reads back: ``5m``, ``2d``, ``500ms``, ``1.5s``, ``0s``."""
    us = value // timedelta(microseconds=1)
    if 0 < us < 10**6 and us % 1000 == 0:
        return f"{us // 1000}ms"
    if us % 10**6:
        whole, frac = divmod(us, 10**6)
        return f"{whole}.{frac:06d}".rstrip("0") + "s"
    seconds = us // 10**6
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _to_timedelta(value: object) -> timedelta:
    # Text as YAML and the environment give it, or a timedelta from code. A bare YAML number
    # (``poll_interval: 10``) is refused rather than silently taken as seconds.
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValueError(f"not a duration: -{format_duration(-value)} (durations are never negative)")
        return value
    if isinstance(value, str):
        return timedelta(seconds=parse_duration(value))
    raise ValueError(f"not a duration: {value!r} (use e.g. 10s, 5m, 1h)")


def _positive(value: timedelta) -> timedelta:
    if not value:
        raise ValueError("must be a positive duration such as 10s or 5m")
    return value


#: A setting's length of time: ``10s``, ``5m``, ``1h``, ``2d`` or a number of seconds as a
#: string (or a ``timedelta``), never negative; JSON and config dumps write it back as text.
Duration = Annotated[
    timedelta,
    BeforeValidator(_to_timedelta),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": _DURATION.pattern, "examples": ["10s", "5m"]}),
]
#: A :data:`Duration` that may not be zero (intervals, timeouts, windows).
PositiveDuration = Annotated[Duration, AfterValidator(_positive)]
