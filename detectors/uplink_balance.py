"""Multipath health: a leaf whose spine uplinks carry persistently uneven load during its job's pulses.

A leaf spreads its upward traffic over its spine uplinks by ECMP hashing (or adaptive routing
on Spectrum-X and InfiniBand AR). Training traffic has few, large, long-lived flows (one or a
few QPs per NCCL connection), so a hash that polarizes (the same function on two tiers), a
fabric with adaptive routing off, or a lost uplink puts most of the bytes on a few uplinks:
those run at line rate during every collective while the rest idle, and each step waits for
the hot ones. Rules:

- *uplinks* are the leaf's ports cabled to a spine (inventory roles); a leaf is judged on the
  uplinks that are up with a transmit rate this poll (the leaf's own ECMP choice is its
  upward traffic), and only when at least ``min_uplinks`` and ``min_known`` of its cabled
  uplinks report;
- *within pulses*: a leaf is judged only while the job behind it (the job most of its hosts'
  ranks belong to, from the NCCL timings) is running collectives, and its uplinks carry at
  least ``min_load`` of their capacity. The step period comes from the job's timings
  (:class:`JobPulses`); idle gaps between steps carry no bytes, so a poll's byte shares are
  the pulses' shares, and a poll with no collective says nothing;
- the score is the *peak ratio*: the busiest uplink's share of the leaf's upward bytes times
  the number of uplinks (1.0 is perfectly even); *hot* uplinks carry more than ``hot_ratio``
  times the even share;
- *peers* are the other leaves of the same job judged this poll (at least ``min_peers``); bad
  when the peak ratio is at least ``min_peak`` and ``peer_ratio`` times the peers' median. A
  job whose every leaf is uneven (a workload, not a leaf) blames none;
- persistence: ``open_after`` bad judged polls in a row open, ``close_after`` good ones close.

Without NCCL timings for a leaf's hosts nothing is judged there: there are no pulses to compare
within, and no peers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import LOGICAL_ACTIVE, RecordKind
from graywire.detectors.base import (
    PORT_RATES,
    EntityIndex,
    Hysteresis,
    HysteresisConfig,
    PortIndexer,
    Scores,
    column,
    port_finding,
)
from graywire.detectors.findings import Finding, Kind, Severity


class JobPulses:
    """Which job each host's ranks run, and when each job last ran collectives, from ``nccl_timing``.

    Emits nothing; :class:`UplinkBalanceDetector` reads it. The step period is the time between
    two polls over the collectives (``seq``) a job ran between them.
    """

    name = "job_pulses"
    version = "1"
    consumes = RecordKind.NCCL_TIMING
    kinds: tuple[str, ...] = ()

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self._node = {n: i for i, n in enumerate(fabric.node_names)}
        self.jobs = EntityIndex(capacity=100_000)
        self.job_of_node = np.full(len(fabric.node_names), -1, dtype=np.int64)
        self.last_end = np.zeros(0)  # per job: end of its latest collective (epoch seconds)
        self.last_seq = np.zeros(0)
        self.last_time = np.zeros(0)
        self.period = np.zeros(0)  # seconds per collective (NaN until two polls)

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        names = batch.schema.names
        if batch.num_rows == 0 or not {"job", "host", "time"} <= set(names):
            return []
        job = self.jobs.ids(batch.column("job"))
        n = len(self.jobs.keys)
        if n > self.last_end.size:
            grow = n - self.last_end.size
            self.last_end = np.concatenate([self.last_end, np.full(grow, np.nan)])
            self.last_seq = np.concatenate([self.last_seq, np.full(grow, np.nan)])
            self.last_time = np.concatenate([self.last_time, np.full(grow, np.nan)])
            self.period = np.concatenate([self.period, np.full(grow, np.nan)])
        node = self._nodes(batch.column("host"))
        ok = (node >= 0) & (job >= 0)
        self.job_of_node[node[ok]] = job[ok]
        t = _seconds(batch.column("time"))
        end = t
        if "start_time" in names and "duration_seconds" in names:
            start = _seconds(batch.column("start_time"))
            dur = column(batch, "duration_seconds")
            end = np.where(np.isfinite(start) & np.isfinite(dur), start + dur, t)
        seq = column(batch, "seq")
        js = job[ok]
        latest = np.full(n, -np.inf)
        np.maximum.at(latest, js, np.where(np.isfinite(end[ok]), end[ok], -np.inf))
        top_seq = np.full(n, -np.inf)
        np.maximum.at(top_seq, js, np.where(np.isfinite(seq[ok]), seq[ok], -np.inf))
        now = np.full(n, -np.inf)
        np.maximum.at(now, js, t[ok])
        seen = np.isfinite(now)
        moved = seen & np.isfinite(self.last_seq) & (top_seq > self.last_seq) & np.isfinite(top_seq)
        self.period[moved] = (now[moved] - self.last_time[moved]) / (top_seq[moved] - self.last_seq[moved])
        upd = seen & np.isfinite(top_seq)
        self.last_seq[upd], self.last_time[upd] = top_seq[upd], now[upd]
        self.last_end[seen] = np.fmax(self.last_end[seen], latest[seen])
        return []

    def _nodes(self, hosts: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Fabric node index of each row's host (-1: unknown), one lookup per distinct host."""
        if isinstance(hosts, pa.ChunkedArray):
            hosts = hosts.combine_chunks()
        if pa.types.is_dictionary(hosts.type):
            codes = hosts.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            names = hosts.dictionary.to_pylist()
        else:
            uniq = pc.unique(hosts)
            codes = (
                pc.index_in(hosts, value_set=uniq)
                .fill_null(-1)
                .to_numpy(zero_copy_only=False)
                .astype(np.int64)
            )
            names = uniq.to_pylist()
        lut = np.array([self._node.get(h, -1) if h else -1 for h in names] + [-1], dtype=np.int64)
        return lut[codes]

    def pulsing(self, job: np.ndarray, t: float, interval_s: np.ndarray) -> np.ndarray:
        """Whether each job ran a collective within the poll interval ending at ``t`` (a step
        period of slack either side: timings and counters are polled apart)."""
        out = np.zeros(job.size, dtype=bool)
        has = job >= 0
        if not has.any() or not self.last_end.size:
            return out
        j = job[has]
        slack = np.where(np.isfinite(self.period[j]), self.period[j], 0.0)
        out[has] = np.isfinite(self.last_end[j]) & (self.last_end[j] >= t - interval_s[has] - slack - 1.0)
        return out


@dataclass(frozen=True, slots=True)
class UplinkBalanceConfig:
    min_uplinks: int = 4
    min_known: float = 0.75  # of the leaf's cabled uplinks reporting this poll
    min_load: float = 0.05  # of the uplinks' capacity: below, the leaf idles and shares are noise
    hot_ratio: float = 1.5  # an uplink over this many times the even share is hot
    min_peak: float = 1.5
    peer_ratio: float = 1.3
    min_peers: int = 3
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=6, close_after=6)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _BalanceScores(Scores):
    peak: np.ndarray
    peer_median: np.ndarray
    job: np.ndarray
    hot_share: np.ndarray
    n_hot: np.ndarray
    n_up: np.ndarray
    load: np.ndarray


class UplinkBalanceDetector:
    name = "uplink_balance"
    version = "1"
    consumes = PORT_RATES
    kinds = (Kind.UPLINK_IMBALANCE,)

    def __init__(self, fabric: Fabric, pulses: JobPulses, cfg: UplinkBalanceConfig | None = None) -> None:
        self.fabric = fabric
        self.pulses = pulses
        self.cfg = cfg or UplinkBalanceConfig()
        self.port_index = PortIndexer(fabric)
        role = fabric.port_role
        peer = fabric.peer
        self.is_up = (role == "leaf") & (peer >= 0) & (role[np.maximum(peer, 0)] == "spine")
        self.leaf_of = fabric.node_of_port.astype(np.int64)
        n_nodes = len(fabric.node_names)
        self.cabled = np.bincount(self.leaf_of[self.is_up], minlength=n_nodes)
        # The hosts behind each leaf: the job most of them run is the leaf's job.
        self.down_host = np.where(
            (role == "leaf") & (peer >= 0) & (role[np.maximum(peer, 0)] == "host"),
            fabric.node_of_port[np.maximum(peer, 0)],
            -1,
        )
        self.hyst = Hysteresis(self.cfg.hysteresis, n_nodes)
        self._hot: dict[int, tuple[list[str], list[float]]] = {}

    def _leaf_jobs(self) -> np.ndarray:
        """Per node, the job most hosts behind it run (-1: none known)."""
        n_nodes = len(self.fabric.node_names)
        sel = self.down_host >= 0
        jobs = self.pulses.job_of_node[self.down_host[sel]]
        leaf = self.leaf_of[sel]
        keep = jobs >= 0
        out = np.full(n_nodes, -1, dtype=np.int64)
        if not keep.any():
            return out
        leaf, jobs = leaf[keep], jobs[keep]
        pairs, counts = np.unique(leaf * (jobs.max() + 1) + jobs, return_counts=True)
        pl, pj = pairs // (jobs.max() + 1), pairs % (jobs.max() + 1)
        order = np.lexsort((-counts, pl))
        first = np.ones(order.size, dtype=bool)
        first[1:] = pl[order][1:] != pl[order][:-1]
        out[pl[order][first]] = pj[order][first]
        return out

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        scores = self._score(batch)
        if scores is None:
            return []
        decision = self.hyst.decide(scores)
        if not decision:
            return []
        now = batch.column("time")[0].as_py()
        return [self._finding(leaf, status, now, scores, j) for status, leaf, j in decision.changes()]

    def _score(self, batch: pa.RecordBatch) -> _BalanceScores | None:
        cfg = self.cfg
        if batch.num_rows == 0:
            return None
        idx = self.port_index(batch.column("port"))
        p = np.maximum(idx, 0)
        tx = column(batch, "tx_bytes_per_second")
        up_state = column(batch, "logical_state", fill=0) == LOGICAL_ACTIVE
        speed = column(batch, "speed_bps")
        speed = np.where(np.isfinite(speed) & (speed > 0), speed, self.fabric.expected_speed_bps[p])
        sel = (idx >= 0) & self.is_up[p] & np.isfinite(tx) & up_state & (speed > 0)
        if not sel.any():
            return None
        ports, load, leaf = idx[sel], tx[sel] * 8, self.leaf_of[p[sel]]
        n_nodes = self.cabled.size
        n_up = np.bincount(leaf, minlength=n_nodes)
        total = np.bincount(leaf, weights=load, minlength=n_nodes)
        cap = np.bincount(leaf, weights=speed[sel], minlength=n_nodes)
        share = load / np.maximum(total[leaf], 1.0)
        peak_share = np.zeros(n_nodes)
        np.maximum.at(peak_share, leaf, share)
        peak = peak_share * n_up
        jobs = self._leaf_jobs()
        interval = column(batch, "interval_seconds")
        ival = np.zeros(n_nodes)
        np.maximum.at(ival, leaf, np.where(np.isfinite(interval[sel]), interval[sel], 0.0))
        t = batch.column("time")[0].as_py().timestamp()
        pulsing = self.pulses.pulsing(jobs, t, ival)
        util = total / np.maximum(cap, 1.0)
        judged = (
            (n_up >= cfg.min_uplinks)
            & (n_up >= cfg.min_known * self.cabled)
            & (util >= cfg.min_load)
            & pulsing
        )
        leaves = np.flatnonzero(judged)
        if not leaves.size:
            return None
        lj = jobs[leaves]
        # Peer median of the peak ratio over the other leaves of the same job.
        peer_med = np.full(leaves.size, np.nan)
        for j in np.unique(lj):  # per job, not per port
            m = np.flatnonzero(lj == j)
            if m.size - 1 >= cfg.min_peers:
                vals = peak[leaves[m]]
                # Each leaf against the others only: with few peers, itself would pull the
                # median its way.
                others = np.broadcast_to(vals, (m.size, m.size))[~np.eye(m.size, dtype=bool)]
                peer_med[m] = np.median(others.reshape(m.size, m.size - 1), axis=1)
        has_peers = np.isfinite(peer_med)
        leaves, lj, peer_med = leaves[has_peers], lj[has_peers], peer_med[has_peers]
        if not leaves.size:
            return None
        pk = peak[leaves]
        bad = (pk >= cfg.min_peak) & (pk >= cfg.peer_ratio * peer_med)
        hot = share * n_up[leaf] > cfg.hot_ratio
        n_hot = np.bincount(leaf[hot], minlength=n_nodes)
        hot_share = np.bincount(leaf[hot], weights=share[hot], minlength=n_nodes)
        # Remember the hot uplinks of the leaves that may open (a few, once per poll).
        self._hot.clear()
        for lf in leaves[bad].tolist():
            m = (leaf == lf) & hot
            order = np.argsort(-share[m])
            self._hot[lf] = (
                [self.fabric.keys[int(i)] for i in ports[m][order]],
                [float(x) for x in share[m][order]],
            )
        return _BalanceScores(
            ids=leaves, bad=bad, peak=pk, peer_median=peer_med, job=lj, hot_share=hot_share[leaves],
            n_hot=n_hot[leaves], n_up=n_up[leaves], load=util[leaves],
        )  # fmt: skip

    def _finding(self, leaf: int, status: str, now: datetime, s: _BalanceScores, j: int) -> Finding:
        f = self.fabric
        name = f.node_names[leaf]
        job_id = int(s.job[j])
        job = self.pulses.jobs.keys[job_id] if 0 <= job_id < len(self.pulses.jobs.keys) else None
        period = float(self.pulses.period[job_id]) if job is not None else float("nan")
        hot, shares = self._hot.get(leaf, ([], []))
        n_hot, n_up = int(s.n_hot[j]), int(s.n_up[j])
        if status == "firing":
            summary = (
                f"{name}: {n_hot} of {n_up} spine uplinks carry {float(s.hot_share[j]):.0%} of its upward "
                f"traffic during {job or 'its job'}'s collectives (even: {n_hot / max(n_up, 1):.0%}); peer "
                f"leaves spread evenly (peak {float(s.peak[j]):.1f}x even, "
                f"peers {float(s.peer_median[j]):.1f}x)"
            )
        else:
            summary = f"{name}: uplinks evenly loaded again"
        return port_finding(
            self,
            Kind.UPLINK_IMBALANCE,
            {"entity": name, "node": name, "port": hot[0] if hot else None, "link": None},
            status,  # type: ignore[arg-type]
            now,
            Severity.WARNING,
            summary,
            float(s.peak[j]),
            {
                "hot_uplinks": hot[:32],
                "hot_uplink_shares": [round(x, 4) for x in shares[:32]],
                "hot_share": float(s.hot_share[j]),
                "even_share": n_hot / max(n_up, 1),
                "uplinks_reporting": n_up,
                "uplinks_cabled": int(self.cabled[leaf]),
                "peak_ratio": float(s.peak[j]),
                "peer_median_peak_ratio": float(s.peer_median[j]),
                "uplink_utilisation": float(s.load[j]),
                "job": job,
                "step_period_s": period if np.isfinite(period) else None,
                "polls_required": self.cfg.hysteresis.open_after,
                "causes": "ECMP hash polarization, adaptive routing off, a missing or down uplink",
            },
        )


_PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


def _seconds(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A timestamp column as epoch seconds (NaN where null)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    scale = _PER_SECOND[arr.type.unit] if pa.types.is_timestamp(arr.type) else 1.0
    vals = arr.cast(pa.int64()).cast(pa.float64()).to_numpy(zero_copy_only=False)
    return vals / scale
