"""FEC / BER degradation, judged over minutes against NVIDIA's field thresholds.

High corrected-bit counts are normal on PAM4 links; what matters is the pre-FEC BER (corrected
bits / received bits) over a window of real traffic, against the level for that speed, FEC
mode and media. Windows are exponentially weighted sums of the counter deltas (O(1) state per
port): a fast one (about a minute) is judged, a slow one (about 15 minutes) is the baseline a
*rising* BER is compared with, so a link walking toward its threshold is reported before it
gets there. Any uncorrectable block is an error (confirmed on the next poll, like every level);
symbol BER is judged once the window holds a few symbol errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa

from collectors.model import Fabric
from detectors.base import Hysteresis, HysteresisConfig, LinkEntities, PortIndexer, column
from detectors.ber_thresholds import GENERIC, LANE_CLASSES, BerThresholds, ThresholdTable, lane_class_codes
from detectors.findings import Finding

LEVELS = ("ok", "rising", "warning", "error")
SEVERITY = {1: "info", 2: "warning", 3: "critical"}


@dataclass(frozen=True, slots=True)
class BerConfig:
    fast_window_s: float = 60.0
    slow_window_s: float = 900.0
    min_bits: float = 1e11  # no verdict on a window with fewer received bits
    rising_ratio: float = 3.0  # fast BER this many times the slow one, and above "Normal"
    min_symbol_errors: float = 3.0  # symbol errors in the window before symbol BER is judged
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=2, close_after=3)
    )


class BerDetector:
    name = "ber"
    version = "1"
    consumes = "port_rates"
    kinds = ("ber_degradation",)

    def __init__(
        self, fabric: Fabric, table: ThresholdTable | None = None, cfg: BerConfig | None = None
    ) -> None:
        self.fabric = fabric
        self.table = table
        self.cfg = cfg or BerConfig()
        n = fabric.n_ports
        self.port_index = PortIndexer(fabric)
        self.links = LinkEntities(fabric)
        self.fast = np.zeros((4, n))  # bits, corrected bits, uncorrectable blocks, symbol errors
        self.slow = np.zeros((2, n))  # bits, corrected bits
        self.hyst = Hysteresis(self.cfg.hysteresis, n)
        self.reported = np.zeros(n, dtype=np.int8)  # highest level reported while open
        self._cache: dict[tuple[str | None, int, str | None], BerThresholds] = {}
        names = sorted({m for m in (fabric.media or []) if m})
        self.media_names: list[str | None] = [None, *names]
        code = {m: i + 1 for i, m in enumerate(names)}
        self.media_code = np.array(
            [code.get(m, 0) for m in (fabric.media or [None] * fabric.n_ports)], np.int64
        )

    def _decode(self, key: int) -> tuple[str | None, int, str | None]:
        media = self.media_names[key % 1024]
        fec = (key // 1024) % 1024 - 1
        cls_ = LANE_CLASSES[key // 1024 // 1024 - 1][0] if key // 1024 // 1024 else None
        return cls_, fec, media

    def _thresholds(self, cls_: str | None, fec: int, media: str | None) -> BerThresholds:
        key = (cls_, fec, media)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = (
                self.table.lookup(cls_, None if fec < 0 else fec, media) if self.table else GENERIC
            )
        return hit

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        f, cfg = self.fabric, self.cfg
        idx = self.port_index(batch.column("port"))
        dt = column(batch, "interval_seconds")
        bits = column(batch, "phy_received_bits_per_second") * dt
        corr = column(batch, "fec_corrected_bits_per_second") * dt
        unc = np.nan_to_num(column(batch, "fec_uncorrectable_blocks_per_second") * dt, nan=0.0)
        sym = np.nan_to_num(column(batch, "symbol_errors_per_second") * dt, nan=0.0)
        ok = (idx >= 0) & np.isfinite(dt) & (dt > 0) & np.isfinite(bits) & np.isfinite(corr)
        p, dt_ok = idx[ok], dt[ok]
        df, ds = np.exp(-dt_ok / cfg.fast_window_s), np.exp(-dt_ok / cfg.slow_window_s)
        self.fast[:, p] = self.fast[:, p] * df + np.vstack([bits[ok], corr[ok], unc[ok], sym[ok]])
        self.slow[:, p] = self.slow[:, p] * ds + np.vstack([bits[ok], corr[ok]])

        enough = self.fast[0, p] >= cfg.min_bits
        pre = np.where(enough, self.fast[1, p] / np.maximum(self.fast[0, p], 1.0), np.nan)
        slow_pre = self.slow[1, p] / np.maximum(self.slow[0, p], 1.0)
        sym_ber = np.where(enough, self.fast[3, p] / np.maximum(self.fast[0, p], 1.0), np.nan)
        # Thresholds per row: by speed class (from the reading, else expected), FEC mode, media.
        speed = column(batch, "speed_bps", 0)[ok]
        width = column(batch, "width", 0)[ok]
        speed = np.where(speed > 0, speed, f.expected_speed_bps[p])
        width = np.where(width > 0, width, f.expected_width[p])
        fec = column(batch, "fec_mode", -1)[ok].astype(np.int64)
        cls_code = lane_class_codes(speed, width)
        key = (cls_code * 1024 + (fec + 1)) * 1024 + self.media_code[p]
        uniq, inv = np.unique(key, return_inverse=True)
        table = [self._thresholds(*self._decode(int(k))) for k in uniq.tolist()]
        combo = inv.reshape(-1)

        def level_of(get: Callable[[BerThresholds], float]) -> np.ndarray:
            return np.array([get(t) for t in table])[combo]

        err, warn, normal = (
            level_of(lambda t, a=a: getattr(t.pre_fec, a)) for a in ("error", "warning", "normal")
        )
        s_err, s_warn = (level_of(lambda t, a=a: getattr(t.symbol, a)) for a in ("error", "warning"))
        level = np.zeros(p.size, dtype=np.int8)
        rising = enough & (pre >= normal) & (pre >= cfg.rising_ratio * np.maximum(slow_pre, 1e-18))
        level[rising] = 1
        # Symbol BER near 1e-14 needs more bits than a minute holds: judge it on a few errors.
        sym_ok = self.fast[3, p] >= cfg.min_symbol_errors
        level[enough & ((pre >= warn) | (sym_ok & (sym_ber >= s_warn)))] = 2
        level[(enough & ((pre >= err) | (sym_ok & (sym_ber >= s_err)))) | (self.fast[2, p] >= 0.5)] = 3

        ent = self.links.of_port[p]
        n = f.n_ports
        ent_level = np.zeros(n, dtype=np.int8)
        np.maximum.at(ent_level, ent, level)
        judged = np.zeros(n, dtype=bool)
        judged[ent[enough | (self.fast[2, p] >= 0.5)]] = True
        ids = np.flatnonzero(judged)
        opened, closed = self.hyst.update(ids, ent_level[ids] > 0)
        escalated = ids[self.hyst.is_open[ids] & (ent_level[ids] > self.reported[ids])]
        fire = np.union1d(opened, escalated)
        if not fire.size and not closed.size:
            return []
        now = batch.column("time")[0].as_py()
        # Per entity: the worst end's row, for the evidence.
        worst_row: dict[int, int] = {}
        fire_set = set(fire.tolist())
        for j in np.flatnonzero(level > 0).tolist():
            e = int(ent[j])
            if e in fire_set and (e not in worst_row or level[j] > level[worst_row[e]]):
                worst_row[e] = j
        out = []
        for e in fire.tolist():
            j = worst_row.get(e)
            if j is None:
                continue
            lv = int(level[j])
            self.reported[e] = lv
            th = table[combo[j]]
            out.append(self._finding(e, "firing", now, lv, int(p[j]), pre[j], slow_pre[j], sym_ber[j], th))
        for e in closed.tolist():
            was = int(self.reported[e])
            self.reported[e] = 0
            out.append(self._finding(e, "cleared", now, was, e, np.nan, np.nan, np.nan, None))
        return out

    def _finding(
        self,
        ent: int,
        status: str,
        now: datetime,
        level: int,
        port: int,
        pre: float,
        slow_pre: float,
        sym_ber: float,
        th: BerThresholds | None,
    ) -> Finding:
        f = self.fabric
        place = self.links.place(ent)
        where = f.keys[port]
        evidence: dict[str, object] = {  # a cleared finding keeps its severity, its level is ok
            "level": LEVELS[level] if status == "firing" else "ok",
            "port_measured": where,
            "peer_port": place["peer_port"],
        }
        if status == "firing":
            unc = float(self.fast[2, port])
            evidence |= {
                "pre_fec_ber": float(pre),
                "pre_fec_ber_baseline": float(slow_pre),
                "symbol_ber": float(sym_ber),
                "uncorrectable_blocks_in_window": unc,
                "window_seconds": self.cfg.fast_window_s,
            }
            if th is not None:
                evidence["thresholds"] = {
                    "pre_fec": vars_of(th.pre_fec),
                    "symbol": vars_of(th.symbol),
                    "source": th.source,
                }
            t = th or GENERIC
            pre_lim = t.pre_fec.error if level == 3 else t.pre_fec.warning
            sym_lim = t.symbol.error if level == 3 else t.symbol.warning
            if level == 3 and unc >= 0.5:
                what = f"{unc:.0f} uncorrectable FEC blocks in the last minute"
            elif level == 1:
                what = f"pre-FEC BER {pre:.1e} rising ({pre / max(slow_pre, 1e-18):.0f}x its 15-min baseline)"
            elif pre >= pre_lim:
                what = f"pre-FEC BER {pre:.1e} over the {LEVELS[level]} level {pre_lim:.0e}"
            else:
                what = f"symbol BER {sym_ber:.1e} over the {LEVELS[level]} level {sym_lim:.0e}"
            summary = f"{where} {what}"
        else:
            summary = f"{place['port']} BER back under its levels"
        return Finding(
            kind="ber_degradation",
            entity=str(place["entity"]),
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=SEVERITY.get(level, "info"),  # type: ignore[arg-type]
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=place["node"],
            port=place["port"],
            link=place["link"],
            score=float(pre) if np.isfinite(pre) else 0.0,
            evidence=evidence,
        )


def vars_of(levels: object) -> dict[str, float]:
    return {k: getattr(levels, k) for k in ("error", "warning", "normal")}
