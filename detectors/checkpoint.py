"""Checkpoint traffic on the training fabric: periodic, synchronised write bursts on compute NICs.

Every N steps a job writes its checkpoint from all its ranks at once. Where hosts have storage
NICs (inventory ``purpose: storage``) that burst belongs on them; carried by the compute NICs
it shares the rails with the collectives, fills the switch buffers and raises PFC and ECN
everywhere. The inventory's NIC purpose tells the two networks apart; without storage NICs
there is nothing to tell apart and the detector says nothing (one fabric for everything is a
design, not a fault).

Rules, per poll, on each host's mean transmit utilisation (tx bytes over line rate) of its
compute NICs and of its storage NICs:

- a host *bursts* on a network when its utilisation there is ``rise`` (of line rate) or more
  over its own baseline; a host's baselines are learned only from polls where it bursts on
  neither (never from the points being judged), after ``warmup`` polls;
- a poll is a *compute checkpoint* when at least ``min_hosts`` hosts, and ``min_share`` of the
  hosts judged, burst on their compute NICs in it while their storage NICs stay at baseline
  (synchronised: the same poll); a *storage checkpoint* when as many burst on storage NICs;
- a finding opens on the ``min_bursts``-th compute checkpoint episode (consecutive compute
  checkpoint polls) within ``max_period_s``: a checkpoint is a schedule, and one synchronised
  burst alone (a dataset staged once) is not one. It carries the period seen, the hosts, and
  the PFC pause share and ECN mark rate of the compute NICs during the bursts against their
  baseline (the rise the burst caused on the training fabric);
- it closes when a checkpoint goes over the storage network, or no compute checkpoint has come
  for ``quiet_periods`` times the period seen.

A host without a rate on either network this poll is not judged; a poll with fewer than
``min_hosts`` judged hosts changes nothing. A storage checkpoint is normal and pages nobody.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PFC_PRIORITIES
from graywire.detectors.base import PORT_RATES, PortIndexer, column
from graywire.detectors.findings import Finding, Kind, Severity

ENTITY = "compute-network"


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    rise: float = 0.2  # of line rate over the host's own baseline
    min_hosts: int = 4  # never judged from fewer hosts
    min_share: float = 0.1  # of the judged hosts, in the same poll
    warmup: int = 3  # baseline polls before a host is judged
    alpha: float = 0.2  # baseline EWMA weight
    min_bursts: int = 2
    max_period_s: float = 6 * 3600.0
    quiet_periods: float = 3.0


@dataclass(slots=True)
class _Episode:
    start: datetime
    end: datetime
    hosts: int
    judged: int
    compute_util: float
    pause_share: float
    ecn_per_second: float


class CheckpointTrafficDetector:
    name = "checkpoint"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.CHECKPOINT_ON_COMPUTE,)

    def __init__(self, fabric: Fabric, cfg: CheckpointConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or CheckpointConfig()
        self.port_index = PortIndexer(fabric)
        purpose = np.asarray(fabric.purpose if fabric.purpose else [None] * fabric.n_ports, dtype=object)
        self.compute = fabric.host_port & (purpose == "compute")
        self.storage = fabric.host_port & (purpose == "storage")
        n_nodes = len(fabric.node_names)
        has = np.zeros((2, n_nodes), dtype=bool)
        has[0, fabric.node_of_port[self.compute]] = True
        has[1, fabric.node_of_port[self.storage]] = True
        #: Hosts with NICs on both networks: the only ones whose checkpoint can be on the wrong one.
        self.eligible = has.all(axis=0)
        self.base = np.full((2, n_nodes), np.nan)
        self.seen = np.zeros(n_nodes, dtype=np.int64)
        self.cong_base = np.full(2, np.nan)  # compute NICs' pause share, ECN marks/s
        self.episodes: deque[_Episode] = deque(maxlen=16)
        self._current: _Episode | None = None
        self.is_open = False
        self.last_storage: datetime | None = None

    @property
    def active(self) -> bool:
        """Whether this fabric's inventory tells compute NICs from storage NICs at all."""
        return bool(self.eligible.any())

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if not self.active or batch.num_rows == 0:
            return []
        cfg = self.cfg
        now = batch.column("time")[0].as_py()
        idx = self.port_index(batch.column("port"))
        ok = idx >= 0
        p = np.where(ok, idx, 0)
        speed = column(batch, "speed_bps")
        speed = np.where(np.isfinite(speed) & (speed > 0), speed, self.fabric.expected_speed_bps[p])
        util = column(batch, "tx_bytes_per_second") * 8 / np.where(speed > 0, speed, np.nan)
        node = self.fabric.node_of_port[p]
        n_nodes = self.eligible.size
        mean = np.full((2, n_nodes), np.nan)
        for net, mask in enumerate((self.compute, self.storage)):
            sel = ok & mask[p] & np.isfinite(util)
            cnt = np.bincount(node[sel], minlength=n_nodes)
            tot = np.bincount(node[sel], weights=util[sel], minlength=n_nodes)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean[net] = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
        known = self.eligible & np.isfinite(mean).all(axis=0)
        warm = known & (self.seen >= cfg.warmup)
        burst = warm & (mean >= self.base + cfg.rise)  # (2, nodes): compute, storage
        quiet = known & ~burst.any(axis=0)
        # Baselines from the polls where the host bursts on neither network.
        fresh = quiet & (self.seen == 0)
        self.base[:, fresh] = mean[:, fresh]
        upd = quiet & ~fresh
        self.base[:, upd] += cfg.alpha * (mean[:, upd] - self.base[:, upd])
        self.seen[quiet] += 1
        judged = int(warm.sum())
        if judged < cfg.min_hosts:
            return []  # too few hosts to say anything: nothing opens, closes or ends
        pause, ecn = self._congestion(batch, ok, p)
        on_compute = int((burst[0] & ~burst[1]).sum())
        on_storage = int(burst[1].sum())
        need = max(cfg.min_hosts, cfg.min_share * judged)
        out: list[Finding] = []
        if on_storage >= need:
            self.last_storage = now
            if self.is_open:
                out.append(self._finding("cleared", now, "the latest checkpoint went over the storage NICs"))
        if on_compute >= need:
            cu = float(np.nanmean(mean[0, burst[0] & ~burst[1]]))
            cur = self._current
            if cur is None:
                self._current = cur = _Episode(now, now, on_compute, judged, cu, pause, ecn)
                self.episodes.append(cur)
            cur.end = now
            cur.hosts, cur.judged = max(cur.hosts, on_compute), max(cur.judged, judged)
            cur.compute_util, cur.pause_share = max(cur.compute_util, cu), max(cur.pause_share, pause)
            cur.ecn_per_second = max(cur.ecn_per_second, ecn)
            recent = [e for e in self.episodes if (now - e.start).total_seconds() <= cfg.max_period_s]
            if not self.is_open and len(recent) >= cfg.min_bursts:
                out.append(self._finding("firing", now))
            return out
        self._current = None
        # Congestion baseline from polls without a compute checkpoint.
        vals = np.array([pause, ecn])
        learn = np.isfinite(vals)
        self.cong_base = np.where(
            learn & np.isnan(self.cong_base), vals,
            np.where(learn, self.cong_base + cfg.alpha * (vals - self.cong_base), self.cong_base),
        )  # fmt: skip
        period = self._period()
        if self.is_open and self.episodes and period is not None:
            since = (now - self.episodes[-1].end).total_seconds()
            if since > cfg.quiet_periods * period:
                why = f"no checkpoint on the compute NICs for {since:.0f} s"
                out.append(self._finding("cleared", now, why))
        return out

    def _congestion(self, batch: pa.RecordBatch, ok: np.ndarray, p: np.ndarray) -> tuple[float, float]:
        """Mean PFC pause share (rx + tx, every priority) and ECN marks per second of the
        compute NICs this poll (NaN where no compute NIC reports them)."""
        sel = ok & self.compute[p]
        names = [f"pfc{q}_{d}_pause_seconds_per_second" for q in PFC_PRIORITIES for d in ("rx", "tx")]
        names = [n for n in names if n in batch.schema.names]
        pause = np.nan
        if names and sel.any():
            stack = np.vstack([column(batch, n)[sel] for n in names])
            has = np.isfinite(stack).any(axis=0)
            if has.any():
                pause = float(np.nansum(stack[:, has], axis=0).mean())
        marks = column(batch, "ecn_marked_packets_per_second")[sel]
        ecn = float(np.nanmean(marks)) if np.isfinite(marks).any() else np.nan
        return pause, ecn

    def _period(self) -> float | None:
        starts = [e.start for e in self.episodes]
        gaps = [(b - a).total_seconds() for a, b in pairwise(starts)]
        return float(np.median(gaps)) if gaps else None

    def _finding(self, status: str, now: datetime, why: str = "") -> Finding:
        self.is_open = status == "firing"
        period = self._period()
        eps = list(self.episodes)[-4:]
        last = eps[-1] if eps else None
        pause_b, ecn_b = (float(x) if np.isfinite(x) else None for x in self.cong_base)
        evidence: dict[str, Any] = {
            "network": "compute",
            "period_s": period,
            "bursts": [
                {
                    "start": e.start.isoformat(),
                    "end": e.end.isoformat(),
                    "hosts": e.hosts,
                    "hosts_judged": e.judged,
                    "compute_tx_utilisation": round(e.compute_util, 3),
                }
                for e in eps
            ],
            "pfc_pause_share": _finite(last.pause_share) if last else None,
            "pfc_pause_share_baseline": pause_b,
            "ecn_marks_per_second": _finite(last.ecn_per_second) if last else None,
            "ecn_marks_per_second_baseline": ecn_b,
            "storage_nics": "at baseline during the bursts",
            "last_storage_checkpoint": self.last_storage.isoformat() if self.last_storage else None,
            "rise_threshold": self.cfg.rise,
        }
        if status == "firing" and last:
            rise = ""
            if last.pause_share == last.pause_share and pause_b:
                rise = f"; PFC pause share {last.pause_share / pause_b:.0f}x its baseline"
            if last.ecn_per_second == last.ecn_per_second and ecn_b:
                rise += f", ECN marks {last.ecn_per_second / ecn_b:.0f}x"
            every = f" every {period:.0f} s" if period else ""
            summary = (
                f"checkpoint traffic on the compute fabric: {last.hosts} of {last.judged} hosts write{every} "
                f"over their compute NICs while their storage NICs stay idle{rise}"
            )
        else:
            summary = f"checkpoint traffic off the compute fabric: {why}"
        return Finding(
            kind=Kind.CHECKPOINT_ON_COMPUTE,
            entity=ENTITY,
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.WARNING,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            score=float(last.hosts / max(last.judged, 1)) if last else 0.0,
            evidence=evidence,
        )


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None
