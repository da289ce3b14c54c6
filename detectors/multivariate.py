"""Multivariate port outliers: an IsolationForest over host NICs' rate vectors, against peers.

Each poll, every host NIC becomes a vector of log rates (traffic, ECN marks, CNPs, PFC pause
share, xmit wait, pre-FEC BER, symbol and receive errors, link downs), each minus the median
of all host NICs in that poll and minus the port's own usual offset from that median (a busier
link always marks more ECN). The forest is fitted on those residuals over a healthy window and
refitted now and then from a reservoir of rows it did not flag, never from the points it
flagged. A poll whose peer medians moved far from the healthy window's (a checkpoint burst, a
job starting) gives no verdict: everyone moved, no one is to blame. A port opens after
``open_after`` consecutive polls below the score threshold (set from the training scores) and
is reported with the features that stand out most against its peers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from graywire.collectors.extras import require
from graywire.collectors.model import Fabric
from graywire.detectors.base import (
    PORT_RATES,
    Hysteresis,
    HysteresisConfig,
    PortIndexer,
    Scores,
    column,
    open_ports,
    port_finding,
    port_place,
    resume_open,
)
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.detectors.robust import MAD_TO_SIGMA

if TYPE_CHECKING:  # scikit-learn is the optional extra graywire[ml]: loaded when the detector is built
    from sklearn.ensemble import IsolationForest

#: What a missing scikit-learn is reported as.
FEATURE = "the multivariate detector (multivariate_outliers: true)"

PAUSE_COLUMNS = tuple(f"pfc{p}_{d}_pause_seconds_per_second" for p in range(8) for d in ("rx", "tx"))
#: (feature name, rate columns summed, divided by the received bits rate: a ratio, not a rate)
FEATURES: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("rx_bytes", ("rx_bytes_per_second",), False),
    ("tx_bytes", ("tx_bytes_per_second",), False),
    ("ecn_marked", ("ecn_marked_packets_per_second",), False),
    ("cnp_sent", ("cnp_sent_per_second",), False),
    ("cnp_handled", ("cnp_handled_per_second",), False),
    ("pause_share", PAUSE_COLUMNS, False),
    ("xmit_wait", ("xmit_wait_ticks_per_second",), False),
    ("pre_fec_ber", ("fec_corrected_bits_per_second",), True),
    ("symbol_errors", ("symbol_errors_per_second",), False),
    ("rcv_errors", ("rcv_errors_per_second",), False),
    ("link_downed", ("link_downed_per_second",), False),
)
FEATURE_NAMES = tuple(f[0] for f in FEATURES)


@dataclass(frozen=True, slots=True)
class MultivariateConfig:
    train_polls: int = 30  # healthy polls collected before the first fit
    refit_polls: int = 360  # refit from the reservoir of unflagged rows this often
    reservoir: int = 50_000  # rows kept for (re)fitting
    n_estimators: int = 32
    threshold_quantile: float = 0.01  # of training scores: the forest's outer region
    # An IsolationForest cannot tell "far beyond the training range" from "at its edge" (both
    # follow the same branches), so its score confirms and the peer distance decides how far.
    min_peer_z: float = 8.0
    min_ports: int = 16
    base_alpha: float = 0.002  # how fast a port's own normal follows it (unflagged polls only)
    global_shift: float = 0.5  # a peer median this far (log units) from training: no verdict
    seed: int = 0
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=3, close_after=3)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _OutlierScores(Scores):
    isolation: np.ndarray  # the forest's score (lower: more isolated)
    resid: np.ndarray  # residual vectors against peers and the port's own normal
    x: np.ndarray  # the feature vectors (log rates)


class MultivariateOutlier:
    name = "multivariate_outlier"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.PORT_ANOMALY,)

    def __init__(self, fabric: Fabric, cfg: MultivariateConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or MultivariateConfig()
        # Here, not at the first fit: a missing extra fails when the pipeline is built.
        self._forest: type[IsolationForest] = require("sklearn.ensemble", FEATURE).IsolationForest
        self.port_index = PortIndexer(fabric)
        self.hyst = Hysteresis(self.cfg.hysteresis, fabric.n_ports)
        self.rng = np.random.default_rng(self.cfg.seed)
        self.pool = np.zeros((0, len(FEATURES)))
        self.seen_rows = 0
        self.polls = 0
        self.model: IsolationForest | None = None
        self.threshold = -np.inf
        self.scale = np.ones(len(FEATURES))
        n, k = fabric.n_ports, len(FEATURES)
        # Each port's own normal offset from its peers (a busier link marks more ECN, always).
        self.base_sum = np.zeros((n, k))
        self.base_n = np.zeros(n)
        self.base = np.full((n, k), np.nan)
        self.med_sum = np.zeros(k)
        self.train_med = np.zeros(k)
        self.skipped_polls = 0

    def _features(self, batch: pa.RecordBatch, rows: np.ndarray) -> np.ndarray:
        bits = column(batch, "phy_received_bits_per_second")[rows]
        x = np.empty((rows.size, len(FEATURES)))
        for j, (_, cols, per_bit) in enumerate(FEATURES):
            vals = np.zeros(rows.size)
            present = np.zeros(rows.size, dtype=bool)
            for c in cols:
                v = column(batch, c)[rows]
                ok = np.isfinite(v)
                vals[ok] += v[ok]
                present |= ok
            if per_bit:
                vals = np.where(bits > 0, vals / np.maximum(bits, 1.0), 0.0)
                x[:, j] = np.log10(vals + 1e-12)
            else:
                x[:, j] = np.log1p(np.maximum(vals, 0.0))
            x[~present, j] = np.nan
        return x

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Open incidents of its kinds, back after a restart (:class:`Resumable`)."""
        ports, taken = open_ports(self.fabric, incidents, self.kinds)
        resume_open(self.hyst, ports)
        return taken

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        scores = self._score(batch)
        if scores is None:
            return []
        decision = self.hyst.decide(scores)
        if not decision:
            return []
        now = batch.column("time")[0].as_py()
        s = scores
        return [
            self._finding(p, status, now, float(s.isolation[j]), s.resid[j], s.x[j])
            for status, p, j in decision.changes()
        ]

    def _score(self, batch: pa.RecordBatch) -> _OutlierScores | None:
        """Isolation score and peer distance of each host NIC's residual vector; also trains and
        refits the forest (never on flagged rows). None while training and on whole-fabric moves."""
        cfg = self.cfg
        if batch.num_rows == 0:
            return None
        idx = self.port_index(batch.column("port"))
        dt = column(batch, "interval_seconds")
        rows = np.flatnonzero((idx >= 0) & np.isfinite(dt))
        rows = rows[self.fabric.host_port[idx[rows]]]
        if rows.size < cfg.min_ports:
            return None
        x = self._features(batch, rows)
        # Residuals from this poll's peer median: whatever moves every port is not an outlier.
        med = np.nanmedian(np.where(np.isfinite(x), x, np.nan), axis=0)
        med = np.nan_to_num(med, nan=0.0)
        peer = np.where(np.isfinite(x), x - med, 0.0)
        self.polls += 1
        ports = idx[rows]
        if self.model is None:
            self.base_sum[ports] += peer
            self.base_n[ports] += 1
            self.med_sum += med
            if self.polls >= cfg.train_polls:
                seen = self.base_n > 0
                self.base[seen] = self.base_sum[seen] / self.base_n[seen, None]
                self._remember(peer - self.base[ports])
                self.train_med = self.med_sum / self.polls
                self._fit()
            return None
        # A whole-fabric event (checkpoint burst, job start) moves every port and changes how
        # they differ from each other: no port is to blame, so the poll gives no verdict.
        shift = float(np.max(np.abs(med - self.train_med)))
        if shift > cfg.global_shift:
            self.skipped_polls += 1
            return None
        new = np.isnan(self.base[ports, 0])
        self.base[ports[new]] = peer[new]  # a port first seen now: its own start is its normal
        resid = peer - self.base[ports]
        scores = self.model.score_samples(resid)
        peer_z = np.max(np.abs(resid) / self.scale, axis=1)
        bad = (scores < self.threshold) & (peer_z >= cfg.min_peer_z)
        ok = ports[~bad]
        self.base[ok] += cfg.base_alpha * (peer[~bad] - self.base[ok])  # never learn from flagged points
        self._remember(resid[~bad])
        if self.polls % cfg.refit_polls == 0:
            self._fit()
        return _OutlierScores(ids=ports, bad=bad, isolation=scores, resid=resid, x=x)

    def _remember(self, rows: np.ndarray) -> None:
        """Reservoir sample of unflagged residual vectors (uniform over everything seen)."""
        cap = self.cfg.reservoir
        for r in np.array_split(rows, max(1, rows.shape[0] // 4096)):
            if self.pool.shape[0] + r.shape[0] <= cap:
                self.pool = np.vstack([self.pool, r])
            else:
                keep = self.rng.random(r.shape[0]) < cap / max(self.seen_rows + r.shape[0], 1)
                take = r[keep]
                if take.shape[0]:
                    slots = self.rng.integers(0, self.pool.shape[0], take.shape[0])
                    self.pool[slots] = take
            self.seen_rows += r.shape[0]

    def _fit(self) -> None:
        cfg = self.cfg
        if self.pool.shape[0] < cfg.min_ports:
            return
        model = self._forest(n_estimators=cfg.n_estimators, max_samples=256, random_state=cfg.seed)
        model.fit(self.pool)
        train = model.score_samples(self.pool)
        self.threshold = float(np.quantile(train, cfg.threshold_quantile))
        spread = np.median(np.abs(self.pool), axis=0) * MAD_TO_SIGMA
        self.scale = np.maximum(spread, 0.05)
        self.model = model

    def _finding(
        self, port: int, status: str, now: datetime, score: float, resid: np.ndarray, raw: np.ndarray
    ) -> Finding:
        f = self.fabric
        key = f.keys[port]
        z = resid / self.scale
        top = np.argsort(-np.abs(z))[:3]
        drivers = [
            {"feature": FEATURE_NAMES[i], "peer_z": float(z[i]), "value_log": float(raw[i])}
            for i in top.tolist()
            if np.isfinite(raw[i])
        ]
        names = ", ".join(f"{d['feature']} {d['peer_z']:+.0f}σ" for d in drivers)
        summary = (
            f"{key} looks unlike its peers (isolation score {score:.2f}); driven by {names}"
            if status == "firing"
            else f"{key} back among its peers"
        )
        return port_finding(
            self,
            Kind.PORT_ANOMALY,
            port_place(f, port),
            status,  # type: ignore[arg-type]
            now,
            Severity.WARNING,
            summary,
            float(-score),
            {
                "isolation_score": score,
                "threshold": self.threshold,
                "drivers": drivers,
                "peer_distance": float(np.max(np.abs(z))),
                "features": dict(zip(FEATURE_NAMES, (float(v) for v in raw), strict=True)),
            },
        )
