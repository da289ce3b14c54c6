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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.detectors.base import (
    PORT_RATES,
    Hysteresis,
    HysteresisConfig,
    LinkEntities,
    PortIndexer,
    Scores,
    column,
    decay_add,
    index_range,
    judged_rows,
    open_ports,
    port_finding,
    resume_open,
)
from graywire.detectors.ber_thresholds import (
    GENERIC,
    LANE_CLASSES,
    BerThresholds,
    ThresholdTable,
    lane_class_codes,
)
from graywire.detectors.findings import Finding, Kind, Severity

LEVELS = ("ok", "rising", "warning", "error")
SEVERITY = {1: Severity.INFO, 2: Severity.WARNING, 3: Severity.CRITICAL}
#: Which rule set a port's level, for the evidence (index = rule code; higher codes win ties).
RULES = (
    "none",
    "pre-FEC BER rising over its 15-min baseline",
    "pre-FEC BER 10x its 125-min baseline and over its peers",
    "pre-FEC BER over the field level",
    "symbol BER over the field level (fast window)",
    "PDR: symbol BER over 125 min over the field Warning level",
    "NVSentinel: more than 10 symbol errors a second",
    "PDR: symbol BER over 12 min over the field Error level",
    "NVSentinel: more than 120 symbol errors an hour",
    "uncorrectable FEC blocks",
)
#: Where the pre-FEC BER came from, per source code.
PRE_FEC_FROM = (
    "fec_corrected_bits / phy_received_bits",
    "fec_corrected_symbols / line-rate bits (lower bound)",
    "fec_corrected_blocks / line-rate bits (lower bound)",
    "none (no corrected-error counter)",
)


@dataclass(frozen=True, slots=True)
class BerConfig:
    fast_window_s: float = 60.0
    slow_window_s: float = 900.0
    min_bits: float = 1e11  # no verdict on a window with fewer received bits
    rising_ratio: float = 3.0  # fast BER this many times the slow one, and above "Normal"
    min_symbol_errors: float = 3.0  # symbol errors in the window before symbol BER is judged
    # Without corrected-bit counters (UFM's default set, legacy PM): pre-FEC BER is estimated
    # from RS-FEC corrected symbols or blocks over line-rate bits, a lower bound.
    baseline_window_s: float = 7500.0  # the estimate's own baseline: 125 minutes, PDR's long window
    estimate_ratio: float = 10.0  # estimate this many times its baseline ...
    peer_ratio: float = 10.0  # ... and this many times its peers' median (same role) is a finding
    # With exact corrected bits the scale is sure: three times the peers' median (a fabric-wide
    # rise lifts them too) beside ten times the port's own baseline. Healthy peers spread over a
    # decade (1e-9 to 1e-8); ten times their median let a 90-s ramp run 63 s before it was seen.
    exact_peer_ratio: float = 3.0
    min_estimate_events: float = 30.0  # corrected symbols/blocks the fast window must hold
    # Baselines learn only from calm polls: a poll's own BER at most this many times the
    # baseline's (or fewer than min_estimate_events corrected events). A port that degrades
    # keeps the level from before its rise, so the "rising" rules compare it with that.
    learn_ratio: float = 3.0
    # A port whose BER rose and then stayed within plateau_ratio of one level for settle_s has
    # a new normal: its baselines take that level and the rising rules let it go.
    plateau_ratio: float = 1.5
    settle_s: float = 300.0
    # NVIDIA's PDR plugin: symbol BER over 12 and 125 minutes against the table's symbol levels.
    pdr_short_s: float = 720.0
    pdr_long_s: float = 7500.0
    # NVSentinel: more than 10 symbol errors a second degrades; more than 120 an hour is fatal.
    nvsentinel_per_second: float = 10.0
    nvsentinel_per_hour: float = 120.0
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=2, close_after=3)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _BerScores(Scores):
    """Per link entity the verdict and level (its worse end's); the rest is per judged port row."""

    level_of_id: np.ndarray  # level of each entity in ``ids``
    port: np.ndarray
    ent: np.ndarray
    level: np.ndarray  # 0 ok .. 3 error (LEVELS)
    rule: np.ndarray  # which rule set the level (RULES)
    pre: np.ndarray  # pre-FEC BER over the fast window (NaN: not enough bits, or no counter)
    slow_pre: np.ndarray  # over the slow window
    long_pre: np.ndarray  # the estimate's baseline
    sym_ber: np.ndarray
    pdr12: np.ndarray  # symbol BER over PDR's short and long windows
    pdr125: np.ndarray
    peer_med: np.ndarray  # median estimate of the poll's ports of the same role
    thresholds: list[BerThresholds]  # the levels in use, indexed by ``combo``
    combo: np.ndarray


class BerDetector:
    name = "ber"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.BER_DEGRADATION,)

    def __init__(
        self, fabric: Fabric, table: ThresholdTable | None = None, cfg: BerConfig | None = None
    ) -> None:
        self.fabric = fabric
        self.table = table
        self.cfg = cfg or BerConfig()
        n = fabric.n_ports
        self.port_index = PortIndexer(fabric)
        self.links = LinkEntities(fabric)
        # Exponentially weighted sums, in float32: their 7 digits are far finer than any BER
        # threshold (a decade apart), and 13 windows a port in float64 were 104 bytes a port.
        w = np.float32
        self.fast = np.zeros((4, n), w)  # bits, corrected bits, uncorrectable blocks, symbol errors
        self.slow = np.zeros((2, n), w)  # bits, corrected bits
        self.long = np.zeros((2, n), w)  # bits, corrected (estimate's baseline)
        self.pdr = np.zeros((4, n), w)  # bits and symbol errors over the PDR short, then long window
        self.hour = np.zeros(n, w)  # symbol errors over the last hour (NVSentinel)
        self.src = np.full(n, -1, dtype=np.int8)  # pre-FEC source in use (PRE_FEC_FROM), -1 none yet
        # A port whose polls stopped teaching its baselines: the fast BER its plateau began at
        # (0: calm) and how long it has held within plateau_ratio of it.
        self.rise_ref = np.zeros(n, w)
        self.rise_s = np.zeros(n, w)
        self.role = fabric.port_role_code
        self.hyst = Hysteresis(self.cfg.hysteresis, n)
        self.reported = np.zeros(n, dtype=np.int8)  # highest level reported while open
        self._cache: dict[tuple[str | None, int, str | None], BerThresholds] = {}
        self._last_combos: tuple[np.ndarray, list[BerThresholds], np.ndarray] | None = None
        names = sorted({m for m in (fabric.media or []) if m})
        self.media_names: list[str | None] = [None, *names]
        code = {m: i + 1 for i, m in enumerate(names)}
        self.media_code = np.array(
            [code.get(m, 0) for m in (fabric.media or [None] * fabric.n_ports)], np.int64
        )

    def _combos(self, key: np.ndarray) -> tuple[list[BerThresholds], np.ndarray]:
        """The thresholds in use and each row's index into them; last poll's when the rows'
        (speed class, FEC, media) keys are the same, as they are on almost every poll."""
        last = self._last_combos
        if last is not None and np.array_equal(last[0], key):
            return last[1], last[2]
        uniq, inv = np.unique(key, return_inverse=True)
        table = [self._thresholds(*self._decode(int(k))) for k in uniq.tolist()]
        combo = inv.reshape(-1)
        self._last_combos = (key, table, combo)
        return table, combo

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

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Open incidents of its kinds, back after a restart (:class:`Resumable`), at the level
        they last reported: only a higher one fires again."""
        ports, taken = open_ports(self.fabric, incidents, self.kinds)
        ents = self.links.of_port[ports]
        resume_open(self.hyst, ents)
        level = [(i.get("evidence") or {}).get("level") for i in taken]
        self.reported[ents] = [LEVELS.index(lv) if lv in LEVELS else 0 for lv in level]
        return taken

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        scores = self._score(batch)
        if scores is None:
            return []
        decision = self.hyst.decide(scores)
        # While open, a level above the one reported fires again (an escalation).
        ids = scores.ids
        escalated = ids[self.hyst.is_open[ids] & (scores.level_of_id > self.reported[ids])]
        fire = np.union1d(decision.opened, escalated)
        if not fire.size and not decision.closed.size:
            return []
        now = batch.column("time")[0].as_py()
        s = scores
        # Per entity: the worst end's row, for the evidence: the higher level, then the higher
        # pre-FEC BER, then the lower port index (whatever order the rows came in).
        rows = np.flatnonzero(s.level > 0)
        rows = rows[np.isin(s.ent[rows], fire)]
        pre = np.nan_to_num(s.pre[rows], nan=-1.0)
        rows = rows[np.lexsort((-s.port[rows], pre, s.level[rows], s.ent[rows]))]
        worst_row = dict(zip(s.ent[rows].tolist(), rows.tolist(), strict=True))  # the last wins
        out = []
        for e in fire.tolist():
            j = worst_row.get(e)
            if j is None:
                continue
            lv = int(s.level[j])
            self.reported[e] = lv
            out.append(self._finding(e, "firing", now, lv, int(s.port[j]), s, j))
        for e in decision.closed.tolist():
            was = int(self.reported[e])
            self.reported[e] = 0
            out.append(self._finding(e, "cleared", now, was, e))
        return out

    def _score(self, batch: pa.RecordBatch) -> _BerScores | None:
        """Advance every port's windows by the poll, then level each port (and each link, its
        worse end) by the rules; a link is judged once a window holds enough bits, or it has an
        uncorrectable block or a level."""
        if batch.num_rows == 0:
            return None
        f, cfg = self.fabric, self.cfg
        idx = self.port_index(batch.column("port"))
        dt = column(batch, "interval_seconds")
        phy_bits = column(batch, "phy_received_bits_per_second") * dt
        # Without a PHY bit counter, bits at line rate (what the PDR plugin divides by): the
        # speed read (from any source of the port), else the inventory's expected speed.
        line_speed = column(batch, "speed_bps", 0)
        unread = (line_speed <= 0) & (idx >= 0)
        if unread.any():
            line_speed = np.where(unread, f.expected_speed_bps[np.maximum(idx, 0)], line_speed)
        line_bits = np.where(line_speed > 0, line_speed, np.nan) * dt
        bits = np.where(np.isfinite(phy_bits), phy_bits, line_bits)
        corr_bits = column(batch, "fec_corrected_bits_per_second") * dt
        symbols = column(batch, "fec_corrected_symbols_per_second") * dt
        blocks = column(batch, "fec_corrected_blocks_per_second") * dt
        src = np.where(
            np.isfinite(corr_bits), 0, np.where(np.isfinite(symbols), 1, np.where(np.isfinite(blocks), 2, 3))
        ).astype(np.int8)
        sources = [corr_bits, symbols, blocks]
        first = int(src[0]) if src.size else 3
        if first < 3 and bool((src == first).all()):  # one source for every port: the usual poll
            corr = np.nan_to_num(sources[first], nan=0.0)
        else:
            corr = np.nan_to_num(np.choose(src, [*sources, np.zeros_like(bits)]), nan=0.0)
        unc = np.nan_to_num(column(batch, "fec_uncorrectable_blocks_per_second") * dt, nan=0.0)
        sym = np.nan_to_num(column(batch, "symbol_errors_per_second") * dt, nan=0.0)
        sym_known = np.isfinite(column(batch, "symbol_errors_per_second"))
        ok = (idx >= 0) & np.isfinite(dt) & (dt > 0) & np.isfinite(bits)
        p, rows = judged_rows(idx, ok, f.n_ports)
        dt_ok, src, bits, corr, unc, sym = dt[rows], src[rows], bits[rows], corr[rows], unc[rows], sym[rows]
        # A port whose pre-FEC source changed (a collector swap) starts its corrected sums afresh.
        moved = (self.src[p] >= 0) & (self.src[p] != src)
        if moved.any():
            q = np.flatnonzero(moved) if isinstance(p, slice) else p[moved]
            self.fast[1, q] = self.slow[1, q] = self.long[1, q] = 0.0
            self.fast[0, q] = self.slow[0, q] = self.long[0, q] = 0.0
        self.src[p] = src
        decay_add(self.fast, p, np.exp(-dt_ok / cfg.fast_window_s), bits, corr, unc, sym)
        self._learn(p, dt_ok, bits, corr)
        decay_add(self.pdr[0:2], p, np.exp(-dt_ok / cfg.pdr_short_s), bits, sym)
        decay_add(self.pdr[2:4], p, np.exp(-dt_ok / cfg.pdr_long_s), bits, sym)
        decay_add(self.hour[np.newaxis], p, np.exp(-dt_ok / 3600.0), sym)
        sym_rate = np.where(sym_known[rows], sym / dt_ok, 0.0)
        m = dt_ok.size

        enough = self.fast[0, p] >= cfg.min_bits
        has_pre = src < 3
        pre = np.where(enough & has_pre, self.fast[1, p] / np.maximum(self.fast[0, p], 1.0), np.nan)
        slow_pre = self.slow[1, p] / np.maximum(self.slow[0, p], 1.0)
        long_pre = self.long[1, p] / np.maximum(self.long[0, p], 1.0)
        sym_ber = np.where(enough, self.fast[3, p] / np.maximum(self.fast[0, p], 1.0), np.nan)
        # Thresholds per row: by speed class (from the reading, else expected), FEC mode, media.
        speed = column(batch, "speed_bps", 0)[rows]
        width = column(batch, "width", 0)[rows]
        speed = np.where(speed > 0, speed, f.expected_speed_bps[p])
        width = np.where(width > 0, width, f.expected_width[p])
        fec = column(batch, "fec_mode", -1)[rows].astype(np.int64)
        cls_code = lane_class_codes(speed, width)
        key = (cls_code * 1024 + (fec + 1)) * 1024 + self.media_code[p]
        table, combo = self._combos(key)

        def level_of(get: Callable[[BerThresholds], float]) -> np.ndarray:
            return np.array([get(t) for t in table])[combo]

        err, warn, normal = (
            level_of(lambda t, a=a: getattr(t.pre_fec, a)) for a in ("error", "warning", "normal")
        )
        s_err, s_warn = (level_of(lambda t, a=a: getattr(t.symbol, a)) for a in ("error", "warning"))
        level = np.zeros(m, dtype=np.int8)
        rule = np.zeros(m, dtype=np.int8)

        def raise_to(mask: np.ndarray, lv: int, code: int) -> None:
            hit = mask & (lv >= level)
            level[hit] = lv
            rule[hit] = code

        exact = src == 0
        rising = exact & enough & (pre >= normal) & (pre >= cfg.rising_ratio * np.maximum(slow_pre, 1e-18))
        raise_to(rising, 1, 1)
        # Scale-free: for an estimate (its scale is unsure), and for every port judged by the
        # generic rule (its levels are too loose to see a link start to degrade).
        generic = level_of(lambda t: float(t.generic)) > 0
        est_ok = enough & has_pre & ((src > 0) | generic) & (self.fast[1, p] >= cfg.min_estimate_events)
        est_rising = est_ok & (pre >= cfg.estimate_ratio * np.maximum(long_pre, 1e-18))
        peer_med = self._peer_median(p, pre, est_ok, est_rising)
        peer_ratio = np.where(src == 0, cfg.exact_peer_ratio, cfg.peer_ratio)
        est_rising &= pre >= peer_ratio * np.maximum(peer_med, 1e-18)
        raise_to(est_rising, 1, 2)
        # Symbol BER near 1e-14 needs more bits than a minute holds: judge it on a few errors.
        sym_ok = self.fast[3, p] >= cfg.min_symbol_errors
        pdr12 = self.pdr[1, p] / np.maximum(self.pdr[0, p], 1.0)
        pdr125 = self.pdr[3, p] / np.maximum(self.pdr[2, p], 1.0)
        # At one level the rules applied later win the evidence: vendors' windows, then the fast ones.
        raise_to((self.pdr[3, p] >= cfg.min_symbol_errors) & (pdr125 >= s_warn), 2, 5)
        raise_to(sym_rate > cfg.nvsentinel_per_second, 2, 6)
        raise_to(enough & (pre >= warn), 2, 3)
        raise_to(enough & sym_ok & (sym_ber >= s_warn), 2, 4)
        raise_to((self.pdr[1, p] >= cfg.min_symbol_errors) & (pdr12 >= s_err), 3, 7)
        raise_to(self.hour[p] > cfg.nvsentinel_per_hour, 3, 8)
        raise_to(enough & (pre >= err), 3, 3)
        raise_to(enough & sym_ok & (sym_ber >= s_err), 3, 4)
        raise_to(self.fast[2, p] >= 0.5, 3, 9)
        ent = self.links.of_port[p]
        ent_level = np.zeros(f.n_ports, dtype=np.int8)
        hot = np.flatnonzero(level)
        np.maximum.at(ent_level, ent[hot], level[hot])
        judged = np.zeros(f.n_ports, dtype=bool)
        judged[ent[enough | (self.fast[2, p] >= 0.5) | (level > 0)]] = True
        ids = np.flatnonzero(judged)
        ports = index_range(m) if isinstance(p, slice) else p
        return _BerScores(ids=ids, bad=ent_level[ids] > 0, level_of_id=ent_level[ids], port=ports, ent=ent,
                          level=level, rule=rule, pre=pre, slow_pre=slow_pre, long_pre=long_pre,
                          sym_ber=sym_ber, pdr12=pdr12, pdr125=pdr125, peer_med=peer_med,
                          thresholds=table, combo=combo)  # fmt: skip

    def _learn(self, p: np.ndarray | slice, dt: np.ndarray, bits: np.ndarray, corr: np.ndarray) -> None:
        """Advance the baselines (15-min slow window, 125-min long one) by the calm polls only.

        A poll is calm when its own BER is at most ``learn_ratio`` times the baseline's, or it
        holds too few corrected events to say; a young baseline (fewer than ``min_bits``) learns
        every poll. A port that is not calm keeps its baselines at the level from before its
        rise, which is what "rising" is measured against: a baseline that learned a ramp as it
        went would follow it and hide it. Should the port settle at its new level (within
        ``plateau_ratio`` for ``settle_s``), the baselines take that level: a step that stays
        flat is a new normal, not a rise forever.
        """
        cfg = self.cfg
        sample = corr / np.maximum(bits, 1.0)
        quiet = corr < cfg.min_estimate_events
        suspect = np.zeros(dt.size, dtype=bool)
        for window, tau in ((self.slow, cfg.slow_window_s), (self.long, cfg.baseline_window_s)):
            young = window[0, p] < cfg.min_bits
            base = window[1, p] / np.maximum(window[0, p], 1.0)
            calm = quiet | young | (sample <= cfg.learn_ratio * base)
            suspect |= ~calm
            decay = np.exp(-dt / tau)
            if isinstance(p, slice) and calm.all():
                decay_add(window, p, decay, bits, corr)
            else:
                q = np.flatnonzero(calm) if isinstance(p, slice) else p[calm]
                decay_add(window, q, decay[calm], bits[calm], corr[calm])
        if not suspect.any() and not self.rise_ref[p].any():
            return
        rows = np.flatnonzero(suspect)
        q = rows if isinstance(p, slice) else p[rows]
        calm_ports = np.flatnonzero(~suspect) if isinstance(p, slice) else p[~suspect]
        self.rise_ref[calm_ports] = 0.0
        self.rise_s[calm_ports] = 0.0
        now = self.fast[1, q] / np.maximum(self.fast[0, q], 1.0)
        ref = self.rise_ref[q]
        moved = (ref <= 0) | (now > cfg.plateau_ratio * ref)
        self.rise_ref[q] = np.where(moved, now, ref)
        self.rise_s[q] = np.where(moved, 0.0, self.rise_s[q] + dt[rows])
        settled = q[self.rise_s[q] >= cfg.settle_s]
        if settled.size:
            level = self.fast[1, settled] / np.maximum(self.fast[0, settled], 1.0)
            for window in (self.slow, self.long):
                window[1, settled] = window[0, settled] * level
            self.rise_ref[settled] = 0.0
            self.rise_s[settled] = 0.0

    def _peer_median(
        self, p: np.ndarray | slice, pre: np.ndarray, use: np.ndarray, want: np.ndarray
    ) -> np.ndarray:
        """Per row, the median pre-FEC estimate of the poll's ports of the same role, for the
        roles of the rows in ``want`` (the ones the median can still judge; NaN elsewhere)."""
        out = np.full(pre.size, np.nan)
        if not want.any():
            return out
        role = self.role[p]
        for r in np.unique(role[want]).tolist():
            peers = use & (role == r)
            if peers.sum() >= 4:
                out[role == r] = float(np.median(pre[peers]))
        return out

    def _finding(
        self,
        ent: int,
        status: str,
        now: datetime,
        level: int,
        port: int,
        s: _BerScores | None = None,
        row: int | None = None,
    ) -> Finding:
        """A firing finding reads row ``row`` of the poll's scores ``s``; a cleared one has none."""
        f = self.fabric
        th: BerThresholds | None = None
        pre = slow_pre = sym_ber = np.nan
        if s is not None and row is not None:
            pre, slow_pre, sym_ber = s.pre[row], s.slow_pre[row], s.sym_ber[row]
            th = s.thresholds[s.combo[row]]
        place = self.links.place(ent)
        where = f.keys[port]
        evidence: dict[str, object] = {  # a cleared finding keeps its severity, its level is ok
            "level": LEVELS[level] if status == "firing" else "ok",
            "port_measured": where,
            "peer_port": place["peer_port"],
        }
        if status == "firing":
            unc = float(self.fast[2, port])
            rule = int(s.rule[row]) if s is not None and row is not None else 0
            src = int(self.src[port])
            estimated = rule == 2 or src in (1, 2)
            evidence |= {
                "rule": RULES[rule],
                "pre_fec_from": PRE_FEC_FROM[src] if src >= 0 else PRE_FEC_FROM[3],
                "counters": _counters_of(src, rule),
                "pre_fec_ber": float(pre),
                "pre_fec_ber_baseline": float(
                    s.long_pre[row] if estimated and s is not None and row is not None else slow_pre
                ),
                "symbol_ber": float(sym_ber),
                "symbol_ber_12min": float(s.pdr12[row]) if s is not None and row is not None else None,
                "symbol_ber_125min": float(s.pdr125[row]) if s is not None and row is not None else None,
                "symbol_errors_last_hour": float(self.hour[port]),
                "uncorrectable_blocks_in_window": unc,
                "window_seconds": self.cfg.fast_window_s,
            }
            if estimated and s is not None and row is not None:
                evidence["peer_median_pre_fec_ber"] = float(s.peer_med[row])
                evidence["peer_ratio"] = self.cfg.exact_peer_ratio if src == 0 else self.cfg.peer_ratio
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
            elif rule == 2:
                what = f"pre-FEC BER {pre:.1e} rising ({RULES[rule]}; {PRE_FEC_FROM[src]})"
            elif rule in (5, 6, 7, 8):
                what = f"symbol errors: {RULES[rule]} ({self.hour[port]:.0f} in the last hour)"
            elif level == 1:
                what = f"pre-FEC BER {pre:.1e} rising ({pre / max(slow_pre, 1e-18):.0f}x its 15-min baseline)"
            elif pre >= pre_lim:
                what = f"pre-FEC BER {pre:.1e} over the {LEVELS[level]} level {pre_lim:.0e}"
            else:
                what = f"symbol BER {sym_ber:.1e} over the {LEVELS[level]} level {sym_lim:.0e}"
            summary = f"{where} {what}"
        else:
            summary = f"{place['port']} BER back under its levels"
        return port_finding(
            self,
            Kind.BER_DEGRADATION,
            place,
            status,  # type: ignore[arg-type]
            now,
            SEVERITY.get(level, Severity.INFO),
            summary,
            float(pre) if np.isfinite(pre) else 0.0,
            evidence,
        )


def _counters_of(src: int, rule: int) -> list[str]:
    """The counters a finding's rule read."""
    if rule in (4, 5, 6, 7, 8):
        return ["symbol_errors", "phy_received_bits" if src == 0 else "speed_bps"]
    if rule == 9:
        return ["fec_uncorrectable_blocks"]
    pre = ("fec_corrected_bits", "fec_corrected_symbols", "fec_corrected_blocks")
    return [pre[src], "phy_received_bits" if src == 0 else "speed_bps"] if 0 <= src < 3 else []


def vars_of(levels: object) -> dict[str, float]:
    return {k: getattr(levels, k) for k in ("error", "warning", "normal")}
