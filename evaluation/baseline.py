"""The static threshold rules a Prometheus alert-rule user writes, as a baseline to beat.

No windows, no peers, no persistence (``for: 0``): speed below expected, width below expected,
any error counter moving, the link-down counter moving, pause frames above a rate, ECN marks
above a rate, xmit_wait ticks above a rate, an NCCL channel 25% over the poll's median, a job's
median collective time 10% over its last hour's average, any NCCL row on ``NET/Socket``.
``graywire eval`` scores it beside the real detectors on the same data, so the difference is
measured, not claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PFC_PRIORITIES
from graywire.detectors.base import PORT_RATES, PortIndexer, column
from graywire.detectors.findings import Finding, Kind


@dataclass(frozen=True, slots=True)
class BaselineConfig:
    pause_frames_per_second: float = 100.0
    ecn_marks_per_second: float = 1000.0
    xmit_wait_ticks_per_second: float = 1e5
    nccl_over_median: float = 1.25
    step_over_hour_mean: float = 1.10


class StaticRules:
    """Each rule is a per-port (or per-row) condition; a finding opens when it turns true."""

    name = "static_rules"
    version = "1"
    consumes = PORT_RATES
    kinds = (
        Kind.SPEED_DOWNGRADE,
        Kind.WIDTH_DOWNGRADE,
        Kind.BER_DEGRADATION,
        Kind.LINK_FLAP,
        Kind.PFC_STORM,
        Kind.ECN_HOTSPOT,
        Kind.XMIT_WAIT_HOTSPOT,
        Kind.NCCL_CHANNEL_SLOW,
        Kind.NCCL_JOB_SLOWDOWN,
        Kind.NCCL_TRANSPORT_FALLBACK,
    )
    port_kinds = kinds[:7]

    def __init__(self, fabric: Fabric, cfg: BaselineConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or BaselineConfig()
        self.port_index = PortIndexer(fabric)
        self.active: dict[str, np.ndarray] = {k: np.zeros(fabric.n_ports, bool) for k in self.port_kinds}
        self.nccl_active: set[tuple[str, int, int]] = set()
        self.step_history: dict[str, list[tuple[float, float]]] = {}  # job -> (time, median)
        self.slow_jobs: set[str] = set()
        self.socket_hosts: set[tuple[str, str]] = set()

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if "duration_seconds" in batch.schema.names:
            return self._nccl(batch)
        if batch.num_rows == 0:
            return []
        f, cfg = self.fabric, self.cfg
        idx = self.port_index(batch.column("port"))
        ok = idx >= 0
        p = idx[ok]
        speed = column(batch, "speed_bps", 0)[ok]  # a down port reads as speed 0, as node_exporter's -1 does
        width = column(batch, "width", 0)[ok]

        def rate(name: str) -> np.ndarray:
            return np.nan_to_num(column(batch, f"{name}_per_second")[ok], nan=0.0)

        errors = rate("symbol_errors") + rate("fec_uncorrectable_blocks") + rate("rcv_errors")
        pauses = np.zeros(p.size)
        for q in PFC_PRIORITIES:
            pauses = pauses + rate(f"pfc{q}_tx_pause_frames")
        conditions = {
            Kind.SPEED_DOWNGRADE: speed < f.expected_speed_bps[p],
            Kind.WIDTH_DOWNGRADE: (width > 0) & (width < f.expected_width[p]),
            Kind.BER_DEGRADATION: errors > 0,
            Kind.LINK_FLAP: rate("link_downed") > 0,
            Kind.PFC_STORM: pauses > cfg.pause_frames_per_second,
            Kind.ECN_HOTSPOT: rate("ecn_marked_packets") > cfg.ecn_marks_per_second,
            Kind.XMIT_WAIT_HOTSPOT: rate("xmit_wait_ticks") > cfg.xmit_wait_ticks_per_second,
        }
        now = batch.column("time")[0].as_py()
        out = []
        for kind, cond in conditions.items():
            was = self.active[kind][p]
            for i in p[cond & ~was].tolist():
                out.append(self._finding(kind, f.keys[i], "firing", now, f.node_of(i), f.keys[i]))
            for i in p[~cond & was].tolist():
                out.append(self._finding(kind, f.keys[i], "cleared", now, f.node_of(i), f.keys[i]))
            self.active[kind][p] = cond
        return out

    def _nccl(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        dur = column(batch, "duration_seconds")
        med = float(np.nanmedian(dur))
        slow = dur > self.cfg.nccl_over_median * med
        comm = batch.column("communicator").cast(pa.string()).to_pylist()
        rank = column(batch, "rank", -1).astype(int)
        chan = column(batch, "channel", -1).astype(int)
        host = batch.column("host").cast(pa.string()).to_pylist()
        dev = column(batch, "device", -1).astype(int)
        now = batch.column("time")[0].as_py()
        current = {(comm[i], int(rank[i]), int(chan[i])) for i in np.flatnonzero(slow).tolist()}
        out = []
        for key in sorted(current - self.nccl_active):  # a set of str: its order varies per process
            i = next(j for j in np.flatnonzero(slow).tolist() if (comm[j], rank[j], chan[j]) == key)
            ent = f"{key[0]}|rank {key[1]}|channel {key[2]}"
            out.append(
                self._finding(Kind.NCCL_CHANNEL_SLOW, ent, "firing", now, host[i], f"{host[i]}/mlx5_{dev[i]}")
            )
        for key in sorted(self.nccl_active - current):
            ent = f"{key[0]}|rank {key[1]}|channel {key[2]}"
            out.append(self._finding(Kind.NCCL_CHANNEL_SLOW, ent, "cleared", now, None, None))
        self.nccl_active = current
        return out + self._step(batch, dur, now) + self._socket(batch, comm, host, now)

    def _step(self, batch: pa.RecordBatch, dur: np.ndarray, now: datetime) -> list[Finding]:
        """``median(step) > 1.1 * avg_over_time(median(step)[1h])`` per job, ``for: 0``."""
        job_col = batch.column("job")
        if not pa.types.is_dictionary(job_col.type):
            job_col = job_col.dictionary_encode()
        codes = job_col.indices.to_numpy(zero_copy_only=False)
        t = now.timestamp()
        out = []
        for code in np.unique(codes).tolist():
            job = str(job_col.dictionary[code])
            med = float(np.nanmedian(dur[codes == code]))
            hist = [h for h in self.step_history.get(job, []) if h[0] >= t - 3600]
            slow = bool(hist) and med > self.cfg.step_over_hour_mean * float(np.mean([h[1] for h in hist]))
            self.step_history[job] = [*hist, (t, med)]
            if slow and job not in self.slow_jobs:
                self.slow_jobs.add(job)
                out.append(self._finding(Kind.NCCL_JOB_SLOWDOWN, job, "firing", now, None, None, job))
            elif not slow and job in self.slow_jobs:
                self.slow_jobs.discard(job)
                out.append(self._finding(Kind.NCCL_JOB_SLOWDOWN, job, "cleared", now, None, None, job))
        return out

    def _socket(self, batch: pa.RecordBatch, comm: list, host: list, now: datetime) -> list[Finding]:
        """Any row whose transport is ``NET/Socket``, per (communicator, host)."""
        if "transport" not in batch.schema.names:
            return []
        tr = batch.column("transport")
        if not pa.types.is_dictionary(tr.type):
            tr = tr.dictionary_encode()
        socket = [i for i, name in enumerate(tr.dictionary.to_pylist()) if name == "NET/Socket"]
        rows = np.flatnonzero(np.isin(tr.indices.fill_null(-1).to_numpy(zero_copy_only=False), socket))
        current = {(comm[i], host[i]) for i in rows.tolist()}
        out = []
        for c, h in sorted(current - self.socket_hosts):
            out.append(self._finding(Kind.NCCL_TRANSPORT_FALLBACK, f"{c}|{h}", "firing", now, h, None))
        for c, h in sorted(self.socket_hosts - current):
            out.append(self._finding(Kind.NCCL_TRANSPORT_FALLBACK, f"{c}|{h}", "cleared", now, h, None))
        self.socket_hosts = current
        return out

    def _finding(
        self,
        kind: str,
        entity: str,
        status: str,
        now: datetime,
        node: str | None,
        port: str | None,
        job: str | None = None,
    ) -> Finding:
        return Finding(
            kind=kind,
            entity=entity,
            status=status,  # type: ignore[arg-type]
            time=now,
            severity="warning",
            summary=f"static rule: {kind} on {entity}",
            detector=f"{self.name}/{self.version}",
            node=node,
            port=port,
            evidence={"job": job} if job else {},
        )
