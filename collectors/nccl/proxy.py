"""nccl_proxy rows gathered one per ProxyOp, built into one Arrow batch at the end.

Like :class:`graywire.collectors.nccl.common.TimingRows`: parsers append plain tuples and the batch is
built from whole columns once. A row's wait columns hold what its direction measured; the
other direction's columns stay null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.nccl.common import fitted_array, latest_plausible_us
from graywire.collectors.schemas import NCCL_PROXY, NCCL_PROXY_WAITS, TS, make_batch

PROXY_FIELDS = (
    "job", "communicator", "rank", "host", "device", "pid", "collective", "seq", "channel", "peer",
    "direction", "steps", "bytes", "duration_seconds", *NCCL_PROXY_WAITS, "port", "net_device",
    "qp_num", "qps", "observed_us",
)  # fmt: skip
_F = {name: i for i, name in enumerate(PROXY_FIELDS)}
_DICT = ("job", "communicator", "host", "collective", "direction")


@dataclass(slots=True)
class ProxyRows:
    """nccl_proxy rows as tuples; ``observed_us`` is each row's own time (µs since the epoch)."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

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
        return latest_plausible_us(r[_F["observed_us"]] for r in self.rows)

    def to_batch(self, time: datetime | None = None) -> pa.RecordBatch:
        """One canonical batch with one time: ``time``, else the newest row time, else now."""
        n = len(self.rows)
        if time is None:
            latest = self.latest_us()
            time = datetime.fromtimestamp(latest / 1e6, UTC) if latest is not None else datetime.now(UTC)
        ts = np.datetime64(time.astimezone(UTC).replace(tzinfo=None), "us")
        cols_in: list[Any] = list(zip(*self.rows, strict=True)) if n else [() for _ in PROXY_FIELDS]
        c = dict(zip(PROXY_FIELDS, cols_in, strict=True))
        cols: dict[str, pa.Array] = {"time": pa.array(np.full(n, ts), type=TS)}
        for name in PROXY_FIELDS[:-1]:
            if name in _DICT:
                cols[name] = pa.array(c[name], type=pa.string()).dictionary_encode()
            else:
                cols[name] = fitted_array(c[name], NCCL_PROXY.field(name).type)
        required = [f.name for f in NCCL_PROXY if not f.nullable and f.name in cols]
        keep = pa.array(np.ones(n, dtype=bool))
        for name in required:  # a row whose rank, channel or peer did not fit is left out
            keep = pc.and_(keep, pc.is_valid(cols[name]))
        if n and not pc.all(keep).as_py():
            cols = {k: v.filter(keep) for k, v in cols.items()}
            n = len(cols["time"])
        return make_batch(NCCL_PROXY, n, cols)
