"""nccl_proxy rows gathered one per ProxyOp, built into one Arrow batch at the end.

Like :class:`graywire.collectors.nccl.common.TimingRows`: parsers append plain tuples or column
blocks and the batch is built from whole columns once. A row's wait columns hold what its
direction measured; the other direction's columns stay null.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.nccl.common import RowBuffer
from graywire.collectors.schemas import NCCL_PROXY, NCCL_PROXY_WAITS, TS, make_batch

PROXY_FIELDS = (
    "job", "communicator", "rank", "host", "device", "pid", "collective", "seq", "channel", "peer",
    "direction", "steps", "bytes", "duration_seconds", *NCCL_PROXY_WAITS, "port", "net_device",
    "qp_num", "qps", "observed_us",
)  # fmt: skip
_DICT = ("job", "communicator", "host", "collective", "direction")


class ProxyRows(RowBuffer):
    """nccl_proxy rows (tuples or column blocks); ``observed_us`` is each row's own time (µs, epoch)."""

    __slots__ = ()
    FIELDS = PROXY_FIELDS
    DICTIONARY = frozenset(_DICT)
    TYPES: ClassVar[dict[str, pa.DataType]] = {
        **{f: pa.string() for f in _DICT},
        **{f.name: f.type for f in NCCL_PROXY if f.name in PROXY_FIELDS and f.name not in _DICT},
        "observed_us": pa.int64(),
    }

    def add(
        self,
        *,
        job: str,
        communicator: str,
        rank: int,
        collective: str,
        channel: int,
        peer: int,
        direction: str,
        waits: dict[str, float],
        host: str | None = None,
        device: int | None = None,
        pid: int | None = None,
        seq: int | None = None,
        steps: int | None = None,
        bytes: int | None = None,
        duration_seconds: float | None = None,
        port: str | None = None,
        net_device: int | None = None,
        qp_num: int | None = None,
        qps: int | None = None,
        observed_us: int | None = None,
    ) -> None:
        self.rows.append(
            (job, communicator, rank, host, device, pid, collective, seq, channel, peer, direction, steps,
             bytes, duration_seconds, *(waits.get(w) for w in NCCL_PROXY_WAITS), port, net_device, qp_num,
             qps, observed_us)
        )  # fmt: skip

    def latest_us(self) -> int | None:
        return self.latest_observed_us()

    def to_batch(self, time: datetime | None = None) -> pa.RecordBatch:
        """One canonical batch with one time: ``time``, else the newest row time, else now."""
        n = len(self)
        if time is None:
            latest = self.latest_us()
            time = datetime.fromtimestamp(latest / 1e6, UTC) if latest is not None else datetime.now(UTC)
        ts = np.datetime64(time.astimezone(UTC).replace(tzinfo=None), "us")
        c = self.columns()
        cols: dict[str, pa.Array] = {"time": pa.array(np.full(n, ts), type=TS)}
        for name in PROXY_FIELDS[:-1]:
            cols[name] = c[name]
        required = [f.name for f in NCCL_PROXY if not f.nullable and f.name in cols]
        keep = pa.array(np.ones(n, dtype=bool))
        for name in required:  # a row whose rank, channel or peer did not fit is left out
            keep = pc.and_(keep, pc.is_valid(cols[name]))
        if n and not pc.all(keep).as_py():
            cols = {k: v.filter(keep) for k, v in cols.items()}
            n = len(cols["time"])
        return make_batch(NCCL_PROXY, n, cols)
