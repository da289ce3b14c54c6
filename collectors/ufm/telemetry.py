"""UFM Telemetry: Prometheus text, CSV and the TFS JSON stream -> canonical ``port_sample`` batches.

UFM Telemetry serves the last sample of every port counter over HTTP (UFM Telemetry guide,
"Prometheus Endpoint Support"): Prometheus text by default (``/metrics``), CSV under ``/csv``
(a header row of ``timestamp,source_id,tag,node_guid,port_guid,port_num,<counters…>``) and
JSON under ``/json``. A Prometheus line looks like (one line, wrapped here)::

    PortXmitDataExtended{source="0x0002c90300f172a0", node_guid="2c90300f172a0",
        port_guid="2c90300f172a2", port_num="2"} 85554128244 1628683905941

with the GUID spelled differently in each label and a trailing millisecond timestamp. The TFS
(fluentd) plugin streams ``{"timestamp", "type", "values": [{timestamp, node_guid, port_guid,
port_num, Infiniband_*_u_<unit>…}]}``; see :mod:`graywire.collectors.ufm.counters` for the counter mapping.

Parsing is the hot path: a 500,000-port fabric with 30 counters is 15 million lines (~2 GB) a
poll. Nothing here loops over lines in Python. Arrow's multithreaded CSV reader splits the text
at ``}`` (``name{labels`` | `` value ts``), the one pass over all of it; everything after works
on views of the reader's buffers. Names and label blocks become one zero-copy interleaved string
array, encoded by comparing each family with the one before (UFM lists the ports in the same
order in every family) so that only what differs is hashed (:func:`_encode_lines`); the tails are
cut where they stand into value and timestamp slots, so timestamps are one cast and each
metric's values one cast of a zero-copy slice (:func:`_tail_views`). Each fast path checks its
premise and falls back to the general one (hash every line, read the tails again as
blank-delimited CSV). The label blocks of a port are parsed once and cached (:mod:`.ports`).
Lines the fast path cannot take (a ``}`` inside a label value, no labels) go through an exact
regular expression; anything that is not Prometheus text fails the whole parse with the line
quoted. A payload that does not end with a newline is truncated and fails: a partial poll must
not look like ports that vanished.

CSV is read by the same reader with the counters typed as numbers; a document with one value
that is no plain number is read again as text for the exact number parser.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from graywire.collectors.base import (
    BAD_PORT,
    MALFORMED_LINE,
    NOT_A_NUMBER,
    OUT_OF_RANGE,
    TOO_DEEP,
    ScrapeResult,
    Skips,
    guarded_scrape,
    raise_if_abandoned,
    redact_url,
)
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PORT_SAMPLE, TS, make_batch, with_counter_widths
from graywire.collectors.ufm.counters import CounterSpec, counter_spec
from graywire.collectors.ufm.http import UfmHttp, UfmHttpSettings
from graywire.collectors.ufm.ports import BAD, PortKeys, SpellingCache, same_strings

TelemetryFormat = Literal["auto", "prometheus", "csv", "json"]


class TelemetryParseError(ValueError):
    """The payload is not a complete UFM telemetry document."""


# -- numbers ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Numbers:
    """Values of a set of tokens: exact uint64 where the token is an unsigned integer, else float."""

    u64: np.ndarray
    is_int: np.ndarray
    f64: np.ndarray  # NaN where not a float (and where is_int)
    garbage: np.ndarray  # a token that is present but not a number (nor a null spelling)


#: Spellings of "no value" in UFM text (empty CSV fields are null already).
_NULL_WORDS = r"^(?i:n/?a|null|none|-)$"
#: A number with an optional unit suffix: temperatures arrive as "45C".
_NUMBER_UNIT = r"^(?P<v>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*[A-Za-z]{0,2}$"


#: The largest uint64, as digits: a 20-digit string above it does not fit.
_U64_MAX = str(2**64 - 1)


def _uint_text(s: pa.Array, digits: int = 20) -> pa.Array:
    """Where ``s`` is an unsigned integer that fits ``digits`` digits (20: uint64): ASCII digits
    only (``utf8_is_digit`` takes "²", which no cast reads), compared as text at full width."""
    ascii_digits = pc.fill_null(pc.match_substring_regex(s, f"^[0-9]{{1,{digits}}}$"), False)
    if digits < 20:
        return ascii_digits
    n = pc.utf8_length(s)
    fits = pc.or_(pc.less(n, 20), pc.less_equal(s, _U64_MAX))
    return pc.and_(ascii_digits, pc.fill_null(fits, False))


def _numbers_text(arr: pa.Array) -> _Numbers:
    n = len(arr)
    s = pc.utf8_trim_whitespace(arr)
    is_int = _uint_text(s)
    is_int_np = is_int.to_numpy(zero_copy_only=False)
    u64 = pc.cast(pc.if_else(is_int, s, pa.scalar(None, s.type)), pa.uint64()).fill_null(0).to_numpy()
    f64 = np.full(n, np.nan)
    garbage = np.zeros(n, bool)
    other = np.flatnonzero(~is_int_np & s.is_valid().to_numpy(zero_copy_only=False))
    if other.size:
        tok = s.take(pa.array(other))
        tok = pc.if_else(pc.match_substring_regex(tok, _NULL_WORDS), pa.scalar(None, tok.type), tok)
        try:
            f64[other] = pc.cast(tok, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
        except pa.ArrowInvalid:
            num = pc.struct_field(pc.extract_regex(tok, _NUMBER_UNIT), 0)
            garbage[other] = pc.and_(num.is_null(), tok.is_valid()).to_numpy(zero_copy_only=False)
            f64[other] = pc.cast(num, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return _Numbers(u64, is_int_np, f64, garbage)


def _numbers(arr: pa.Array | pa.ChunkedArray) -> _Numbers:
    """Parse counter values of any Arrow type (text tokens, or numbers from JSON), never raising."""
    if isinstance(arr, pa.ChunkedArray):
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            return _numbers(arr.combine_chunks())  # numbers: one array of them is small
        parts = [_numbers(c) for c in arr.chunks]
        if not parts:
            return _numbers(pa.array([], arr.type))
        return _Numbers(*(np.concatenate([getattr(p, f) for p in parts]) for f in _Numbers.__slots__))
    n = len(arr)
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = arr.type
    nothing = np.zeros(n, bool)
    if pa.types.is_null(t):
        return _Numbers(np.zeros(n, np.uint64), nothing, np.full(n, np.nan), nothing)
    if pa.types.is_unsigned_integer(t) and arr.null_count == 0:  # counters as Arrow read them
        v = arr.cast(pa.uint64()).to_numpy()
        return _Numbers(v, np.ones(n, bool), np.full(n, np.nan), nothing)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        v = arr.cast(pa.int64() if pa.types.is_signed_integer(t) else pa.uint64()).fill_null(0).to_numpy()
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        ok = valid & (v >= 0)
        # A negative count is a number no counter holds: kept as a float, so it reads out of range.
        f = np.where(valid & ~ok, v.astype(np.float64), np.nan)
        return _Numbers(np.where(ok, v, 0).astype(np.uint64), ok, f, nothing)
    if pa.types.is_floating(t):
        f = arr.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
        return _Numbers(np.zeros(n, np.uint64), nothing, f, nothing)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _numbers_text(arr)
    return _Numbers(
        np.zeros(n, np.uint64), nothing, np.full(n, np.nan), arr.is_valid().to_numpy(zero_copy_only=False)
    )


# -- the wide form every parser ends in ---------------------------------------------------------

_COLUMN_TYPES = {f.name: f.type for f in PORT_SAMPLE}


@dataclass
class _Columns:
    """Per-port canonical columns being filled from source counters (rows = distinct ports)."""

    n: int
    values: dict[str, np.ndarray] = field(default_factory=dict)
    valid: dict[str, np.ndarray] = field(default_factory=dict)
    narrow: dict[str, tuple[np.ndarray, int, bool]] = field(default_factory=dict)
    lanes: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def put(self, spec: CounterSpec, rows: np.ndarray, num: _Numbers, skipped: Skips | None = None) -> None:
        """Write one source counter's values at ``rows``; null values never overwrite.

        A value that is a number its column cannot hold (negative, past 64 bits, infinite) is
        null and counted as ``out_of_range`` in ``skipped``; one that is no number, as
        ``not_a_number``.
        """
        if skipped is not None:
            present = num.is_int | ~np.isnan(num.f64)
            if spec.lane is not None or not pa.types.is_floating(_COLUMN_TYPES[spec.column]):
                bad = int(np.count_nonzero(present & ~_as_uint(num)[1]))
            else:
                bad = int(np.count_nonzero(present & ~num.is_int & ~np.isfinite(num.f64)))
            if bad:
                skipped[OUT_OF_RANGE] += bad
            if num.garbage.any():
                skipped[NOT_A_NUMBER] += int(np.count_nonzero(num.garbage))
        if spec.lane is not None:
            vals, ok = _as_uint(num)
            lv, lok = self.lanes.setdefault(spec.lane, (np.zeros(self.n, np.uint64), np.zeros(self.n, bool)))
            lv[rows[ok]] = vals[ok]
            lok[rows[ok]] = True
            return
        col = spec.column
        is_float = pa.types.is_floating(_COLUMN_TYPES[col])
        if is_float:
            vals = np.where(num.is_int, num.u64.astype(np.float64), num.f64)
            ok = np.isfinite(vals)
        else:
            vals, ok = _as_uint(num)
            if spec.scale != 1:
                vals = vals * np.uint64(spec.scale)
        if col not in self.values:
            self.values[col] = np.zeros(self.n, np.float64 if is_float else np.uint64)
            self.valid[col] = np.zeros(self.n, bool)
        every = ok.all()
        w = rows if every else rows[ok]
        self.values[col][w] = vals if every else vals[ok]
        self.valid[col][w] = True
        if not is_float and spec.bits < 64:
            mask = self.narrow.get(col, (np.zeros(self.n, bool), spec.bits, spec.saturating))[0]
            mask[w] = True
            self.narrow[col] = (mask, spec.bits, spec.saturating)
        elif col in self.narrow:
            self.narrow[col][0][w] = False  # a 64-bit value replaced the narrow one

    def batch(
        self, time_us: int, port: pa.Array, source: str, source_us: np.ndarray | None = None
    ) -> pa.RecordBatch:
        n = self.n
        cols: dict[str, pa.Array] = {
            "time": pa.array(np.full(n, time_us, dtype="datetime64[us]"), type=TS),
            "port": port,
            "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array([source])),
        }
        if source_us is not None and source_us.any():
            cols["source_time"] = pa.array(source_us.astype("datetime64[us]"), type=TS, mask=source_us <= 0)
        for col, vals in self.values.items():
            ok = self.valid[col]
            t = _COLUMN_TYPES[col]
            if pa.types.is_uint8(t):
                ok = ok & (vals <= 255)
            cols[col] = pa.array(vals, mask=~ok).cast(t)
        if self.lanes:
            k = max(self.lanes) + 1
            mat = np.zeros((n, k), np.uint64)
            okm = np.zeros((n, k), bool)
            for lane, (v, o) in self.lanes.items():
                mat[:, lane] = v
                okm[:, lane] = o
            offsets = pa.array(np.arange(n + 1, dtype=np.int32) * k)
            values = pa.array(mat.ravel(), mask=~okm.ravel())
            cols["fec_lane_errors"] = pa.ListArray.from_arrays(
                offsets, values, mask=pa.array(~okm.any(axis=1))
            )
        bits = {c: b for c, (m, b, _) in self.narrow.items() if m.any()}
        sat = tuple(sorted(c for c, (m, _, s) in self.narrow.items() if s and m.any()))
        schema = with_counter_widths(PORT_SAMPLE, bits, sat) if bits else PORT_SAMPLE
        return make_batch(schema, n, cols)


def _as_uint(num: _Numbers) -> tuple[np.ndarray, np.ndarray]:
    """Counter values as uint64: exact integers, or floats that are finite and non-negative."""
    if num.is_int.all():
        return num.u64, num.is_int
    f = num.f64
    with np.errstate(invalid="ignore"):
        f_ok = ~num.is_int & np.isfinite(f) & (f >= 0) & (f < 1.8446744073709552e19)
    vals = num.u64.copy()
    if f_ok.any():
        vals[f_ok] = np.rint(f[f_ok]).astype(np.uint64)
    return vals, num.is_int | f_ok


def _to_us(v: np.ndarray | np.int64, t: int) -> np.ndarray | np.int64:
    """Source timestamps in µs, their unit (s, ms, µs or ns since the epoch) told by the magnitude
    of the latest, ``t``."""
    return v // 1000 if t >= 10**17 else v if t >= 10**14 else v * 1000 if t >= 10**11 else v * 1_000_000


def _time_us(raw: np.ndarray) -> int | None:
    """Batch time from source timestamps: the latest."""
    t = int(raw.max()) if raw.size else 0
    return int(_to_us(np.int64(t), t)) if t > 0 else None


def _per_row_us(raw: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Each port's source sample time (µs; 0 where none): the latest of its lines' timestamps.

    ``rows`` names every row of ``0..n-1`` at least once (each port has a line).
    """
    out = np.zeros(n, np.int64)
    t = int(raw.max()) if raw.size else 0
    if t <= 0:
        return out
    if raw.min() == t:  # one timestamp on every line (UFM stamps a scrape once)
        out[:] = _to_us(np.int64(t), t)
        return out
    ok = raw > 0
    r, us = rows[ok], _to_us(raw[ok].astype(np.int64), t)
    # A scatter keeps one of a row's lines (any); where that is not the latest, ufunc.at settles it.
    out[r] = np.maximum(out[r], us)
    if (out[r] < us).any():
        np.maximum.at(out, r, us)
    return out


def _check_complete(payload: bytes) -> None:
    if not payload or payload.isspace():  # isspace stops at the first non-blank byte
        raise TelemetryParseError("empty telemetry payload")
    if not payload.endswith(b"\n"):
        raise TelemetryParseError("payload does not end with a newline: truncated")


def _dense(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``codes`` (ascending) and each code's position among them, in O(n)."""
    present = np.zeros(size, bool)
    present[codes] = True
    uniq = np.flatnonzero(present)
    where = np.zeros(size, np.int64)
    where[uniq] = np.arange(uniq.size)
    return uniq, where[codes]


def _now_us(now: datetime | None) -> int:
    if now is None:
        return time.time_ns() // 1000
    return int(now.timestamp() * 1_000_000)


# -- ports ----------------------------------------------------------------------------------------


def _label(blocks: pa.Array, name: str) -> pa.Array:
    pattern = r"(?:^|[,{\s])" + name + r'\s*=\s*"(?P<v>(?:[^"\\]|\\.)*)"'
    return pc.struct_field(pc.extract_regex(blocks, pattern), 0)


#: UFM's own label block, values of GUID and number characters only (so no label name can hide in
#: one): one match gives all three labels, as :func:`_label` would find them one by one.
_UFM_LABELS = (
    r'^source="[0-9A-Fa-fXx:]*", node_guid="(?P<node>[0-9A-Fa-fXx:]*)", '
    r'port_guid="(?P<port>[0-9A-Fa-fXx:]*)", port_num="(?P<num>[0-9]*)"$'
)


def _port_labels(blocks: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(port_guid, node_guid, port_num) of each label block: one pass for blocks in UFM's layout,
    a search per label for the others."""
    m = pc.extract_regex(blocks, _UFM_LABELS)
    if m.null_count == 0:
        return pc.struct_field(m, 1), pc.struct_field(m, 0), pc.struct_field(m, 2)
    other = m.is_null()
    rest = blocks.filter(other)
    port, node, num = (
        pc.replace_with_mask(pc.struct_field(m, i), other, _label(rest, name))
        for i, name in ((1, "port_guid"), (0, "node_guid"), (2, "port_num"))
    )
    return port, node, num


def _port_nums(nums: pa.Array, errors: list[str]) -> tuple[pa.Array, np.ndarray]:
    """Port numbers (null where absent) and the mask of those that are no port number (garbage,
    or past 65535); the first such is described in ``errors``."""
    nums = nums.cast(pa.string()) if not pa.types.is_string(nums.type) else nums
    nums = pc.utf8_trim_whitespace(nums)
    nums = pc.if_else(pc.equal(nums, ""), pa.scalar(None, pa.string()), nums)
    digits = _uint_text(nums, 5)
    out = pc.cast(pc.if_else(digits, nums, pa.scalar(None, pa.string())), pa.int64())
    bad = pc.or_(pc.invert(digits), pc.greater(out, 65535))
    bad_np = pc.and_(pc.fill_null(bad, True), nums.is_valid()).to_numpy(zero_copy_only=False).astype(bool)
    if bad_np.any() and not errors:
        v = nums[int(np.flatnonzero(bad_np)[0])].as_py()
        errors.append(
            f"port_num out of range: {v}"
            if v.isascii() and v.isdigit()
            else f"port_num is not a number: {v!r}"
        )
    return pc.if_else(pc.fill_null(bad, False), pa.scalar(None, pa.int64()), out), bad_np


def _resolve(
    keys: PortKeys, port_guids: pa.Array, node_guids: pa.Array, nums: pa.Array, errors: list[str]
) -> np.ndarray:
    """Port ids; the port GUID names the port (an HCA port, or a switch's shared GUID + number).

    A spelling whose GUID is not a GUID or whose port number is garbage gets :data:`BAD` (its
    lines are skipped and counted); the first such is described in ``errors``.
    """
    port_guids, node_guids = port_guids.cast(pa.string()), node_guids.cast(pa.string())
    missing = pc.or_kleene(port_guids.is_null(), pc.equal(port_guids, ""))
    guids = pc.if_else(missing, node_guids, port_guids)
    port_nums, bad_num = _port_nums(nums, errors)
    ids = keys.resolve_ids(guids, port_nums, lenient=True)
    if (ids == BAD).any() and not errors:
        g = guids[int(np.flatnonzero(ids == BAD)[0])].as_py()
        errors.append(f"not a GUID: {g!r}")
    ids[bad_num] = BAD
    return ids


def _skip_bad_ports(ids: np.ndarray, errors: list[str], skipped: Skips | None) -> np.ndarray:
    """Lines (or rows) of :data:`BAD` ports are left out and counted; when no line names a
    usable port and some name a bad one, the payload names no port at all: it fails."""
    bad = int(np.count_nonzero(ids == BAD))
    if bad and not (ids >= 0).any():
        raise TelemetryParseError(errors[0] if errors else "no record names a usable port")
    if bad and skipped is not None:
        skipped[BAD_PORT] += bad
    return ids


# -- Prometheus text --------------------------------------------------------------------------------

_PROM_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:.]*)"
    r"(?:\{(?P<labels>(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*)\})?"
    r"[ \t]+(?P<value>\S+)(?:[ \t]+(?P<ts>-?\d+))?[ \t]*$"
)
#: Lines the fast path hands to the exact expression before the payload is judged not Prometheus.
MAX_SLOW_LINES = 100_000
_BLOCK = 4 << 20


@dataclass(slots=True)
class _Long:
    """Samples in long form: one entry per sample line, names and label blocks dictionary encoded."""

    names: list[str]  # distinct metric names
    labels: pa.Array  # distinct label blocks (the text between the braces)
    name_idx: np.ndarray  # per line, into names
    label_idx: np.ndarray  # per line, into labels
    values: _Values  # per line, the value as written
    ts: np.ndarray  # per line, the timestamp (ms), 0 when absent
    malformed: list[str] = field(default_factory=list)  # lines that are not Prometheus text


@dataclass(slots=True)
class _Values:
    """Each line's value text, uncopied: line ``i`` is ``text[stride * i + first]``; the other
    slots are the blanks and timestamps around it (null, so kernels skip them)."""

    text: pa.ChunkedArray
    stride: int = 1
    first: int = 0

    def lines(self, at: np.ndarray) -> tuple[pa.ChunkedArray, int, int]:
        """The values of lines ``at`` (ascending) as (text, stride, first): a zero-copy slice when
        they are one run of lines, else a compact copy."""
        k = self.stride
        if at[-1] - at[0] + 1 == at.size:
            return self.text.slice(k * int(at[0]), k * int(at.size)), k, self.first
        return pa.chunked_array([_take(self.text, k * at + self.first)]), 1, 0

    def append(self, more: list[str]) -> _Values:
        """With the values of more lines (each in its slot) after these."""
        k = self.stride
        slots: list[str | None] = [None] * (k * len(more))
        slots[self.first :: k] = more
        text = pa.chunked_array([*self.text.chunks, pa.array(slots, self.text.type)], self.text.type)
        return _Values(text, k, self.first)


def _offsets(arr: pa.Array) -> np.ndarray:
    buf = arr.buffers()[1]
    if pa.types.is_large_string(arr.type):
        return np.frombuffer(buf, np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    return np.frombuffer(buf, np.int32, count=len(arr) + 1, offset=arr.offset * 4).astype(np.int64)


def _text_of(arr: pa.Array) -> pa.Buffer:
    """The concatenated text of a string array, zero-copy (its data buffer between first and last offset)."""
    off = _offsets(arr)
    data = arr.buffers()[2]
    return data[int(off[0]) : int(off[-1])] if data is not None else pa.py_buffer(b"")


#: A millisecond timestamp has at most 18 digits (int64); a longer one makes its line malformed.
_MAX_TS = 10**18


def _slow_lines(lines: list[str], bad: list[str]) -> tuple[list[str], list[str], list[str], list[int]]:
    """The exact (slow) parse of the few lines the fast path cannot take; lines that are not
    Prometheus text go to ``bad``."""
    names, labels, values, ts = [], [], [], []
    for line in lines:
        m = _PROM_LINE.match(line.rstrip("\r\n"))
        t = int(m.group("ts") or 0) if m is not None else 0
        if m is None or not -_MAX_TS < t < _MAX_TS:
            bad.append(line)
            continue
        if m.group("labels") is None:
            continue  # a sample without labels names no port
        names.append(m.group("name"))
        labels.append(m.group("labels"))
        values.append(m.group("value"))
        ts.append(t)
    return names, labels, values, ts


def _tails(tails: pa.ChunkedArray, exact: bool = False) -> tuple[_Values, np.ndarray, np.ndarray]:
    """Values and timestamps of the line tails `` value[ ts]``: (values, ts, well-formed mask).

    Tails all alike (`` value ts`` with timestamps of one width, or `` value``) are cut where
    they stand (:func:`_tail_views`). Else they are joined with newlines and read again by
    Arrow's CSV reader, blank-delimited:
    timestamps are parsed by its typed converter and values come out without their blank, in
    one multithreaded C++ pass. Tails that are not all alike (one blank, then one or two
    fields) are tokenized line by line instead (vectorized, slower).
    """
    n = len(tails)
    first = tails[0].as_py() if n else ""
    fields = ["_", "v"] if first.count(" ") == 1 else ["_", "v", "ts"]
    if not exact and first.count(" ") in (1, 2):
        views = _tail_views(tails, len(first) - first.rindex(" ") - 1 if len(fields) == 3 else 0)
        if views is not None:
            return views[0], views[1], np.ones(n, bool)
    try:
        if exact:
            raise pa.ArrowInvalid("tabs: tokenize line by line")
        joined = pc.binary_join_element_wise(tails, "\n", "")
        text = (
            pa.py_buffer(b"".join(_text_of(c) for c in joined.chunks))
            if joined.num_chunks != 1
            else _text_of(joined.chunk(0))
        )
        t = pcsv.read_csv(
            text,
            read_options=pcsv.ReadOptions(column_names=fields, block_size=_BLOCK),
            parse_options=pcsv.ParseOptions(
                delimiter=" ", quote_char=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={"_": pa.string(), "v": pa.string(), "ts": pa.int64()}, strings_can_be_null=False
            ),
        )
        if t.num_rows == n and pc.max(pc.utf8_length(t.column("_"))).as_py() in (0, None):
            ts = t.column("ts").fill_null(0).to_numpy() if "ts" in fields else np.zeros(n, np.int64)
            values = t.column("v")
            ok = pc.utf8_length(values).to_numpy() > 0
            return _Values(values), ts, ok
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    parts = [_tails_exact(c) for c in tails.chunks]
    return (
        _Values(pa.chunked_array([p[0] for p in parts], type=pa.string())),
        np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64),
        np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, bool),
    )


def _slotted(offsets: np.ndarray, data: pa.Buffer, valid: np.ndarray | None = None) -> pa.Array:
    """Strings over ``data`` cut at ``offsets`` (int32; zero-copy), null where not ``valid``."""
    mask = pa.py_buffer(np.packbits(valid, bitorder="little")) if valid is not None else None
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, [mask, pa.py_buffer(offsets), data])


def _tail_views(tails: pa.ChunkedArray, width: int) -> tuple[_Values, np.ndarray] | None:
    """Values and timestamps of tails that are all `` value ts`` with ``width``-digit timestamps
    (or all `` value`` when ``width`` is 0), without copying a value: the tails' text is cut into
    value slots and the text between them (blank, timestamp, blank) as one string array over the
    reader's own buffer, the other slots null; the timestamps are one cast of such an array.
    None when a tail is not of that shape (a blank more or elsewhere, a timestamp of another
    width or no integer): the blank-delimited read then decides, exactly as before."""
    texts: list[pa.Array] = []
    ts_parts: list[np.ndarray] = []
    for c in tails.chunks:
        n = len(c)
        if n == 0:
            continue
        if c.null_count:
            return None
        off = _offsets(c)
        data = np.frombuffer(c.buffers()[2], np.uint8)
        start, end = off[:-1], off[1:]
        cut = end - width - 1 if width else end  # where the value ends: the blank before the timestamp
        if (
            (data[start] != 32).any()
            or (cut <= start + 1).any()  # an empty value
            or (width and (data[cut] != 32).any())
            or np.count_nonzero(data[off[0] : off[-1]] == 32) != n * (2 if width else 1)  # another blank
        ):
            return None
        valid = np.zeros(2 * n, bool)
        valid[0::2] = True
        slots = np.empty(2 * n + 1, np.int32)
        if width:  # timestamp slots, then what follows up to the next (blank, value, blank)
            slots[0:-1:2], slots[1::2], slots[-1] = cut + 1, end, end[-1]
            try:
                stamps = pc.cast(_slotted(slots, c.buffers()[2], valid), pa.int64())  # as the CSV reader
            except pa.ArrowInvalid:
                return None
            ts_parts.append(np.frombuffer(stamps.buffers()[1], np.int64, 2 * n)[0::2].copy())
        else:
            ts_parts.append(np.zeros(n, np.int64))
        # two slots a tail: its value, then what follows up to the next value (blank, timestamp,
        # blank); the first tail's leading blank is left before the array
        slots = np.empty(2 * n + 1, np.int32)
        slots[0:-1:2], slots[1::2], slots[-1] = start + 1, cut, end[-1]
        texts.append(_slotted(slots, c.buffers()[2], valid))
    if not texts:
        return None
    return _Values(pa.chunked_array(texts), 2, 0), np.concatenate(ts_parts)


def _tails_exact(tail: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Line by line (vectorized), for tails of mixed shapes: one or two tokens after a blank."""
    pattern = r"^[ \t]+(?P<v>\S+)(?:[ \t]+(?P<ts>\S+))?[ \t]*$"
    m = pc.extract_regex(tail, pattern)
    ok = m.is_valid().to_numpy(zero_copy_only=False)
    values = pc.fill_null(pc.struct_field(m, 0), "")
    ts_text = pc.struct_field(m, 1)
    ts_ok = _uint_text(ts_text, 18)
    ok &= ~(ts_text.is_valid().to_numpy(zero_copy_only=False) & ~ts_ok.to_numpy(zero_copy_only=False))
    ts = pc.cast(pc.if_else(ts_ok, ts_text, pa.scalar(None, pa.string())), pa.int64()).fill_null(0).to_numpy()
    return values, ts, ok


#: More runs of one metric name than this and the label blocks are hashed line by line.
_MAX_RUNS = 4096


def _codes(enc: pa.ChunkedArray) -> np.ndarray:
    """The indices of a dictionary-encoded chunked array, as one array."""
    parts = [c.indices.to_numpy(zero_copy_only=False) for c in enc.chunks]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _take(arr: pa.ChunkedArray, idx: np.ndarray) -> pa.Array:
    """``arr.take(idx)`` for ascending ``idx``, chunk by chunk (``ChunkedArray.take`` first
    concatenates every chunk: a copy of the whole payload's text)."""
    bounds = np.cumsum([0, *(len(c) for c in arr.chunks)])
    cuts = np.searchsorted(idx, bounds)
    parts = [
        c.take(pa.array(idx[cuts[k] : cuts[k + 1]] - bounds[k]))
        for k, c in enumerate(arr.chunks)
        if cuts[k + 1] > cuts[k]
    ]
    return pa.concat_arrays(parts) if parts else pa.array([], arr.type)


def _encode_lines(
    inter: pa.ChunkedArray, hint: pa.Array | None = None
) -> tuple[pa.Array, np.ndarray, pa.Array, np.ndarray, np.ndarray] | None:
    """Dictionary codes of each line's name and label block from ``inter`` (``name{``, labels,
    alternating): (names, name codes, label blocks, label codes, whether the name piece starts
    with "#"), each dictionary in order of first sight, as ``dictionary_encode`` gives them.
    ``hint`` is the label dictionary of the poll before: when the blocks to hash are those, in
    that order, they are not hashed again.

    Hashing 15 million label blocks is most of a parse, and a UFM scrape repeats itself: it
    writes one family after another (a run of lines with one name) and lists the ports in the
    same order in each. So a name is hashed only where it differs from the line before, and a
    label block only where it differs from the block at the same place in the run before
    (compared with ``equal``, a memcmp); the others take the code of the line they equal.
    Layouts of many short runs (a port's samples together) are hashed line by line.
    """
    n = len(inter) // 2
    # Names: compared with the line before (lag 2 in the interleaved array; labels come along).
    same = np.zeros(0, bool)
    if n > 1:
        same = pc.equal(inter[2:], inter[:-2]).to_numpy(zero_copy_only=False)[0::2]
    starts = np.flatnonzero(np.concatenate([[True], ~same])) if n else np.zeros(0, np.int64)
    firsts = _take(inter, 2 * starts)
    # Each line's name piece equals the one before it, so all have their first "{" last when the
    # first of each run has (see _heads): else None.
    if not pc.all(pc.equal(pc.find_substring(firsts, "{"), pc.subtract(pc.binary_length(firsts), 1))).as_py():
        return None
    run_names = pc.dictionary_encode(firsts)
    name_dict = run_names.dictionary
    lengths = np.diff(np.append(starts, n))
    name_codes = np.repeat(run_names.indices.to_numpy(zero_copy_only=False), lengths)
    pound = np.repeat(pc.starts_with(firsts, "#").to_numpy(zero_copy_only=False), lengths)
    labels = inter  # a label block is at 2i + 1
    if starts.size > _MAX_RUNS:
        enc = pc.dictionary_encode(labels)
        uniq, label_codes = _dense(_codes(enc)[1::2], len(enc.chunk(0).dictionary))
        return name_dict, name_codes, enc.chunk(0).dictionary.take(pa.array(uniq)), label_codes, pound
    ends = np.append(starts[1:], n)
    partner = np.full(n, -1, np.int32)  # the line of the run before with the same block
    for r in range(1, starts.size):
        k = int(min(ends[r] - starts[r], ends[r - 1] - starts[r - 1]))
        a, b = int(starts[r]), int(starts[r - 1])
        eq = pc.equal(labels[2 * a : 2 * (a + k)], labels[2 * b : 2 * (b + k)]).to_numpy(zero_copy_only=False)
        hit = np.flatnonzero(eq[1::2])
        partner[a + hit] = b + hit
    anchors = np.flatnonzero(partner < 0)
    blocks = _take(labels, 2 * anchors + 1)
    label_codes = np.empty(n, np.int32)
    if hint is not None and same_strings(blocks, hint):  # distinct, in order of first sight
        label_dict = hint
        label_codes[anchors] = np.arange(anchors.size)
    else:
        enc = pc.dictionary_encode(blocks)
        label_dict = enc.dictionary
        label_codes[anchors] = enc.indices.to_numpy(zero_copy_only=False)
    for r in range(1, starts.size):  # runs in order: a partner's code is known before its own
        seg = slice(int(starts[r]), int(ends[r]))
        p = partner[seg]
        m = p >= 0
        label_codes[seg][m] = label_codes[p[m]]
    return name_dict, name_codes, label_dict, label_codes, pound


def _heads(batches: list[pa.RecordBatch], guess: bool) -> tuple[pa.ChunkedArray, np.ndarray]:
    """The heads (``name{labels``) of the lines as one zero-copy array of ``name{`` and label
    blocks alternating, and each line's first "{" (-1: none). With ``guess``, a line whose byte
    at the first line's name length is "{" is taken to have its first "{" there
    (``_encode_lines`` proves it or says to look again); the others are searched."""
    inter: list[pa.Array] = []
    braces: list[np.ndarray] = []
    for rb in batches:
        head = rb.column(0)
        n = len(head)
        h_off = _offsets(head)
        hb = np.frombuffer(head.buffers()[2] or b"\0", np.uint8)
        start, end = h_off[:-1], h_off[1:]
        g = pc.find_substring(head.slice(0, 1), "{")[0].as_py() if guess else -1
        if g > 0:
            at = start + g
            brace = np.full(n, g, np.int64)
            miss = np.flatnonzero((at >= end) | (hb[np.minimum(at, hb.size - 1)] != ord("{")))
            if miss.size:
                brace[miss] = pc.find_substring(head.take(pa.array(miss)), "{").to_numpy(zero_copy_only=False)
        else:
            brace = pc.find_substring(head, "{").to_numpy(zero_copy_only=False).astype(np.int64)
        # "name{" and "labels" alternate over the head buffer: one array, no copy
        inter_off = np.empty(2 * n + 1, np.int32)
        inter_off[0:-1:2] = start
        inter_off[1:-1:2] = start + np.maximum(brace, -1) + 1
        inter_off[-1] = h_off[-1]
        inter.append(_slotted(inter_off, head.buffers()[2]))
        braces.append(brace)
    return pa.chunked_array(inter, type=pa.string()), np.concatenate(braces)


def _prometheus_long(payload: bytes, hint: pa.Array | None = None) -> _Long:
    _check_complete(payload)
    slow: list[str] = []

    def invalid(row: pcsv.InvalidRow) -> str:
        text = row.text.strip()
        if not text or text.startswith("#"):
            return "skip"
        slow.append(row.text)
        return "error" if len(slow) > MAX_SLOW_LINES else "skip"

    try:
        table = pcsv.read_csv(
            pa.py_buffer(payload),
            read_options=pcsv.ReadOptions(column_names=["head", "tail"], block_size=_BLOCK),
            parse_options=pcsv.ParseOptions(
                delimiter="}", quote_char=False, escape_char=False, invalid_row_handler=invalid
            ),
            convert_options=pcsv.ConvertOptions(column_types={"head": pa.string(), "tail": pa.string()}),
        )
    except pa.ArrowInvalid as e:
        if len(slow) > MAX_SLOW_LINES:
            raise TelemetryParseError(f"not Prometheus text: {slow[0][:200]!r}") from None
        raise TelemetryParseError(f"not Prometheus text: {e}") from None

    raise_if_abandoned()  # between the stages of a long parse: not for a scrape that gave up
    batches = [rb for rb in table.to_batches() if rb.num_rows]
    if batches:
        # Tails (values, timestamps) and the name/label dictionary are independent: one runs in a
        # worker thread while this one hashes (both Arrow kernels release the GIL).
        # A tab is whitespace to Prometheus but not to the blank-delimited fast reader.
        with ThreadPoolExecutor(1) as pool:
            tails = pa.chunked_array([rb.column(1) for rb in batches], type=pa.string())
            tails_job = pool.submit(_tails, tails, b"\t" in payload)
            inter, brace = _heads(batches, guess=True)
            encoded = _encode_lines(inter, hint)
            if encoded is None:  # a guessed "{" was not the first of its line
                inter, brace = _heads(batches, guess=False)
                encoded = _encode_lines(inter, hint)
            assert encoded is not None
            name_dict, name_codes, label_dict, label_codes, comment = encoded
            values, ts, good_tail = tails_job.result()
        raise_if_abandoned()
        # A comment's name piece starts with "#"; a line with no name piece is looked at itself.
        odd = np.flatnonzero(brace <= 0)
        if odd.size:
            heads = pa.chunked_array([rb.column(0) for rb in batches], type=pa.string())
            comment[odd] = pc.starts_with(_take(heads, odd), "#").to_numpy(zero_copy_only=False)
        fast = ~comment & (brace > 0) & good_tail
        bad = np.flatnonzero(~comment & ~fast)
        if bad.size + len(slow) > MAX_SLOW_LINES:
            raise TelemetryParseError(f"not Prometheus text: {_row_text(table, int(bad[0]))[:200]!r}")
        slow.extend(_row_text(table, i) for i in bad.tolist())
    else:
        name_dict = label_dict = pa.array([], pa.string())
        name_codes = label_codes = ts = np.zeros(0, np.int64)
        fast = np.zeros(0, bool)
        values = _Values(pa.chunked_array([], type=pa.string()))
    if fast.all():  # every line a sample: every entry of the dictionaries is used, in order
        uniq_names, name_pos = np.arange(len(name_dict)), name_codes
        uniq_labels, label_pos = np.arange(len(label_dict)), label_codes
    else:
        uniq_names, name_pos = _dense(name_codes[fast], len(name_dict))
        uniq_labels, label_pos = _dense(label_codes[fast], len(label_dict))
    names = [s[:-1] for s in name_dict.take(pa.array(uniq_names, pa.int64())).to_pylist()]  # drop the "{"
    labels = label_dict if fast.all() else label_dict.take(pa.array(uniq_labels, pa.int64()))
    # Rows that are not samples (comments, lines handed to the exact parser) point past the end.
    if fast.all():
        name_idx, label_idx = name_pos, label_pos
    else:
        name_idx = np.full(len(fast), -1, np.int64)
        name_idx[fast] = name_pos
        label_idx = np.full(len(fast), -1, np.int64)
        label_idx[fast] = label_pos
    malformed: list[str] = []
    s_names, s_labels, s_values, s_ts = _slow_lines(slow, malformed)
    if malformed and not s_names and not fast.any():
        raise TelemetryParseError(f"not Prometheus text: {malformed[0][:200]!r}")
    if s_names:
        name_map = {nm: i for i, nm in enumerate(names)}
        for nm in s_names:
            name_map.setdefault(nm, len(name_map))
        names = list(name_map)
        new_labels = list(dict.fromkeys(s_labels))
        label_map = {lb: len(labels) + i for i, lb in enumerate(new_labels)}
        labels = pa.concat_arrays([labels, pa.array(new_labels, pa.string())])
        name_idx = np.concatenate([name_idx, [name_map[nm] for nm in s_names]])
        label_idx = np.concatenate([label_idx, [label_map[lb] for lb in s_labels]])
        values = values.append(s_values)
        ts = np.concatenate([ts, np.array(s_ts, np.int64)])
    name_idx[name_idx < 0] = len(names)
    label_idx[label_idx < 0] = len(labels)
    return _Long(names, labels, name_idx, label_idx, values, ts, malformed)


def _row_text(table: pa.Table, i: int) -> str:
    return f"{table.column(0)[i].as_py()}}}{table.column(1)[i].as_py()}"


def _numbers_fast(arr: pa.ChunkedArray, stride: int = 1, first: int = 0) -> _Numbers:
    """Counter values of one metric (every ``stride``-th slot of ``arr`` from ``first``, see
    :class:`_Values`): one vectorized cast when all are integers (the usual case)."""
    try:
        cast = pc.cast(arr, pa.uint64())
    except pa.ArrowInvalid:
        return _numbers(arr.drop_null() if stride > 1 else arr)
    parts = [np.frombuffer(c.buffers()[1], np.uint64, len(c), c.offset * 8) for c in cast.chunks if len(c)]
    u64 = (np.concatenate(parts) if parts else np.zeros(0, np.uint64))[first::stride]
    n = len(u64)
    return _Numbers(u64, np.ones(n, bool), np.full(n, np.nan), np.zeros(n, bool))


def parse_prometheus(
    payload: bytes,
    keys: PortKeys,
    cache: SpellingCache | None = None,
    *,
    now: datetime | None = None,
    source: str = "ufm",
    skipped: Skips | None = None,
) -> pa.RecordBatch:
    """UFM Telemetry Prometheus text -> one ``port_sample`` batch (see the module docstring).

    Raises :class:`TelemetryParseError` when the payload is not Prometheus text at all, or is
    truncated. Within one, a line that is not Prometheus text, a line naming no usable port and
    a value that is no number its column can hold are left out and counted in ``skipped``.
    """
    cache = cache or SpellingCache()
    long = _prometheus_long(payload, cache.last)
    if long.malformed and skipped is not None:
        skipped[MALFORMED_LINE] += len(long.malformed)
    errors: list[str] = []
    specs = [counter_spec(nm) for nm in long.names]
    mapped = np.array([s is not None for s in specs] + [False], bool)
    keep = mapped[long.name_idx]
    # Label blocks of the kept lines -> port ids, parsed once per distinct block, then cached.
    label_ids = np.full(len(long.labels) + 1, -1, np.int32)  # the extra slot: rows that are not samples
    used, _ = _dense(long.label_idx[keep], len(long.labels))
    if used.size:

        def resolve(new: pa.Array) -> np.ndarray:
            return _resolve(keys, *_port_labels(new), errors)

        blocks = long.labels if used.size == len(long.labels) else long.labels.take(pa.array(used))
        label_ids[used] = cache.lookup(blocks, resolve)
    port_of_line = label_ids[long.label_idx]
    _skip_bad_ports(port_of_line[keep], errors, skipped)
    keep &= port_of_line >= 0
    lines = np.flatnonzero(keep)
    every = lines.size == keep.size  # every line kept (the usual case): views, not gathers
    ts = long.ts if every else long.ts[lines]
    time_us = _time_us(ts) or _now_us(now)
    # Rows: the ports named, ascending; found per label block, then looked up per line.
    named = label_ids[used]
    ports, _ = _dense(named[named >= 0], len(keys.keys))
    row_of_port = np.zeros(len(keys.keys), np.int64)
    row_of_port[ports] = np.arange(ports.size)
    row_of_line = row_of_port[port_of_line if every else port_of_line[lines]]
    out = _Columns(len(ports))
    name_of = long.name_idx if every else long.name_idx[lines]
    # Group lines by metric. Families are usually runs in order of first sight, so name_of is
    # sorted and each group a slice; else a stable radix sort on small integers.
    if name_of.size and (name_of[1:] >= name_of[:-1]).all():
        order = None
        bounds = np.searchsorted(name_of, np.arange(1, len(long.names) + 1)).tolist()
    else:
        order = np.argsort(name_of.astype(np.int16 if len(long.names) < 2**15 else np.int64), kind="stable")
        bounds = np.cumsum(np.bincount(name_of, minlength=len(long.names))).tolist()
    starts = [0, *bounds][: len(bounds)]
    groups: list[slice | np.ndarray] = [
        slice(a, b) if order is None else order[a:b] for a, b in zip(starts, bounds, strict=True)
    ]
    ranked = sorted(
        ((specs[k], g) for k, g in enumerate(groups) if specs[k] is not None and bounds[k] > starts[k]),
        key=lambda sg: sg[0].rank,  # type: ignore[union-attr]
    )
    for spec, grp in ranked:
        assert spec is not None
        raise_if_abandoned()
        out.put(spec, row_of_line[grp], _numbers_fast(*long.values.lines(lines[grp])), skipped)
    src_us = _per_row_us(ts, row_of_line, len(ports))
    return out.batch(time_us, keys.port_column(ports.astype(np.int32)), source, src_us)


# -- CSV and TFS JSON (wide forms) ----------------------------------------------------------------


def _from_wide(
    table: pa.Table,
    keys: PortKeys,
    cache: SpellingCache | None,
    now: datetime | None,
    source: str,
    skipped: Skips | None,
) -> pa.RecordBatch:
    """Rows of (ids, counters…) -> one batch; the last row of a port wins."""
    names = table.column_names
    if table.num_rows == 0:  # a valid document with no port records (UFM just started)
        return _Columns(0).batch(_now_us(now), keys.port_column(np.zeros(0, np.int32)), source)
    if "port_guid" not in names and "node_guid" not in names:
        raise TelemetryParseError(f"no port_guid or node_guid column (columns: {names[:8]})")
    n = table.num_rows

    def text(col: str) -> pa.Array:
        if col not in names:
            return pa.nulls(n, pa.string())
        arr = table.column(col).combine_chunks()
        if arr.type == pa.string():
            return arr
        try:
            return arr.cast(pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # lists, records: no port names
            return pa.nulls(n, pa.string())

    pg, ng, pn = text("port_guid"), text("node_guid"), text("port_num")
    spelling = pc.binary_join_element_wise(
        pc.fill_null(pg, ""), pc.fill_null(ng, ""), pc.fill_null(pn, ""), "|"
    )
    enc = pc.dictionary_encode(spelling)
    uniq = enc.dictionary

    def resolve(new: pa.Array) -> np.ndarray:
        parts = pc.split_pattern(new, "|")
        return _resolve(
            keys, pc.list_element(parts, 0), pc.list_element(parts, 1), pc.list_element(parts, 2), errors
        )

    errors: list[str] = []
    uid = (cache or SpellingCache()).lookup(uniq, resolve)
    port_of_row = uid[enc.indices.to_numpy(zero_copy_only=False)] if n else np.zeros(0, np.int32)
    _skip_bad_ports(port_of_row, errors, skipped)
    keep = port_of_row >= 0
    ts_col = table.column("timestamp") if "timestamp" in names else None
    raw_ts = np.zeros(0, np.int64)
    if ts_col is not None:
        tnum = _numbers(ts_col)
        raw_ts = np.where(tnum.is_int, tnum.u64, 0).astype(np.int64)[keep]
    time_us = _time_us(raw_ts) or _now_us(now)
    rows = np.flatnonzero(keep)
    # One row per port, in port order: the last row of a port wins.
    ports, pos = _dense(port_of_row[rows], len(keys.keys))
    if ports.size == rows.size:  # each port once (the usual case): O(n), no sort
        take_rows = np.empty(rows.size, np.int64)
        take_rows[pos] = rows
    else:
        rev = rows[::-1]
        ports, first_in_rev = np.unique(port_of_row[rev], return_index=True)
        take_rows = rev[first_in_rev]
    in_order = take_rows.size == n and bool((take_rows == np.arange(n)).all())  # no take needed

    def column(col: str) -> pa.ChunkedArray:
        return table.column(col) if in_order else table.column(col).take(pa.array(take_rows))

    out = _Columns(len(ports))
    specs = [(counter_spec(c), c) for c in names]
    for spec, col in sorted(((s, c) for s, c in specs if s is not None), key=lambda sc: sc[0].rank):  # type: ignore[union-attr]
        out.put(spec, np.arange(len(ports)), _numbers(column(col)), skipped)  # type: ignore[arg-type]
    src_us = None
    if ts_col is not None:
        tnum = _numbers(column("timestamp"))
        raw = np.where(tnum.is_int, tnum.u64, 0).astype(np.int64)
        src_us = _per_row_us(raw, np.arange(len(ports)), len(ports))
    return out.batch(time_us, keys.port_column(ports.astype(np.int32)), source, src_us)


def _csv_type(column: str) -> pa.DataType:
    """How a CSV column is read when every value is a plain number: ids as text, a timestamp or
    counter as uint64 (float64 where its canonical column is a float)."""
    if column in ("port_guid", "node_guid", "port_num"):
        return pa.string()
    spec = counter_spec(column)
    if spec is not None and spec.lane is None and pa.types.is_floating(_COLUMN_TYPES[spec.column]):
        return pa.float64()
    return pa.uint64()


def parse_csv(
    payload: bytes,
    keys: PortKeys,
    cache: SpellingCache | None = None,
    *,
    now: datetime | None = None,
    source: str = "ufm",
    skipped: Skips | None = None,
) -> pa.RecordBatch:
    """UFM Telemetry CSV (header row of counter names) -> one ``port_sample`` batch.

    Raises :class:`TelemetryParseError` when the payload is not such CSV or is truncated; a
    row with the wrong number of fields, a row naming no usable port and a value that is no
    number its column can hold are left out and counted in ``skipped``.
    """
    _check_complete(payload)
    malformed: list[str] = []

    def invalid(row: pcsv.InvalidRow) -> str:
        malformed.append(row.text or "")
        return "skip"

    # Names exactly as Arrow reads them (it trims nothing): a stray form feed is part of a name.
    header = payload[: payload.find(b"\n")].decode("utf-8", "replace").rstrip("\r").split(",")
    wanted = [
        c for c in header if c in ("timestamp", "port_guid", "node_guid", "port_num") or counter_spec(c)
    ]
    if "port_guid" not in wanted and "node_guid" not in wanted:
        raise TelemetryParseError(f"not UFM telemetry CSV: the header has no port_guid ({header[:6]})")

    def read(quote: str | bool, types: dict[str, pa.DataType], strict: bool = False) -> pa.Table:
        """``strict``: no handler for rows of the wrong width (a read that meets one fails); the
        handler costs the reader a fifth of its speed. The blocks are the same either way: where
        a stray quote ends its field (the block's end) decides what a read gives."""
        malformed.clear()
        return pcsv.read_csv(
            pa.py_buffer(payload),
            read_options=pcsv.ReadOptions(block_size=_BLOCK),
            parse_options=pcsv.ParseOptions(
                quote_char=quote, newlines_in_values=False, invalid_row_handler=None if strict else invalid
            ),
            convert_options=pcsv.ConvertOptions(
                include_columns=wanted, column_types=types, strings_can_be_null=True
            ),
        )

    def table_of(types: dict[str, pa.DataType]) -> pa.Table:
        table = read('"', types)
        if any("\n" in m for m in malformed):
            # A stray quote opens a field Arrow ends only at its block's end, swallowing every row
            # after it: read again without quoting, so the bad row alone is left out.
            table = read(False, types)
        return table

    # Counters read as numbers by Arrow's converter; a value it does not take as one ("45C",
    # "N/A", past 64 bits…) and the whole document is read as text for the exact number parser.
    typed = {c: _csv_type(c) for c in wanted}
    try:
        table = read('"', typed, strict=True)  # the usual document: every row whole, every value a number
    except (pa.ArrowInvalid, pa.ArrowKeyError):
        table = None
    try:
        table = table if table is not None else table_of(typed)
    except (pa.ArrowInvalid, pa.ArrowKeyError):
        try:
            table = table_of({c: pa.string() for c in wanted})
        except (pa.ArrowInvalid, pa.ArrowKeyError) as e:  # KeyError: a header name not UTF-8
            raise TelemetryParseError(f"not UFM telemetry CSV: {e}") from None
    if malformed:
        if table.num_rows == 0:
            raise TelemetryParseError(f"not UFM telemetry CSV: {malformed[0][:200]!r}")
        if skipped is not None:
            skipped[MALFORMED_LINE] += len(malformed)
    return _from_wide(table, keys, cache, now, source, skipped)


def parse_tfs_json(
    payload: bytes,
    keys: PortKeys,
    cache: SpellingCache | None = None,
    *,
    now: datetime | None = None,
    source: str = "ufm",
    skipped: Skips | None = None,
) -> pa.RecordBatch:
    """The TFS stream document ``{"timestamp", "type", "values": [...]}`` -> one batch; a message
    of one record (the plugin with ``bulk_streaming`` off) is a document of that record.

    Raises :class:`TelemetryParseError` when the payload is not such a document (not JSON,
    nested past the decoder's depth, no ``values`` list of records). A value that does not fit
    its counter (a string, a 70-bit integer, a list) nulls its cell and is counted in
    ``skipped``, as is a record naming no usable port.
    """
    try:
        doc = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TelemetryParseError(f"not JSON (truncated?): {e}") from None
    except RecursionError:
        if skipped is not None:
            skipped[TOO_DEEP] += 1
        raise TelemetryParseError("JSON nested deeper than any TFS document") from None
    values = doc.get("values") if isinstance(doc, dict) else doc
    if values is None and isinstance(doc, dict) and ("port_guid" in doc or "node_guid" in doc):
        values = [doc]  # one record a message (the plugin's bulk_streaming off)
    if not isinstance(values, list) or not all(isinstance(v, dict) for v in values):
        raise TelemetryParseError("not a TFS telemetry document: no 'values' list of port records")
    return _from_wide(_tfs_table(values, skipped), keys, cache, now, source, skipped)


def _tfs_table(values: list[dict[str, object]], skipped: Skips | None) -> pa.Table:
    """The records as a table: Arrow's own conversion, or, when one value does not fit its
    column's type (a string among integers, an integer past 64 bits), that column as text (the
    number parser then nulls what is no number) with nested values and booleans null."""
    try:
        return pa.Table.from_pylist(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    names = list(dict.fromkeys(k for v in values for k in v))
    cols: dict[str, pa.Array] = {}
    for name in names:
        col = [v.get(name) for v in values]
        try:
            cols[name] = pa.array(col)
            continue
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
        text = [
            x
            if isinstance(x, str)
            else str(x)
            if isinstance(x, int | float) and not isinstance(x, bool)
            else None
            for x in col
        ]
        dropped = sum(1 for x, t in zip(col, text, strict=True) if x is not None and t is None)
        if dropped and skipped is not None:
            skipped[NOT_A_NUMBER] += dropped
        cols[name] = pa.array(text, pa.string())
    return pa.table(cols)


_PARSERS: dict[str, Callable[..., pa.RecordBatch]] = {
    "prometheus": parse_prometheus,
    "csv": parse_csv,
    "json": parse_tfs_json,
}


def sniff_format(payload: bytes, url_path: str = "", content_type: str = "") -> str:
    """Which telemetry form a payload is: by URL prefix (/csv, /json), content type, then content."""
    path = url_path.lower()
    if path.startswith("/csv") or "/csv/" in path:
        return "csv"
    if path.startswith("/json") or "/json/" in path:
        return "json"
    if "json" in content_type:
        return "json"
    if "csv" in content_type:
        return "csv"
    head = payload[:4096].lstrip()
    if head[:1] in (b"{", b"["):
        return "json"
    first = head.split(b"\n", 1)[0]
    if b"," in first and b"{" not in first and not first.startswith(b"#"):
        return "csv"
    return "prometheus"


class UfmTelemetryCollector:
    """One UFM Telemetry endpoint -> one ``port_sample`` batch of counters per scrape."""

    source = "ufm"

    def __init__(
        self,
        url: str,
        fabric: Fabric | None,
        settings: UfmHttpSettings | None = None,
        *,
        fmt: TelemetryFormat = "auto",
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"telemetry URL must be http(s)://host[:port]/path, not {url!r}")
        self.target = redact_url(url)
        self.path = parts.path or "/metrics"
        if parts.query:
            self.path += "?" + parts.query
        self.fmt = fmt
        self.http = UfmHttp(f"{parts.scheme}://{parts.netloc}", settings or UfmHttpSettings(), transport)
        self.keys = PortKeys(fabric)
        self.cache = SpellingCache()
        #: The poll time when the payload carries no timestamps.
        self.clock = clock or (lambda: datetime.now(UTC))

    def parse(
        self,
        payload: bytes,
        content_type: str = "",
        now: datetime | None = None,
        skipped: Skips | None = None,
    ) -> pa.RecordBatch:
        fmt = self.fmt if self.fmt != "auto" else sniff_format(payload, self.path, content_type)
        return _PARSERS[fmt](payload, self.keys, self.cache, now=now, source=self.source, skipped=skipped)

    async def scrape(self) -> ScrapeResult:
        def parse(payload: tuple[bytes, str], skipped: Skips) -> tuple[pa.RecordBatch, ...]:
            return (self.parse(*payload, self.clock(), skipped),)

        timeout = self.http.settings.total_timeout_s
        return await guarded_scrape(
            self.source, self.target, timeout, lambda: self.http.get_bytes(self.path), parse
        )

    async def aclose(self) -> None:
        await self.http.aclose()
