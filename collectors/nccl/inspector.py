"""NCCL Inspector plugin output -> nccl_timing rows (JSON) and an aggregate table (Prometheus).

The Inspector (NVIDIA/nccl ``plugins/profiler/inspector``) writes one file per process,
``<dump dir>/<hostname>-pid<pid>.log``, as compact JSON objects, one per line. Its layouts:

- v4.0: every record carries ``header`` (``id`` = communicator hash ``0x%lx``, ``rank``,
  ``n_ranks``, ``nnodes``; later versions add ``comm_name``), ``metadata``
  (``dump_timestamp_us``, ``hostname``, ``pid``, ...) and one body: ``coll_perf`` or ``p2p_perf``.
- v4.2 (and early v4.3 builds): each communicator's dump starts with a ``dump_stats`` marker
  (records written, records the ring overwrote); the records after it still carry header and
  metadata.
- v4.3 as documented, v4.4: the marker carries header and metadata once; the records after it
  are bare ``{"coll_perf": ...}`` / ``{"p2p_perf": ...}`` / ``{"proxy_trace": ...}`` lines that
  inherit them, so the parser keeps that context per file (:class:`InspectorParser`).

``coll_perf``: ``coll`` (``AllReduce``...), ``coll_sn``, ``coll_msg_size_bytes``,
``coll_exec_time_us`` (integer µs), ``coll_algobw_gbs``/``coll_busbw_gbs`` (decimal GB/s,
``"nan"`` for NaN), ``coll_timing_source`` (``kernel_gpu``, ``kernel_cpu``,
``collective_cpu``). With ``NCCL_INSPECTOR_DUMP_VERBOSE=1`` it adds ``event_trace_ts`` with
``coll_start_ts``/``coll_stop_ts`` and ``kernel_events[]`` of ``channel_id``,
``kernel_start_ts``, ``kernel_stop_ts``, ``kernel_record_ts``: all gettimeofday microseconds
(CPU callback times, the same clock as ``dump_timestamp_us``); ``event_trace_sn`` holds the
callbacks' sequence numbers (0 = the callback never came).

Rows: one whole-collective row per ``coll_perf`` (channel null, duration = exec time), plus
one row per channel of a verbose record (duration = kernel stop - start). ``start_time`` is
when the rank arrived: ``coll_start_ts`` for the whole row (else its first kernel start), the
kernel start for a channel row; a rank that enters late starts last and, since the collective
ends together on every rank, runs shortest (see detectors/nccl_straggler.py). A channel row's bus
bandwidth is the collective's scaled to that channel's pace (busbw x exec time / channel
time), so channels compare like with like. A row's time is its collective's last kernel stop
when the record is verbose, else the dump time. The JSON has no GPU index and no job id: the
GPU comes from a resolver (the process's NCCL_DEBUG log, see :mod:`graywire.collectors.nccl.debug_log`)
or from ``gpus_per_host`` (rank % gpus_per_host, only where the communicator spans whole
hosts), and the job from configuration. P2P and proxy records are counted, not made rows.

Buffers of JSON lines are read as columns: pyarrow reads the records and one pass over whole
columns does what :meth:`InspectorParser.feed_record` does to each, for every record it can
decide exactly; the others (bad lines, problems to report, values a float64 column cannot hold
exactly) go through ``feed_record`` in line order. Small buffers go line by line throughout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.nccl import jsonlines
from graywire.collectors.nccl.common import GBPS_TO_BPS, TimingRows, as_float, as_int, in_range, plausible_us
from graywire.collectors.nccl.jsonlines import (
    Lines,
    Read,
    join_lines,
    json_floats,
    json_ints,
    read_lines,
    split_lines,
    valid_utf8,
)

_I32 = 2**31
_I64 = 2**63
#: A collective longer than a day is not a timing (and would not fit the arithmetic below).
_MAX_EXEC_US = 86_400e6

#: (host, pid, rank, nranks) -> CUDA device index, or None when unknown.
DeviceResolver = Callable[[str, int, int, int | None], int | None]
#: (host, pid, rank, channel) -> transport ("NET/IB", ...), or None when unknown.
TransportResolver = Callable[[str, int, int, int], str | None]


class RecordError(ValueError):
    """A record that cannot become rows; the message says why."""


@dataclass
class InspectorParser:
    """Stateful parser for one Inspector file (or one push body): holds the v4.3 dump context.

    Malformed lines and unusable records are skipped and counted (``skipped``, with the first
    reasons in ``problems``) unless ``strict``, where the first one raises ``RecordError``.
    """

    job: str
    device_of: DeviceResolver | None = None
    transport_of: TransportResolver | None = None
    gpus_per_host: int | None = None
    short_hostnames: bool = False
    whole_rows: bool = True
    channel_rows: bool = True
    strict: bool = False
    header: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    records: int = 0  # coll_perf records turned into rows
    ignored: int = 0  # p2p_perf / proxy_trace / dump_stats records (valid, not timed here)
    skipped: int = 0
    dropped: int = 0  # collectives the Inspector's ring overwrote before dumping (dump_stats)
    problems: list[str] = field(default_factory=list)

    def _problem(self, where: str, reason: str) -> None:
        if self.strict:
            raise RecordError(f"{where}: {reason}" if where else reason)
        self.skipped += 1
        if len(self.problems) < 5:
            self.problems.append(f"{where}: {reason}" if where else reason)

    def feed_lines(
        self, lines: Iterable[bytes | str], rows: TimingRows, where: str = "", first_line: int = 1
    ) -> None:
        """Parse complete JSON lines (blank lines are fine); ``first_line`` numbers them in messages.

        The lines are read as columns (:meth:`feed_data`); a list whose items hold newlines
        themselves is parsed one item at a time, as is a buffer under ``SMALL_BYTES``."""
        lines = list(lines)
        data = join_lines(lines)
        split = split_lines(valid_utf8(data)) if data is not None else None
        if split is None or len(split) != len(lines):
            for i, raw in enumerate(lines, first_line):
                self._feed_value(_decode_line(raw), rows, f"{where}line {i}")
            return
        self._feed_split(split, rows, where, first_line, False)

    def feed_data(
        self,
        data: bytes,
        rows: TimingRows,
        where: str = "",
        first_line: int = 1,
        *,
        strict_json: bool = False,
    ) -> None:
        """Parse a buffer of complete JSON lines: pyarrow reads the records into columns and
        :func:`_records_as_columns` turns them into rows; the lines it cannot decide exactly
        (not JSON, not a usable record, a value too big for a float64 column, a ``null``)
        go through :meth:`feed_record` one by one, in order, with the dump context they had.
        ``strict_json`` reads lines as a push body's: each as it is (not stripped), and one that is
        not JSON raises ``ValueError``; else such a line is skipped and counted like any bad line."""
        self._feed_split(split_lines(valid_utf8(data)), rows, where, first_line, strict_json)

    def _feed_split(
        self, lines: Lines, rows: TimingRows, where: str, first_line: int, strict_json: bool
    ) -> None:
        if len(lines.data) < jsonlines.SMALL_BYTES:
            for i in range(len(lines)):
                value = _decode_line(lines[i], strip=not strict_json)
                self._feed_value(value, rows, f"{where}line {first_line + i}", strict_json)
            return
        read = read_lines(lines, SCHEMA, hold=_HOLD, substitute=_SUBSTITUTE)
        values: dict[int, Any] = {}
        for i in read.slow.tolist():
            value = _decode_line(lines[i], strip=not strict_json)
            if value is not _BLANK:
                values[i] = value
        self._apply(lines, read, values, rows, where, first_line, strict_json)

    def feed_text(self, text: str, rows: TimingRows) -> None:
        """A whole document: JSON lines, pretty-printed objects one after another, or an array
        of records. Raises ``ValueError`` naming the line where it is not JSON. JSON lines are
        read as columns; anything else goes value by value (:func:`iter_json_values`)."""
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            data = None
        if data is not None and len(data) >= jsonlines.SMALL_BYTES:
            lines = split_lines(data)
            read = read_lines(lines, SCHEMA, hold=_HOLD, substitute=_SUBSTITUTE)
            if not any(lines[i].strip(b" \t\r") for i in read.slow.tolist()):
                self._apply(lines, read, {}, rows, "", 1, strict_json=False)
                return
        for line, value in iter_json_values(text):
            self.feed_record(value, rows, f"line {line}")

    def _feed_value(self, value: Any, rows: TimingRows, where: str, strict_json: bool = False) -> None:
        """One line's value as :func:`_decode_line` gave it."""
        if value is _BLANK:
            return
        if isinstance(value, _NotJson):
            if strict_json:
                raise ValueError(f"{where}: not valid JSON ({value.error.msg} at column {value.error.colno})")
            self._problem(where, f"not JSON ({value.error.msg} at column {value.error.colno})")
            return
        if isinstance(value, _Failed):
            raise value.error
        self.feed_record(value, rows, where)

    def feed_record(self, rec: Any, rows: TimingRows, where: str = "") -> None:
        if not isinstance(rec, dict):
            self._problem(where, f"expected a JSON object, got {type(rec).__name__}")
            return
        if "dump_stats" in rec:
            self._marker(rec, where)
            return
        body = rec.get("coll_perf")
        if body is None:
            if any(k in rec for k in ("p2p_perf", "proxy_trace")):
                self.ignored += 1
            else:
                self._problem(
                    where, f"no coll_perf, p2p_perf, proxy_trace or dump_stats in {sorted(rec)[:5]}"
                )
            return
        header = rec.get("header", self.header)
        metadata = rec.get("metadata", self.metadata)
        if not isinstance(header, dict) or not isinstance(metadata, dict):
            self._problem(
                where, "coll_perf record without header/metadata (a v4.3 record before its dump_stats marker)"
            )
            return
        if not isinstance(body, dict):
            self._problem(where, "coll_perf is not an object")
            return
        try:
            self._coll(header, metadata, body, rows)
        except RecordError as e:
            self._problem(where, str(e))
            return
        self.records += 1

    def _marker(self, rec: dict[str, Any], where: str) -> None:
        stats = rec.get("dump_stats")
        if isinstance(rec.get("header"), dict) and isinstance(rec.get("metadata"), dict):
            self.header, self.metadata = rec["header"], rec["metadata"]
        else:
            self._problem(where, "dump_stats marker without header/metadata")
            return
        if isinstance(stats, dict):
            self.dropped += as_int(stats.get("coll_dropped_since_last_dump")) or 0
        self.ignored += 1

    def _coll(
        self, header: dict[str, Any], metadata: dict[str, Any], body: dict[str, Any], rows: TimingRows
    ) -> None:
        comm = header.get("id")
        rank = as_int(header.get("rank"))
        coll = body.get("coll")
        exec_us = as_float(body.get("coll_exec_time_us"))
        if not isinstance(comm, str) or not comm:
            raise RecordError("header.id (communicator hash) missing")
        if rank is None or not 0 <= rank < _I32:
            raise RecordError(f"header.rank {_short(header.get('rank'))} is not a rank")
        if not isinstance(coll, str) or not coll:
            raise RecordError("coll_perf.coll missing")
        if exec_us is None or not 0 <= exec_us <= _MAX_EXEC_US:
            raise RecordError(
                f"coll_perf.coll_exec_time_us {_short(body.get('coll_exec_time_us'))} is not a duration"
            )
        nranks = in_range(as_int(header.get("n_ranks")), 0, _I32)
        nnodes = in_range(as_int(header.get("nnodes")), 0, _I32)
        host = metadata.get("hostname") if isinstance(metadata.get("hostname"), str) else None
        if host and self.short_hostnames:
            host = host.split(".", 1)[0]
        pid = in_range(as_int(metadata.get("pid")), 0, _I64)
        device = None
        if self.device_of is not None and host is not None and pid is not None:
            device = self.device_of(host, pid, rank, nranks)
        g = self.gpus_per_host
        if device is None and g and nranks and nnodes and nnodes * g == nranks:
            device = rank % g  # host-major ranks over whole hosts: local rank = GPU index
        seq = in_range(as_int(body.get("coll_sn")), 0, _I64)
        size = in_range(as_int(body.get("coll_msg_size_bytes")), 0, _I64)
        busbw = as_float(body.get("coll_busbw_gbs"))
        trace = body.get("event_trace_ts") if isinstance(body.get("event_trace_ts"), dict) else {}
        channels = self._channels(body, trace) if self.channel_rows else []
        # When it was observed: the last kernel stop (CPU clock), else the dump that wrote it. A
        # dump time that is no time (negative, past 2262) is refused, never replaced by receipt.
        raw_dumped = metadata.get("dump_timestamp_us")
        dumped = as_int(raw_dumped)
        if raw_dumped is not None and (dumped is None or not plausible_us(dumped)):
            raise RecordError(
                f"metadata.dump_timestamp_us {_short(raw_dumped)} is not a time (µs after 1970, before 2262)"
            )
        observed = max((stop for _, _, stop in channels), default=None) or dumped
        common = dict(
            job=self.job,
            communicator=comm,
            rank=rank,
            nranks=nranks,
            host=host,
            device=device,
            collective=coll,
            seq=seq,
            message_bytes=size,
            observed_us=observed,
        )
        if self.whole_rows:
            rows.add(
                **common,
                channel=None,
                duration_seconds=exec_us / 1e6,
                bus_bandwidth_bps=busbw * GBPS_TO_BPS if busbw is not None else None,
                start_us=self._arrival(body, trace, channels),
            )
        for ch, start, stop in channels:
            dur = (stop - start) / 1e6
            bw = busbw * GBPS_TO_BPS * (exec_us / 1e6) / dur if busbw is not None and exec_us > 0 else None
            transport = None
            if self.transport_of is not None and host is not None and pid is not None:
                transport = self.transport_of(host, pid, rank, ch)
            rows.add(**common, channel=ch, duration_seconds=dur, bus_bandwidth_bps=bw, transport=transport,
                     start_us=start)  # fmt: skip

    @staticmethod
    def _arrival(
        body: dict[str, Any], trace: dict[str, Any], channels: list[tuple[int, int, int]]
    ) -> int | None:
        """When the rank entered the collective: ``coll_start_ts`` if its callback fired, else
        its first kernel start (both CPU gettimeofday µs on the rank's host)."""
        sn = body.get("event_trace_sn") if isinstance(body.get("event_trace_sn"), dict) else {}
        start = as_int(trace.get("coll_start_ts"))
        if start is not None and plausible_us(start) and as_int(sn.get("coll_start_sn")) != 0:
            return start
        return min((s for _, s, _ in channels), default=None)

    @staticmethod
    def _channels(body: dict[str, Any], trace: dict[str, Any]) -> list[tuple[int, int, int]]:
        """(channel, kernel start µs, kernel stop µs) of the channels whose kernel completed."""
        events = trace.get("kernel_events")
        if not isinstance(events, list):
            return []
        sn = body.get("event_trace_sn") if isinstance(body.get("event_trace_sn"), dict) else {}
        sn_events = sn.get("kernel_events")
        stopped = {
            as_int(e.get("channel_id")): as_int(e.get("kernel_stop_sn"))
            for e in (sn_events if isinstance(sn_events, list) else [])
            if isinstance(e, dict)
        }
        out = []
        for ev in events:
            if not isinstance(ev, dict):
                continue
            ch = in_range(as_int(ev.get("channel_id")), 0, 2**15)
            start, stop = as_int(ev.get("kernel_start_ts")), as_int(ev.get("kernel_stop_ts"))
            if ch is None or start is None or stop is None or not plausible_us(start) or stop <= start:
                continue  # the kernel stop never came (or clocks went backwards): no duration
            if not plausible_us(stop):
                continue
            if stopped.get(ch, 1) == 0:
                continue  # sequence number 0: the stop callback never fired
            out.append((ch, start, stop))
        return out

    def _apply(
        self,
        lines: Lines,
        read: Read,
        values: dict[int, Any],
        rows: TimingRows,
        where: str,
        first_line: int,
        strict_json: bool,
    ) -> None:
        """Deliver the column pass's rows and the per-line records in line order, counting as
        :meth:`feed_record` counts; a per-line record sees the dump context of its line."""
        start = (self.header, self.metadata)
        plan = _records_as_columns(self, lines, read, values)
        special = np.union1d(np.array(sorted(values), np.int64), plan.special)
        cum_dropped = np.concatenate(([0], np.cumsum(plan.dropped)))
        contexts: dict[int, tuple[Any, Any]] = {}

        def context(line: int) -> tuple[Any, Any]:
            """header and metadata in force at ``line``: from the last valid marker before it."""
            j = int(np.searchsorted(plan.ctx_line, line)) - 1
            if j < 0:
                return start
            src = int(plan.ctx_line[j])
            if src not in contexts:
                rec = values[src] if src in values else json.loads(lines[src].decode("utf-8", "replace"))
                contexts[src] = (rec["header"], rec["metadata"])
            return contexts[src]

        at_row = at_rec = at_ign = 0

        def deliver(upto: int) -> None:
            nonlocal at_row, at_rec, at_ign
            row, rec, ign = (
                int(np.searchsorted(a, upto)) for a in (plan.row_line, plan.rec_line, plan.ignored_line)
            )
            if row > at_row:
                rows.add_block({k: v.slice(at_row, row - at_row) for k, v in plan.block.items()})
            self.records += rec - at_rec
            self.ignored += ign - at_ign
            self.dropped += int(cum_dropped[ign] - cum_dropped[at_ign])
            at_row, at_rec, at_ign = row, rec, ign

        for line in special.tolist():
            deliver(line)
            self.header, self.metadata = context(line)
            value = values[line] if line in values else _decode_line(lines[line], strip=not strict_json)
            self._feed_value(value, rows, f"{where}line {first_line + line}", strict_json)
        deliver(len(lines))
        self.header, self.metadata = context(len(lines))


def _short(value: object) -> str:
    """A caller's value for an error message, cut short (a 400-digit number is not a message)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


# -- the column pass ---------------------------------------------------------------------------------

_F64, _STR = pa.float64(), pa.string()
_KERNEL_TS = pa.struct([("channel_id", _F64), ("kernel_start_ts", _F64), ("kernel_stop_ts", _F64)])
_KERNEL_SN = pa.struct([("channel_id", _F64), ("kernel_stop_sn", _F64)])
#: What the parser reads of a record, as pyarrow reads it: numbers as float64 (exact below 2**53;
#: :func:`json_ints` flags the rest), so no value fails a conversion without naming its line.
#: A field of the wrong JSON kind (a string rank, an array header) makes pyarrow refuse the line.
SCHEMA = pa.schema(
    [
        ("header", pa.struct([("id", _STR), ("rank", _F64), ("n_ranks", _F64), ("nnodes", _F64)])),
        ("metadata", pa.struct([("dump_timestamp_us", _F64), ("hostname", _STR), ("pid", _F64)])),
        (
            "coll_perf",
            pa.struct(
                [
                    ("coll", _STR),
                    ("coll_sn", _F64),
                    ("coll_msg_size_bytes", _F64),
                    ("coll_exec_time_us", _F64),
                    ("coll_busbw_gbs", _F64),
                    (
                        "event_trace_sn",
                        pa.struct([("coll_start_sn", _F64), ("kernel_events", pa.list_(_KERNEL_SN))]),
                    ),
                    (
                        "event_trace_ts",
                        pa.struct([("coll_start_ts", _F64), ("kernel_events", pa.list_(_KERNEL_TS))]),
                    ),
                ]
            ),
        ),
        ("dump_stats", pa.struct([("coll_dropped_since_last_dump", _F64)])),
        ("p2p_perf", pa.struct([])),
        ("proxy_trace", pa.struct([])),
    ]
)
#: Lines holding these go to :meth:`InspectorParser.feed_record`: a column cannot tell
#: ``"header": null`` (a record that names no header) from no ``header`` (one that inherits its
#: dump's), and pyarrow reads ``-NaN`` and ``Inf``, which json refuses (so ``Infinity`` goes too).
#: Upper case is rare in Inspector output: those two are found by their capital first.
_HOLD = ((b"null", None), (b"-NaN", 1), (b"Inf", 0))
#: ``jsonDouble`` writes a NaN bandwidth as the string ``"nan"``, which as_float reads as it
#: reads NaN: the same length with the literal, so pyarrow's float column takes it.
_SUBSTITUTE = ((b'"coll_busbw_gbs":"nan"', b'"coll_busbw_gbs":NaN  '),)
_CHANNELS = 2**15


class _NotJson:
    __slots__ = ("error",)

    def __init__(self, error: json.JSONDecodeError) -> None:
        self.error = error


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


_BLANK = object()


def _decode_line(raw: bytes | str, strip: bool = True) -> Any:
    """A line's JSON value, :data:`_BLANK`, or what went wrong (raised when its turn comes).
    ``strip``: the value is read from the stripped line (files), else from the line as it is."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if not text.strip():
        return _BLANK
    try:
        return json.loads(text.strip() if strip else text)
    except json.JSONDecodeError as e:
        return _NotJson(e)
    except RecursionError as e:
        return _Failed(e)


@dataclass
class _Plan:
    """The column pass's outcome: rows for the records it decided, and what it left to the
    per-line path (all arrays by line, ascending)."""

    block: dict[str, pa.Array]
    row_line: np.ndarray  # the line of each block row
    rec_line: np.ndarray  # coll_perf records turned into rows
    ignored_line: np.ndarray  # valid markers and P2P/proxy records
    dropped: np.ndarray  # per ignored line: coll_dropped_since_last_dump, 0 when none
    special: np.ndarray  # rows read as columns that the per-line path must decide
    ctx_line: np.ndarray  # lines of the valid dump_stats markers (read or not)


def _valid(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.is_valid(arr).to_numpy(zero_copy_only=False), dtype=bool)


def _field(arr: pa.Array, *names: str) -> pa.Array:
    """A nested field, null wherever a struct on the way is."""
    for name in names:
        arr = pc.struct_field(arr, name)
    return arr


@dataclass
class _Strings:
    """A string column as codes into a dictionary (-1 for null): rows are gathered by code."""

    codes: np.ndarray
    dictionary: pa.Array

    @classmethod
    def of(cls, arr: pa.Array) -> _Strings:
        enc = pc.dictionary_encode(arr)
        return cls(
            np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64), enc.dictionary
        )

    def non_empty(self, rows: np.ndarray) -> np.ndarray:
        """Where the value is a string of at least one character (``isinstance(v, str) and v``)."""
        full = np.asarray(
            pc.greater(pc.binary_length(self.dictionary), 0).to_numpy(zero_copy_only=False), bool
        )
        codes = self.codes[rows]
        return (codes >= 0) & full[np.maximum(codes, 0)] if len(full) else np.zeros(len(rows), bool)

    def column(self, rows: np.ndarray) -> pa.Array:
        codes = self.codes[rows]
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=codes < 0), self.dictionary)

    def value(self, code: int) -> str:
        return str(self.dictionary[code].as_py())


def _masked(values: np.ndarray, ok: np.ndarray, typ: pa.DataType) -> pa.Array:
    return pa.array(values, type=typ, mask=~ok)


def _segments(values: np.ndarray, parent: np.ndarray, n: int, ufunc: np.ufunc) -> np.ndarray:
    """``ufunc`` reduced over each parent's values (``parent`` ascending); 0 where it has none."""
    out = np.zeros(n, values.dtype)
    if len(values):
        first = np.flatnonzero(np.concatenate(([True], parent[1:] != parent[:-1])))
        out[parent[first]] = ufunc.reduceat(values, first)
    return out


def _memo(keys: list[np.ndarray], call: Callable[..., Any], *convert: Callable[[Any], Any]) -> list[Any]:
    """``call`` once per distinct key row (the resolvers are lookups: same key, same answer),
    mapped back to every row; ``convert`` turns each key column's value into the argument."""
    if not len(keys[0]):
        return []
    uniq, inverse = np.unique(np.rec.fromarrays(keys), return_inverse=True)
    answers = [call(*(f(v) for f, v in zip(convert, u, strict=True))) for u in uniq.tolist()]
    return [answers[i] for i in np.asarray(inverse).ravel().tolist()]


def _records_as_columns(p: InspectorParser, lines: Lines, read: Read, values: dict[int, Any]) -> _Plan:
    """:meth:`InspectorParser.feed_record` over every record pyarrow read, at once.

    A record is decided here only when the columns say exactly what its dict would: any doubt
    (a problem to report, a number past float64's exact range, a negative zero, a context the
    columns do not hold) puts its line in ``special`` for the per-line path instead.
    """
    t = read.table
    n, line = t.num_rows, read.line
    col = {name: t.column(name).combine_chunks() for name in SCHEMA.names}
    has_h, has_m, has_b = _valid(col["header"]), _valid(col["metadata"]), _valid(col["coll_perf"])
    has_ds = _valid(col["dump_stats"])
    has_pp = _valid(col["p2p_perf"]) | _valid(col["proxy_trace"])
    marker = has_ds & has_h & has_m
    drop_v, drop_ok, drop_un = json_ints(_field(col["dump_stats"], "coll_dropped_since_last_dump"))
    flag = (has_ds & ~marker) | (marker & drop_un) | (~has_ds & ~has_b & ~has_pp)
    ignored = (marker & ~drop_un) | (~has_ds & ~has_b & has_pp)

    # The dump context (v4.3): header and metadata of the last valid marker before each line,
    # or what the parser held before this buffer. Contexts that are not rows of the table are
    # read as one-line documents of their own and appended to its header and metadata columns.
    slow_markers = sorted(i for i, v in values.items() if _is_marker(v))
    outside = [(p.header, p.metadata)] + [(values[i]["header"], values[i]["metadata"]) for i in slow_markers]
    pool = _read_contexts(outside)
    at = np.where(pool.index >= 0, n + pool.index, -1)  # -1: the columns cannot hold that context
    ctx_line = np.concatenate((line[marker], np.array(slow_markers, np.int64)))
    ctx_src = np.concatenate((np.flatnonzero(marker), at[1:]))
    order = np.argsort(ctx_line, kind="stable")
    ctx_line, ctx_src = ctx_line[order], ctx_src[order]
    j = np.searchsorted(ctx_line, line, side="left") - 1
    inherited = np.where(j >= 0, ctx_src[np.maximum(j, 0)], at[0]) if len(ctx_src) else np.full(n, at[0])
    coll = ~has_ds & has_b
    h_idx = np.where(has_h, np.arange(n), inherited)
    m_idx = np.where(has_m, np.arange(n), inherited)
    flag |= coll & ((h_idx < 0) | (m_idx < 0))
    c = np.flatnonzero(coll & (h_idx >= 0) & (m_idx >= 0))
    hc, mc = h_idx[c], m_idx[c]
    head = pa.concat_arrays([col["header"], pool.header])
    meta = pa.concat_arrays([col["metadata"], pool.metadata])
    body = col["coll_perf"]

    unsure = np.zeros(len(c), bool)

    def ints(arr: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v, ok, un = json_ints(arr)
        unsure[:] |= un[rows]
        return v[rows], ok[rows]

    def floats(arr: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v, ok, un = json_floats(arr)
        unsure[:] |= un[rows]
        return v[rows], ok[rows]

    comm, coll_name = _Strings.of(_field(head, "id")), _Strings.of(_field(body, "coll"))
    host = _field(meta, "hostname")
    if p.short_hostnames:
        host = pc.replace_substring_regex(host, pattern=r"(?s)\..*", replacement="")
    hosts = _Strings.of(host)
    rank, rank_ok = ints(_field(head, "rank"), hc)
    exec_us, exec_ok = floats(_field(body, "coll_exec_time_us"), c)
    good = (
        comm.non_empty(hc) & rank_ok & (rank >= 0) & (rank < _I32) & coll_name.non_empty(c)
        & exec_ok & (exec_us >= 0) & (exec_us <= _MAX_EXEC_US)
    )  # fmt: skip
    nranks, nranks_ok = ints(_field(head, "n_ranks"), hc)
    nnodes, nnodes_ok = ints(_field(head, "nnodes"), hc)
    pid, pid_ok = ints(_field(meta, "pid"), mc)
    dumped, dumped_ok = ints(_field(meta, "dump_timestamp_us"), mc)
    seq, seq_ok = ints(_field(body, "coll_sn"), c)
    size, size_ok = ints(_field(body, "coll_msg_size_bytes"), c)
    coll_start, coll_start_ok = ints(_field(body, "event_trace_ts", "coll_start_ts"), c)
    start_sn, start_sn_ok = ints(_field(body, "event_trace_sn", "coll_start_sn"), c)
    busbw, busbw_ok = floats(_field(body, "coll_busbw_gbs"), c)
    nranks_ok &= (nranks >= 0) & (nranks < _I32)
    nnodes_ok &= (nnodes >= 0) & (nnodes < _I32)
    pid_ok &= pid >= 0
    seq_ok &= seq >= 0
    size_ok &= size >= 0
    dumped_ok &= dumped > 0  # plausible: after 1970 (and, below 2**53, before 2262)
    # A dump time that is there but no time: the per-line path refuses its record, with why.
    untimed = _field(meta, "dump_timestamp_us").is_valid().to_numpy(zero_copy_only=False)[mc] & ~dumped_ok
    kernels = _Kernels.of(body, c, unsure) if p.channel_rows else _Kernels.none()
    g = p.gpus_per_host
    if g and not -_I32 < g < _I32:
        unsure[:] = True  # nnodes * g would not fit the arithmetic below: Python's integers do it

    # From here on, only the records decided here.
    decided = good & ~unsure & ~untimed
    flag[c[~decided]] = True
    r = np.flatnonzero(decided)
    k = kernels.restrict(decided)
    n_ch = np.bincount(k.parent, minlength=len(c))[r]
    last_stop = _segments(k.stop, k.parent, len(c), np.maximum)[r]
    first_start = _segments(k.start, k.parent, len(c), np.minimum)[r]
    hc, mc, cr = hc[r], mc[r], c[r]
    rank, exec_us, busbw, busbw_ok = rank[r], exec_us[r], busbw[r], busbw_ok[r]
    nranks, nranks_ok, nnodes, nnodes_ok = nranks[r], nranks_ok[r], nnodes[r], nnodes_ok[r]
    pid, pid_ok, seq, seq_ok, size, size_ok = pid[r], pid_ok[r], seq[r], seq_ok[r], size[r], size_ok[r]
    has_ch = n_ch > 0
    # Observed at the last kernel stop, else at the dump; arrived at coll_start_ts when its
    # callback fired, else at the first kernel start.
    observed, observed_ok = np.where(has_ch, last_stop, dumped[r]), has_ch | dumped_ok[r]
    from_cs = coll_start_ok[r] & (coll_start[r] > 0) & ~(start_sn_ok[r] & (start_sn[r] == 0))
    arrival, arrival_ok = np.where(from_cs, coll_start[r], first_start), from_cs | has_ch
    host_ok = hosts.codes[mc] >= 0
    device, device_ok = _devices(
        p, hosts, mc, host_ok & pid_ok, pid, rank, nranks, nranks_ok, nnodes, nnodes_ok
    )

    # Rows: each record's whole-collective row, then its channels' rows, in line order.
    whole = 1 if p.whole_rows else 0
    per = whole + n_ch
    first = np.cumsum(per) - per
    total = int(per.sum())
    rec_of = np.repeat(np.arange(len(r)), per)
    kp = np.searchsorted(r, k.parent)  # each kept kernel's record, among the decided ones
    ch_at = first[kp] + whole + np.arange(len(kp)) - (np.cumsum(n_ch) - n_ch)[kp]
    is_ch = np.zeros(total, bool)
    is_ch[ch_at] = True
    channel = np.zeros(total, np.int64)
    channel[ch_at] = k.channel
    k_dur = (k.stop - k.start) / 1e6
    duration = exec_us[rec_of] / 1e6
    duration[ch_at] = k_dur
    with np.errstate(all="ignore"):
        bw = busbw[rec_of] * GBPS_TO_BPS
        bw[ch_at] = busbw[kp] * GBPS_TO_BPS * (exec_us[kp] / 1e6) / k_dur
    bw_ok = busbw_ok[rec_of]
    bw_ok[ch_at] &= exec_us[kp] > 0
    start, start_ok = arrival[rec_of], arrival_ok[rec_of]
    start[ch_at], start_ok[ch_at] = k.start, True
    transport: pa.Array = pa.nulls(total, _STR)
    if p.transport_of is not None and len(kp):
        ask = np.flatnonzero((host_ok & pid_ok)[kp])
        got = _memo(
            [hosts.codes[mc][kp[ask]], pid[kp[ask]], rank[kp[ask]], k.channel[ask]],
            p.transport_of,
            hosts.value, int, int, int,
        )  # fmt: skip
        per_row: list[Any] = [None] * total
        for i, v in zip(ch_at[ask].tolist(), got, strict=True):
            per_row[i] = v
        transport = pa.array(per_row, type=_STR)
    block = {
        "job": pa.DictionaryArray.from_arrays(pa.array(np.zeros(total, np.int32)), pa.array([p.job], _STR)),
        "communicator": comm.column(hc[rec_of]),
        "rank": pa.array(rank[rec_of], pa.int64()),
        "nranks": _masked(nranks[rec_of], nranks_ok[rec_of], pa.int64()),
        "host": hosts.column(mc[rec_of]),
        "device": _masked(device[rec_of], device_ok[rec_of], pa.int64()),
        "collective": coll_name.column(cr[rec_of]),
        "seq": _masked(seq[rec_of], seq_ok[rec_of], pa.int64()),
        "message_bytes": _masked(size[rec_of], size_ok[rec_of], pa.int64()),
        "channel": _masked(channel, is_ch, pa.int64()),
        "duration_seconds": pa.array(duration, pa.float64()),
        "bus_bandwidth_bps": _masked(bw, bw_ok, pa.float64()),
        "transport": transport,
        "observed_us": _masked(observed[rec_of], observed_ok[rec_of], pa.int64()),
        "start_us": _masked(start, start_ok, pa.int64()),
    }
    return _Plan(
        block=block,
        row_line=line[cr][rec_of],
        rec_line=line[cr],
        ignored_line=line[ignored],
        dropped=np.where(drop_ok, drop_v, 0)[ignored],
        special=line[flag],
        ctx_line=ctx_line,
    )


@dataclass
class _Kernels:
    """The kernel events that give channel rows, as :meth:`InspectorParser._channels` keeps them:
    completed (start and stop plausible, stop after start), not stopped by a callback numbered
    0 in the last ``event_trace_sn`` entry of their channel. ``parent`` indexes the records."""

    parent: np.ndarray
    channel: np.ndarray
    start: np.ndarray
    stop: np.ndarray

    @classmethod
    def none(cls) -> _Kernels:
        empty = np.empty(0, np.int64)
        return cls(empty, empty, empty, empty)

    @classmethod
    def of(cls, body: pa.Array, rows: np.ndarray, unsure: np.ndarray) -> _Kernels:
        """The kernels of the records ``body[rows]``; marks ``unsure`` the records whose events
        hold numbers past float64's exact range."""
        where = np.full(len(body), -1, np.int64)
        where[rows] = np.arange(len(rows))

        def events(name: str) -> tuple[np.ndarray, pa.Array]:
            lists = _field(body, name, "kernel_events")
            parent = where[np.asarray(pc.list_parent_indices(lists).to_numpy(), np.int64)]
            return parent, pc.list_flatten(lists)

        parent, ev = events("event_trace_ts")
        ch, ch_ok, un1 = json_ints(_field(ev, "channel_id"))
        start, start_ok, un2 = json_ints(_field(ev, "kernel_start_ts"))
        stop, stop_ok, un3 = json_ints(_field(ev, "kernel_stop_ts"))
        mine = (parent >= 0) & _valid(ev)
        unsure[np.unique(parent[mine & (un1 | un2 | un3)])] = True
        keep = mine & ch_ok & (ch >= 0) & (ch < _CHANNELS) & start_ok & stop_ok & (start > 0) & (stop > start)

        sn_parent, sn = events("event_trace_sn")
        sn_ch, sn_ch_ok, un1 = json_ints(_field(sn, "channel_id"))
        sn_stop, sn_stop_ok, un2 = json_ints(_field(sn, "kernel_stop_sn"))
        sn_mine = (sn_parent >= 0) & _valid(sn)
        unsure[np.unique(sn_parent[sn_mine & (un1 | un2)])] = True
        usable = sn_mine & sn_ch_ok & (sn_ch >= 0) & (sn_ch < _CHANNELS)
        key = sn_parent[usable] * _CHANNELS + sn_ch[usable]
        zero = (sn_stop_ok & (sn_stop == 0))[usable]
        if len(key):  # the last entry of a (record, channel) decides, as a dict built in order would
            by_key = np.lexsort((np.arange(len(key)), key))
            last = by_key[np.concatenate((key[by_key][1:] != key[by_key][:-1], [True]))]
            key, zero = key[last], zero[last]
            ev_key = parent * _CHANNELS + ch
            at = np.minimum(np.searchsorted(key, ev_key), len(key) - 1)
            keep &= ~((key[at] == ev_key) & zero[at])
        return cls(parent[keep], ch[keep], start[keep], stop[keep])

    def restrict(self, decided: np.ndarray) -> _Kernels:
        m = decided[self.parent]
        return _Kernels(self.parent[m], self.channel[m], self.start[m], self.stop[m])


def _devices(
    p: InspectorParser,
    hosts: _Strings,
    mc: np.ndarray,
    ask: np.ndarray,
    pid: np.ndarray,
    rank: np.ndarray,
    nranks: np.ndarray,
    nranks_ok: np.ndarray,
    nnodes: np.ndarray,
    nnodes_ok: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each record's GPU: the resolver's answer (asked where host and pid are known), else rank %
    gpus_per_host where the communicator spans whole hosts."""
    n = len(rank)
    device, device_ok, unanswered = np.zeros(n, np.int64), np.zeros(n, bool), np.ones(n, bool)
    if p.device_of is not None:
        rows = np.flatnonzero(ask)
        got = _memo(
            [hosts.codes[mc][rows], pid[rows], rank[rows], np.where(nranks_ok, nranks, -1)[rows]],
            p.device_of,
            hosts.value, int, int, lambda v: None if v < 0 else int(v),
        )  # fmt: skip
        for i, d in zip(rows.tolist(), got, strict=True):
            if d is not None:
                unanswered[i] = False
                if isinstance(d, int) and not isinstance(d, bool) and -(2**63) <= d < 2**63:
                    device[i], device_ok[i] = d, True
    g = p.gpus_per_host
    if g:
        spans = unanswered & nranks_ok & (nranks != 0) & nnodes_ok & (nnodes != 0) & (nnodes * g == nranks)
        device = np.where(spans, rank % g, device)
        device_ok |= spans
    return device, device_ok


def _is_marker(value: Any) -> bool:
    """A record :meth:`InspectorParser._marker` takes as the dump context."""
    return (
        isinstance(value, dict)
        and "dump_stats" in value
        and isinstance(value.get("header"), dict)
        and isinstance(value.get("metadata"), dict)
    )


@dataclass
class _Pool:
    header: pa.Array
    metadata: pa.Array
    index: np.ndarray  # per context: its row in header/metadata, -1 when the columns cannot hold it


def _read_contexts(contexts: list[tuple[Any, Any]]) -> _Pool:
    """Header/metadata pairs that are not rows of the table, as columns (one row each)."""
    docs = []
    for header, metadata in contexts:
        try:
            docs.append(json.dumps({"header": header, "metadata": metadata}, allow_nan=True).encode())
        except (TypeError, ValueError, RecursionError):
            docs.append(b"")
    got = read_lines(split_lines(b"\n".join(docs)), SCHEMA, hold=_HOLD)
    index = np.full(len(contexts), -1, np.int64)
    index[got.line] = np.arange(len(got.line))
    return _Pool(
        got.table.column("header").combine_chunks(), got.table.column("metadata").combine_chunks(), index
    )


def iter_json_values(text: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each JSON value in ``text``: JSON lines, pretty-printed objects
    one after another, or one array of records. Raises ``ValueError`` naming the line."""
    dec = json.JSONDecoder()
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            return
        line = text.count("\n", 0, i) + 1
        try:
            value, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise ValueError(f"line {e.lineno} column {e.colno}: not valid JSON ({e.msg})") from None
        if isinstance(value, list):
            for v in value:
                yield line, v
        else:
            yield line, value


def parse_inspector_text(
    text: str,
    job: str,
    *,
    device_of: DeviceResolver | None = None,
    gpus_per_host: int | None = None,
    strict: bool = False,
) -> tuple[TimingRows, InspectorParser]:
    """Parse a whole Inspector document (a file, a README example, a push body)."""
    parser = InspectorParser(job, device_of=device_of, gpus_per_host=gpus_per_host, strict=strict)
    rows = TimingRows()
    parser.feed_text(text, rows)
    return rows, parser


# -- Prometheus textfile mode ----------------------------------------------------------------------

_PROM_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$"
)
_PROM_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SIZE_BUCKET = re.compile(r"^(?P<lo>\d+)-(?P<hi>\d+)(?P<unit>B|KB|MB|GB|TB)$")
_UNIT = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
_GPU = re.compile(r"^GPU(\d+)$")


def parse_size_bucket(label: str) -> tuple[int | None, int | None]:
    """``4-5GB`` -> (4 GiB, 5 GiB): the Inspector buckets sizes by 1024-based units, lower inclusive."""
    if label == "0B":
        return 0, 0
    m = _SIZE_BUCKET.match(label)
    if not m:
        return None, None
    unit = _UNIT[m["unit"]]
    return int(m["lo"]) * unit, int(m["hi"]) * unit


def parse_inspector_prom(text: str, job: str | None = None) -> pa.Table:
    """The Inspector's Prometheus textfile (``nccl_inspector_metrics_<gpu uuid>.prom``) as a table.

    Not nccl_timing rows: each series is an aggregate over the dump interval (mean exec time,
    geometric-mean bandwidth) per node, GPU, communicator name, collective, algorithm/protocol
    and power-of-two size bucket. There is no rank, no sequence number and no exact size, so
    the rank/channel peer comparison cannot run on it; it suits node/GPU-level trends.
    Columns: job, host, device, communicator (``comm_name``), nnodes, nranks, collective
    (``p2p_operation`` for P2P), p2p, algo_proto, message_bytes_min/max, duration_seconds,
    bus_bandwidth_bps. A series missing one of the two metrics has null there.
    """
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line[:80]!r}")
        labels = dict(_PROM_LABEL.findall(m["labels"] or ""))
        name = m["name"]
        try:
            value = float(m["value"])
        except ValueError:
            raise ValueError(f"{name}: value {m['value']!r} is not a number") from None
        key = tuple(sorted(labels.items()))
        entry = series.setdefault(key, {"labels": labels})
        if name in ("nccl_bus_bandwidth_gbs", "nccl_p2p_bus_bandwidth_gbs"):
            entry["busbw"] = value * GBPS_TO_BPS
            entry["p2p"] = name.startswith("nccl_p2p")
        elif name in ("nccl_collective_exec_time_microseconds", "nccl_p2p_exec_time_microseconds"):
            entry["dur"] = value / 1e6
            entry["p2p"] = name.startswith("nccl_p2p")
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "job",
            "host",
            "device",
            "communicator",
            "nnodes",
            "nranks",
            "collective",
            "p2p",
            "algo_proto",
            "message_bytes_min",
            "message_bytes_max",
            "duration_seconds",
            "bus_bandwidth_bps",
        )
    }
    for entry in series.values():
        if "p2p" not in entry:
            continue  # stats counters (nccl_collectives_total ...) are not timings
        lab = entry["labels"]
        g = _GPU.match(lab.get("gpu", ""))
        lo, hi = parse_size_bucket(lab.get("message_size", ""))
        jid = lab.get("slurm_job_id")
        cols["job"].append(jid if jid and jid != "unknown" else job)
        cols["host"].append(lab.get("node"))
        cols["device"].append(int(g.group(1)) if g else None)
        cols["communicator"].append(lab.get("comm_name"))
        cols["nnodes"].append(as_int(lab.get("n_nodes")))
        cols["nranks"].append(as_int(lab.get("nranks")))
        cols["collective"].append(lab.get("p2p_operation") if entry["p2p"] else lab.get("collective"))
        cols["p2p"].append(entry["p2p"])
        cols["algo_proto"].append(lab.get("algo_proto"))
        cols["message_bytes_min"].append(lo)
        cols["message_bytes_max"].append(hi)
        cols["duration_seconds"].append(entry.get("dur"))
        cols["bus_bandwidth_bps"].append(entry.get("busbw"))
    types = {
        "device": pa.int16(),
        "nnodes": pa.int32(),
        "nranks": pa.int32(),
        "p2p": pa.bool_(),
        "message_bytes_min": pa.int64(),
        "message_bytes_max": pa.int64(),
        "duration_seconds": pa.float64(),
        "bus_bandwidth_bps": pa.float64(),
    }
    return pa.table({k: pa.array(v, types.get(k, pa.string())) for k, v in cols.items()})
