"""Shared pieces of the NCCL parsers: nccl_timing rows gathered in one pass, built into Arrow once.

NCCL sources are text (JSON lines, log lines, tables), so parsing is per line by nature; what
is not per line is turning the rows into Arrow. Each parser appends one tuple per row to a
:class:`TimingRows` and the batch is built from whole columns at the end.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.schemas import NCCL_TIMING, TS, fitted_array, make_batch

#: The last µs an int64 nanosecond clock reaches (year 2262): later "times" are not times.
_MAX_US = 2**63 // 1000


def plausible_us(us: object) -> bool:
    """A gettimeofday µs value that is a time: an integer after 1970 and before year 2262."""
    return isinstance(us, int) and not isinstance(us, bool) and 0 < us < _MAX_US


def latest_plausible_us(values: Iterable[object]) -> int | None:
    """The newest plausible µs time among ``values`` (each row's own time), or None."""
    seen = [v for v in values if plausible_us(v)]
    return max(seen) if seen else None  # type: ignore[type-var]


#: NCCL's "GB/s" is decimal (10**9 bytes per second); the schema wants bits per second.
GBPS_TO_BPS = 8e9

#: Bytes per element of NCCL data types, as named in profiler traces (``ncclFloat32``) and in
#: nccl-tests tables (``float``).
DTYPE_BYTES: dict[str, int] = {
    "ncclInt8": 1,
    "ncclChar": 1,
    "ncclUint8": 1,
    "ncclInt32": 4,
    "ncclInt": 4,
    "ncclUint32": 4,
    "ncclInt64": 8,
    "ncclUint64": 8,
    "ncclFloat16": 2,
    "ncclHalf": 2,
    "ncclFloat32": 4,
    "ncclFloat": 4,
    "ncclFloat64": 8,
    "ncclDouble": 8,
    "ncclBfloat16": 2,
    "ncclFloat8e4m3": 1,
    "ncclFloat8e5m2": 1,
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
    "f8e4m3": 1,
    "f8e5m2": 1,
}

#: NCCL's bus-bandwidth factor per collective (nccl-tests PERFORMANCE.md): busbw = algbw * f(n).
BUSBW_FACTOR = {
    "AllReduce": lambda n: 2 * (n - 1) / n,
    "ReduceScatter": lambda n: (n - 1) / n,
    "AllGather": lambda n: (n - 1) / n,
    "AllToAll": lambda n: (n - 1) / n,
}


def busbw_factor(collective: str, nranks: int) -> float:
    f = BUSBW_FACTOR.get(collective)
    return f(nranks) if f is not None and nranks > 0 else 1.0


#: The columns of :class:`TimingRows`, in tuple order.
ROW_FIELDS = (
    "job", "communicator", "rank", "nranks", "host", "device", "collective", "seq", "message_bytes",
    "channel", "duration_seconds", "bus_bandwidth_bps", "transport", "observed_us", "start_us",
)  # fmt: skip
_F = {name: i for i, name in enumerate(ROW_FIELDS)}


@dataclass(slots=True)
class TimingRows:
    """nccl_timing rows as tuples (one append per row), transposed into columns once.

    ``observed_us`` is each row's own time (µs since the epoch); a batch has one time, so
    :meth:`to_batch` takes the newest unless told otherwise. ``start_us`` is when the rank
    entered the collective (or started the channel's kernel), the ``start_time`` column.
    """

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
        duration_seconds: float,
        nranks: int | None = None,
        host: str | None = None,
        device: int | None = None,
        seq: int | None = None,
        message_bytes: int | None = None,
        channel: int | None = None,
        bus_bandwidth_bps: float | None = None,
        transport: str | None = None,
        observed_us: int | None = None,
        start_us: int | None = None,
    ) -> None:
        self.rows.append(
            (job, communicator, rank, nranks, host, device, collective, seq, message_bytes, channel,
             duration_seconds, bus_bandwidth_bps, transport, observed_us, start_us)
        )  # fmt: skip

    def extend(self, other: TimingRows) -> None:
        self.rows.extend(other.rows)

    def column(self, name: str) -> list[Any]:
        i = _F[name]
        return [r[i] for r in self.rows]

    def latest_us(self) -> int | None:
        """The newest plausible row time (after 1970, before 2262), or None."""
        i = _F["observed_us"]
        return latest_plausible_us(r[i] for r in self.rows)

    def to_batch(self, time: datetime | None = None) -> pa.RecordBatch:
        """One canonical batch. Every row gets one time (a batch is one poll): ``time`` if
        given, else the newest row time, else now."""
        n = len(self)
        if time is None:
            latest = self.latest_us()
            time = datetime.fromtimestamp(latest / 1e6, UTC) if latest is not None else datetime.now(UTC)
        ts = np.datetime64(time.astimezone(UTC).replace(tzinfo=None), "us")
        cols_in: list[Any] = list(zip(*self.rows, strict=True)) if n else [() for _ in ROW_FIELDS]
        c = dict(zip(ROW_FIELDS, cols_in, strict=True))
        bw = fitted_array(c["bus_bandwidth_bps"], pa.float64())
        if n and bw.null_count < n:  # NaN ("nan" in Inspector JSON) means unknown, not a value
            vals = bw.to_numpy(zero_copy_only=False)
            bw = pa.array(vals, mask=~np.isfinite(vals), type=pa.float64())
        start = fitted_array(c["start_us"], pa.int64())
        start = pc.if_else(pc.and_(pc.greater(start, 0), pc.less(start, _MAX_US)), start, None)
        cols = {
            "time": pa.array(np.full(n, ts), type=TS),
            "job": _dict(c["job"]),
            "communicator": _dict(c["communicator"]),
            "rank": fitted_array(c["rank"], pa.int32()),
            "nranks": fitted_array(c["nranks"], pa.int32()),
            "host": _dict(c["host"]),
            "device": fitted_array(c["device"], pa.int16()),
            "collective": _dict(c["collective"]),
            "seq": fitted_array(c["seq"], pa.int64()),
            "message_bytes": fitted_array(c["message_bytes"], pa.int64()),
            "channel": fitted_array(c["channel"], pa.int16()),
            "start_time": start.cast(TS),
            "duration_seconds": fitted_array(c["duration_seconds"], pa.float64()),
            "bus_bandwidth_bps": bw,
            "transport": _dict(c["transport"]),
        }
        # A row whose rank or duration did not fit says nothing: it is left out, not nulled.
        keep = pc.and_(
            pc.is_valid(cols["rank"]),
            pc.fill_null(pc.greater_equal(cols["duration_seconds"], 0.0), False),
        )
        if n and not pc.all(keep).as_py():
            cols = {k: v.filter(keep) for k, v in cols.items()}
            n = len(cols["rank"])
        return make_batch(NCCL_TIMING, n, cols)


def _dict(values: Sequence[str | None]) -> pa.Array:
    return pa.array(values, type=pa.string()).dictionary_encode()


def empty_timing_batch(time: datetime | None = None) -> pa.RecordBatch:
    return TimingRows().to_batch(time or datetime.now(UTC))


def as_int(value: object) -> int | None:
    """An integer from JSON (int, integral float, digit string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    return None


def as_float(value: object) -> float | None:
    """A float from JSON; ``"nan"`` (how the Inspector writes NaN) and garbage give None."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, int | float):
            v = float(value)  # an int past 1.8e308 overflows: not a usable number
            return v if math.isfinite(v) else None
        if isinstance(value, str):
            v = float(value)
            return v if math.isfinite(v) else None
    except (ValueError, OverflowError):
        return None
    return None


def in_range(value: int | None, lo: int, hi: int) -> int | None:
    """``value`` when ``lo <= value < hi``, else None: a JSON integer may have any number of
    digits, and one that does not fit its column must null the row's cell, not crash the batch."""
    return value if value is not None and lo <= value < hi else None
