"""Compute stragglers: the rank that arrives last at every collective of its communicator.

NCCL collectives are synchronous. A rank that enters late (a slow GPU, a throttled clock, a
busy host CPU, a slow data loader on one node) starts its kernels last, and since the
collective ends together on every rank, its kernels run *shortest*, while every other rank's
run long, waiting for it. A detector that looks for the slowest rank never sees it; this one
looks for the rank whose durations fall short of its peers' by the same margin, collective
after collective (Greyhound/Falcon, Holmes and Mycroft localize stragglers the same way).

Rules, per collective instance (communicator, collective, ``seq``), then per rank:

- A rank's duration in an instance is its whole-collective row, else the median of its
  channel rows. Its *deficit* is ``1 - duration / median duration of the instance's ranks``:
  the share of the collective it spent not waiting for someone else. This needs no
  synchronised clocks.
- Where rows carry ``start_time``, the rank's *start skew* is its arrival minus the instance's
  median arrival. It is evidence only (host clocks may disagree by more than the skew), and
  the finding says whether it agrees with the deficit.
- Per poll, a cell (communicator group, rank) scores the median deficit over the poll's
  instances; the last ``window`` polls' median is compared with the group's other ranks
  (robust z). It opens when z >= ``open_z`` and the windowed deficit is at least
  ``open_deficit``, and holds while above the close thresholds. An instance with fewer than
  ``min_ranks`` ranks, and a group with fewer than ``min_peers``, says nothing.
- A job-wide slowdown moves every rank together: no deficit, no finding. A slow rank (its own
  kernels long) is the channel detector's, not this one's.

Findings are per (communicator, rank): compute-side, on the rank's host and GPU, never on a
port or link.

State is bounded: a cell unseen for ``expire_polls`` polls and not open is forgotten (its
rows compacted away, all at once), an open one is first cleared as stopped reporting, and at
most ``max_groups`` groups and ``max_cells`` cells are live; rows past them are counted in
``over_capacity``, not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.schemas import RecordKind
from graywire.detectors.base import EntityIndex, Hysteresis, HysteresisConfig, KeyIndex, RollingWindow, Scores
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.detectors.robust import MAD_TO_SIGMA, group_median, group_median_mad


@dataclass(frozen=True, slots=True)
class NcclStragglerConfig:
    window: int = 3  # polls in the scored median (2 of 3 must be late)
    open_z: float = 5.0
    open_deficit: float = 0.03  # at least 3% of the collective spent not waiting
    close_z: float = 2.5
    close_deficit: float = 0.015
    min_scale: float = 0.004  # floor on the peers' spread of windowed deficits
    min_ranks: int = 4  # ranks an instance needs before its deficits mean anything
    min_peers: int = 4  # ranks of a group with full windows before any is judged
    #: A cell not seen for this many polls (its job ended, or stopped reporting) is closed,
    #: then forgotten; the state is compacted this often too.
    expire_polls: int = 30
    #: Live groups (communicator, collective, size bucket) and cells (group, rank) at most:
    #: pushed data can name new communicators for ever. Rows past them are counted, not judged.
    max_groups: int = 16384
    max_cells: int = 524288
    #: Start skew agrees with the deficit when within this share of it (both in seconds).
    skew_agreement: float = 0.5
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=1, close_after=3)
    )


def _codes(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Batch-local integer codes of a string column, and their dictionary."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    return arr.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), arr.dictionary


def _first_index(inv: np.ndarray, n: int) -> np.ndarray:
    first = np.zeros(n, dtype=np.int64)
    first[inv[::-1]] = np.arange(inv.size)[::-1]
    return first


@dataclass(frozen=True, slots=True, kw_only=True)
class _StragglerScores(Scores):
    """Per judged cell: its scores and the evidence a finding shows."""

    x: np.ndarray  # this poll's deficit
    wmed: np.ndarray  # windowed deficit
    z: np.ndarray
    peer_center: np.ndarray  # the group's median windowed deficit
    peer_scale: np.ndarray
    peers: np.ndarray
    inst_count: np.ndarray  # instances the cell was in this poll
    last: np.ndarray  # of which it arrived last
    inst_med: np.ndarray  # median duration of its first instance
    skew: np.ndarray  # median start skew (NaN: no start times)
    first_row: np.ndarray  # its first value in the poll's _PerRank


class NcclStraggler:
    """The rank persistently last to arrive: shortest own durations, every peer waiting for it."""

    name = "nccl_straggler"
    version = "1"
    consumes = RecordKind.NCCL_TIMING
    kinds = (Kind.NCCL_STRAGGLER,)

    def __init__(self, cfg: NcclStragglerConfig | None = None) -> None:
        self.cfg = cfg or NcclStragglerConfig()
        self.groups = EntityIndex(self.cfg.max_groups)  # communicator|collective|size bucket -> id
        self.cells = KeyIndex(self.cfg.max_cells)  # group id << 32 | rank -> cell id
        self.over_capacity = 0  # rows left out because the group or cell cap was reached
        self._crowded = False
        self.windows = RollingWindow(self.cfg.window)
        self.last_seen = np.zeros(0, dtype=np.int64)
        self.hyst = Hysteresis(self.cfg.hysteresis)
        self.polls = 0
        self.rank_open: dict[tuple[str, int], set[int]] = {}  # (communicator, rank) -> open cells
        self._cell_where: dict[int, dict[str, Any]] = {}

    def _grow(self, n: int) -> None:
        if n > self.last_seen.size:
            self.windows.grow(n)
            self.last_seen = np.concatenate([self.last_seen, np.zeros(n - self.last_seen.size, np.int64)])
            self.hyst.grow(n)

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []
        dur = batch.column("duration_seconds").to_numpy(zero_copy_only=False)
        ok = np.isfinite(dur) & (dur > 0) & batch.column("seq").is_valid().to_numpy(zero_copy_only=False)
        if not ok.all():
            batch = batch.filter(pa.array(ok))
            dur = dur[ok]
        now = batch.column("time")[0].as_py() if batch.num_rows else None
        if batch.num_rows == 0 or now is None:
            return []
        per = _PerRank.of(batch, dur)
        if per is None:
            return []
        self.polls += 1
        scores = self._score(per)
        if scores is None:
            return self._expire(now)
        decision = self.hyst.decide(scores)
        out = self._expire(now)
        if not decision:
            return out
        s = scores
        for status, c, j in decision.changes():
            r = int(s.first_row[j])
            stats = {
                "deficit": float(s.x[j]),
                "windowed_deficit": float(s.wmed[j]),
                "robust_z": float(s.z[j]),
                "peer_median_deficit": float(s.peer_center[j]),
                "peer_spread": float(s.peer_scale[j]),
                "peers": int(s.peers[j]),
                "instances": int(s.inst_count[j]),
                "last_to_arrive_share": float(s.last[j] / max(1, s.inst_count[j])),
                "instance_median_seconds": float(s.inst_med[j]),
                "start_skew_seconds": None if math.isnan(s.skew[j]) else float(s.skew[j]),
            }
            out += self._roll_up(status, c, now, per.describe(r), stats)
        return out

    def _score(self, per: _PerRank) -> _StragglerScores | None:
        """Each cell's windowed deficit against its group's other ranks (robust z), judged once
        its window is full and the group has ``min_peers``; None when no instance is usable."""
        cfg = self.cfg
        # Per instance: the ranks' median duration and arrival; each rank's deficit and skew.
        n_inst = int(per.inst.max()) + 1
        present = np.bincount(per.inst, minlength=n_inst)
        med = group_median(per.dur, per.inst, n_inst)
        deficit = 1.0 - per.dur / med[per.inst]
        skew = np.full(per.dur.size, np.nan)
        has_start = np.isfinite(per.start)
        if has_start.any():
            s_med = group_median(per.start[has_start], per.inst[has_start], n_inst)
            skew[has_start] = per.start[has_start] - s_med[per.inst[has_start]]
        usable = present[per.inst] >= cfg.min_ranks
        if not usable.any():
            return None
        if self.polls % cfg.expire_polls == 0 or self._crowded:
            self._compact()
        # Per cell (group, rank): the poll's median over its instances.
        # Ids only for what is judged: groups and cells with a usable value.
        g_ids = np.full(len(per.group_keys), -1, dtype=np.int64)
        g_used = np.unique(per.group_of[usable])
        g_ids[g_used] = self.groups.ids(per.group_keys.take(pa.array(g_used)))
        g_val = g_ids[per.group_of]
        cell = np.full(per.rank.size, -1, dtype=np.int64)
        take = usable & (g_val >= 0)
        cell[take] = self.cells.ids((g_val[take] << 32) | (per.rank[take] & 0xFFFFFFFF), group=g_val[take])
        left_out = usable & (cell < 0)
        if left_out.any():
            self.over_capacity += int(per.rows[left_out].sum())
            self._crowded = True  # compact at the next poll: stale rows may make room
            usable &= cell >= 0
            if not usable.any():
                return None
        cell, deficit, skew, rows = cell[usable], deficit[usable], skew[usable], np.flatnonzero(usable)
        ids, c_inv = np.unique(cell, return_inverse=True)
        self._grow(self.cells.n)
        x = group_median(deficit, c_inv, ids.size)
        last = np.zeros(ids.size)
        # How often the cell was the very last to arrive (largest deficit of its instance).
        inst_of = per.inst[usable]
        top = np.full(n_inst, -np.inf)
        np.maximum.at(top, inst_of, deficit)
        np.add.at(last, c_inv, (deficit >= top[inst_of]).astype(np.float64))
        inst_count = np.bincount(c_inv, minlength=ids.size)
        skew_ok = np.isfinite(skew)
        skew_cell = np.full(ids.size, np.nan)
        if skew_ok.any():
            skew_cell = group_median(skew[skew_ok], c_inv[skew_ok], ids.size)
        self.windows.push(ids, x)
        self.last_seen[ids] = self.polls
        full = self.windows.full(ids)
        wmed = self.windows.median(ids)
        # Peers: the other ranks of the same group, by their windowed deficits.
        first_row = rows[_first_index(c_inv, ids.size)]
        group_of_cell = g_ids[per.group_of[first_row]]
        used_g, gc_inv = np.unique(group_of_cell, return_inverse=True)
        center = np.full(used_g.size, np.nan)
        spread = np.full(used_g.size, np.nan)
        if full.any():
            center, spread = group_median_mad(wmed[full], gc_inv[full], used_g.size)
        peers = np.bincount(gc_inv[full], minlength=used_g.size)
        scale = np.maximum(MAD_TO_SIGMA * np.nan_to_num(spread, nan=0.0), cfg.min_scale)
        z = (wmed - np.nan_to_num(center[gc_inv], nan=0.0)) / scale[gc_inv]
        enough = full & (peers[gc_inv] >= cfg.min_peers)
        opening = (z >= cfg.open_z) & (wmed >= cfg.open_deficit)
        holding = (z >= cfg.close_z) & (wmed >= cfg.close_deficit)
        e = enough
        return _StragglerScores(
            ids=ids[e], bad=opening[e], holding=holding[e], x=x[e], wmed=wmed[e], z=z[e],
            peer_center=np.nan_to_num(center[gc_inv], nan=0.0)[e], peer_scale=scale[gc_inv][e],
            peers=peers[gc_inv][e], inst_count=inst_count[e], last=last[e],
            inst_med=med[per.inst[first_row]][e], skew=skew_cell[e], first_row=first_row[e],
        )  # fmt: skip

    # -- incidents ------------------------------------------------------------------------------------
    def _roll_up(
        self, status: str, cell: int, now: datetime, where: dict[str, Any], stats: dict[str, Any]
    ) -> list[Finding]:
        """One incident per (communicator, rank), however many collectives and sizes show it."""
        key = (where["communicator"], where["rank"])
        open_cells = self.rank_open.setdefault(key, set())
        if status == "firing":
            first = not open_cells
            open_cells.add(cell)
            self._cell_where[cell] = where
            if not first:
                return []
        else:
            open_cells.discard(cell)
            self._cell_where.pop(cell, None)
            if open_cells:
                return []
            del self.rank_open[key]
        return [self._finding(status, now, where, stats)]

    def _finding(self, status: str, now: datetime, where: dict[str, Any], stats: dict[str, Any]) -> Finding:
        host, device, rank, comm = where["host"], where["device"], where["rank"], where["communicator"]
        gpu = f"GPU {device}" if device is not None else "GPU ?"
        late_s = stats["windowed_deficit"] * stats["instance_median_seconds"]
        skew = stats["start_skew_seconds"]
        if skew is None:
            clocks = "no start times: judged by durations only (clock-free)"
        elif abs(skew - late_s) <= self.cfg.skew_agreement * max(late_s, 1e-9):
            clocks = "start skew agrees with the duration deficit (host clocks in step)"
        else:
            clocks = "start skew disagrees with the duration deficit: host clocks differ; durations decide"
        if status == "firing":
            summary = (
                f"rank {rank} of {comm} ({host} {gpu}) arrives last at its collectives: its kernels run "
                f"{stats['windowed_deficit']:.0%} shorter than its {stats['peers'] - 1} peers' "
                f"(~{late_s * 1e3:.2f} ms late each time), every other rank waits for it: "
                "a compute straggler on this host"
            )
        else:
            summary = f"rank {rank} of {comm} ({host}) arrives with its peers again"
        return Finding(
            kind=Kind.NCCL_STRAGGLER,
            entity=f"{comm}|rank {rank}",
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.WARNING,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=host,
            score=float(stats["robust_z"]),
            confidence=float(min(1.0, stats["robust_z"] / (2 * self.cfg.open_z)))
            if status == "firing"
            else 1.0,
            evidence={
                **where,
                **stats,
                "late_seconds": late_s,
                "signal": "clock-free: own durations shortest while peers wait",
                "clocks": clocks,
                "side": "host",
                "window_polls": self.cfg.window,
                "expected": f"deficit < {self.cfg.open_deficit:.0%} of the collective, like its peers",
            },
        )

    def _compact(self) -> None:
        """Forget cells unseen for ``expire_polls`` polls that are not open, and groups left
        without cells: ended jobs, or a pusher naming new communicators for ever.

        Rows are dropped and renumbered densely in one pass over the arrays (order kept, so
        findings do not depend on when it ran); only the few open cells' maps are remapped in
        Python. A cell that comes back starts afresh.
        """
        self._crowded = False
        n = self.cells.n
        keep = ~((self.polls - self.last_seen[:n] > self.cfg.expire_polls) & ~self.hyst.is_open[:n])
        key = self.cells.key_of[keep]
        g_live = np.zeros(len(self.groups.keys), dtype=bool)
        g_live[key >> 32] = True
        if keep.all() and g_live.all():
            return
        new_id = np.cumsum(keep) - 1
        new_g = np.cumsum(g_live) - 1
        self.groups.keep(g_live)
        self.cells.rekey((new_g[key >> 32] << 32) | (key & 0xFFFFFFFF))
        self.windows.keep(keep)
        self.hyst.keep(keep)
        self.last_seen = self.last_seen[:n][keep]
        self.rank_open = {k: {int(new_id[c]) for c in v} for k, v in self.rank_open.items()}
        self._cell_where = {int(new_id[c]): w for c, w in self._cell_where.items()}

    def _expire(self, now: datetime) -> list[Finding]:
        """Close ranks whose late cells stopped reporting: an ended job leaves nothing open."""
        n = self.hyst.is_open.size
        stale = np.flatnonzero(self.hyst.is_open & (self.polls - self.last_seen[:n] > self.cfg.expire_polls))
        out: list[Finding] = []
        for c in stale.tolist():
            self.hyst.is_open[c] = False
            self.hyst.bad_run[c] = 0
            where = self._cell_where.get(c)
            if where is None:
                continue
            stats = {"windowed_deficit": 0.0, "instance_median_seconds": 0.0, "start_skew_seconds": None,
                     "robust_z": 0.0, "peers": 0}  # fmt: skip
            why = (
                f"rank {where['rank']} of {where['communicator']} stopped reporting for "
                f"{self.cfg.expire_polls} polls (job ended?): closed"
            )
            out += [replace(f, summary=why) for f in self._roll_up("cleared", c, now, where, stats)]
        return out


@dataclass(slots=True)
class _PerRank:
    """One value per (collective instance, rank) of a poll, with its group and where it ran."""

    batch: pa.RecordBatch
    inst: np.ndarray  # instance id per value (batch-local)
    group_of: np.ndarray  # batch-local group index per value
    group_keys: pa.Array  # communicator|collective|log2 size per batch-local group
    rank: np.ndarray
    dur: np.ndarray
    start: np.ndarray  # seconds since the epoch, NaN where unknown
    row: np.ndarray  # a batch row of the value
    rows: np.ndarray  # how many batch rows the value stands for (counted when left out)

    @classmethod
    def of(cls, batch: pa.RecordBatch, dur: np.ndarray) -> _PerRank | None:
        comm, comm_dict = _codes(batch.column("communicator"))
        coll, coll_dict = _codes(batch.column("collective"))
        seq = batch.column("seq").to_numpy(zero_copy_only=False).astype(np.int64)
        rank = batch.column("rank").to_numpy(zero_copy_only=False).astype(np.int64)
        size = batch.column("message_bytes").fill_null(0).to_numpy(zero_copy_only=False)
        bucket = np.floor(np.log2(np.maximum(size, 1))).astype(np.int64)
        whole = batch.column("channel").is_null().to_numpy(zero_copy_only=False)
        if "start_time" in batch.schema.names:
            st = batch.column("start_time").cast(pa.int64())
            start = st.to_numpy(zero_copy_only=False).astype(np.float64) / 1e6
            if st.null_count:
                start[~st.is_valid().to_numpy(zero_copy_only=False)] = np.nan
        else:
            start = np.full(batch.num_rows, np.nan)
        # Instance = (communicator, collective, seq); value = (instance, rank), whole rows first.
        cc = comm * len(coll_dict) + coll
        order = np.lexsort((rank, seq, cc))
        ks = np.stack([cc[order], seq[order]])
        new_inst = np.concatenate(([True], np.any(ks[:, 1:] != ks[:, :-1], axis=0)))
        inst_sorted = np.cumsum(new_inst) - 1
        inst = np.empty_like(inst_sorted)
        inst[order] = inst_sorted
        vkey = inst * (int(rank.max()) + 1) + rank
        # A rank with a whole-collective row is judged by it; else by its channels' median.
        has_whole = np.zeros(batch.num_rows, dtype=bool)
        if whole.any():
            wk = np.unique(vkey[whole])
            has_whole = np.isin(vkey, wk)
        keep = whole | ~has_whole
        if not keep.any():
            return None
        uk, v_inv = np.unique(vkey[keep], return_inverse=True)
        rows_kept = np.flatnonzero(keep)
        n_val = uk.size
        v_dur = group_median(dur[keep], v_inv, n_val)
        v_start = np.full(n_val, np.nan)
        st_k = start[keep]
        fin = np.isfinite(st_k)
        if fin.any():
            v_start_all = np.full(n_val, np.inf)
            np.minimum.at(v_start_all, v_inv[fin], st_k[fin])
            v_start = np.where(np.isfinite(v_start_all), v_start_all, np.nan)
        v_row = rows_kept[_first_index(v_inv, n_val)]
        # Groups (communicator, collective, size bucket) of the values, named once each.
        gcombo = (comm[v_row] * len(coll_dict) + coll[v_row]) * 64 + bucket[v_row]
        ug, g_inv = np.unique(gcombo, return_inverse=True)
        k = len(coll_dict)
        names = [
            f"{comm_dict[int(u // 64 // k)]}|{coll_dict[int((u // 64) % k)]}|{int(u % 64)}"
            for u in ug.tolist()
        ]
        n_rows = np.bincount(v_inv, minlength=n_val)
        keys = pa.array(names, pa.string())
        return cls(batch, inst[v_row], g_inv, keys, rank[v_row], v_dur, v_start, v_row, n_rows)

    def describe(self, j: int) -> dict[str, Any]:
        """Where value ``j`` ran: job, communicator, collective, size, rank, host, GPU."""
        rec = self.batch.slice(int(self.row[j]), 1).to_pylist()[0]
        return {
            "job": rec.get("job"),
            "communicator": rec.get("communicator"),
            "collective": rec.get("collective"),
            "message_bytes": rec.get("message_bytes"),
            "rank": int(rec["rank"]),
            "nranks": rec.get("nranks"),
            "host": rec.get("host"),
            "device": rec.get("device"),
        }
