"""NCCL channel latency of the latest poll, per (host, rank, channel), for ``/metrics``.

The job id is never a label: jobs come and go, and each would leave a trail of series behind.
Ranks and channels of the jobs running now are bounded by the cluster's GPUs and NCCL's
channel limit, and the snapshot holds only the latest poll, so a finished job's series end
with it. The rank's host (the ``node`` label, as on every other series) tells two concurrent
jobs' rank 0 apart.

The slowdown ratio compares a (rank, channel) with the median of its peers: the other ranks
on the same channel of the same communicator and collective at the same poll, as the
channel-outlier detector does, so a whole-job slowdown leaves every ratio near 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.detectors.robust import group_median


@dataclass(frozen=True, slots=True)
class NcclSnapshot:
    """One row per (host, rank, channel) seen in the latest poll, sorted so."""

    host: pa.Array  # string, "" where the rows named none
    rank: np.ndarray  # int
    channel: np.ndarray  # int
    duration_seconds: np.ndarray  # mean over that poll's collectives
    slowdown_ratio: np.ndarray  # worst ratio to the peer median over its communicators/collectives
    ranks: int  # distinct (host, rank)

    @property
    def size(self) -> int:
        return len(self.host)


def _decoded(arr: pa.ChunkedArray) -> pa.Array:
    arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def nccl_snapshot(batches: list[pa.RecordBatch]) -> NcclSnapshot | None:
    """Per (host, rank, channel) figures from one poll's ``nccl_timing`` batches (None if none)."""
    if not batches:
        return None
    cols = ["communicator", "collective", "channel", "rank", "host", "duration_seconds"]
    table = pa.Table.from_batches([b.select(cols) for b in batches])
    table = table.filter(pc.is_valid(table.column("channel")))
    if table.num_rows == 0:
        return None
    table = pa.table(
        {
            "communicator": _decoded(table.column("communicator")),
            "collective": _decoded(table.column("collective")),
            "channel": table.column("channel").combine_chunks(),
            "rank": table.column("rank").combine_chunks(),
            "host": _decoded(table.column("host")).fill_null(""),
            "duration_seconds": table.column("duration_seconds").combine_chunks(),
        }
    )
    per = table.group_by(["communicator", "collective", "channel", "rank", "host"]).aggregate(
        [("duration_seconds", "mean")]
    )
    dur = per.column("duration_seconds_mean").to_numpy()
    peers = pc.binary_join_element_wise(
        per.column("communicator"),
        per.column("collective"),
        pc.cast(per.column("channel"), pa.string()),
        "\x1f",
    )
    codes = pc.dictionary_encode(peers).combine_chunks()
    groups = codes.indices.to_numpy()
    median = group_median(dur, groups, len(codes.dictionary))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(median[groups] > 0, dur / median[groups], np.nan)
    per = per.append_column("ratio", pa.array(ratio, type=pa.float64()))
    out = per.group_by(["host", "rank", "channel"]).aggregate(
        [("duration_seconds_mean", "mean"), ("ratio", "max")]
    )
    out = out.sort_by([("host", "ascending"), ("rank", "ascending"), ("channel", "ascending")])
    return NcclSnapshot(
        host=out.column("host").combine_chunks(),
        rank=out.column("rank").to_numpy(),
        channel=out.column("channel").to_numpy(),
        duration_seconds=out.column("duration_seconds_mean_mean").to_numpy(),
        slowdown_ratio=out.column("ratio_max").to_numpy(zero_copy_only=False),
        ranks=out.group_by(["host", "rank"]).aggregate([]).num_rows,
    )


def per_channel_max(snap: NcclSnapshot) -> tuple[np.ndarray, np.ndarray]:
    """(channels, worst slowdown ratio on each): the aggregate kept when per-rank series are off.

    Channel numbers are small integers: one slot per number in range, not np.unique's sort of
    a row per (rank, channel)."""
    channel = snap.channel.astype(np.int64)
    low = int(channel.min()) if channel.size else 0
    worst = np.full(int(channel.max()) - low + 1 if channel.size else 0, np.nan)
    np.fmax.at(worst, channel - low, snap.slowdown_ratio)
    present = np.zeros(worst.size, dtype=bool)
    present[channel - low] = True
    return np.flatnonzero(present) + low, worst[present]
