"""JSON lines read into Arrow columns by pyarrow, with the lines it cannot read handed back.

``pyarrow.json`` parses newline-delimited objects into typed columns in C, but refuses a whole
block for one bad line, and reads a few things Python's :mod:`json` refuses (``-NaN``, two
objects on one line, a byte-order mark) or reads differently (a duplicate key). :func:`read_lines`
reads a buffer in chunks of whole lines with an explicit schema; when pyarrow refuses a chunk
it finds the line from the error's row number (or halves the range when the error names none)
and reads around it. Only lines that start with ``{`` and hold none of the caller's ``hold``
tokens are given to pyarrow; every other non-empty line, and every line it refused, is returned
in :attr:`Read.slow` for the caller's own per-line parser. So what comes back as columns is
what :func:`json.loads` would have given, and no line is lost.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

#: Bytes given to one ``read_json`` call: big enough to amortize it, small enough that a line
#: pyarrow refuses costs little to read around.
CHUNK_BYTES = 4 * 2**20
#: A range with this many lines or fewer that pyarrow refuses without naming a row goes to the
#: per-line parser whole rather than being halved again.
_SMALL = 4
_ROW = re.compile(r"\bin row (\d+)")
_NEWLINE, _OPEN, _SPACE = 10, ord("{"), ord(" ")


@dataclass(frozen=True, slots=True)
class Lines:
    """``data.split(b"\\n")`` as offsets: line ``i`` is ``data[starts[i]:ends[i]]``."""

    data: bytes
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> bytes:
        return self.data[self.starts[i] : self.ends[i]]

    def line_of(self, offsets: np.ndarray) -> np.ndarray:
        """The line holding each byte offset."""
        return np.searchsorted(self.starts, offsets, side="right") - 1


def split_lines(data: bytes) -> Lines:
    """The lines of ``data`` (split at ``\\n`` only, as :meth:`bytes.split` does)."""
    raw = np.frombuffer(data, np.uint8)
    found = [
        np.flatnonzero(raw[o : o + CHUNK_BYTES] == _NEWLINE) + o for o in range(0, len(raw), CHUNK_BYTES)
    ]
    nl = np.concatenate(found).astype(np.int64) if found else np.empty(0, np.int64)
    starts = np.concatenate((np.zeros(1, np.int64), nl + 1))
    ends = np.concatenate((nl, np.array([len(data)], np.int64)))
    return Lines(data, starts, ends)


def join_lines(lines: Sequence[bytes | str]) -> bytes | None:
    """``lines`` as one buffer (to split with :func:`split_lines`; a line holding a newline shows
    as more lines than were given), or None when a string is not UTF-8 encodable."""
    try:
        return b"\n".join(lines)  # type: ignore[arg-type]
    except TypeError:  # some are strings
        pass
    try:
        return b"\n".join(x if isinstance(x, bytes) else x.encode("utf-8") for x in lines)
    except (UnicodeEncodeError, TypeError):
        return None


def valid_utf8(data: bytes) -> bytes:
    """``data`` with every invalid UTF-8 sequence replaced by U+FFFD, as decoding each line with
    ``errors="replace"`` does (a newline always ends an invalid sequence); ``data`` itself when
    it is valid, the common case, checked without a copy when it is ASCII."""
    if not data or int(np.frombuffer(data, np.uint8).max()) < 0x80:
        return data
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")


@dataclass(frozen=True, slots=True)
class Read:
    """What :func:`read_lines` read: one table row per line read, and the lines left over."""

    table: pa.Table
    line: np.ndarray  # int64: the line each row was read from, ascending
    slow: np.ndarray  # int64, ascending: the non-empty lines not read, for the per-line parser


#: A token to hold back, with the index of the byte to look for first (memchr-fast when that
#: byte is rare in the format), or None to search for the whole token.
Token = tuple[bytes, int | None]


def lines_holding(lines: Lines, tokens: Iterable[Token]) -> np.ndarray:
    """The lines in which any of ``tokens`` occurs (one search per such line, not per occurrence)."""
    data, found = lines.data, []
    for tok, anchor in tokens:
        budget = len(lines) + 16  # anchor bytes that start no token, before searching whole tokens
        if anchor is not None:
            byte = tok[anchor : anchor + 1]
            i = data.find(byte, anchor)
            while i >= 0 and budget:
                at = i - anchor
                if data[at : at + len(tok)] == tok:
                    line = int(lines.line_of(np.array([at]))[0])
                    found.append(line)
                    i = data.find(byte, int(lines.ends[line]) + anchor)
                else:
                    budget -= 1
                    i = data.find(byte, i + 1)
            if i < 0:
                continue
            start = max(i - anchor, 0)
        else:
            start = 0
        i = data.find(tok, start)
        while i >= 0:
            line = int(lines.line_of(np.array([i]))[0])
            found.append(line)
            i = data.find(tok, int(lines.ends[line]))
    return np.unique(np.array(found, np.int64))


def read_lines(
    lines: Lines,
    schema: pa.Schema,
    *,
    hold: Iterable[Token] = (),
    substitute: Sequence[tuple[bytes, bytes]] = (),
) -> Read:
    """Read the lines of ``lines`` that pyarrow reads as ``json.loads`` would, with ``schema``
    (fields it does not name are ignored).

    ``hold`` tokens send every line holding one to :attr:`Read.slow` unread (a value pyarrow
    reads differently, or one whose presence the columns cannot show, such as ``null``).
    ``substitute`` pairs of equal length are replaced in what pyarrow reads (a spelling it cannot
    read, where the replacement means the same to the caller); the offsets stay those of ``lines``.
    """
    data, starts, ends = lines.data, lines.starts, lines.ends
    n = len(lines)
    raw = np.frombuffer(data, np.uint8)
    first = np.full(n, _SPACE, np.uint8)
    nonempty = ends > starts
    first[nonempty] = raw[starts[nonempty]]
    take = first == _OPEN
    take[lines_holding(lines, hold)] = False
    cand = np.flatnonzero(take)
    slow: list[np.ndarray] = [np.flatnonzero(nonempty & ~take)]
    if not len(cand):
        return Read(schema.empty_table(), np.empty(0, np.int64), slow[0])
    # What pyarrow reads: the lines not given to it but lying between ones that are blanked,
    # the substitutions made, in one copy (none in the common case).
    between = slow[0][(slow[0] > cand[0]) & (slow[0] < cand[-1])]
    subs = [(pos, new) for old, new in substitute for pos in _positions(data, old, new)]
    if len(between) or subs:
        buf = bytearray(data)
        for i in between.tolist():
            buf[starts[i] : ends[i]] = b" " * int(ends[i] - starts[i])
        for pos, new in subs:
            buf[pos : pos + len(new)] = new
        data = buf  # type: ignore[assignment]
    reader = _Reader(pa.py_buffer(data), starts[cand], ends[cand], schema)
    bounds = np.unique(np.searchsorted(starts[cand], np.arange(CHUNK_BYTES, len(data), CHUNK_BYTES)))
    edges = [0, *bounds[(bounds > 0) & (bounds < len(cand))].tolist(), len(cand)]
    for lo, hi in itertools.pairwise(edges):
        reader.read(lo, hi)
    got = sorted(reader.tables, key=lambda x: x[0])
    table = pa.concat_tables([t for _, _, t in got]) if got else schema.empty_table()
    line = np.concatenate([cand[lo:hi] for lo, hi, _ in got]) if got else np.empty(0, np.int64)
    slow.append(cand[np.array(reader.refused, np.int64)])
    return Read(table, line.astype(np.int64), np.unique(np.concatenate(slow)).astype(np.int64))


def _positions(data: bytes, old: bytes, new: bytes) -> list[int]:
    if len(old) != len(new):
        raise ValueError(f"substitute {old!r} -> {new!r} changes the length")
    out, i = [], data.find(old)
    while i >= 0:
        out.append(i)
        i = data.find(old, i + len(old))
    return out


class _Reader:
    """Reads ranges of candidate lines, reading around the ones pyarrow refuses."""

    def __init__(self, buf: pa.Buffer, starts: np.ndarray, ends: np.ndarray, schema: pa.Schema) -> None:
        self.buf, self.starts, self.ends = buf, starts, ends
        self.parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        self.tables: list[tuple[int, int, pa.Table]] = []
        self.refused: list[int] = []  # candidate indices

    def read(self, lo: int, hi: int) -> None:
        todo = [(lo, hi)]
        while todo:
            lo, hi = todo.pop()
            if lo >= hi:
                continue
            b0, b1 = int(self.starts[lo]), int(self.ends[hi - 1])
            try:
                table = pj.read_json(
                    pa.BufferReader(self.buf.slice(b0, b1 - b0)),
                    read_options=pj.ReadOptions(use_threads=False, block_size=b1 - b0 + 1),
                    parse_options=self.parse,
                )
            except pa.ArrowInvalid as e:
                m = _ROW.search(str(e))
                row = int(m.group(1)) if m else -1
                if 0 <= row < hi - lo:  # usually right; when not, the ranges around it fail again
                    self.refused.append(lo + row)
                    todo += [(lo + row + 1, hi), (lo, lo + row)]
                else:
                    self._split(lo, hi, todo)
                continue
            if table.num_rows == hi - lo:
                self.tables.append((lo, hi, table))
            else:  # a line held two objects: pyarrow's rows no longer match the lines
                self._split(lo, hi, todo)

    def _split(self, lo: int, hi: int, todo: list[tuple[int, int]]) -> None:
        if hi - lo <= _SMALL:
            self.refused.extend(range(lo, hi))
        else:
            mid = (lo + hi) // 2
            todo += [(mid, hi), (lo, mid)]


#: Integers past 2**53 do not survive as float64: a column value that large is not trusted.
EXACT = 2.0**53


def json_ints(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`~graywire.collectors.nccl.common.as_int` gives for each value of a float64
    column pyarrow read from JSON numbers: (value, is an integer, unsure). Null, NaN and
    fractional values are not integers; one of 2**53 or more, infinite included, is *unsure*
    (the JSON may have held an integer float64 cannot hold: pyarrow reads a 400-digit one as
    infinity) and its line belongs to the per-line parser."""
    x = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        unsure = np.abs(x) >= EXACT
        ok = ~unsure & (np.trunc(x) == x)
    return np.where(ok, x, 0.0).astype(np.int64), ok, unsure


def json_floats(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`~graywire.collectors.nccl.common.as_float` gives for a float64 column pyarrow
    read from JSON numbers: (value, finite, unsure). A zero with its sign bit set is unsure:
    ``-0`` in JSON is the integer 0 to Python, ``-0.0`` is the float -0.0, and the column holds
    -0.0 for both."""
    x = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
    ok = np.isfinite(x)
    return np.where(ok, x, 0.0), ok, (x == 0) & np.signbit(x)
