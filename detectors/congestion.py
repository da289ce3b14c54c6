"""Congestion: PFC pause storms, ECN hotspots and xmit_wait (credit starvation) hotspots.

A PFC storm is a port that keeps its peer paused nearly all the time (a NIC that cannot drain
its receive queue pauses its whole rail): the share of wall time it asked for pauses, from
``pfcN_tx_pause_seconds``, is at or above ``storm_share`` for ``open_after`` polls in a row.
Checkpoint bursts and per-step pulses pause for milliseconds a second, never ~all of it.

An ECN hotspot is a host whose received packets are marked far more often than its peers'
(same role, same poll): robust z of log marking fraction against the peer median and MAD,
plus a minimum ratio to the median. Marking that rises everywhere (a global burst) moves the
median with it and blames no one; bounded marking alone never alarms; a fabric that marks
nothing has no baseline and no findings.

An xmit_wait hotspot is a port that spends far more time than its peers with data to send and
no credit to send it (InfiniBand ``PortXmitWait``): the receiver behind it is not returning
credits. Same peer statistics as ECN, on log ticks per second, plus an absolute floor. A port
whose waiting is explained by PFC pauses (it, or its peer, reports a high pause share) is the
PFC storm detector's business and is never reported twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PFC_PRIORITIES
from graywire.detectors.base import (
    PORT_RATES,
    Hysteresis,
    HysteresisConfig,
    LinkEntities,
    PortIndexer,
    Scores,
    column,
    open_ports,
    port_finding,
    port_place,
    resume_open,
)
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.detectors.robust import MAD_TO_SIGMA, median_through


@dataclass(frozen=True, slots=True)
class PfcStormConfig:
    storm_share: float = 0.95  # of wall time spent asking the peer to pause
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=2, close_after=2)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _StormScores(Scores):
    share: np.ndarray  # the worst priority's share of the poll spent pausing the peer
    rows: np.ndarray  # the batch row of each judged port


class PfcStormDetector:
    name = "pfc_storm"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.PFC_STORM,)

    def __init__(self, fabric: Fabric, cfg: PfcStormConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or PfcStormConfig()
        self.port_index = PortIndexer(fabric)
        self.hyst = Hysteresis(self.cfg.hysteresis, fabric.n_ports)

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
            self._finding(p, status, now, s.share[j], self._worst_priority(batch, int(s.rows[j]), s.share[j]))
            for status, p, j in decision.changes()
        ]

    def _score(self, batch: pa.RecordBatch) -> _StormScores | None:
        """Bad: the worst priority's pause share at ``storm_share`` or more; ports without any
        pause reading are not judged."""
        if batch.num_rows == 0:
            return None
        idx = self.port_index(batch.column("port"))
        # One pass per priority: the worst share so far (fmax passes over nulls, as NaN).
        n = batch.num_rows
        share = np.full(n, -1.0)
        read = np.zeros(n, dtype=bool)
        for p in PFC_PRIORITIES:
            v = column(batch, f"pfc{p}_tx_pause_seconds_per_second")
            read |= np.isfinite(v)
            np.fmax(share, v, out=share)
        judged = (idx >= 0) & read
        if not judged.any():
            return None
        rows = np.flatnonzero(judged)
        if rows.size < n:
            share = share[rows]
        return _StormScores(ids=idx[rows], bad=share >= self.cfg.storm_share, share=share, rows=rows)

    @staticmethod
    def _worst_priority(batch: pa.RecordBatch, row: int, share: float) -> int:
        """The first priority pausing ``share`` of the time on ``row`` (for a finding only)."""
        for p in PFC_PRIORITIES:
            v = column(batch.slice(row, 1), f"pfc{p}_tx_pause_seconds_per_second")[0]
            if v == share:
                return p
        return 0

    def _finding(self, port: int, status: str, now: datetime, share: float, prio: int) -> Finding:
        f = self.fabric
        key = f.keys[port]
        peer = int(f.peer[port])
        if status == "firing":
            summary = (
                f"{key} holds {f.keys[peer] if peer >= 0 else 'its peer'} paused {share:.0%} of the time "
                f"on priority {prio} (PFC storm)"
            )
        else:
            summary = f"{key} PFC pauses back to normal"
        return port_finding(
            self,
            Kind.PFC_STORM,
            port_place(f, port),
            status,  # type: ignore[arg-type]
            now,
            Severity.CRITICAL,
            summary,
            float(share),
            {
                "tx_pause_share": float(share),
                "priority": prio,
                "threshold": self.cfg.storm_share,
                "paused_peer": f.keys[peer] if peer >= 0 else None,
                "polls_required": self.cfg.hysteresis.open_after,
            },
        )


@dataclass(frozen=True, slots=True)
class EcnHotspotConfig:
    open_z: float = 4.0
    min_ratio: float = 20.0  # marking fraction at least this many times the peer median
    min_marks_per_second: float = 10.0  # a handful of marks is never a hotspot
    min_peers: int = 8
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=3, close_after=3)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _HotspotScores(Scores):
    frac: np.ndarray  # marked share of received packets
    med: np.ndarray  # the role's median share
    z: np.ndarray  # robust z of the log share
    ratio: np.ndarray  # share over the median
    marks: np.ndarray  # marked packets per second


def _log_fraction(frac: np.ndarray) -> np.ndarray:
    return np.log10(frac + 1e-12)


def _log_wait(rate: np.ndarray) -> np.ndarray:
    return np.log10(rate + 1.0)


class EcnHotspotDetector:
    name = "ecn_hotspot"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.ECN_HOTSPOT,)

    def __init__(self, fabric: Fabric, cfg: EcnHotspotConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or EcnHotspotConfig()
        self.port_index = PortIndexer(fabric)
        self.hyst = Hysteresis(self.cfg.hysteresis, fabric.n_ports)
        self.role_of_port = fabric.port_role_code
        self.roles = np.unique(self.role_of_port).tolist()

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
            self._finding(p, status, now, s.frac[j], s.med[j], s.z[j], s.ratio[j], s.marks[j])
            for status, p, j in decision.changes()
        ]

    def _score(self, batch: pa.RecordBatch) -> _HotspotScores | None:
        """Robust z of each port's log marking fraction against its role's peers."""
        cfg = self.cfg
        if batch.num_rows == 0:
            return None
        idx = self.port_index(batch.column("port"))
        marks = column(batch, "ecn_marked_packets_per_second")
        pkts = column(batch, "rx_packets_per_second")
        ok = (idx >= 0) & np.isfinite(marks) & np.isfinite(pkts) & (pkts > 0)
        if ok.sum() < cfg.min_peers:
            return None
        ports, m = idx[ok], marks[ok]
        frac = m / pkts[ok]
        # Peers: same role. A fabric that marks nothing has a zero median: no baseline, no verdict.
        x = _log_fraction(frac)
        role = self.role_of_port[ports]
        bad = np.zeros(ports.size, dtype=bool)
        judged = np.zeros(ports.size, dtype=bool)  # roles with a baseline; others say nothing
        z = np.zeros(ports.size)
        ratio = np.zeros(ports.size)
        med_of = np.zeros(ports.size)
        for r in self.roles:
            sel = role == r
            if sel.sum() < cfg.min_peers:
                continue
            med_frac, med = median_through(frac[sel], _log_fraction)
            if med_frac <= 0:
                continue
            mad = np.median(np.abs(x[sel] - med))
            scale = max(MAD_TO_SIGMA * mad, 0.05)
            z[sel] = (x[sel] - med) / scale
            ratio[sel] = frac[sel] / med_frac
            med_of[sel] = med_frac
            judged[sel] = True
            bad[sel] = (
                (z[sel] >= cfg.open_z) & (ratio[sel] >= cfg.min_ratio) & (m[sel] >= cfg.min_marks_per_second)
            )
        return _HotspotScores(ids=ports[judged], bad=bad[judged], frac=frac[judged], med=med_of[judged],
                              z=z[judged], ratio=ratio[judged], marks=m[judged])  # fmt: skip

    def _finding(
        self,
        port: int,
        status: str,
        now: datetime,
        frac: float,
        med: float,
        z: float,
        ratio: float,
        marks: float,
    ) -> Finding:
        f = self.fabric
        key = f.keys[port]
        summary = (
            f"{key} receives ECN-marked packets at {frac:.1e} of its traffic, {ratio:.0f}x its peers' median"
            if status == "firing"
            else f"{key} ECN marking back in line with its peers"
        )
        return port_finding(
            self,
            Kind.ECN_HOTSPOT,
            port_place(f, port),
            status,  # type: ignore[arg-type]
            now,
            Severity.WARNING,
            summary,
            float(z),
            {
                "marked_fraction": float(frac),
                "marks_per_second": float(marks),
                "peer_median_fraction": float(med),
                "robust_z": float(z),
                "ratio_to_peers": float(ratio),
            },
        )


@dataclass(frozen=True, slots=True)
class XmitWaitConfig:
    open_z: float = 4.0
    min_ratio: float = 50.0  # wait rate at least this many times the peers' median
    min_ticks_per_second: float = 1e4  # a few ticks is never a hotspot (device ticks: tune per model)
    min_peers: int = 8
    #: A port that received pauses (or whose peer sent them) this share of the poll waits because
    #: it was told to: the PFC storm detector owns that, this one stays silent.
    pause_explains_share: float = 0.01
    pause_explains_frames_per_second: float = 1000.0  # the same, for ports that count frames only
    #: Device ticks per second, when known (e.g. from the switch model): adds the share of the
    #: poll spent waiting to the evidence. ``None``: ticks are reported as they are.
    ticks_per_second: float | None = None
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=3, close_after=3)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _WaitScores(Scores):
    """Per link entity the verdict; the evidence is per judged port (row ``rows`` of the batch)."""

    rows: np.ndarray
    ent: np.ndarray  # the port's link entity
    port: np.ndarray
    wait: np.ndarray  # xmit wait ticks per second
    med: np.ndarray  # the role's median
    z: np.ndarray
    ratio: np.ndarray  # (wait + 1) over (median + 1)


class XmitWaitDetector:
    name = "xmit_wait_hotspot"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.XMIT_WAIT_HOTSPOT,)

    def __init__(self, fabric: Fabric, cfg: XmitWaitConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or XmitWaitConfig()
        self.port_index = PortIndexer(fabric)
        self.links = LinkEntities(fabric)
        self.hyst = Hysteresis(self.cfg.hysteresis, fabric.n_ports)
        self.role_of_port = fabric.port_role_code
        self.roles = np.unique(self.role_of_port).tolist()

    def _pause(self, batch: pa.RecordBatch, idx: np.ndarray) -> np.ndarray:
        """Per fabric port, whether PFC pauses explain its waiting this poll."""
        cfg, f = self.cfg, self.fabric

        def worst(kind: str) -> np.ndarray:
            cols = [
                np.nan_to_num(column(batch, f"pfc{p}_{kind}_per_second"), nan=0.0) for p in PFC_PRIORITIES
            ]
            return np.max(np.vstack(cols), axis=0)

        n = f.n_ports
        rx_share, tx_share = np.zeros(n), np.zeros(n)
        rx_frames, tx_frames = np.zeros(n), np.zeros(n)
        ok = idx >= 0
        rx_share[idx[ok]] = worst("rx_pause_seconds")[ok]
        tx_share[idx[ok]] = worst("tx_pause_seconds")[ok]
        rx_frames[idx[ok]] = worst("rx_pause_frames")[ok]
        tx_frames[idx[ok]] = worst("tx_pause_frames")[ok]
        peer = f.peer
        has_peer = peer >= 0
        peer_tx_share = np.where(has_peer, tx_share[np.maximum(peer, 0)], 0.0)
        peer_tx_frames = np.where(has_peer, tx_frames[np.maximum(peer, 0)], 0.0)
        return (np.maximum(rx_share, peer_tx_share) >= cfg.pause_explains_share) | (
            np.maximum(rx_frames, peer_tx_frames) >= cfg.pause_explains_frames_per_second
        )

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Open incidents of its kinds, back after a restart (:class:`Resumable`)."""
        ports, taken = open_ports(self.fabric, incidents, self.kinds)
        resume_open(self.hyst, self.links.of_port[ports])
        return taken

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        scores = self._score(batch)
        if scores is None:
            return []
        decision = self.hyst.decide(scores)
        if not decision:
            return []
        now = batch.column("time")[0].as_py()
        # The worst judged end of each entity carries the evidence.
        s = scores
        dt = column(batch, "interval_seconds")[s.rows]
        out = []
        for status, e, _ in decision.changes():
            ends = np.flatnonzero(s.ent == e)
            j = int(ends[np.argmax(s.wait[ends])])
            out.append(
                self._finding(e, int(s.port[j]), status, now, s.wait[j], s.med[j], s.z[j], s.ratio[j], dt[j])
            )
        return out

    def _score(self, batch: pa.RecordBatch) -> _WaitScores | None:
        """Robust z of each port's log wait rate against its role's peers; a link is bad when
        either end is and pauses do not explain it."""
        cfg = self.cfg
        if batch.num_rows == 0:
            return None
        idx = self.port_index(batch.column("port"))
        wait = column(batch, "xmit_wait_ticks_per_second")
        ok = (idx >= 0) & np.isfinite(wait) & (wait >= 0)
        if ok.sum() < cfg.min_peers:
            return None
        ports, w = idx[ok], wait[ok]
        x = _log_wait(w)
        role = self.role_of_port[ports]
        bad = np.zeros(ports.size, dtype=bool)
        judged = np.zeros(ports.size, dtype=bool)
        z = np.zeros(ports.size)
        ratio = np.zeros(ports.size)
        med_of = np.zeros(ports.size)
        for r in self.roles:
            sel = role == r
            if sel.sum() < cfg.min_peers:
                continue
            med_rate, med = median_through(w[sel], _log_wait)
            scale = max(MAD_TO_SIGMA * float(np.median(np.abs(x[sel] - med))), 0.1)
            z[sel] = (x[sel] - med) / scale
            ratio[sel] = (w[sel] + 1.0) / (med_rate + 1.0)
            med_of[sel] = med_rate
            judged[sel] = True
            bad[sel] = (
                (z[sel] >= cfg.open_z) & (ratio[sel] >= cfg.min_ratio) & (w[sel] >= cfg.min_ticks_per_second)
            )
        if bad.any():  # pauses are looked up only for ports that would otherwise be bad
            bad &= ~self._pause(batch, idx)[ports]
        if not judged.any():
            return None
        # One entity per link: either end waiting is one finding about that cable and its ends.
        ent = self.links.of_port[ports[judged]]
        ent_bad = np.zeros(self.fabric.n_ports, dtype=bool)
        ent_bad[ent[bad[judged]]] = True
        seen = np.zeros(self.fabric.n_ports, dtype=bool)
        seen[ent] = True
        ids = np.flatnonzero(seen)  # np.unique without the sort
        return _WaitScores(ids=ids, bad=ent_bad[ids], rows=np.flatnonzero(ok)[judged], ent=ent,
                           port=ports[judged], wait=w[judged], med=med_of[judged], z=z[judged],
                           ratio=ratio[judged])  # fmt: skip

    def _finding(
        self,
        entity: int,
        port: int,
        status: str,
        now: datetime,
        rate: float,
        med: float,
        z: float,
        ratio: float,
        interval: float,
    ) -> Finding:
        f, cfg = self.fabric, self.cfg
        place = self.links.place(entity)
        waiting = f.keys[port]
        share = rate / cfg.ticks_per_second if cfg.ticks_per_second else None
        if status == "firing":
            spent = f" ({share:.1%} of the time)" if share is not None else ""
            summary = (
                f"{waiting} waits for credits at {rate:.3g} ticks/s{spent}, {ratio:.0f}x its peers' median: "
                f"the receiver on {place['entity']} is not returning credits"
            )
        else:
            summary = f"{waiting} xmit_wait back in line with its peers"
        return port_finding(
            self,
            Kind.XMIT_WAIT_HOTSPOT,
            place,
            status,  # type: ignore[arg-type]
            now,
            Severity.WARNING,
            summary,
            float(z),
            {
                "waiting_port": waiting,
                "xmit_wait_ticks_per_second": float(rate),
                "peer_median_ticks_per_second": float(med),
                "ratio_to_peers": float(ratio),
                "robust_z": float(z),
                "wait_share": float(share) if share is not None else None,
                "interval_seconds": float(interval) if np.isfinite(interval) else None,
                "polls_required": cfg.hysteresis.open_after,
            },
        )
