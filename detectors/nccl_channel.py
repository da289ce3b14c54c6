"""NCCL channel tail-latency outliers: one (rank, channel) far slower than its peers.

Peers are the other ranks on the same channel of the same communicator, collective and
message-size bucket at the same poll, so a whole-job slowdown (checkpoint, data loader, global
congestion) moves everyone and blames no one, and the small wait a slow hop imposes on its
whole ring is shared by all peers. Each (rank, channel)'s log-duration residual from the peer
median is kept for the last ``window`` polls; the score is that windowed median against the
peers' windowed medians (robust z), so a single slow sample never opens anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind
from graywire.detectors.base import (
    EntityIndex,
    Hysteresis,
    HysteresisConfig,
    RollingWindow,
    Scores,
    resume_open,
)
from graywire.detectors.findings import Finding, Kind, Severity
from graywire.detectors.robust import MAD_TO_SIGMA, group_median, group_median_mad


@dataclass(frozen=True, slots=True)
class NcclChannelConfig:
    window: int = 5  # polls in the median that is scored (3 of 5 must be slow)
    open_z: float = 5.0  # robust z of the windowed residual to open
    open_ratio: float = 1.05  # and at least this much slower than the peer median
    close_z: float = 2.5  # stays open while above both close thresholds
    close_ratio: float = 1.03
    min_scale: float = (
        0.005  # floor on the peers' spread (log units): identical peers are not infinitely sure
    )
    min_peers: int = 8
    #: An open rank not seen for this many polls (its job ended, or stopped reporting) clears.
    expire_polls: int = 30
    #: A column (one channel, ranks whose NICs hang off one leaf) with this many distinct hosts
    #: elevated is a slow path: the switch side, not those hosts (never blame a switch on fewer).
    min_path_hosts: int = 3
    #: A cell counts toward a column only while at most this share of its rank's channels is
    #: elevated (a slow rank elevates its whole row, and is the host's problem).
    max_row_share: float = 0.5
    #: A cell slow on its channel alone waits up to this many polls while its column is forming
    #: (``min_path_hosts`` - 1 other hosts behind its leaf slower on that channel in their
    #: latest sample): the ranks behind a slow leaf cross the window one or two polls apart, and
    #: the first of them is the path's, not its host's. A cell with no such column fires at once.
    path_wait_polls: int = 3
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=1, close_after=3)
    )


class NcclChannelOutlier:
    """Per-(rank, channel) latency outliers against communicator peers, localized to host and NIC."""

    name = "nccl_channel_outlier"
    version = "3"
    consumes = RecordKind.NCCL_TIMING
    kinds = (Kind.NCCL_CHANNEL_SLOW, Kind.NCCL_PATH_SLOW)

    def __init__(self, fabric: Fabric | None = None, cfg: NcclChannelConfig | None = None) -> None:
        self.fabric = fabric
        self.cfg = cfg or NcclChannelConfig()
        self.groups = EntityIndex()  # communicator|collective|size bucket -> stable id
        self._known_keys = np.zeros(0, dtype=np.int64)
        self._known_ids = np.zeros(0, dtype=np.int64)
        self._entity_label: dict[int, tuple[int, int, int]] = {}
        self._n_entities = 0
        self.rank_open: dict[tuple[int, int], set[int]] = {}  # (group, rank) -> slow channels
        self.last_seen = np.zeros(0, dtype=np.int64)  # poll number an entity last reported
        self.polls = 0
        self._where: dict[tuple[int, int], tuple[str | None, str | None]] = {}  # rank -> (host, port)
        self.windows = RollingWindow(self.cfg.window)
        self.hyst = Hysteresis(self.cfg.hysteresis)
        self._label = np.zeros((0, 3), dtype=np.int64)  # entity -> (group, rank, channel)
        self._leaf_cache: dict[int, str] = {}  # entity -> the leaf its rank's NIC hangs off
        self._host_of: dict[int, str | None] = {}
        self._cell_path: dict[int, tuple[int, str]] = {}  # open cell -> (group, leaf) it is part of
        self.path_open: dict[tuple[int, str], tuple[list[int], list[str]]] = {}  # -> (channels, hosts)
        self._held: dict[int, int] = {}  # open cell not yet reported -> poll it opened at

    def _group_keys(self, batch: pa.RecordBatch) -> pa.Array:
        """``communicator|collective|log2 size`` per row, built on the dictionaries (few strings)."""
        size = batch.column("message_bytes").fill_null(0).to_numpy(zero_copy_only=False)
        bucket = np.floor(np.log2(np.maximum(size, 1))).astype(np.int64)
        comm = batch.column("communicator")
        coll = batch.column("collective")
        if pa.types.is_dictionary(comm.type) and pa.types.is_dictionary(coll.type):
            cc = comm.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            kc = coll.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            combo = (cc * len(coll.dictionary) + kc) * 64 + bucket
            uniq, inv = np.unique(combo, return_inverse=True)
            b = uniq % 64
            k = (uniq // 64) % len(coll.dictionary)
            c = uniq // 64 // len(coll.dictionary)
            names = [
                f"{comm.dictionary[int(ci)]}|{coll.dictionary[int(ki)]}|{int(bi)}"
                for ci, ki, bi in zip(c, k, b, strict=True)
            ]
            return pa.array(names, type=pa.string()).take(pa.array(inv))
        return pc.binary_join_element_wise(
            comm.cast(pa.string()), coll.cast(pa.string()), pa.array(bucket).cast(pa.string()), "|"
        )

    def _entity_ids(self, group: np.ndarray, rank: np.ndarray, chan: np.ndarray) -> np.ndarray:
        """Stable ids for (group, rank, channel), found by binary search over packed int keys."""
        packed = (group << 40) | ((rank & 0xFFFFFF) << 16) | (chan & 0xFFFF)
        if self._known_keys.size:
            pos = np.searchsorted(self._known_keys, packed)
            hit = self._known_keys[np.minimum(pos, self._known_keys.size - 1)] == packed
        else:
            hit = np.zeros(packed.size, dtype=bool)
        if not hit.all():
            new = np.unique(packed[~hit])
            new_ids = np.arange(self._n_entities, self._n_entities + new.size)
            self._n_entities += new.size
            keys = np.concatenate([self._known_keys, new])
            vals = np.concatenate([self._known_ids, new_ids])
            order = np.argsort(keys, kind="stable")
            self._known_keys, self._known_ids = keys[order], vals[order]
            for key, i in zip(new.tolist(), new_ids.tolist(), strict=True):
                self._entity_label[i] = (key >> 40, (key >> 16) & 0xFFFFFF, key & 0xFFFF)
            self._label = np.vstack(
                [self._label, np.stack([new >> 40, (new >> 16) & 0xFFFFFF, new & 0xFFFF], axis=1)]
            )
            pos = np.searchsorted(self._known_keys, packed)
        return self._known_ids[pos]

    def entity_name(self, ent: int) -> str:
        """The incident entity: communicator|collective|size bucket|rank (channels roll up)."""
        g, r, _ = self._entity_label[ent]
        return f"{self.groups.keys[g]}|rank {r}"

    def _grow(self, n: int) -> None:
        if n > self.last_seen.size:
            self.windows.grow(n)
            self.last_seen = np.concatenate([self.last_seen, np.zeros(n - self.last_seen.size, np.int64)])
            self.hyst.grow(n)

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """A rank's slow channels left open by a restart (:class:`Resumable`): they close once
        the rank runs in line with its peers again, or expire when it stops reporting (a job
        that ended), as they would have. Slow paths are not taken back: they stay as they are."""
        taken = []
        for inc in incidents:
            if inc.get("kind") != Kind.NCCL_CHANNEL_SLOW:
                continue
            group, sep, who = str(inc.get("entity") or "").rpartition("|")
            evidence = inc.get("evidence") or {}
            chans = [c for c in evidence.get("channels") or [evidence.get("channel")]
                     if isinstance(c, int) and 0 <= c < 0xFFFF]  # fmt: skip
            rank = who.removeprefix("rank ")
            if not sep or not rank.isdigit() or int(rank) >= 0xFFFFFF or not chans:
                continue
            g, r = int(self.groups.ids(pa.array([group]))[0]), int(rank)
            ents = self._entity_ids(np.full(len(chans), g), np.full(len(chans), r), np.array(chans))
            self._grow(self._n_entities)
            resume_open(self.hyst, ents)
            self.last_seen[ents] = self.polls
            self.rank_open[(g, r)] = set(chans)
            self._where[(g, r)] = (inc.get("node"), inc.get("port"))
            taken.append(inc)
        return taken

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        ctx = self._score(batch)
        if ctx is None:
            return []
        decision = self.hyst.decide(ctx)
        now = ctx.batch.column("time")[0].as_py()
        expired = self._expire(now)
        if not decision and not self._held:
            return expired
        opened, closed = decision.opened, decision.closed
        batch, ids, first_row, wmed, z = ctx.batch, ctx.cells, ctx.first_row, ctx.wmed, ctx.z
        elevated, cfg = ctx.elevated, self.cfg
        # A column cell is slow on its channel while most of its rank's row is not: several slow
        # ranks behind one leaf fill their rows, a slow path fills only its channels.
        lab = self._label[ids]
        _, r_inv = np.unique((lab[:, 0] << 24) | lab[:, 1], return_inverse=True)
        row_share = (np.bincount(r_inv, weights=elevated) / np.bincount(r_inv))[r_inv]
        in_col = elevated & (row_share <= cfg.max_row_share)
        columns = self._columns(ids[in_col], batch, first_row[in_col], wmed[in_col], z[in_col])
        lone = set(ids[in_col].tolist())
        for e in opened.tolist():
            g_id, _, chan = self._entity_label[e]
            j = ctx.at(e)
            assert j is not None  # a changed cell is one of the poll's
            leaf = self._leaf_of_cell(e, batch, int(first_row[j]))
            col = columns.get((g_id, chan, leaf))
            if col is not None and len(col["hosts"]) >= self.cfg.min_path_hosts:
                self._cell_path[e] = (g_id, leaf)
            elif e in lone and cfg.path_wait_polls > 0 and self._column_forming(e, ctx):
                self._held[e] = self.polls
        opened, closed, joined = self._release_held(opened, closed, columns, ctx)
        out = expired
        out += self._rank_updates(now, opened, closed, ctx)
        out += self._path_updates(now, np.concatenate([opened, joined]), closed, columns, ctx)
        return out

    def _column_forming(self, ent: int, ctx: _PollView) -> bool:
        """Whether ``min_path_hosts`` - 1 other hosts behind the cell's leaf ran slower than their
        peers on its channel in this poll's sample: a column whose windows have yet to fill."""
        g_id, _, chan = self._entity_label[ent]
        leaf = self._leaf_cache.get(ent, "?")
        lab = self._label[ctx.cells]
        near = np.flatnonzero(
            (lab[:, 0] == g_id) & (lab[:, 2] == chan) & (ctx.resid >= math.log(self.cfg.open_ratio))
        )
        hosts = {
            self._host_of.get(c)
            for c, row in zip(ctx.cells[near].tolist(), ctx.first_row[near].tolist(), strict=True)
            if c != ent and self._leaf_of_cell(c, ctx.batch, row) == leaf
        }
        hosts.discard(self._host_of.get(ent))
        return len(hosts) >= self.cfg.min_path_hosts - 1

    def _release_held(
        self,
        opened: np.ndarray,
        closed: np.ndarray,
        columns: dict[tuple[int, int, str], dict],
        ctx: _PollView,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Held cells: part of a path once their column fills (``joined``), reported as their
        rank's once it does not within ``path_wait_polls`` or stops forming, forgotten if they
        close first (never reported, so never cleared). Returns what the rank and path updates see."""
        if not self._held:
            return opened, closed, np.zeros(0, np.int64)
        release, joined, dropped = [], [], []
        for e, since in list(self._held.items()):
            if not self.hyst.is_open[e]:
                del self._held[e]
                dropped.append(e)
                continue
            g_id, _, chan = self._entity_label[e]
            key = (g_id, self._leaf_cache.get(e, "?"))
            col = columns.get((g_id, chan, key[1]))
            if col is not None and len(col["hosts"]) >= self.cfg.min_path_hosts:
                del self._held[e]
                self._cell_path[e] = key
                joined.append(e)
            elif ctx.at(e) is not None and (
                self.polls - since >= self.cfg.path_wait_polls or not self._column_forming(e, ctx)
            ):
                del self._held[e]
                release.append(e)
        held = np.fromiter(self._held, np.int64, len(self._held))
        opened = np.union1d(opened[~np.isin(opened, held)], np.array(release, np.int64))
        closed = closed[~np.isin(closed, np.array(dropped, np.int64))]
        return opened, closed, np.array(joined, np.int64)

    def _score(self, batch: pa.RecordBatch) -> _PollView | None:
        """Each (rank, channel)'s windowed residual against its peers' (robust z), judged once
        its window is full and it has ``min_peers`` peers."""
        cfg = self.cfg
        if batch.num_rows == 0:
            return None
        batch = batch.filter(pc.is_valid(batch.column("channel")))
        dur = batch.column("duration_seconds").to_numpy(zero_copy_only=False)
        ok = np.isfinite(dur) & (dur > 0)
        if not ok.all():
            batch = batch.filter(pa.array(ok))
            dur = dur[ok]
        if batch.num_rows == 0:
            return None
        if self.polls and self.polls % cfg.expire_polls == 0:
            self._compact()
        group_key = self._group_keys(batch)
        g_row = self.groups.ids(group_key)
        rank = batch.column("rank").to_numpy(zero_copy_only=False).astype(np.int64)
        chan = batch.column("channel").to_numpy(zero_copy_only=False).astype(np.int64)
        ent_row = self._entity_ids(g_row, rank, chan)
        self._grow(self._n_entities)
        # One value per (rank, channel) per poll: several calls of one collective in a poll
        # are summarized by their median, and peers are counted in entities, not rows.
        ids, first_row, e_inv = np.unique(ent_row, return_index=True, return_inverse=True)
        x = group_median(np.log(dur), e_inv, ids.size)
        # Peers share the channel too: a slow hop makes every rank of its ring wait a little,
        # which must not read as each of them being slow; a slow rank still stands out.
        used, g_ent = np.unique((g_row[first_row] << 16) | (chan[first_row] & 0xFFFF), return_inverse=True)
        n_groups = used.size
        med = group_median(x, g_ent, n_groups)
        peers = np.bincount(g_ent, minlength=n_groups)
        resid = x - med[g_ent]

        self.windows.push(ids, resid)
        self.polls += 1
        self.last_seen[ids] = self.polls
        full = self.windows.full(ids)
        wmed = self.windows.median(ids)
        # Score against the spread of the peers' *windowed* medians: like against like.
        center = np.full(n_groups, np.nan)
        spread = np.full(n_groups, np.nan)
        if full.any():
            center, spread = group_median_mad(wmed[full], g_ent[full], n_groups)
        scale = np.maximum(MAD_TO_SIGMA * np.nan_to_num(spread, nan=0.0), cfg.min_scale)
        z = (wmed - np.nan_to_num(center[g_ent], nan=0.0)) / scale[g_ent]
        enough = full & (peers[g_ent] >= cfg.min_peers)
        opening = (z >= cfg.open_z) & (wmed >= math.log(cfg.open_ratio))
        holding = (z >= cfg.close_z) & (wmed >= math.log(cfg.close_ratio))
        e = enough
        # Elevated: above the close thresholds, for the matrix view (slow rows and columns).
        return _PollView(ids=ids[e], bad=opening[e], holding=holding[e], batch=batch, cells=ids,
                         first_row=first_row, g_ent=g_ent, x=x, med=med, scale=scale, wmed=wmed,
                         resid=resid, z=z, peers=peers, elevated=holding & enough)  # fmt: skip

    # -- the rank x channel matrix -----------------------------------------------------------------
    def _leaf_of_cell(self, ent: int, batch: pa.RecordBatch, row: int) -> str:
        """The switch a cell's rank NIC hangs off (``?`` when the fabric model cannot say)."""
        leaf = self._leaf_cache.get(ent)
        if leaf is not None:
            return leaf
        leaf = "?"
        host, device = batch.column("host")[row].as_py(), batch.column("device")[row].as_py()
        if self.fabric is not None and host is not None and device is not None:
            i = int(self.fabric.lookup(pa.array([f"{host}/mlx5_{device}"]))[0])
            if i >= 0 and self.fabric.peer[i] >= 0:
                leaf = self.fabric.node_of(int(self.fabric.peer[i]))
        self._leaf_cache[ent] = leaf
        self._host_of[ent] = host
        return leaf

    def _why_no_leaf(self) -> str:
        if self.fabric is None:
            return "no fabric model"
        return (
            "the ranks' NICs are not known: the timings name no GPU (set the source's gpus_per_host, "
            "or read the jobs' NCCL_DEBUG logs with debug_pattern) or the model lacks them"
        )

    def _columns(
        self, ents: np.ndarray, batch: pa.RecordBatch, rows: np.ndarray, wmed: np.ndarray, z: np.ndarray
    ) -> dict[tuple[int, int, str], dict]:
        """Elevated cells grouped by (group, channel, leaf): a column of the rank x channel matrix."""
        cols: dict[tuple[int, int, str], dict] = {}
        if ents.size < self.cfg.min_path_hosts:
            return cols
        for e, row, w, zz in zip(ents.tolist(), rows.tolist(), wmed.tolist(), z.tolist(), strict=True):
            g_id, rank, chan = self._entity_label[e]
            leaf = self._leaf_of_cell(e, batch, row)
            col = cols.setdefault((g_id, chan, leaf), {"hosts": set(), "ranks": [], "excess": [], "z": []})
            col["hosts"].add(self._host_of.get(e))
            col["ranks"].append(rank)
            col["excess"].append(w)
            col["z"].append(zz)
        return cols

    def _rank_updates(
        self, now: datetime, opened: np.ndarray, closed: np.ndarray, ctx: _PollView
    ) -> list[Finding]:
        """Decisions are per cell; incidents are per rank: a slow NIC slows every channel of its
        rank, and on-call wants one incident for it, listing the channels."""
        out = []
        for status, ents in (("firing", opened), ("cleared", closed)):
            for e in ents.tolist():
                if e in self._cell_path:
                    continue
                g_id, rank, chan = self._entity_label[e]
                channels = self.rank_open.setdefault((g_id, rank), set())
                if status == "firing":
                    channels.add(chan)
                else:
                    channels.discard(chan)
                    if channels:
                        continue  # other channels of this rank are still slow
                    del self.rank_open[(g_id, rank)]
                f = self._finding(status, e, now, ctx, sorted(channels))
                self._where[(g_id, rank)] = (f.node, f.port)
                out.append(f)
        return out

    def _path_updates(
        self,
        now: datetime,
        opened: np.ndarray,
        closed: np.ndarray,
        columns: dict[tuple[int, int, str], dict],
        ctx: _PollView,
    ) -> list[Finding]:
        """One incident per (group, leaf) whose column of cells is slow: the network side."""
        out = []
        touched: set[tuple[int, str]] = set()
        for e in opened.tolist():
            if e in self._cell_path:
                touched.add(self._cell_path[e])
        for e in closed.tolist():
            key = self._cell_path.pop(e, None)
            if key is not None:
                touched.add(key)
        for key in sorted(touched):
            cells = [c for c, k in self._cell_path.items() if k == key]
            was_open = key in self.path_open
            if cells:
                chans = sorted({self._entity_label[c][2] for c in cells})
                # Fires when it opens and when it spreads to another channel, not as cells flicker.
                if was_open and set(chans) <= set(self.path_open[key][0]):
                    continue
                self.path_open[key] = (chans, [])
                out.append(self._path_finding("firing", key, cells, columns, now, ctx))
            elif was_open:
                del self.path_open[key]
                out.append(self._path_finding("cleared", key, [], columns, now, ctx))
        return out

    def _compact(self) -> None:
        """Forget (rank, channel) cells that stopped reporting and are not open: ended jobs.

        A long-running service sees job after job, each adding ranks x channels x collectives
        cells; without this the per-cell arrays grow for ever. Ids are renumbered densely and
        every structure keyed by them is remapped; a cell that comes back starts afresh.
        """
        n = self._n_entities
        dead = (self.polls - self.last_seen[:n] > self.cfg.expire_polls) & ~self.hyst.is_open[:n]
        if not dead.any():
            return
        keep = ~dead
        new_id = np.full(n, -1, dtype=np.int64)
        new_id[keep] = np.arange(int(keep.sum()))
        live = keep[self._known_ids]
        self._known_keys = self._known_keys[live]
        self._known_ids = new_id[self._known_ids[live]]
        self._label = self._label[:n][keep]
        self.windows.keep(keep)
        self.last_seen = self.last_seen[:n][keep]
        h = self.hyst
        h.bad_run, h.good_run, h.is_open = h.bad_run[:n][keep], h.good_run[:n][keep], h.is_open[:n][keep]

        def remap(d: dict[int, Any]) -> dict[int, Any]:
            return {int(new_id[e]): v for e, v in d.items() if e < n and keep[e]}

        self._entity_label = remap(self._entity_label)
        self._leaf_cache = remap(self._leaf_cache)
        self._host_of = remap(self._host_of)
        self._cell_path = remap(self._cell_path)
        self._held = remap(self._held)
        self._n_entities = int(keep.sum())

    def _expire(self, now: datetime) -> list[Finding]:
        """Clear ranks and paths whose slow cells stopped reporting: an ended job leaves no open incident."""
        stale = np.flatnonzero(self.hyst.is_open & (self.polls - self.last_seen > self.cfg.expire_polls))
        out = []
        for e in stale.tolist():
            self.hyst.is_open[e] = False
            self.hyst.bad_run[e] = 0
            if self._held.pop(e, None) is not None:
                continue  # never reported: nothing to close
            g_id, rank, chan = self._entity_label[e]
            comm = self.groups.keys[g_id].split("|")[0]
            path = self._cell_path.pop(e, None)
            if path is not None:
                if path in self.path_open and path not in self._cell_path.values():
                    del self.path_open[path]
                    what = f"slow path via {path[1]} in {comm}"
                    ent = self._path_entity(path)
                    out.append(self._expired_finding(Kind.NCCL_PATH_SLOW, ent, now, what, path[1], None))
                continue
            channels = self.rank_open.get((g_id, rank), set())
            channels.discard(chan)
            if channels:
                continue
            self.rank_open.pop((g_id, rank), None)
            host, port = self._where.pop((g_id, rank), (None, None))
            out.append(self._expired_finding(Kind.NCCL_CHANNEL_SLOW, self.entity_name(e), now,
                                             f"rank {rank} of {comm}", host, port))  # fmt: skip
        return out

    def _expired_finding(
        self, kind: str, entity: str, now: datetime, what: str, node: str | None, port: str | None
    ) -> Finding:
        return Finding(
            kind=kind,
            entity=entity,
            status="cleared",
            time=now,
            severity=Severity.WARNING,
            summary=f"{what} stopped reporting for {self.cfg.expire_polls} polls (job ended?): closed",
            detector=f"{self.name}/{self.version}",
            node=node if node != "?" else None,
            port=port,
            evidence={"expired_after_polls": self.cfg.expire_polls},
        )

    def _path_entity(self, key: tuple[int, str]) -> str:
        return f"{self.groups.keys[key[0]]}|path {key[1]}"

    def _matrix_scores(self, ent: int, ctx: _PollView) -> dict[str, float | int | str]:
        """Row and column scores of one cell: how many of its rank's channels are elevated (a
        slow host fills its row) and how many hosts behind the same leaf are elevated on its
        channel (a slow path fills a column)."""
        g_id, rank, chan = self._entity_label[ent]
        lab = self._label[ctx.cells]
        in_row = (lab[:, 0] == g_id) & (lab[:, 1] == rank)
        row_hot = int((in_row & ctx.elevated).sum())
        leaf = self._leaf_cache.get(ent, "?")
        col = np.flatnonzero((lab[:, 0] == g_id) & (lab[:, 2] == chan) & ctx.elevated)
        hosts = {
            self._host_of.get(int(e)) for e in ctx.cells[col].tolist() if self._leaf_cache.get(int(e)) == leaf
        }
        return {
            "row_elevated_channels": row_hot,
            "row_channels": int(in_row.sum()),
            "row_score": row_hot / max(1, int(in_row.sum())),
            "column_elevated_hosts_same_leaf": len(hosts),
            "leaf": leaf,
        }

    def _finding(self, status: str, ent: int, now: datetime, ctx: _PollView, channels: list[int]) -> Finding:
        j = ctx.at(ent)
        assert j is not None  # a changed cell is one of the poll's
        g = ctx.g_ent[j]
        row = int(ctx.first_row[j])
        duration, peer_med, scale = float(np.exp(ctx.x[j])), ctx.med[g], ctx.scale[g]
        wmed, latest, z, peers = ctx.wmed[j], ctx.resid[j], ctx.z[j], int(ctx.peers[g])
        batch = ctx.batch
        rec = batch.slice(row, 1).to_pylist()[0]
        host, device = rec.get("host"), rec.get("device")
        port = None
        if host is not None and device is not None:
            candidate = f"{host}/mlx5_{device}"
            if self.fabric is None or self.fabric.lookup(pa.array([candidate]))[0] >= 0:
                port = candidate
        slower = math.exp(latest) - 1  # this poll, vs peers
        matrix = self._matrix_scores(ent, ctx)
        if status == "firing":
            which = (
                f"channel {channels[0]}"
                if len(channels) == 1
                else f"channels {', '.join(map(str, channels))}"
            )
            summary = (
                f"rank {rec['rank']} of {rec['communicator']} ({host} GPU {device}): {which} slow, "
                f"channel {rec['channel']} {slower:.0%} slower than its {peers - 1} peers "
                f"in {rec['collective']} of {rec['message_bytes']} bytes"
            )
        else:
            summary = f"rank {rec['rank']} of {rec['communicator']} ({host}) back in line with its peers"
        return Finding(
            kind=Kind.NCCL_CHANNEL_SLOW,
            entity=self.entity_name(ent),
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=Severity.WARNING,
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=host,
            port=port,
            score=float(z),
            confidence=float(min(1.0, z / (2 * self.cfg.open_z))) if status == "firing" else 1.0,
            evidence={
                "job": rec["job"],
                "communicator": rec["communicator"],
                "collective": rec["collective"],
                "message_bytes": rec["message_bytes"],
                "rank": rec["rank"],
                "channel": rec["channel"],
                "channels": channels,
                "host": host,
                "device": device,
                "duration_seconds": duration,
                "peer_median_seconds": float(math.exp(peer_med)),
                "peer_spread_log": float(scale),
                "peers": peers,
                "slowdown_vs_peers": float(slower),
                "windowed_slowdown": float(math.exp(wmed) - 1),
                "robust_z": float(z),
                "window_polls": self.cfg.window,
                "pattern": "row" if len(channels) > 1 else "cell",
                "side": "host",
                **matrix,
            },
        )

    def _path_finding(
        self,
        status: str,
        key: tuple[int, str],
        cells: list[int],
        columns: dict[tuple[int, int, str], dict],
        now: datetime,
        ctx: _PollView,
    ) -> Finding:
        g_id, leaf = key
        comm, coll, bucket = self.groups.keys[g_id].split("|")
        node = None if leaf == "?" else leaf
        where = f"via {leaf}" if node else f"across hosts (switch unknown: {self._why_no_leaf()})"
        if status == "cleared":
            return Finding(
                kind=Kind.NCCL_PATH_SLOW, entity=self._path_entity(key), status="cleared", time=now,
                severity=Severity.WARNING, summary=f"slow path {where} in {comm} back in line with its peers",
                detector=f"{self.name}/{self.version}", node=node,
            )  # fmt: skip
        chans = sorted({self._entity_label[c][2] for c in cells})
        host_set = {h for c in cells if (h := self._host_of.get(c)) is not None}
        rank_set = {self._entity_label[c][1] for c in cells}
        zs, excess, col_stats = [], [], {}
        for c in cells:
            j = ctx.at(c)
            if j is not None:
                zs.append(float(ctx.z[j]))
                excess.append(float(ctx.wmed[j]))
        for ch in chans:
            col = columns.get((g_id, ch, leaf))
            if col is not None:
                host_set.update(h for h in col["hosts"] if h is not None)
                rank_set.update(col["ranks"])
                excess += [float(v) for v in col["excess"]]
                zs += [float(v) for v in col["z"]]
                col_stats[str(ch)] = {
                    "elevated_hosts": len(col["hosts"]),
                    "elevated_ranks": len(col["ranks"]),
                    "median_slowdown": float(math.exp(float(np.median(col["excess"]))) - 1),
                    "median_z": float(np.median(col["z"])),
                }
        hosts, ranks = sorted(host_set), sorted(rank_set)
        # Row scores of the ranks involved: a path leaves their other channels alone.
        lab = self._label[ctx.cells]
        row_scores = []
        for r in ranks:
            in_row = (lab[:, 0] == g_id) & (lab[:, 1] == r)
            n = int(in_row.sum())
            if n:
                row_scores.append(int((in_row & ctx.elevated).sum()) / n)
        med_slow = float(math.exp(float(np.median(excess))) - 1) if excess else 0.0
        z_med = float(np.median(zs)) if zs else 0.0
        which = f"channel {chans[0]}" if len(chans) == 1 else f"channels {', '.join(map(str, chans))}"
        return Finding(
            kind=Kind.NCCL_PATH_SLOW,
            entity=self._path_entity(key),
            status="firing",
            time=now,
            severity=Severity.WARNING,
            summary=(
                f"{which} of {comm} slow on {len(ranks)} ranks of {len(hosts)} hosts {where} "
                f"({med_slow:.0%} slower than peers), other channels of those ranks normal: "
                "the path (link/switch), not the hosts"
            ),
            detector=f"{self.name}/{self.version}",
            node=node,
            score=z_med,
            confidence=float(min(1.0, len(hosts) / (2 * self.cfg.min_path_hosts))),
            evidence={
                "communicator": comm,
                "collective": coll,
                "size_bucket_log2": int(bucket),
                "leaf": node,
                "channels": chans,
                "hosts": hosts,
                "ranks": ranks,
                "pattern": "column",
                "side": "network",
                "column_scores": col_stats,
                "row_score_median": float(np.median(row_scores)) if row_scores else None,
                "windowed_slowdown": med_slow,
                "robust_z_median": z_med,
                "min_path_hosts": self.cfg.min_path_hosts,
                "window_polls": self.cfg.window,
            },
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _PollView(Scores):
    """One poll's scores: ``ids`` are the judged cells; the arrays below cover every cell of
    the poll (``cells``, sorted), for the matrix view and the findings."""

    batch: pa.RecordBatch
    cells: np.ndarray
    first_row: np.ndarray
    g_ent: np.ndarray
    x: np.ndarray
    med: np.ndarray
    scale: np.ndarray
    wmed: np.ndarray
    resid: np.ndarray
    z: np.ndarray
    peers: np.ndarray
    elevated: np.ndarray

    def at(self, cell: int) -> int | None:
        """Position of ``cell`` in ``cells``, None when it did not report this poll."""
        j = int(np.searchsorted(self.cells, cell))
        return j if j < self.cells.size and self.cells[j] == cell else None
