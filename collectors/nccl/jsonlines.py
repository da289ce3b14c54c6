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
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

#: Bytes given to one ``read_json`` call: big enough to amortize it, small enough that a line
#: pyarrow refuses costs little to read around.
CHUNK_BYTES = 4 * 2**20
#: Below this, a buffer goes to the parsers' per-line paths: reading columns costs a few ms
#: however few the lines (pyarrow's setup, a few dozen whole-column steps), which json.loads
#: line by line beats up to about this size (measured on Inspector records and trace events).
SMALL_BYTES = 128 * 2**10
#: A range with this many lines or fewer that pyarrow refuses without naming a row goes to the
#: per-line parser whole rather than being halved again.
_SMALL = 4
_ROW = re.compile(r"\bin row (\d+)")
_NEWLINE, _OPEN, _SPACE, _CR, _COMMA = 10, ord("{"), ord(" "), 13, ord(",")


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
    offsets = pa.py_buffer(np.array([0, len(data)], np.int64))
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)]).validate(full=True)
        return data
    except pa.ArrowInvalid:
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
#: Byte offsets, in a chunk's bytes, of spellings pyarrow will refuse.
Suspect = Callable[[np.ndarray], np.ndarray]


def lines_holding(lines: Lines, tokens: Iterable[Token]) -> np.ndarray:
    """The lines in which any of ``tokens`` occurs: one scan per anchor byte (for all the tokens
    that share it) or per whole token, one search per line that holds one."""
    data, found = lines.data, []
    by_anchor: dict[bytes, list[tuple[bytes, int]]] = {}
    whole: list[bytes] = []
    for tok, anchor in tokens:
        if anchor is None:
            whole.append(tok)
        else:
            by_anchor.setdefault(tok[anchor : anchor + 1], []).append((tok, anchor))
    for byte, toks in by_anchor.items():
        budget = len(lines) + 16  # anchor bytes that start no token, before searching whole tokens
        i = data.find(byte)
        while i >= 0 and budget:
            hit = next((i - a for t, a in toks if data[i - a : i - a + len(t)] == t and i >= a), None)
            if hit is None:
                budget -= 1
                i = data.find(byte, i + 1)
                continue
            line = int(lines.line_of(np.array([hit]))[0])
            found.append(line)
            i = data.find(byte, int(lines.ends[line]))
        if i >= 0:  # the anchor byte is common in this buffer after all
            whole.extend(t for t, _ in toks)
    for tok in whole:
        i = data.find(tok)
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
    trailing_comma: bool = False,
    suspect: Suspect | None = None,
) -> Read:
    """Read the lines of ``lines`` that pyarrow reads as ``json.loads`` would, with ``schema``
    (fields it does not name are ignored).

    ``hold`` tokens send every line holding one to :attr:`Read.slow` unread (a value pyarrow
    reads differently, or one whose presence the columns cannot show, such as ``null``).
    ``substitute`` pairs of equal length are replaced in what pyarrow reads (a spelling it cannot
    read, where the replacement means the same to the caller); the offsets stay those of ``lines``.
    ``trailing_comma`` blanks one comma ending a line (before a carriage return), as in the
    elements of a JSON array printed one per line. ``suspect`` finds, in a chunk's bytes, the
    offsets of what pyarrow is likely to refuse: a chunk that fails sets those lines aside before
    reading around the rest.
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
    commas = np.empty(0, np.int64)
    if trailing_comma:
        last = ends[cand] - 1
        last = np.where((raw[last] == _CR) & (last > starts[cand]), last - 1, last)
        commas = last[raw[last] == _COMMA]
    if len(between) or subs or len(commas):
        buf = bytearray(data)
        for i in between.tolist():
            buf[starts[i] : ends[i]] = b" " * int(ends[i] - starts[i])
        for pos, new in subs:
            buf[pos : pos + len(new)] = new
        np.frombuffer(buf, np.uint8)[commas] = _SPACE
        data = buf  # type: ignore[assignment]
    reader = _Reader(data, starts[cand], ends[cand], schema, suspect)
    bounds = np.unique(np.searchsorted(starts[cand], np.arange(CHUNK_BYTES, len(data), CHUNK_BYTES)))
    edges = [0, *bounds[(bounds > 0) & (bounds < len(cand))].tolist(), len(cand)]
    chunks = list(itertools.pairwise(edges))
    if len(chunks) > 1 and pa.cpu_count() > 1:  # read_json releases the GIL: chunks side by side
        with ThreadPoolExecutor(min(pa.cpu_count(), len(chunks))) as pool:
            results = list(pool.map(lambda c: reader.read(*c), chunks))
    else:
        results = [reader.read(lo, hi) for lo, hi in chunks]
    got = sorted((t for tables, _ in results for t in tables), key=lambda x: int(x[0][0]))
    table = pa.concat_tables([t for _, t in got]) if got else schema.empty_table()
    line = np.concatenate([cand[ids] for ids, _ in got]) if got else np.empty(0, np.int64)
    slow.append(cand[np.array([i for _, refused in results for i in refused], np.int64)])
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
    """Reads chunks of candidate lines, reading around the ones pyarrow refuses.

    A chunk that fails and holds ``suspect`` bytes (spellings the format is known to print that
    pyarrow refuses) has those lines set aside first, so a trace full of them costs one search,
    not one failed read per line."""

    def __init__(
        self,
        data: bytes | bytearray,
        starts: np.ndarray,
        ends: np.ndarray,
        schema: pa.Schema,
        suspect: Suspect | None,
    ) -> None:
        self.data, self.buf, self.starts, self.ends = data, pa.py_buffer(data), starts, ends
        self.suspect = suspect
        self.parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def read(self, lo: int, hi: int) -> tuple[list[tuple[np.ndarray, pa.Table]], list[int]]:
        """The tables of candidates ``lo:hi`` (each with the candidates it holds) and the
        candidates refused."""
        tables: list[tuple[np.ndarray, pa.Table]] = []
        refused: list[int] = []
        ids, buf, base = np.arange(lo, hi), self.buf, 0
        todo, set_aside = [(0, len(ids))], self.suspect is None
        while todo:
            i0, i1 = todo.pop()
            if i0 >= i1:
                continue
            b0, b1 = int(self.starts[ids[i0]]), int(self.ends[ids[i1 - 1]])
            try:
                table = pj.read_json(
                    pa.BufferReader(buf.slice(b0 - base, b1 - b0)),
                    read_options=pj.ReadOptions(use_threads=False, block_size=b1 - b0 + 1),
                    parse_options=self.parse,
                )
            except pa.ArrowInvalid as e:
                if not set_aside:  # the chunk's first failure, before anything was read
                    set_aside = True
                    bad = self._suspects(ids)
                    if bad.any():
                        refused.extend(ids[bad].tolist())
                        buf, base = self._blanked(ids, bad)
                        ids = ids[~bad]
                        todo = [(0, len(ids))]
                        continue
                m = _ROW.search(str(e))
                row = int(m.group(1)) if m else -1
                if 0 <= row < i1 - i0:  # usually right; when not, the ranges around it fail again
                    refused.append(int(ids[i0 + row]))
                    todo += [(i0 + row + 1, i1), (i0, i0 + row)]
                else:
                    self._split(ids, i0, i1, todo, refused)
                continue
            if table.num_rows == i1 - i0:
                tables.append((ids[i0:i1], table))
            else:  # a line held two objects: pyarrow's rows no longer match the lines
                self._split(ids, i0, i1, todo, refused)
        return tables, refused

    def _suspects(self, ids: np.ndarray) -> np.ndarray:
        """Which of the candidates ``ids`` (one chunk, ascending) hold something suspect."""
        assert self.suspect is not None
        b0, b1 = int(self.starts[ids[0]]), int(self.ends[ids[-1]])
        at = self.suspect(np.frombuffer(self.data, np.uint8)[b0:b1]) + b0
        bad = np.zeros(len(ids), bool)
        j = np.searchsorted(self.starts[ids], at, side="right") - 1
        bad[j[(j >= 0) & (at < self.ends[ids[np.maximum(j, 0)]])]] = True
        return bad

    def _blanked(self, ids: np.ndarray, bad: np.ndarray) -> tuple[pa.Buffer, int]:
        """A copy of the chunk with the ``bad`` candidates' lines blanked, and its offset."""
        b0, b1 = int(self.starts[ids[0]]), int(self.ends[ids[-1]])
        local = bytearray(self.data[b0:b1])
        for i in ids[bad].tolist():
            s, e = int(self.starts[i]) - b0, int(self.ends[i]) - b0
            local[s:e] = b" " * (e - s)
        return pa.py_buffer(local), b0

    @staticmethod
    def _split(ids: np.ndarray, i0: int, i1: int, todo: list[tuple[int, int]], refused: list[int]) -> None:
        if i1 - i0 <= _SMALL:
            refused.extend(ids[i0:i1].tolist())
        else:
            mid = (i0 + i1) // 2
            todo += [(mid, i1), (i0, mid)]


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
