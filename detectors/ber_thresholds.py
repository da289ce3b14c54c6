"""NVIDIA's field BER thresholds (the UFM PDR plugin's ``Field_BER_Thresholds.csv``), loaded as is.

The table is keyed by protocol, speed class (EDR/HDR/NDR…), FEC opcode and media, and gives
Error / Warning / Normal levels for pre-FEC, post-FEC (effective) and symbol BER. It is read
from the operator's copy (config ``ber_thresholds``); graywire does not ship or retype it.
Without it, a generic PAM4 rule applies and every finding says so.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Speed classes by per-lane rate (b/s), fastest first, to map a port's speed and width to a row.
LANE_CLASSES: tuple[tuple[str, float], ...] = (
    ("XDR", 200e9),
    ("NDR", 100e9),
    ("HDR", 50e9),
    ("EDR", 25e9),
    ("FDR", 14e9),
)


@dataclass(frozen=True, slots=True)
class Levels:
    error: float
    warning: float
    normal: float


@dataclass(frozen=True, slots=True)
class BerThresholds:
    pre_fec: Levels
    post_fec: Levels
    symbol: Levels
    source: str  # which row (or rule) these came from, for the evidence

    @property
    def generic(self) -> bool:
        return self.source.startswith("generic")


#: Used only without a table: the usual PAM4 RS(544,514) pre-FEC limit region, and "any
#: post-FEC error is bad". Deliberately loose, to avoid false alarms on unknown hardware.
GENERIC = BerThresholds(
    pre_fec=Levels(error=2.4e-4, warning=1e-4, normal=1e-5),
    post_fec=Levels(error=1e-12, warning=1e-13, normal=1e-15),
    symbol=Levels(error=1e-12, warning=1e-13, normal=1e-15),
    source="generic PAM4 rule (no thresholds table configured)",
)


def lane_class(speed_bps: float, width: int) -> str | None:
    """IB speed class name from a port's total speed and lane count."""
    if speed_bps <= 0 or width <= 0:
        return None
    lane = speed_bps / width
    for name, rate in LANE_CLASSES:
        if lane >= rate * 0.9:
            return name
    return None


def lane_class_codes(speed_bps: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Vectorized :func:`lane_class`: 1 + index into LANE_CLASSES, 0 where unknown."""
    lane = np.where((speed_bps > 0) & (width > 0), speed_bps / np.maximum(width, 1), 0.0)
    code = np.zeros(lane.shape, dtype=np.int64)
    for i in range(len(LANE_CLASSES) - 1, -1, -1):  # slowest first, faster classes overwrite
        code[lane >= LANE_CLASSES[i][1] * 0.9] = i + 1
    return code


def _media(text: str) -> str:
    t = text.strip().lower()
    return t[:-1] if t.endswith("s") else t


def _f(text: str) -> float:
    return float(text.strip())


class ThresholdTable:
    """Lookup by (speed class, FEC opcode, media), with documented fallbacks."""

    def __init__(self, rows: dict[tuple[str, int, str], BerThresholds]) -> None:
        self.rows = rows

    @classmethod
    def load(cls, path: str | Path) -> ThresholdTable:
        path = Path(path)
        rows: dict[tuple[str, int, str], BerThresholds] = {}
        collisions: dict[tuple[str, int, str], int] = {}
        try:
            with path.open(newline="", encoding="utf-8-sig") as fh:
                for i, r in enumerate(csv.DictReader(fh, restval=""), start=2):
                    try:
                        key = (r["Speed"].strip().upper(), int(r["FEC OPCODE"]), _media(r["Media Type"]))
                        row = BerThresholds(
                            pre_fec=Levels(
                                _f(r["Pre-FEC BER Error"]),
                                _f(r["Pre-FEC BER Warning"]),
                                _f(r["Pre-FEC BER Normal"]),
                            ),
                            post_fec=Levels(
                                _f(r["Post-FEC BER Error"]),
                                _f(r["Post-FEC BER Warning"]),
                                _f(r["Post-FEC BER Normal"]),
                            ),
                            symbol=Levels(
                                _f(r["Symbol BER Error"]),
                                _f(r["Symbol BER Warning"]),
                                _f(r["Symbol BER Normal"]),
                            ),
                            source=f"{path.name} row {i}: {r['ASIC']} {r['Protocol']} {key[0]} "
                            f"FEC {key[1]} {r['Media Type'].strip()}",
                        )
                    except (KeyError, ValueError, TypeError, AttributeError) as e:
                        raise ValueError(f"{path}: row {i}: {e}") from e
                    # The table has rows per ASIC generation, which the inventory does not
                    # know: where two rows share a key, the stricter one is kept and says so.
                    old = rows.get(key)
                    if old is None or row.pre_fec.error < old.pre_fec.error:
                        rows[key] = row
                    if old is not None:
                        collisions[key] = collisions.get(key, 1) + 1
        except OSError as e:
            raise ValueError(f"cannot read BER thresholds {path}: {e.strerror}") from e
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text: {e}") from e
        for key, n in collisions.items():
            r0 = rows[key]
            rows[key] = BerThresholds(
                r0.pre_fec, r0.post_fec, r0.symbol, f"{r0.source} (strictest of {n} ASIC rows)"
            )
        if not rows:
            raise ValueError(f"{path}: no threshold rows")
        return cls(rows)

    def lookup(self, speed_class: str | None, fec_mode: int | None, media: str | None) -> BerThresholds:
        """The row for this port; a faster class than the table knows uses its fastest row.

        Falls back, in order: exact; same FEC and media at the fastest class the table has
        (XDR ports get NDR rows until the table grows XDR ones); same class and FEC with any
        media (strictest); the generic rule.
        """
        m = _media(media or "")
        fec = -1 if fec_mode is None else int(fec_mode)
        cls_ = (speed_class or "").upper()
        hit = self.rows.get((cls_, fec, m))
        if hit:
            return hit
        order = [name for name, _ in LANE_CLASSES]
        known = [c for c in order if any(k[0] == c for k in self.rows)]
        if known and cls_ in order and order.index(cls_) < order.index(known[0]):
            hit = self.rows.get((known[0], fec, m))
            if hit:
                return hit
            cls_ = known[0]
        same = [v for k, v in self.rows.items() if k[0] == cls_ and k[1] == fec]
        if same:
            return min(same, key=lambda v: v.pre_fec.error)
        return GENERIC
