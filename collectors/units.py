"""Unit parsing shared by the inventory, the collectors and the service: everything becomes
base units (bit/s, seconds)."""

from __future__ import annotations

import re
from decimal import Decimal

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


_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str | float | int) -> float:
    """Seconds from ``10s``, ``5m``, ``1h``, ``2d`` or a plain number of seconds."""
    if isinstance(text, int | float):
        return float(text)
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 10s, 5m, 1h)")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]
