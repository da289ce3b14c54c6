"""Congestion: PFC pause storms and ECN hotspots.

A PFC storm is a port that keeps its peer paused nearly all the time (a NIC that cannot drain
its receive queue pauses its whole rail): the share of wall time it asked for pauses, from
``pfcN_tx_pause_seconds``, is at or above ``storm_share`` for ``open_after`` polls in a row.
Checkpoint bursts and per-step pulses pause for milliseconds a second, never ~all of it.

An ECN hotspot is a host whose received packets are marked far more often than its peers'
(same role, same poll): robust z of log marking fraction against the peer median and MAD,
plus a minimum ratio to the median. Marking that rises everywhere (a global burst) moves the
median with it and blames no one; bounded marking alone never alarms; a fabric that marks
nothing has no baseline and no findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa

from collectors.model import Fabric
from collectors.schemas import PFC_PRIORITIES
from detectors.base import Hysteresis, HysteresisConfig, PortIndexer, column
from detectors.findings import Finding
from detectors.robust import MAD_TO_SIGMA


@dataclass(frozen=True, slots=True)
class PfcStormConfig:
    storm_share: float = 0.95  # of wall time spent asking the peer to pause
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=2, close_after=2)
    )


class PfcStormDetector:
    name = "pfc_storm"
    version = "1"
    consumes = "port_rates"
    kinds = ("pfc_storm",)

    def __init__(self, fabric: Fabric, cfg: PfcStormConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or PfcStormConfig()
        self.port_index = PortIndexer(fabric)
        self.hyst = Hysteresis(self.cfg.hysteresis, fabric.n_ports)

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        idx = self.port_index(batch.column("port"))
        shares = np.vstack([column(batch, f"pfc{p}_tx_pause_seconds_per_second") for p in PFC_PRIORITIES])
        judged = (idx >= 0) & np.isfinite(shares).any(axis=0)
        if not judged.any():
            return []
        share = np.nanmax(np.where(np.isfinite(shares[:, judged]), shares[:, judged], -1.0), axis=0)
        prio = np.nanargmax(np.where(np.isfinite(shares[:, judged]), shares[:, judged], -1.0), axis=0)
        ports = idx[judged]
        opened, closed = self.hyst.update(ports, share >= self.cfg.storm_share)
        if not opened.size and not closed.size:
            return []
        now = batch.column("time")[0].as_py()
        pos = {int(p): j for j, p in enumerate(ports.tolist())}
        return [
            self._finding(int(p), status, now, share[pos[int(p)]], int(prio[pos[int(p)]]))
            for status, group in (("firing", opened), ("cleared", closed))
            for p in group.tolist()
        ]

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
        return Finding(
            kind="pfc_storm",
            entity=key,
            status=status,  # type: ignore[arg-type]
            time=now,
            severity="critical",
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=f.node_of(port),
            port=key,
            link=f.link_label(port),
            score=float(share),
            evidence={
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


class EcnHotspotDetector:
    name = "ecn_hotspot"
    version = "1"
    consumes = "port_rates"
    kinds = ("ecn_hotspot",)

    def __init__(self, fabric: Fabric, cfg: EcnHotspotConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or EcnHotspotConfig()
        self.port_index = PortIndexer(fabric)
        self.hyst = Hysteresis(self.cfg.hysteresis, fabric.n_ports)
        roles = np.array(fabric.node_roles)
        role_code = {r: i for i, r in enumerate(sorted(set(fabric.node_roles)))}
        self.role_of_port = np.array([role_code[r] for r in roles[fabric.node_of_port]], dtype=np.int64)

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        cfg = self.cfg
        if batch.num_rows == 0:
            return []
        idx = self.port_index(batch.column("port"))
        marks = column(batch, "ecn_marked_packets_per_second")
        pkts = column(batch, "rx_packets_per_second")
        ok = (idx >= 0) & np.isfinite(marks) & np.isfinite(pkts) & (pkts > 0)
        if ok.sum() < cfg.min_peers:
            return []
        ports, m = idx[ok], marks[ok]
        frac = m / pkts[ok]
        # Peers: same role. A fabric that marks nothing has a zero median: no baseline, no verdict.
        x = np.log10(frac + 1e-12)
        role = self.role_of_port[ports]
        bad = np.zeros(ports.size, dtype=bool)
        judged = np.zeros(ports.size, dtype=bool)  # roles with a baseline; others say nothing
        z = np.zeros(ports.size)
        ratio = np.zeros(ports.size)
        med_of = np.zeros(ports.size)
        for r in np.unique(role):
            sel = role == r
            if sel.sum() < cfg.min_peers:
                continue
            med_frac = float(np.median(frac[sel]))
            if med_frac <= 0:
                continue
            med = np.median(x[sel])
            mad = np.median(np.abs(x[sel] - med))
            scale = max(MAD_TO_SIGMA * mad, 0.05)
            z[sel] = (x[sel] - med) / scale
            ratio[sel] = frac[sel] / med_frac
            med_of[sel] = med_frac
            judged[sel] = True
            bad[sel] = (
                (z[sel] >= cfg.open_z) & (ratio[sel] >= cfg.min_ratio) & (m[sel] >= cfg.min_marks_per_second)
            )
        opened, closed = self.hyst.update(ports[judged], bad[judged])
        if not opened.size and not closed.size:
            return []
        now = batch.column("time")[0].as_py()
        pos = {int(p): j for j, p in enumerate(ports.tolist())}
        out = []
        for status, group in (("firing", opened), ("cleared", closed)):
            for p in group.tolist():
                j = pos[int(p)]
                out.append(self._finding(int(p), status, now, frac[j], med_of[j], z[j], ratio[j], m[j]))
        return out

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
        return Finding(
            kind="ecn_hotspot",
            entity=key,
            status=status,  # type: ignore[arg-type]
            time=now,
            severity="warning",
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=f.node_of(port),
            port=key,
            link=f.link_label(port),
            score=float(z),
            evidence={
                "marked_fraction": float(frac),
                "marks_per_second": float(marks),
                "peer_median_fraction": float(med),
                "robust_z": float(z),
                "ratio_to_peers": float(ratio),
            },
        )
