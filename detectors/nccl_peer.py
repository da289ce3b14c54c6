"""A slow network hop between two ranks, from the NCCL profiler's per-peer proxy steps.

A slow link or NIC pair slows the channels whose ring hop crosses it on every rank of the
ring (the ring runs at its slowest hop's pace), so per-rank timings cannot say which hop it is.
The profiler's ProxySteps can: ``SendWait`` is the time a posted network send takes to complete,
the hop's own wire time, and the receiver's ``RecvWait`` on the same hop grows with it, while
the healthy hops of the ring wait for their GPUs (``SendGPUWait``, ``RecvGPUWait``) instead.

Each edge is (communicator, channel, sender -> receiver). Per observation (one collective,
``seq``) its network time per byte is compared with the median of the communicator's other
edges (same collective and size bucket, same side): sender ``SendWait`` and, when the receiver
is profiled too, receiver ``RecvWait``. The residuals are windowed like ``nccl_channel``: the
score is the windowed median against the spread of the other edges' windowed medians (open
edges left out of that baseline), and both sides must agree, so

- a whole-job slowdown (every edge slower together) leaves every residual at zero;
- a compute straggler (a rank late into the collective) raises its neighbour's ``RecvWait``
  but not the sender's ``SendWait`` (the sender posts only once it has data and credits);
- many slow edges on one channel behind one leaf are a path (``nccl_path_slow``), not hops.

Findings name both NICs (``link`` = ``nic <-> nic``) and the side ``network``: neither host
is to blame by itself.

State is bounded: an edge unseen for ``expire_polls`` polls and not open is forgotten (its
rows compacted away, all at once), an open one is first cleared as stopped reporting, and at
most ``max_communicators`` communicators and ``max_edges`` edges are live; rows past them are
counted in ``over_capacity``, not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.keys import LINK_SEP
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind
from graywire.detectors.base import EntityIndex, Hysteresis, HysteresisConfig, KeyIndex, RollingWindow, Scores
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.detectors.robust import MAD_TO_SIGMA, group_median, group_median_mad

_SIDES = ("send", "recv")
# An edge's key packs (communicator, channel, sender, receiver) into 15, 8, 20 and 20 bits: the
# communicator is a live id below max_communicators, the others are checked per row.
_COMM_BITS, _RANK_LIMIT, _CHAN_LIMIT = 15, 1 << 20, 1 << 8


def _pack(comm: np.ndarray, chan: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    return (comm << 48) | (chan << 40) | (src << 20) | dst


def _unpack(key: np.ndarray) -> np.ndarray:
    return np.stack([key >> 48, (key >> 40) & 0xFF, (key >> 20) & 0xFFFFF, key & 0xFFFFF], axis=1)


@dataclass(frozen=True, slots=True)
class NcclHopConfig:
    window: int = 5  # observations (collectives) in the windowed median that is scored
    open_z: float = 5.0  # robust z of the windowed residual to open, on both sides
    open_ratio: float = 1.10  # and the hop's network time per byte at least this much above its peers'
    close_z: float = 2.5
    close_ratio: float = 1.05
    min_scale: float = 0.01  # floor on the peers' spread (log units)
    min_peers: int = 8  # edges in the comparison group
    #: An open edge not seen for this many polls (its job ended) clears, then is forgotten; the
    #: state is compacted this often too.
    expire_polls: int = 30
    #: Live communicators (below 2**15: they are packed into edge keys) and edges at most: job
    #: after job adds its own. Rows past them are counted, not judged.
    max_communicators: int = 8192
    max_edges: int = 262144
    #: This many hosts' disjoint slow edges on one channel behind one leaf are a path, not hops.
    min_path_hosts: int = 3
    #: A batch holding more collectives than this (a whole dump at once) is judged in this many steps.
    max_observations: int = 256
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=2, close_after=3)
    )

    def __post_init__(self) -> None:
        if not 0 < self.max_communicators <= 1 << _COMM_BITS:
            raise ValueError(f"max_communicators must be in 1..{1 << _COMM_BITS}")


@dataclass(frozen=True, slots=True, kw_only=True)
class _HopScores(Scores):
    """Per judged edge (a sender's, its receiver agreeing where profiled): z and log excess."""

    z: np.ndarray
    ratio: np.ndarray  # windowed log excess over the peers
    elevated: np.ndarray  # the judged edges above the close thresholds (hops or a path?)
    cols: dict[str, np.ndarray]  # the observation's rows that were judged


class NcclHopDetector:
    """Per-(communicator, channel, sender -> receiver) network-wait outliers, blamed on the NIC pair."""

    name = "nccl_hop"
    version = "1"
    consumes = RecordKind.NCCL_PROXY
    kinds = (Kind.NCCL_HOP_SLOW,)

    def __init__(self, fabric: Fabric | None = None, cfg: NcclHopConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or NcclHopConfig()
        w = self.cfg.window
        self.comms = EntityIndex(self.cfg.max_communicators)
        self.cells = KeyIndex(self.cfg.max_edges)  # packed (comm, channel, src, dst) -> cell
        self._label = np.zeros((0, 4), dtype=np.int64)  # cell -> (comm, channel, src, dst)
        self.over_capacity = 0  # rows left out because the communicator or edge cap was reached
        self._crowded = False
        self.windows = {s: RollingWindow(w) for s in _SIDES}
        self.last_raw = {s: np.full(0, np.nan) for s in _SIDES}  # log seconds per byte, last observation
        self.last_med = {s: np.full(0, np.nan) for s in _SIDES}  # its group's median then
        self.last_seen = np.zeros(0, dtype=np.int64)
        self.hyst = Hysteresis(self.cfg.hysteresis)
        self.polls = 0
        self.pair_open: dict[tuple[int, int, int], set[int]] = {}  # (comm, src, dst) -> open channels
        self._where: dict[tuple[int, int, int], dict[str, Any]] = {}
        self._in_path: set[int] = set()  # open cells judged part of a slow path: no hop finding
        self._ranks: dict[tuple[int, int], dict[str, Any]] = {}  # (comm, rank) -> host, device, ports
        self._leaf: dict[str, str] = {}

    # -- state ---------------------------------------------------------------------------------------
    def _cells(self, comm: np.ndarray, chan: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Cell ids (-1 past ``max_edges``: a communicator's new edges are taken all or none)."""
        n = self.cells.n
        cell = self.cells.ids(_pack(comm, chan, src, dst), group=comm, first_seen=False)
        if self.cells.n > n:
            self._label = np.vstack([self._label, _unpack(self.cells.key_of[n:])])
            self._grow(self.cells.n)
        return cell

    def _grow(self, n: int) -> None:
        extra = n - self.last_seen.size
        if extra <= 0:
            return
        for s in _SIDES:
            self.windows[s].grow(n)
            self.last_raw[s] = np.concatenate([self.last_raw[s], np.full(extra, np.nan)])
            self.last_med[s] = np.concatenate([self.last_med[s], np.full(extra, np.nan)])
        self.last_seen = np.concatenate([self.last_seen, np.zeros(extra, np.int64)])
        self.hyst.grow(n)

    def _compact(self) -> None:
        """Forget edges unseen for ``expire_polls`` polls that are not open, and communicators
        left without edges: ended jobs.

        Rows are dropped and renumbered densely in one pass over the arrays (order kept, so
        findings do not depend on when it ran); only the maps of open edges and reported ranks
        are remapped in Python. An edge that comes back starts afresh.
        """
        self._crowded = False
        n = self.cells.n
        keep = ~((self.polls - self.last_seen[:n] > self.cfg.expire_polls) & ~self.hyst.is_open[:n])
        lab = self._label[:n][keep]
        c_live = np.zeros(len(self.comms.keys), dtype=bool)
        c_live[lab[:, 0]] = True
        if keep.all() and c_live.all():
            return
        new_id = np.cumsum(keep) - 1
        new_c = np.cumsum(c_live) - 1
        self.comms.keep(c_live)
        lab[:, 0] = new_c[lab[:, 0]]
        self._label = lab
        self.cells.rekey(_pack(lab[:, 0], lab[:, 1], lab[:, 2], lab[:, 3]))
        for s in _SIDES:
            self.windows[s].keep(keep)
            self.last_raw[s] = self.last_raw[s][:n][keep]
            self.last_med[s] = self.last_med[s][:n][keep]
        self.last_seen = self.last_seen[:n][keep]
        self.hyst.keep(keep)
        self._in_path = {int(new_id[e]) for e in self._in_path}

        def by_comm(d: dict[Any, Any]) -> dict[Any, Any]:
            return {(int(new_c[k[0]]), *k[1:]): v for k, v in d.items() if c_live[k[0]]}

        self.pair_open = by_comm(self.pair_open)
        self._where = by_comm(self._where)
        self._ranks = by_comm(self._ranks)

    # -- scoring -------------------------------------------------------------------------------------
    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        self.polls += 1
        if self.polls % self.cfg.expire_polls == 0 or self._crowded:
            self._compact()
        now = batch.column("time")[0].as_py()
        cols = self._columns(batch)
        out: list[Finding] = []
        obs = cols.pop("obs")
        for o in np.unique(obs).tolist():
            sel = obs == o
            out += self._observe_one(batch, {k: v[sel] for k, v in cols.items()}, now)
        return out + self._expire(now)

    def _columns(self, batch: pa.RecordBatch) -> dict[str, np.ndarray]:
        """The numbers the score needs, per row: cell, side, group and log network time per byte."""

        def num(name: str) -> np.ndarray:
            return batch.column(name).cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)

        comm = batch.column("communicator")
        if not pa.types.is_dictionary(comm.type):
            comm = comm.dictionary_encode()
        comm_ids = self.comms.ids(comm.dictionary)[comm.indices.to_numpy(zero_copy_only=False)]
        coll = batch.column("collective")
        if not pa.types.is_dictionary(coll.type):
            coll = coll.dictionary_encode()
        coll_code = coll.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        n_coll = max(1, len(coll.dictionary))
        direction = batch.column("direction").cast(pa.string())
        is_send = pc.equal(direction, "send").fill_null(False).to_numpy(zero_copy_only=False)
        is_recv = pc.equal(direction, "recv").fill_null(False).to_numpy(zero_copy_only=False)
        rank = batch.column("rank").to_numpy(zero_copy_only=False).astype(np.int64)
        peer = batch.column("peer").to_numpy(zero_copy_only=False).astype(np.int64)
        chan = batch.column("channel").to_numpy(zero_copy_only=False).astype(np.int64)
        nbytes, steps = num("bytes"), num("steps")
        wait = np.where(is_send, num("send_wait_seconds"), num("recv_wait_seconds"))
        per_byte = nbytes > 0
        norm = np.where(per_byte, nbytes, steps)
        with np.errstate(divide="ignore", invalid="ignore"):
            val = np.log(wait / norm)
        ok = np.isfinite(val) & (is_send | is_recv)
        ok &= (rank >= 0) & (rank < _RANK_LIMIT) & (peer >= 0) & (peer < _RANK_LIMIT)
        ok &= (chan >= 0) & (chan < _CHAN_LIMIT)
        if (full := ok & (comm_ids < 0)).any():
            self.over_capacity += int(full.sum())
            self._crowded = True  # compact at the next poll: stale rows may make room
            ok &= ~full
        bucket = np.floor(np.log2(np.maximum(np.nan_to_num(norm, nan=1.0), 1.0))).astype(np.int64)
        # Compare like with like: one communicator, collective, size bucket, unit and side.
        group = (((comm_ids * n_coll + coll_code) * 64 + bucket) * 2 + per_byte) * 2 + is_send
        seq = batch.column("seq")
        if seq.null_count == len(seq):
            obs = np.zeros(batch.num_rows, dtype=np.int64)
        else:
            s = seq.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            _, obs = np.unique(s, return_inverse=True)
            n_obs = int(obs.max()) + 1
            if n_obs > self.cfg.max_observations:
                obs = obs * self.cfg.max_observations // n_obs
        src = np.where(is_send, rank, peer)
        dst = np.where(is_send, peer, rank)
        keep = np.flatnonzero(ok)
        return {
            "obs": obs[keep],
            "comm": comm_ids[keep],
            "chan": chan[keep],
            "src": src[keep],
            "dst": dst[keep],
            "send": is_send[keep],
            "group": group[keep],
            "val": val[keep],
            "row": keep,
        }

    def _observe_one(self, batch: pa.RecordBatch, c: dict[str, np.ndarray], now: datetime) -> list[Finding]:
        scores = self._score_one(c)
        if scores is None:
            return []
        decision = self.hyst.decide(scores)
        if not decision:
            return []
        s, elevated = scores, scores.elevated
        opened, closed = decision.opened, decision.closed
        self._learn_ranks(batch, s.cols, np.concatenate([opened, closed, elevated]))
        out = []
        hops = []
        for e, j in zip(opened.tolist(), decision.opened_at.tolist(), strict=True):
            if self._is_path(e, elevated):
                self._in_path.add(e)
                continue
            comm, chan, src, dst = (int(v) for v in self._label[e])
            if not self.pair_open.get((comm, src, dst)):
                hops.append((e, j))  # the pair's first channel: its finding lists every channel opening now
            self.pair_open.setdefault((comm, src, dst), set()).add(chan)
        for e, j in hops:
            out += self._pair_update("firing", e, now, float(s.z[j]), float(s.ratio[j]), elevated)
        for e, j in zip(closed.tolist(), decision.closed_at.tolist(), strict=True):
            if e in self._in_path:
                self._in_path.discard(e)
                continue
            out += self._pair_update("cleared", e, now, float(s.z[j]), float(s.ratio[j]), elevated)
        return out

    def _score_one(self, c: dict[str, np.ndarray]) -> _HopScores | None:
        """Push one observation's residuals into the edges' windows and score the senders'
        edges, the receivers' agreeing where they are profiled too; None when nothing is judged."""
        cfg = self.cfg
        if not c["val"].size:
            return None
        cell = self._cells(c["comm"], c["chan"], c["src"], c["dst"])
        if (full := cell < 0).any():
            self.over_capacity += int(full.sum())
            self._crowded = True
            c = {k: v[~full] for k, v in c.items()}
            cell = cell[~full]
            if not cell.size:
                return None
        ids = np.unique(cell)
        self.last_seen[ids] = self.polls
        peers: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for side in _SIDES:
            m = c["send"] if side == "send" else ~c["send"]
            if not m.any():
                continue
            s_cell, s_val, s_grp = cell[m], c["val"][m], c["group"][m]
            u, first, inv = np.unique(s_cell, return_index=True, return_inverse=True)
            x = group_median(s_val, inv, u.size)  # one value per edge per observation
            g_u, g_inv = np.unique(s_grp[first], return_inverse=True)
            med = group_median(x, g_inv, g_u.size)
            self.windows[side].push(u, x - med[g_inv])
            self.last_raw[side][u] = x
            self.last_med[side][u] = med[g_inv]
            peers[side] = (u, g_inv)
        if "send" not in peers:
            return None  # the sender's SendWait times the wire; without it no edge is judged
        u, g_inv = peers["send"]
        z, ratio, enough = self._score("send", u, g_inv)
        if "recv" in peers:
            ur, gr = peers["recv"]
            zr, rr, er = self._score("recv", ur, gr)
            pos = np.searchsorted(ur, u)
            pos = np.minimum(pos, max(ur.size - 1, 0))
            both = (ur[pos] == u) & er[pos] if ur.size else np.zeros(u.size, dtype=bool)
            z = np.where(both, np.minimum(z, zr[pos]), z)
            ratio = np.where(both, np.minimum(ratio, rr[pos]), ratio)
        opening = (z >= cfg.open_z) & (ratio >= math.log(cfg.open_ratio))
        holding = (z >= cfg.close_z) & (ratio >= math.log(cfg.close_ratio))
        e = enough
        return _HopScores(ids=u[e], bad=opening[e], holding=holding[e], z=z[e], ratio=ratio[e],
                          elevated=u[holding & e], cols=c)  # fmt: skip

    def _score(
        self, side: str, u: np.ndarray, g_inv: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Robust z of each edge's windowed residual against its group's other edges."""
        cfg = self.cfg
        n_g = int(g_inv.max()) + 1 if g_inv.size else 0
        full = self.windows[side].full(u)
        wmed = np.full(u.size, np.nan)
        if full.any():
            wmed[full] = self.windows[side].median(u[full])
        # The baseline leaves out edges already judged slow: they must not widen it.
        base = full & ~self.hyst.is_open[u]
        center = np.full(n_g, np.nan)
        spread = np.full(n_g, np.nan)
        if base.any():
            center, spread = group_median_mad(wmed[base], g_inv[base], n_g)
        scale = np.maximum(MAD_TO_SIGMA * np.nan_to_num(spread, nan=0.0), cfg.min_scale)
        resid = wmed - np.nan_to_num(center, nan=0.0)[g_inv]
        z = np.nan_to_num(resid / scale[g_inv], nan=-np.inf)
        peers = np.bincount(g_inv, weights=base, minlength=n_g)
        enough = full & (peers[g_inv] >= cfg.min_peers)
        return z, np.nan_to_num(resid, nan=-np.inf), enough

    # -- localization --------------------------------------------------------------------------------
    def _learn_ranks(self, batch: pa.RecordBatch, c: dict[str, np.ndarray], cells: np.ndarray) -> None:
        """Host, GPU and NIC per channel of the ranks at both ends of the edges being reported."""
        if not cells.size:
            return
        lab = self._label[cells]
        want = {(int(a), int(r)) for a, r in zip(lab[:, 0], lab[:, 2], strict=True)}
        want |= {(int(a), int(r)) for a, r in zip(lab[:, 0], lab[:, 3], strict=True)}
        rank = np.where(c["send"], c["src"], c["dst"])
        key = c["comm"] << 24 | rank
        wanted = np.array([a << 24 | r for a, r in want], dtype=np.int64)
        rows = c["row"][np.isin(key, wanted)]
        if not rows.size:
            return
        sub = batch.take(pa.array(rows)).select(["rank", "host", "device", "channel", "port"]).to_pylist()
        comm_of = dict(zip(rows.tolist(), c["comm"][np.isin(key, wanted)].tolist(), strict=True))
        for r, rec in zip(rows.tolist(), sub, strict=True):
            info = self._ranks.setdefault((comm_of[r], rec["rank"]), {"ports": {}})
            info["host"] = rec["host"] or info.get("host")
            info["device"] = rec["device"] if rec["device"] is not None else info.get("device")
            if rec["port"]:
                info["ports"][rec["channel"]] = rec["port"]

    def _port(self, comm: int, rank: int, chan: int) -> tuple[str | None, str | None, int | None]:
        """(host, NIC port, GPU) of a rank on a channel: the NCCL_DEBUG channel line's NIC, else
        the GPU's rail NIC ``host/mlx5_<gpu>`` when the fabric model has it."""
        info = self._ranks.get((comm, rank))
        if info is None:
            return None, None, None
        host, dev = info.get("host"), info.get("device")
        port = info["ports"].get(chan) or (next(iter(info["ports"].values())) if info["ports"] else None)
        if port is None and host is not None and dev is not None:
            cand = f"{host}/mlx5_{dev}"
            if self.fabric is None or self.fabric.lookup(pa.array([cand]))[0] >= 0:
                port = cand
        return host, port, dev

    def _leaf_of(self, port: str | None) -> str:
        if port is None or self.fabric is None:
            return "?"
        leaf = self._leaf.get(port)
        if leaf is None:
            i = int(self.fabric.lookup(pa.array([port]))[0])
            if i < 0:
                return "?"  # not cached: the cache stays as small as the fabric model
            peer = int(self.fabric.peer[i])
            leaf = self._leaf[port] = self.fabric.node_of(peer) if peer >= 0 else "?"
        return leaf

    def _is_path(self, e: int, elevated: np.ndarray) -> bool:
        """Other slow edges on the same channel, sharing no rank with this one but a leaf with it:
        enough hosts of them and it is the switch path, not this hop."""
        comm, chan, src, dst = (int(v) for v in self._label[e])
        lab = self._label[elevated]
        same = (lab[:, 0] == comm) & (lab[:, 1] == chan) & (elevated != e)
        disjoint = same & ~np.isin(lab[:, 2], (src, dst)) & ~np.isin(lab[:, 3], (src, dst))
        if int(disjoint.sum()) + 1 < self.cfg.min_path_hosts:
            return False
        mine = {self._leaf_of(self._port(comm, src, chan)[1]), self._leaf_of(self._port(comm, dst, chan)[1])}
        hosts = set()
        for s, d in lab[disjoint][:, 2:].tolist():
            hs, ps, _ = self._port(comm, s, chan)
            hd, pd, _ = self._port(comm, d, chan)
            if mine & {self._leaf_of(ps), self._leaf_of(pd)} or "?" in mine:
                hosts.update(h for h in (hs, hd) if h)
        return len(hosts) + 1 >= self.cfg.min_path_hosts

    # -- findings ------------------------------------------------------------------------------------
    def _pair_update(
        self, status: str, e: int, now: datetime, z: float, ratio: float, elevated: np.ndarray
    ) -> list[Finding]:
        """Decisions are per channel; the incident is per NIC pair (all its slow channels)."""
        comm, chan, src, dst = (int(v) for v in self._label[e])
        key = (comm, src, dst)
        chans = self.pair_open.setdefault(key, set())
        if status != "firing":
            chans.discard(chan)
            if chans:
                return []
            del self.pair_open[key]
        f = self._finding(status, e, now, z, ratio, sorted(chans), elevated)
        if status == "firing":
            self._where[key] = {"node": None, "port": f.port, "link": f.link}
        else:
            self._where.pop(key, None)
        return [f]

    def _entity(self, comm: int, src: int, dst: int) -> str:
        return f"{self.comms.keys[comm]}|hop {src}->{dst}"

    def _finding(
        self,
        status: str,
        e: int,
        now: datetime,
        z: float,
        ratio: float,
        channels: list[int],
        elevated: np.ndarray,
    ) -> Finding:
        comm, chan, src, dst = (int(v) for v in self._label[e])
        name = self.comms.keys[comm]
        s_host, s_port, s_dev = self._port(comm, src, chan)
        d_host, d_port, d_dev = self._port(comm, dst, chan)
        link = f"{s_port}{LINK_SEP}{d_port}" if s_port and d_port else None  # the hop's direction
        ends = f"{s_port or s_host or f'rank {src}'} -> {d_port or d_host or f'rank {dst}'}"
        lab = self._label[elevated]
        others = lab[(lab[:, 0] == comm) & ~((lab[:, 2] == src) & (lab[:, 3] == dst))]  # other pairs
        ev: dict[str, Any] = {
            "communicator": name,
            "channel": chan,
            "channels": channels,
            "src_rank": src,
            "dst_rank": dst,
            "src_host": s_host,
            "dst_host": d_host,
            "src_device": s_dev,
            "dst_device": d_dev,
            "src_port": s_port,
            "dst_port": d_port,
            "robust_z": float(z),
            "windowed_excess_log": float(ratio),
            "windowed_slowdown": float(math.exp(ratio) - 1) if math.isfinite(ratio) else None,
            "window_observations": self.cfg.window,
            # Other slow edges at either end: several through one NIC point at that NIC.
            "src_other_slow_edges": int(((others[:, 2] == src) | (others[:, 3] == src)).sum()),
            "dst_other_slow_edges": int(((others[:, 2] == dst) | (others[:, 3] == dst)).sum()),
            "side": "network",
        }
        for side, what in (("send", "sender_send_wait"), ("recv", "receiver_recv_wait")):
            raw, med = self.last_raw[side][e], self.last_med[side][e]
            if np.isfinite(raw):
                ev[f"{what}_seconds_per_gib"] = float(math.exp(raw) * 2**30)
                ev[f"peers_median_{what}_seconds_per_gib"] = float(math.exp(med) * 2**30)
        if status == "firing":
            which = f"channel {chan}"
            slower = ev["windowed_slowdown"] or 0.0
            summary = (
                f"NCCL hop {ends} (rank {src} -> {dst} of {name}, {which}) slow: its network wait per byte "
                f"is {slower:.0%} above the communicator's other hops on both ends; the link or NIC pair "
                "between them, not either host"
            )
        else:
            summary = f"NCCL hop {ends} (rank {src} -> {dst} of {name}) back in line with the other hops"
        return Finding(
            kind=Kind.NCCL_HOP_SLOW,
            entity=self._entity(comm, src, dst),
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.WARNING,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=None,
            port=s_port,
            link=link,
            score=float(z) if math.isfinite(z) else 0.0,
            confidence=float(min(1.0, z / (2 * self.cfg.open_z))) if status == "firing" and z > 0 else 1.0,
            evidence=ev,
        )

    def _expire(self, now: datetime) -> list[Finding]:
        """Clear open edges that stopped reporting (their job ended)."""
        stale = np.flatnonzero(self.hyst.is_open & (self.polls - self.last_seen > self.cfg.expire_polls))
        out = []
        for e in stale.tolist():
            self.hyst.is_open[e] = False
            self.hyst.bad_run[e] = 0
            if e in self._in_path:
                self._in_path.discard(e)
                continue
            comm, chan, src, dst = (int(v) for v in self._label[e])
            key = (comm, src, dst)
            chans = self.pair_open.get(key, set())
            chans.discard(chan)
            if chans:
                continue
            self.pair_open.pop(key, None)
            where = self._where.pop(key, {})
            out.append(
                Finding(
                    kind=Kind.NCCL_HOP_SLOW,
                    entity=self._entity(comm, src, dst),
                    status="cleared",
                    time=now,
                    severity=Severity.WARNING,
                    summary=f"hop rank {src} -> {dst} stopped reporting for {self.cfg.expire_polls} polls "
                    "(job ended?): closed",
                    detector=f"{self.name}/{self.version}",
                    port=where.get("port"),
                    link=where.get("link"),
                    evidence={"expired_after_polls": self.cfg.expire_polls},
                )
            )
        return out
