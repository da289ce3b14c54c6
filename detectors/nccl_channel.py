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
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.model import Fabric
from detectors.base import EntityIndex, Hysteresis, HysteresisConfig
from detectors.findings import Finding
from detectors.robust import MAD_TO_SIGMA, group_median, group_median_mad


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
    hysteresis: HysteresisConfig = field(
        default_factory=lambda: HysteresisConfig(open_after=1, close_after=3)
    )


class NcclChannelOutlier:
    """Per-(rank, channel) latency outliers against communicator peers, localized to host and NIC."""

    name = "nccl_channel_outlier"
    version = "1"
    consumes = "nccl_timing"
    kinds = ("nccl_channel_slow",)

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
        self.hist = np.full((0, self.cfg.window), np.nan)
        self.count = np.zeros(0, dtype=np.int64)
        self.hyst = Hysteresis(self.cfg.hysteresis)

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
            pos = np.searchsorted(self._known_keys, packed)
        return self._known_ids[pos]

    def entity_name(self, ent: int) -> str:
        """The incident entity: communicator|collective|size bucket|rank (channels roll up)."""
        g, r, _ = self._entity_label[ent]
        return f"{self.groups.keys[g]}|rank {r}"

    def _grow(self, n: int) -> None:
        if n > self.count.size:
            extra = n - self.count.size
            self.hist = np.vstack([self.hist, np.full((extra, self.cfg.window), np.nan)])
            self.count = np.concatenate([self.count, np.zeros(extra, np.int64)])
            self.last_seen = np.concatenate([self.last_seen, np.zeros(extra, np.int64)])
            self.hyst.grow(n)

    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        cfg = self.cfg
        if batch.num_rows == 0:
            return []
        batch = batch.filter(pc.is_valid(batch.column("channel")))
        dur = batch.column("duration_seconds").to_numpy(zero_copy_only=False)
        ok = np.isfinite(dur) & (dur > 0)
        if not ok.all():
            batch = batch.filter(pa.array(ok))
            dur = dur[ok]
        if batch.num_rows == 0:
            return []
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

        slot = self.count[ids] % cfg.window
        self.hist[ids, slot] = resid
        self.count[ids] += 1
        self.polls += 1
        self.last_seen[ids] = self.polls
        full = self.count[ids] >= cfg.window
        wmed = np.median(self.hist[ids], axis=1)
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
        bad = np.where(self.hyst.is_open[ids], holding, opening) & enough
        opened, closed = self.hyst.update(ids[enough], bad[enough])
        now = batch.column("time")[0].as_py()
        expired = self._expire(now)
        if not opened.size and not closed.size:
            return expired
        pos_of = {int(e): j for j, e in enumerate(ids.tolist())}
        out = expired
        # Decisions are per channel; incidents are per rank: a slow NIC slows every channel of
        # its rank, and on-call wants one incident for it, listing the channels.
        for status, ents in (("firing", opened), ("cleared", closed)):
            for e in ents.tolist():
                g_id, rank, chan = self._entity_label[e]
                channels = self.rank_open.setdefault((g_id, rank), set())
                if status == "firing":
                    channels.add(chan)
                else:
                    channels.discard(chan)
                    if channels:
                        continue  # other channels of this rank are still slow
                    del self.rank_open[(g_id, rank)]
                j = pos_of[e]
                g = g_ent[j]
                stats = (float(np.exp(x[j])), med[g], scale[g], wmed[j], resid[j], z[j], int(peers[g]))
                f = self._finding(status, e, int(first_row[j]), now, batch, *stats, sorted(channels))
                self._where[(g_id, rank)] = (f.node, f.port)
                out.append(f)
        return out

    def _expire(self, now: datetime) -> list[Finding]:
        """Clear ranks whose slow channels stopped reporting: an ended job leaves no open incident."""
        stale = np.flatnonzero(self.hyst.is_open & (self.polls - self.last_seen > self.cfg.expire_polls))
        out = []
        for e in stale.tolist():
            self.hyst.is_open[e] = False
            self.hyst.bad_run[e] = 0
            g_id, rank, chan = self._entity_label[e]
            channels = self.rank_open.get((g_id, rank), set())
            channels.discard(chan)
            if channels:
                continue
            self.rank_open.pop((g_id, rank), None)
            host, port = self._where.pop((g_id, rank), (None, None))
            out.append(
                Finding(
                    kind="nccl_channel_slow",
                    entity=self.entity_name(e),
                    status="cleared",
                    time=now,
                    severity="warning",
                    summary=f"rank {rank} of {self.groups.keys[g_id].split('|')[0]} stopped reporting "
                    f"for {self.cfg.expire_polls} polls (job ended?): closed",
                    detector=f"{self.name}/{self.version}",
                    node=host,
                    port=port,
                    evidence={"expired_after_polls": self.cfg.expire_polls},
                )
            )
        return out

    def _finding(
        self,
        status: str,
        ent: int,
        row: int,
        now: datetime,
        batch: pa.RecordBatch,
        duration: float,
        peer_med: float,
        scale: float,
        wmed: float,
        latest: float,
        z: float,
        peers: int,
        channels: list[int],
    ) -> Finding:
        rec = batch.slice(row, 1).to_pylist()[0]
        host, device = rec.get("host"), rec.get("device")
        port = None
        if host is not None and device is not None:
            candidate = f"{host}/mlx5_{device}"
            if self.fabric is None or self.fabric.lookup(pa.array([candidate]))[0] >= 0:
                port = candidate
        slower = math.exp(latest) - 1  # this poll, vs peers
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
            kind="nccl_channel_slow",
            entity=self.entity_name(ent),
            status=status,  # type: ignore[arg-type]
            time=now,
            severity="warning",
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
            },
        )
