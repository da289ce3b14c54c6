"""Shared pieces of the NCCL parsers: nccl_timing rows gathered in one pass, built into Arrow once.

NCCL sources are text (JSON lines, log lines, tables). The line-oriented parsers append one
tuple per row to a :class:`TimingRows`; the JSON parsers read whole columns with pyarrow and
append them as blocks. Either way the batch is built from whole columns at the end.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar

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


class RowBuffer:
    """Rows gathered in arrival order, one tuple per :meth:`add` or a whole block of columns at
    once (:meth:`add_block`, from a parser that builds columns), fitted to their types once.

    Subclasses name their ``FIELDS`` (tuple order) and the type each is fitted to (``TYPES``):
    a value that does not fit (an integer past the type's range, a float past 1.8e308) becomes
    null, as :func:`~graywire.collectors.schemas.fitted_array` does for tuples. The
    ``DICTIONARY`` fields (names, keys) are strings taken as they are (a non-string there is a
    parser's bug and fails the batch) and come out dictionary-encoded; a block may give them
    dictionary-encoded too. ``rows`` holds the tuples added since the last block.
    """

    __slots__ = ("_parts", "rows")
    FIELDS: ClassVar[tuple[str, ...]] = ()
    TYPES: ClassVar[dict[str, pa.DataType]] = {}
    DICTIONARY: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self._parts: list[list[tuple[Any, ...]] | dict[str, pa.Array]] = []

    def __len__(self) -> int:
        return sum(len(p) if isinstance(p, list) else _block_len(p) for p in self._all())

    def _all(self) -> list[list[tuple[Any, ...]] | dict[str, pa.Array]]:
        return [*self._parts, self.rows] if self.rows else list(self._parts)

    def add_block(self, columns: dict[str, pa.Array]) -> None:
        """Append whole columns (any subset of ``FIELDS``, equal lengths; the rest are null)."""
        if not columns or not _block_len(columns):
            return
        if self.rows:
            self._parts.append(self.rows)
            self.rows = []
        self._parts.append(columns)

    def extend(self, other: RowBuffer) -> None:
        for part in other._all():
            if isinstance(part, list):
                self.rows.extend(part)
            else:
                self.add_block(part)

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` rows (a caller undoing what a failed parse added)."""
        kept: list[list[tuple[Any, ...]] | dict[str, pa.Array]] = []
        for part in self._all():
            size = len(part) if isinstance(part, list) else _block_len(part)
            if n <= 0:
                break
            if size > n:
                part = part[:n] if isinstance(part, list) else {k: v.slice(0, n) for k, v in part.items()}
            kept.append(part)
            n -= size
        self.rows = kept.pop() if kept and isinstance(kept[-1], list) else []
        self._parts = kept

    def column(self, name: str) -> list[Any]:
        """One column as Python values, in row order (tuple values as added, block values as stored)."""
        i = self.FIELDS.index(name)
        out: list[Any] = []
        for part in self._all():
            if isinstance(part, list):
                out.extend(r[i] for r in part)
            else:
                col = part.get(name)
                out.extend(col.to_pylist() if col is not None else [None] * _block_len(part))
        return out

    def latest_observed_us(self, name: str = "observed_us") -> int | None:
        """The newest plausible row time (after 1970, before 2262), or None."""
        i = self.FIELDS.index(name)
        seen: list[int] = []
        for part in self._all():
            if isinstance(part, list):
                v = latest_plausible_us(r[i] for r in part)
            else:
                col = part.get(name)
                v = None
                if col is not None:
                    col = col.cast(pa.int64())
                    ok = pc.and_(pc.greater(col, 0), pc.less(col, _MAX_US))
                    v = pc.max(col.filter(ok)).as_py()
            if v is not None:
                seen.append(v)
        return max(seen) if seen else None

    def columns(self) -> dict[str, pa.Array]:
        """Every field as one fitted array over all rows (``DICTIONARY`` fields encoded)."""
        chunks: dict[str, list[pa.Array]] = {f: [] for f in self.FIELDS}
        for part in self._all():
            if isinstance(part, list):
                cols = list(zip(*part, strict=True))
                for f, values in zip(self.FIELDS, cols, strict=True):
                    typ = self.TYPES[f]
                    chunks[f].append(
                        pa.array(values, type=typ) if f in self.DICTIONARY else fitted_array(values, typ)
                    )
            else:
                n = _block_len(part)
                for f in self.FIELDS:
                    col, typ = part.get(f), self.TYPES[f]
                    if col is None:
                        col = pa.nulls(n, typ)
                    elif not (f in self.DICTIONARY and pa.types.is_dictionary(col.type)):
                        col = fit_arrow(col, typ)
                    chunks[f].append(col)
        out = {}
        for f, c in chunks.items():
            if f in self.DICTIONARY:
                out[f] = dictionary_in_order(c, self.TYPES[f])
            else:
                out[f] = (
                    pa.concat_arrays(c) if len(c) > 1 else c[0] if c else pa.array([], type=self.TYPES[f])
                )
        return out


def dictionary_in_order(chunks: list[pa.Array], typ: pa.DataType) -> pa.DictionaryArray:
    """Arrays of ``typ`` (or dictionary-encoded ones) as one dictionary array, encoded as
    ``dictionary_encode`` encodes the plain column: codes in order of first appearance."""
    if not chunks:
        return pc.dictionary_encode(pa.array([], type=typ))
    encoded = [c if pa.types.is_dictionary(c.type) else pc.dictionary_encode(c) for c in chunks]
    if len(encoded) == 1 and all(not pa.types.is_dictionary(c.type) for c in chunks):
        return encoded[0]
    whole = pa.chunked_array(encoded).unify_dictionaries().combine_chunks()
    if isinstance(whole, pa.ChunkedArray):
        whole = whole.chunk(0) if whole.num_chunks == 1 else pa.concat_arrays(whole.chunks)
    codes = np.asarray(whole.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    seen = codes >= 0
    first = np.full(len(whole.dictionary), len(codes), np.int64)
    at = np.flatnonzero(seen)
    first[codes[at][::-1]] = at[::-1]  # repeated codes: the last write, the earliest row, wins
    order = np.argsort(first, kind="stable")[: int(np.count_nonzero(first < len(codes)))]
    remap = np.zeros(len(whole.dictionary), np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    mapped = remap[np.maximum(codes, 0)] if len(remap) else np.zeros(len(codes), np.int32)
    indices = pa.array(mapped, type=pa.int32(), mask=~seen)
    return pa.DictionaryArray.from_arrays(indices, whole.dictionary.take(pa.array(order)).cast(typ))


def _block_len(block: dict[str, pa.Array]) -> int:
    return len(next(iter(block.values()))) if block else 0


def fit_arrow(arr: pa.Array, typ: pa.DataType) -> pa.Array:
    """An Arrow column as ``typ``, fitted as :func:`fitted_array` fits Python values: an integer
    outside ``typ``'s range becomes null (floats and strings are cast)."""
    if arr.type == typ:
        return arr
    if pa.types.is_integer(typ) and pa.types.is_integer(arr.type):
        (lo, hi), (src_lo, src_hi) = _int_range(typ), _int_range(arr.type)
        ok = None
        if lo > src_lo:
            ok = pc.greater_equal(arr, pa.scalar(lo, arr.type))
        if hi < src_hi:
            below = pc.less_equal(arr, pa.scalar(hi, arr.type))
            ok = below if ok is None else pc.and_(ok, below)
        if ok is not None:
            arr = pc.if_else(ok, arr, pa.scalar(None, arr.type))
    return arr.cast(typ)


def _int_range(typ: pa.DataType) -> tuple[int, int]:
    bits = typ.bit_width
    if pa.types.is_unsigned_integer(typ):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


#: The columns of :class:`TimingRows`, in tuple order.
ROW_FIELDS = (
    "job", "communicator", "rank", "nranks", "host", "device", "collective", "seq", "message_bytes",
    "channel", "duration_seconds", "bus_bandwidth_bps", "transport", "observed_us", "start_us",
)  # fmt: skip


class TimingRows(RowBuffer):
    """nccl_timing rows (one tuple per row, or column blocks), transposed into columns once.

    ``observed_us`` is each row's own time (µs since the epoch); a batch has one time, so
    :meth:`to_batch` takes the newest unless told otherwise. ``start_us`` is when the rank
    entered the collective (or started the channel's kernel), the ``start_time`` column.
    """

    __slots__ = ()
    FIELDS = ROW_FIELDS
    DICTIONARY = frozenset(("job", "communicator", "host", "collective", "transport"))
    TYPES: ClassVar[dict[str, pa.DataType]] = {
        "job": pa.string(), "communicator": pa.string(), "rank": pa.int32(), "nranks": pa.int32(),
        "host": pa.string(), "device": pa.int16(), "collective": pa.string(), "seq": pa.int64(),
        "message_bytes": pa.int64(), "channel": pa.int16(), "duration_seconds": pa.float64(),
        "bus_bandwidth_bps": pa.float64(), "transport": pa.string(), "observed_us": pa.int64(),
        "start_us": pa.int64(),
    }  # fmt: skip

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

    def latest_us(self) -> int | None:
        """The newest plausible row time (after 1970, before 2262), or None."""
        return self.latest_observed_us()

    def to_batch(self, time: datetime | None = None) -> pa.RecordBatch:
        """One canonical batch. Every row gets one time (a batch is one poll): ``time`` if
        given, else the newest row time, else now."""
        n = len(self)
        if time is None:
            latest = self.latest_us()
            time = datetime.fromtimestamp(latest / 1e6, UTC) if latest is not None else datetime.now(UTC)
        ts = np.datetime64(time.astimezone(UTC).replace(tzinfo=None), "us")
        c = self.columns()
        bw = c["bus_bandwidth_bps"]
        if n and bw.null_count < n:  # NaN ("nan" in Inspector JSON) means unknown, not a value
            vals = bw.to_numpy(zero_copy_only=False)
            bw = pa.array(vals, mask=~np.isfinite(vals), type=pa.float64())
        start = c["start_us"]
        start = pc.if_else(pc.and_(pc.greater(start, 0), pc.less(start, _MAX_US)), start, None)
        cols = {
            "time": pa.array(np.full(n, ts), type=TS),
            "job": c["job"],
            "communicator": c["communicator"],
            "rank": c["rank"],
            "nranks": c["nranks"],
            "host": c["host"],
            "device": c["device"],
            "collective": c["collective"],
            "seq": c["seq"],
            "message_bytes": c["message_bytes"],
            "channel": c["channel"],
            "start_time": start.cast(TS),
            "duration_seconds": c["duration_seconds"],
            "bus_bandwidth_bps": bw,
            "transport": c["transport"],
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
