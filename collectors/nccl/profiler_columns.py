"""The example profiler plugin's trace as columns: events read by pyarrow, nesting resolved at once.

pyarrow reads the event lines (``{...},``) with an explicit schema; the lines it cannot read as
json would (the old unquoted spellings, typographic quotes, ``-NaN``, a line cut short) are
repaired one by one by :func:`~graywire.collectors.nccl.profiler_events.lenient_event` and
merged back in file order. The association the per-event parser makes as it reads (a kernel or
ProxyOp belongs to the innermost open collective, a step to the open ``Progress`` op of its
direction, a network-plugin event to the open step, an end closes the latest open begin of the
same category, name and id) is then resolved for all events at once, with sorted searches.

That holds while the nesting is what the plugin prints: one collective open at a time, and
per direction one ``Progress`` op, and one step, open at a time. :meth:`TraceColumns.feed`
checks it on every read and returns False, changing nothing, when a read breaks it or holds
a value its columns cannot hold exactly (an id that is not a number, an integer past int64);
the caller then goes on with the per-event parser (:meth:`TraceColumns.to_events`).

Sums and firsts that the per-event parser keeps on each ProxyOp (wait seconds per state, the
steps and QPs seen, the NIC) are derived from the steps and network events when asked for, in
the order it would have added them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.nccl.common import DTYPE_BYTES, TimingRows, as_float, as_int, fit_arrow, fitted_array
from graywire.collectors.nccl.jsonlines import (
    Lines,
    Token,
    join_lines,
    json_floats,
    json_ints,
    read_lines,
    split_lines,
    valid_utf8,
)
from graywire.collectors.nccl.profiler_events import (
    _NET_PLUGIN,
    _PROXY_OPS,
    WAIT_COLUMN,
    DeviceOf,
    EventParser,
    PortOf,
    _Open,
    lenient_event,
)
from graywire.collectors.nccl.proxy import ProxyRows
from graywire.collectors.schemas import NCCL_PROXY_WAITS

_F64, _U64, _STR = pa.float64(), pa.uint64(), pa.string()
#: 64-bit values (hashes, GPU clocks) read exactly as uint64; the other integers as float64.
_ARGS_U64 = ("CommHash", "StartGpuClk", "StopGpuClk", "wr_id")
_ARGS_INT = (
    "SeqNum",
    "Rank",
    "Peer",
    "Count",
    "nChannels",
    "Channel",
    "Steps",
    "ChunkSize",
    "transSize",
    "Step",
    "device",
    "qp_num",
    "opcode",
    "sock",
    "size",
)
_ARGS_TEXT = ("Datatype", "Algorithm", "Protocol")
SCHEMA = pa.schema(
    [
        ("name", _STR),
        ("cat", _STR),
        ("ph", _STR),
        ("id", _F64),
        ("pid", _F64),
        ("ts", _F64),
        (
            "args",
            pa.struct(
                [(k, _U64) for k in _ARGS_U64]
                + [(k, _F64) for k in _ARGS_INT]
                + [(k, _STR) for k in _ARGS_TEXT]
            ),
        ),
    ]
)
#: Lines holding these are repaired one by one: json refuses ``-NaN`` and ``Inf`` (pyarrow reads
#: them) and the repair would quote them, and typographic quotes are translated before json
#: reads a line. Found by a byte rare in the plugin's output (``-``, ``f``, the quotes' lead byte).
_HOLD: tuple[Token, ...] = (
    (b"-NaN", 0),
    (b"Inf", 2),
    *((q.encode(), 0) for q in ("\u201c", "\u201d", "\u201e", "\u2033")),
)
_COLON, _SPACE, _QUOTE = ord(":"), ord(" "), ord('"')
#: Bytes a JSON value may start with after a colon (a string, a number, an object or array,
#: true, false, null, NaN, Infinity); any other is a bare value older plugins printed.
_VALUE_START = np.zeros(256, bool)
_VALUE_START[[_QUOTE, *b"-0123456789{[tfnNI"]] = True


def _bare_values(chunk: np.ndarray) -> np.ndarray:
    """Offsets of values printed unquoted (``"Stream": 0x5020000567d0``, ``"datatype":
    ncclFloat32``, ``(nil)``): after a colon and at most one space, a byte no JSON value starts
    with, or ``0x``. Colons inside strings may count too: those lines are only repaired one by
    one, which reads them exactly."""
    colon = np.flatnonzero(chunk == _COLON)
    colon = colon[colon + 3 < len(chunk)]
    at = colon + 1 + (chunk[colon + 1] == _SPACE)
    first, second = chunk[at], chunk[at + 1]
    return at[~_VALUE_START[first] | ((first == ord("0")) & ((second == ord("x")) | (second == ord("X"))))]


_SKIP_LINES = ("[", "]", "{}]", "{}", "{},")
_WAIT_COLUMNS = tuple(NCCL_PROXY_WAITS)
_NONE = -1


class _Names:
    """Strings as small integer codes (one table per trace): names, categories, data types."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.code: dict[str, int] = {}
        self._waits = np.empty(0, np.int64)

    def of(self, value: str) -> int:
        c = self.code.get(value)
        if c is None:
            c = self.code[value] = len(self.values)
            self.values.append(value)
        return c

    def codes(self, arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """A string column as codes (-1 for null), each distinct string looked up once."""
        enc = pc.dictionary_encode(arr)
        if isinstance(enc, pa.ChunkedArray):
            chunks = enc.unify_dictionaries().chunks
            enc = pa.concat_arrays(chunks) if chunks else pc.dictionary_encode(pa.array([], _STR))
        table = np.array([self.of(v) for v in enc.dictionary.to_pylist()] + [_NONE], np.int64)
        return table[np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)]

    def wait_column(self) -> np.ndarray:
        """Per code: the index in NCCL_PROXY_WAITS of the column a step state of that name sums
        into, -1 for none."""
        if len(self._waits) != len(self.values):
            self._waits = np.array([_wait_index(v) for v in self.values], np.int64)
        return self._waits

    def array(self, codes: np.ndarray) -> pa.Array:
        """Codes back to strings (null for -1)."""
        dictionary = pa.array(self.values, _STR)
        return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=codes < 0), dictionary).cast(
            _STR
        )


class _Store:
    """One kind of entity as columns, appended to in blocks, some columns updated in place."""

    def __init__(self, **dtypes: Any) -> None:
        self.n = 0
        self._cols = {k: np.empty(0, dt) for k, dt in dtypes.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name][: self.n]

    def append(self, **cols: np.ndarray) -> None:
        m = len(next(iter(cols.values())))
        for k, arr in self._cols.items():
            if len(arr) < self.n + m:
                grown = np.empty(max(2 * len(arr), self.n + m, 16), arr.dtype)
                grown[: self.n] = arr[: self.n]
                self._cols[k] = arr = grown
            arr[self.n : self.n + m] = cols[k]
        self.n += m


def _pairs(kind: str) -> dict[str, Any]:
    """Columns of a value with its validity (``x`` and ``x_ok``)."""
    return {kind: np.int64, f"{kind}_ok": bool}


class _Events:
    """One read's events in file order, as the per-event parser sees them (those with a string
    name and category and a ``b``/``e`` phase): the columns every event needs, and the arguments
    gathered on demand from what pyarrow read (``src`` < ``nf``) or what was repaired."""

    def __init__(
        self,
        cols: dict[str, np.ndarray],
        src: np.ndarray,
        nf: int,
        args: dict[str, Any],
        extra: list[dict[str, Any]],
        names: _Names,
    ) -> None:
        self.cols, self.src, self.nf, self.args, self.extra, self.names = cols, src, nf, args, extra, names
        self.m = len(src)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def _split(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = self.src[at]
        fast = src < self.nf
        return fast, src[fast], src[~fast] - self.nf

    def ints(self, name: str, at: np.ndarray, unsigned: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """An integer argument (or ``pid``) of the events at ``at``: values and validity."""
        fast, fi, xi = self._split(at)
        dtype = np.uint64 if unsigned else np.int64
        value, ok = np.zeros(len(at), dtype), np.zeros(len(at), bool)
        if len(fi):
            col = self.args[name]
            if unsigned:
                value[fast] = np.asarray(col.fill_null(0).to_numpy(), np.uint64)[fi]
                ok[fast] = np.asarray(pc.is_valid(col).to_numpy(), bool)[fi]
            else:
                value[fast], ok[fast], _ = json_ints(pa.array(np.asarray(col.to_numpy(), np.float64)[fi]))
        if len(xi):
            got = [self.extra[i][name] for i in xi.tolist()]
            value[~fast] = np.array([0 if v is None else v for v in got], dtype)
            ok[~fast] = np.array([v is not None for v in got], bool)
        return value, ok

    def text(self, name: str, at: np.ndarray) -> np.ndarray:
        fast, fi, xi = self._split(at)
        out = np.full(len(at), _NONE, np.int64)
        if len(fi):
            out[fast] = self.names.codes(self.args[name].take(pa.array(fi)))
        if len(xi):
            out[~fast] = np.array([self.extra[i][name] for i in xi.tolist()], np.int64)
        return out


class TraceColumns:
    """The column state of one trace file and the reads that extend it."""

    def __init__(self) -> None:
        self.skipped = 0  # lines that look like events but do not parse
        self.problems: list[str] = []
        self._lines = 0
        self._events = 0  # events read so far: the order steps closed in, across reads
        self._next_op = 0
        self.names = _Names()
        self.colls = _Store(
            kind=np.int64,
            collective=np.int64,
            **_pairs("seq"),
            comm_hash=np.uint64,
            comm_hash_ok=bool,
            **_pairs("rank"),
            **_pairs("peer"),
            **_pairs("count"),
            datatype=np.int64,
            algorithm=np.int64,
            protocol=np.int64,
            **_pairs("nchannels"),
            **_pairs("pid"),
            start_us=np.float64,
            stop_us=np.float64,
        )
        self.kernels = _Store(
            coll=np.int64,
            **_pairs("channel"),
            start_gpu_ns=np.uint64,
            start_gpu_ns_ok=bool,
            stop_gpu_ns=np.uint64,
            stop_gpu_ns_ok=bool,
            start_us=np.float64,
        )
        self.ops = _Store(
            coll=np.int64,
            progress=bool,
            send=bool,
            **_pairs("channel"),
            **_pairs("peer"),
            **_pairs("steps"),
            **_pairs("chunk_size"),
            **_pairs("trans_size"),
            **_pairs("pid"),
            start_us=np.float64,
            stop_us=np.float64,
            emitted=bool,
        )
        self.steps = _Store(
            coll=np.int64,
            op=np.int64,
            send=bool,
            state=np.int64,
            **_pairs("step"),
            start_us=np.float64,
            stop_us=np.float64,
            counted=bool,
            closed_at=np.int64,
        )
        self.nets = _Store(
            step=np.int64,
            qp=bool,
            **_pairs("device"),
            **_pairs("qp_num"),
            **_pairs("opcode"),
            wr_id=np.uint64,
            wr_id_ok=bool,
            **_pairs("sock"),
            **_pairs("size"),
            start_us=np.float64,
            stop_us=np.float64,
        )
        # What is open between reads: the collective, the Progress op of each direction, the
        # step, and the begins an end may still close (category, name, id kind, id, entity).
        self.open_coll = _NONE
        self.open_progress = {True: _NONE, False: _NONE}  # send?
        self.open_step = _NONE
        self.open_keys = np.empty((0, 4), np.float64)
        self.open_what = np.empty((0, 2), np.int64)  # (0 op | 1 step | 2 net, index)
        self._constants()

    def _constants(self) -> None:
        """Codes of the names the association looks at."""
        n = self.names
        self.COLL, self.P2P, self.GPU, self.PROXY, self.NET = (
            n.of(x) for x in ("COLL", "P2P", "GPU", "PROXY", "NET")
        )
        self.NET_IB, self.KERNEL, self.B = n.of("NET_IB"), n.of("KernelCh"), n.of("b")
        self.PHASES = [self.B, n.of("e")]
        self.NET_PLUGIN = [n.of(x) for x in sorted(_NET_PLUGIN)]
        self.PROXY_OPS = [n.of(x) for x in sorted(_PROXY_OPS)]
        self.PROGRESS = [n.of(x) for x in sorted(_PROXY_OPS) if x.startswith("Progress")]

    # -- reading --------------------------------------------------------------------------------
    def feed(self, lines: Sequence[bytes | str]) -> bool:
        """Read ``lines`` (as the per-event parser's ``feed``); False, with nothing changed, when
        the column pass cannot follow them."""
        if not lines:
            return True
        data = join_lines(lines)
        split = split_lines(valid_utf8(data)) if data is not None else None
        if split is None or len(split) != len(lines):
            return False
        return self._feed(split)

    def feed_data(self, data: bytes) -> bool:
        """Read the lines of a buffer (joined by newlines)."""
        return self._feed(split_lines(valid_utf8(data)))

    def _feed(self, lines: Lines) -> bool:
        read = read_lines(lines, SCHEMA, hold=_HOLD, trailing_comma=True, suspect=_bare_values)
        fast, slow = self._fast_events(read.table, read.line)
        extra, skipped, problems = [], 0, []
        for i in sorted({*read.slow.tolist(), *slow.tolist()}):
            stripped = lines[i].decode("utf-8", "replace").strip()
            if not stripped or stripped in _SKIP_LINES:
                continue
            ev = lenient_event(stripped)
            if ev is None:
                if "{" in stripped:
                    skipped += 1
                    if len(self.problems) + len(problems) < 5:
                        problems.append(f"line {self._lines + i + 1}: cannot repair {stripped[:60]!r}")
                continue
            row = self._row(ev, i)
            if row is False:
                return False
            if row is not None:
                extra.append(row)
        events = self._merge(fast, slow, extra)
        if not self._apply(events):
            return False
        self._lines += len(lines)
        self._events += events.m
        self.skipped += skipped
        self.problems.extend(problems)
        return True

    def _fast_events(self, t: pa.Table, line: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
        """The events pyarrow read: the columns every event needs as arrays, the arguments as
        read (converted when gathered); and the lines holding a number a float64 column holds
        only approximately, or an id json would not match as this number (repaired one by one)."""
        cols: dict[str, Any] = {"line": line}
        for k in ("name", "cat", "ph"):
            cols[k] = self.names.codes(t.column(k))
        idv = np.asarray(t.column("id").to_numpy(), np.float64)
        valid = ~np.isnan(idv) | np.asarray(pc.is_valid(t.column("id")).to_numpy(zero_copy_only=False), bool)
        unsure = valid & (~np.isfinite(idv) | (np.abs(np.nan_to_num(idv)) > 2.0**53))
        cols["idk"], cols["idv"] = valid.astype(np.int64), np.where(valid, np.nan_to_num(idv), 0.0) + 0.0
        ts, ts_ok, un = json_floats(t.column("ts"))
        cols["ts"], unsure = np.where(ts_ok, ts, np.nan), unsure | un
        args = {k: pc.struct_field(t.column("args"), k) for k in (*_ARGS_INT, *_ARGS_U64, *_ARGS_TEXT)}
        args["pid"] = t.column("pid")
        for k in ("pid", *_ARGS_INT):
            big = pc.max(pc.abs(args[k])).as_py()
            if big is not None and not big < 2.0**53:  # NaN or a big one somewhere: find the rows
                unsure |= json_ints(args[k])[2]
        cols["args"] = args
        return cols, line[unsure] if unsure.any() else line[:0]

    def _row(self, ev: dict[str, Any], line: int) -> dict[str, Any] | bool | None:
        """One repaired event as a column row; None when the per-event parser ignores it, False
        when a value does not fit its column exactly."""
        name, cat, ph = ev.get("name"), ev.get("cat"), ev.get("ph")
        if not isinstance(name, str) or not isinstance(cat, str) or ph not in ("b", "e"):
            return None
        row: dict[str, Any] = {
            "line": line,
            "name": self.names.of(name),
            "cat": self.names.of(cat),
            "ph": self.names.of(ph),
        }
        ident = ev.get("id")
        if ident is None:
            row["idk"], row["idv"] = 0, 0.0
        elif isinstance(ident, int | float) and not isinstance(ident, bool) and abs(ident) <= 2**53:
            if ident != ident:  # NaN: never equal to itself, never a dict key that matches
                return False
            row["idk"], row["idv"] = 1, float(ident) + 0.0
        else:
            return False
        ts = as_float(ev.get("ts"))
        row["ts"] = np.nan if ts is None else ts
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        for k, v, lo, hi in (
            ("pid", ev.get("pid"), -(2**63), 2**63),
            *((k, args.get(k), -(2**63), 2**63) for k in _ARGS_INT),
            *((k, args.get(k), 0, 2**64) for k in _ARGS_U64),
        ):
            i = as_int(v)
            if i is not None and not lo <= i < hi:
                return False
            row[k] = i
        for k in _ARGS_TEXT:
            v = args.get(k)
            if v is not None and not isinstance(v, str):
                return False
            row[k] = _NONE if v is None else self.names.of(v)
        return row

    def _merge(self, fast: dict[str, Any], unsure: np.ndarray, extra: list[dict[str, Any]]) -> _Events:
        """The read's events in file order, those the per-event parser ignores left out."""
        nf = len(fast["line"])
        keep_fast = np.ones(nf, bool)
        keep_fast[np.searchsorted(fast["line"], unsure)] = False
        cols = {k: fast[k] for k in ("line", "name", "cat", "ph", "idk", "idv", "ts")}
        src = np.arange(nf)
        if extra:
            cols = {k: np.concatenate((v, np.array([r[k] for r in extra], v.dtype))) for k, v in cols.items()}
            src = np.arange(nf + len(extra))
            keep_fast = np.concatenate((keep_fast, np.ones(len(extra), bool)))
        phase = np.zeros(len(self.names.values) + 1, bool)
        phase[self.PHASES] = True
        ok = keep_fast & (cols["name"] >= 0) & (cols["cat"] >= 0) & phase[cols["ph"]]
        order = np.flatnonzero(ok)
        if extra:
            order = order[np.argsort(cols["line"][order], kind="stable")]
        return _Events(
            {k: v[order] for k, v in cols.items()}, src[order], nf, fast["args"], extra, self.names
        )

    # -- association ------------------------------------------------------------------------------
    def _table(self, codes: list[int]) -> np.ndarray:
        """A lookup by code: True for ``codes``."""
        out = np.zeros(len(self.names.values), bool)
        out[codes] = True
        return out

    def _apply(self, ev: _Events) -> bool:
        """Resolve one read's nesting and add it to the state; False (nothing changed) when it
        does not nest as the column pass models."""
        m = ev.m
        names = self.names.values
        cat, name, is_b = ev["cat"], ev["name"], ev["ph"] == self.B
        pos = np.arange(m)
        in_coll = (cat == self.COLL) | (cat == self.P2P)
        cb, ce = in_coll & is_b, in_coll & ~is_b
        kb = is_b & (cat == self.GPU) & (name == self.KERNEL)
        pb = is_b & (cat == self.PROXY) & self._table(self.PROXY_OPS)[name]
        nb = is_b & (cat == self.NET)
        xb = is_b & self._table(self.NET_PLUGIN)[cat]
        closing = ~is_b & ~in_coll
        ends_send = np.array([v.endswith("Send") for v in names], bool)
        starts_send = np.array([v.startswith("Send") for v in names], bool)

        # Collectives: at most one open; an end of the same name closes it.
        cpos = np.flatnonzero(cb)
        epos = np.flatnonzero(ce)
        ekey = np.sort(name[epos] * (m + 1) + epos)

        def first_end(names_: np.ndarray, after: np.ndarray) -> np.ndarray:
            """Position of the first collective end of each name after each position, or m."""
            q = names_ * (m + 1) + after
            i = np.searchsorted(ekey, q, side="right")
            hit = i < len(ekey)
            i = np.minimum(i, max(len(ekey) - 1, 0))
            ok = hit & (ekey[i] // (m + 1) == names_) if len(ekey) else np.zeros(len(q), bool)
            return np.where(ok, ekey[i] % (m + 1) if len(ekey) else m, m)

        cclose = first_end(name[cpos], cpos)
        carry_close = m
        if self.open_coll != _NONE:
            carry_close = int(
                first_end(np.array([self.colls["collective"][self.open_coll]]), np.array([-1]))[0]
            )
            if len(cpos) and carry_close > cpos[0]:
                return False
        if len(cpos) > 1 and np.any(cclose[:-1] > cpos[1:]):
            return False
        k = np.searchsorted(cpos, pos) - 1
        in_new = (k >= 0) & (pos < cclose[np.maximum(k, 0)]) if len(cpos) else np.zeros(m, bool)
        parent = np.where(in_new, self.colls.n + np.maximum(k, 0), _NONE)
        if self.open_coll != _NONE:
            parent = np.where((k < 0) & (pos < carry_close), self.open_coll, parent)

        # Begins and the end that closes each: the next event of the same key, if it is an end.
        n_open = len(self.open_keys)
        dpos = np.concatenate((np.full(n_open, -1), np.flatnonzero(pb | nb | xb | closing)))
        dev = dpos[n_open:]
        keys = np.concatenate(
            (self.open_keys, np.stack([cat[dev], name[dev], ev["idk"][dev], ev["idv"][dev]], 1))
        )
        d_b = np.concatenate((np.ones(n_open, bool), is_b[dev]))
        order = _key_order(keys, dpos)
        sk, sb = keys[order], d_b[order]
        same = np.concatenate(([False], np.all(sk[1:] == sk[:-1], axis=1)))
        closes = np.flatnonzero(same & ~sb & np.roll(sb, 1))  # sorted index of each end that closes
        close_of = np.full(len(dpos), m, np.int64)  # per dict event: where it is closed (m: not here)
        close_of[order[closes - 1]] = dpos[order[closes]]
        last_of_key = np.concatenate((~same[1:], [True]))
        still_open = order[last_of_key & sb]  # begins left in the dict after this read
        carry_close_of = close_of[:n_open]
        new_close = np.full(m, m, np.int64)
        new_close[dev] = close_of[n_open:]

        def intervals(begins: np.ndarray, carry: int, carry_end: int) -> tuple[np.ndarray, np.ndarray] | None:
            """Open spans of begins that never overlap (the carried one first), or None."""
            starts = np.concatenate(([-1], begins)) if carry != _NONE else begins
            stops = np.concatenate(([carry_end], new_close[begins])) if carry != _NONE else new_close[begins]
            if len(starts) > 1 and np.any(stops[:-1] > starts[1:]):
                return None
            return starts, stops

        def carried_close(kind: int, index: int) -> int:
            hit = np.flatnonzero((self.open_what[:, 0] == kind) & (self.open_what[:, 1] == index))
            return int(carry_close_of[hit[0]]) if len(hit) else m

        def inside(at: np.ndarray, spans: tuple[np.ndarray, np.ndarray], ids: np.ndarray) -> np.ndarray:
            """The span open at each position (its id), else -1."""
            starts, stops = spans
            j = np.searchsorted(starts, at) - 1
            ok = (j >= 0) & (at < stops[np.maximum(j, 0)]) if len(starts) else np.zeros(len(at), bool)
            return np.where(ok, ids[np.maximum(j, 0)] if len(ids) else _NONE, _NONE)

        # Progress ops (per direction) and steps: one open at a time.
        op_pos = np.flatnonzero(pb)
        op_index = self.ops.n + np.arange(len(op_pos))
        op_send = ends_send[name[op_pos]]
        op_progress = self._table(self.PROGRESS)[name[op_pos]]
        op_of_step = np.full(m, _NONE, np.int64)
        step_pos = np.flatnonzero(nb)
        step_send = starts_send[name[step_pos]]
        for send in (True, False):
            mine = op_progress & (op_send == send)
            carry = self.open_progress[send]
            spans = intervals(op_pos[mine], carry, carried_close(0, carry) if carry != _NONE else m)
            if spans is None:
                return False
            ids = np.concatenate(([carry], op_index[mine])) if carry != _NONE else op_index[mine]
            at = step_pos[step_send == send]
            op_of_step[at] = inside(at, spans, ids)
        step_index = self.steps.n + np.arange(len(step_pos))
        carry = self.open_step
        spans = intervals(step_pos, carry, carried_close(1, carry) if carry != _NONE else m)
        if spans is None:
            return False
        ids = np.concatenate(([carry], step_index)) if carry != _NONE else step_index
        net_pos = np.flatnonzero(xb)
        step_of_net = inside(net_pos, spans, ids)

        # From here the read is taken: add what it opened, close what it closed.
        ts = ev["ts"]

        def pairs(at: np.ndarray, **fields: str) -> dict[str, np.ndarray]:
            """``out=arg`` integer arguments as value and ``out_ok`` columns (uint64 for hashes, clocks)."""
            out = {}
            for key, arg in fields.items():
                out[key], out[f"{key}_ok"] = ev.ints(arg, at, unsigned=arg in _ARGS_U64)
            return out

        op_coll_all = np.concatenate((self.ops["coll"], parent[op_pos]))
        s_op = op_of_step[step_pos]
        has_op = s_op >= 0
        si = np.maximum(s_op, 0)
        self.colls.append(
            kind=np.where(cat[cpos] == self.P2P, 1, 0),
            collective=name[cpos],
            **pairs(
                cpos,
                seq="SeqNum",
                comm_hash="CommHash",
                rank="Rank",
                peer="Peer",
                count="Count",
                nchannels="nChannels",
                pid="pid",
            ),
            datatype=ev.text("Datatype", cpos),
            algorithm=ev.text("Algorithm", cpos),
            protocol=ev.text("Protocol", cpos),
            start_us=ts[cpos],
            stop_us=np.where(cclose < m, ts[np.minimum(cclose, m - 1)], np.nan),
        )
        if self.open_coll != _NONE and carry_close < m:
            self.colls["stop_us"][self.open_coll] = ts[carry_close]
        kpos = np.flatnonzero(kb)
        self.kernels.append(
            coll=parent[kpos],
            **pairs(kpos, channel="Channel", start_gpu_ns="StartGpuClk", stop_gpu_ns="StopGpuClk"),
            start_us=ts[kpos],
        )
        self.ops.append(
            coll=parent[op_pos],
            progress=op_progress,
            send=op_send,
            **pairs(
                op_pos,
                channel="Channel",
                peer="Peer",
                steps="Steps",
                chunk_size="ChunkSize",
                trans_size="transSize",
                pid="pid",
            ),
            start_us=ts[op_pos],
            stop_us=_stop(ts, new_close[op_pos], m),
            emitted=np.zeros(len(op_pos), bool),
        )
        self.steps.append(
            coll=np.where(has_op, op_coll_all[si] if len(op_coll_all) else _NONE, parent[step_pos]),
            op=s_op,
            send=step_send,
            state=name[step_pos],
            **pairs(step_pos, step="Step"),
            start_us=ts[step_pos],
            stop_us=_stop(ts, new_close[step_pos], m),
            counted=np.zeros(len(step_pos), bool),
            closed_at=np.full(len(step_pos), -1, np.int64),
        )
        self.nets.append(
            step=step_of_net,
            qp=cat[net_pos] == self.NET_IB,
            **pairs(
                net_pos,
                device="device",
                qp_num="qp_num",
                opcode="opcode",
                wr_id="wr_id",
                sock="sock",
                size="size",
            ),
            start_us=ts[net_pos],
            stop_us=_stop(ts, new_close[net_pos], m),
        )
        # Carried begins closed here.
        for (kind, index), at in zip(self.open_what.tolist(), carry_close_of.tolist(), strict=True):
            if at < m:
                store = (self.ops, self.steps, self.nets)[kind]
                store["stop_us"][index] = ts[at]
        # Steps closed here (new or carried) count toward their op's waits, in the order they closed.
        closed_steps = [
            (index, at)
            for (kind, index), at in zip(self.open_what.tolist(), carry_close_of.tolist(), strict=True)
            if kind == 1 and at < m
        ]
        new_closed = np.flatnonzero(new_close[step_pos] < m)
        idx = np.concatenate((np.array([i for i, _ in closed_steps], np.int64), step_index[new_closed]))
        at = np.concatenate(
            (np.array([a for _, a in closed_steps], np.int64), new_close[step_pos][new_closed])
        )
        if len(idx):
            start, stop = self.steps["start_us"][idx], self.steps["stop_us"][idx]
            col = self.names.wait_column()[self.steps["state"][idx]]
            counted = (
                (self.steps["op"][idx] >= 0)
                & (col >= 0)
                & ~np.isnan(start)
                & ~np.isnan(stop)
                & (stop >= start)
            )
            self.steps["counted"][idx] = counted
            self.steps["closed_at"][idx] = self._events + at

        # What stays open.
        if len(cpos):
            self.open_coll = self.colls.n - 1 if cclose[-1] >= m else _NONE
        elif self.open_coll != _NONE and carry_close < m:
            self.open_coll = _NONE
        for send in (True, False):
            mine = op_index[op_progress & (op_send == send)]
            closes = new_close[op_pos[op_progress & (op_send == send)]]
            carry = self.open_progress[send]
            if len(mine):
                self.open_progress[send] = int(mine[-1]) if closes[-1] >= m else _NONE
            elif carry != _NONE and carried_close(0, carry) < m:
                self.open_progress[send] = _NONE
        if len(step_pos):
            self.open_step = int(step_index[-1]) if new_close[step_pos[-1]] >= m else _NONE
        elif self.open_step != _NONE and carried_close(1, self.open_step) < m:
            self.open_step = _NONE
        # Each begin of the dict: what it opened (0 op, 1 step, 2 net) and its index.
        kind_at = np.full(m, _NONE, np.int64)
        index_at = np.full(m, _NONE, np.int64)
        net_index = self.nets.n - len(net_pos) + np.arange(len(net_pos))
        for kind, at, index in ((0, op_pos, op_index), (1, step_pos, step_index), (2, net_pos, net_index)):
            kind_at[at], index_at[at] = kind, index
        what_new = np.stack([kind_at[dev], index_at[dev]], 1)
        what = np.concatenate((self.open_what, what_new))
        self.open_keys, self.open_what = keys[still_open], what[still_open]
        return True

    # -- the per-event parser, for reads the column pass cannot follow --------------------------------
    def to_events(self) -> EventParser:
        """An :class:`EventParser` in the state these columns hold, to read on with."""
        p = EventParser()
        p.colls, p.kernels = self.coll_dicts(), self.kernel_dicts()
        p.proxy_ops, p.proxy_steps, p.net_events = self.op_dicts(), self.step_dicts(), self.net_dicts()
        p.skipped, p.problems, p._lines, p._next_op = self.skipped, self.problems, self._lines, self._next_op
        p._open_colls = [] if self.open_coll == _NONE else [self.open_coll]
        p._progress = {"send": [], "recv": []}
        for send, idx in self.open_progress.items():
            if idx != _NONE:
                p._progress["send" if send else "recv"].append(idx)
        p._steps_open = [] if self.open_step == _NONE else [self.open_step]
        names = self.names.values
        for (c, nm, idk, idv), (_kind, index) in zip(
            self.open_keys.tolist(), self.open_what.tolist(), strict=True
        ):
            ident = None if not idk else (int(idv) if float(idv).is_integer() else idv)
            p._open[(names[int(c)], names[int(nm)], ident)] = _Open(
                names[int(nm)], names[int(c)], ident, None, {}, index
            )
        return p

    # -- entities as the per-event parser's dicts ---------------------------------------------------
    def _val(self, store: _Store, name: str) -> list[Any]:
        v, ok = store[name].tolist(), store[f"{name}_ok"].tolist()
        return [x if o else None for x, o in zip(v, ok, strict=True)]

    def _str(self, codes: np.ndarray) -> list[str | None]:
        return [self.names.values[c] if c >= 0 else None for c in codes.tolist()]

    @staticmethod
    def _us(arr: np.ndarray) -> list[float | None]:
        return [None if x != x else x for x in arr.tolist()]

    @staticmethod
    def _ref(arr: np.ndarray) -> list[int | None]:
        return [None if x < 0 else x for x in arr.tolist()]

    def coll_dicts(self) -> list[dict[str, Any]]:
        s = self.colls
        cols = {
            "kind": ["p2p" if k else "coll" for k in s["kind"].tolist()],
            "collective": self._str(s["collective"]),
            "seq": self._val(s, "seq"),
            "comm_hash": self._val(s, "comm_hash"),
            "rank": self._val(s, "rank"),
            "peer": self._val(s, "peer"),
            "count": self._val(s, "count"),
            "datatype": self._str(s["datatype"]),
            "algorithm": self._str(s["algorithm"]),
            "protocol": self._str(s["protocol"]),
            "nchannels": self._val(s, "nchannels"),
            "pid": self._val(s, "pid"),
            "start_us": self._us(s["start_us"]),
            "stop_us": self._us(s["stop_us"]),
        }
        return [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]

    def kernel_dicts(self) -> list[dict[str, Any]]:
        s = self.kernels
        dur = _gpu_seconds(s)
        cols = {
            "coll": self._ref(s["coll"]),
            "channel": self._val(s, "channel"),
            "start_gpu_ns": self._val(s, "start_gpu_ns"),
            "stop_gpu_ns": self._val(s, "stop_gpu_ns"),
            "start_us": self._us(s["start_us"]),
            "duration_seconds": self._us(dur),
        }
        return [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]

    def op_dicts(self) -> list[dict[str, Any]]:
        s = self.ops
        waits, step_ids, qps, device = self._op_extras()
        cols = {
            "coll": self._ref(s["coll"]),
            "phase": ["progress" if x else "schedule" for x in s["progress"].tolist()],
            "direction": ["send" if x else "recv" for x in s["send"].tolist()],
            "channel": self._val(s, "channel"),
            "peer": self._val(s, "peer"),
            "steps": self._val(s, "steps"),
            "chunk_size": self._val(s, "chunk_size"),
            "trans_size": self._val(s, "trans_size"),
            "pid": self._val(s, "pid"),
            "start_us": self._us(s["start_us"]),
            "stop_us": self._us(s["stop_us"]),
            "waits": waits,
            "step_ids": step_ids,
            "qps": qps,
            "net_device": device,
            "emitted": s["emitted"].tolist(),
        }
        return [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]

    def step_dicts(self) -> list[dict[str, Any]]:
        s, ops = self.steps, self.ops
        op = s["op"]
        has = op >= 0
        channel = [
            ops["channel"][o].item() if h and ops["channel_ok"][o] else None
            for o, h in zip(op.tolist(), has.tolist(), strict=True)
        ]
        peer = [
            ops["peer"][o].item() if h and ops["peer_ok"][o] else None
            for o, h in zip(op.tolist(), has.tolist(), strict=True)
        ]
        cols = {
            "coll": self._ref(s["coll"]),
            "op": self._ref(op),
            "direction": ["send" if x else "recv" for x in s["send"].tolist()],
            "state": self._str(s["state"]),
            "step": self._val(s, "step"),
            "channel": channel,
            "peer": peer,
            "start_us": self._us(s["start_us"]),
            "stop_us": self._us(s["stop_us"]),
        }
        return [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]

    def net_dicts(self) -> list[dict[str, Any]]:
        s = self.nets
        cols = {
            "step": self._ref(s["step"]),
            "kind": ["qp" if x else "socket" for x in s["qp"].tolist()],
            "device": self._val(s, "device"),
            "qp_num": self._val(s, "qp_num"),
            "opcode": self._val(s, "opcode"),
            "wr_id": self._val(s, "wr_id"),
            "sock": self._val(s, "sock"),
            "size": self._val(s, "size"),
            "start_us": self._us(s["start_us"]),
            "stop_us": self._us(s["stop_us"]),
        }
        return [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]

    def _op_extras(self) -> tuple[list[dict[str, float]], list[set[Any]], list[list[int]], list[int | None]]:
        """Per op: the waits its steps added, their step numbers, its QPs and NIC, as dicts."""
        n = self.ops.n
        sums, seen = self.wait_sums()
        waits = [{c: float(sums[i, j]) for j, c in enumerate(_WAIT_COLUMNS) if seen[i, j]} for i in range(n)]
        step_ids: list[set[Any]] = [set() for _ in range(n)]
        s = self.steps
        for o, v, ok, c in zip(
            s["op"].tolist(), s["step"].tolist(), s["step_ok"].tolist(), s["counted"].tolist(), strict=True
        ):
            if c:
                step_ids[o].add(v if ok else None)
        qps: list[list[int]] = [[] for _ in range(n)]
        device: list[int | None] = [None] * n
        for o, q, q_ok, d, d_ok in zip(*(a.tolist() for a in self._net_ops()), strict=True):
            if q_ok and q not in qps[o]:
                qps[o].append(q)
            if d_ok and device[o] is None:
                device[o] = d
        return waits, step_ids, qps, device

    # -- what the per-event parser keeps on each op, derived --------------------------------------------
    def wait_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Per op and wait column: the seconds its counted steps waited (summed in the order the
        steps closed, as the per-event parser adds them) and whether any step added to it."""
        s = self.steps
        sums = np.zeros((self.ops.n, len(_WAIT_COLUMNS)))
        seen = np.zeros((self.ops.n, len(_WAIT_COLUMNS)), bool)
        c = np.flatnonzero(s["counted"])
        if len(c):
            c = c[np.argsort(s["closed_at"][c], kind="stable")]
            col = self.names.wait_column()[s["state"][c]]
            d = (s["stop_us"][c] - s["start_us"][c]) / 1e6
            flat = s["op"][c] * len(_WAIT_COLUMNS) + col
            np.add.at(sums.reshape(-1), flat, d)
            seen.reshape(-1)[flat] = True
        return sums, seen

    def _net_ops(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The QP events whose step belongs to an op, in file order: (op, qp_num, its validity,
        device, its validity)."""
        s = self.nets
        step = s["step"]
        op = np.where(step >= 0, self.steps["op"][np.maximum(step, 0)], _NONE) if self.steps.n else step
        m = s["qp"] & (op >= 0)
        return op[m], s["qp_num"][m], s["qp_num_ok"][m], s["device"][m], s["device_ok"][m]

    # -- outputs ----------------------------------------------------------------------------------------
    def _coll_col(self, refs: np.ndarray) -> dict[str, pa.Array]:
        """collective, seq, comm_hash, rank of each referenced collective (null for none)."""
        c = self.colls
        ok = refs >= 0
        i = np.maximum(refs, 0)

        def take(name: str, typ: pa.DataType) -> pa.Array:
            if not c.n:
                return pa.nulls(len(refs), typ)
            return pa.array(c[name][i], typ, mask=~(ok & c[f"{name}_ok"][i]))

        collective = np.where(ok, c["collective"][i], _NONE) if c.n else np.full(len(refs), _NONE)
        return {
            "collective": self.names.array(collective),
            "seq": take("seq", pa.int64()),
            "comm_hash": take("comm_hash", _U64),
            "rank": take("rank", pa.int64()),
        }

    def kernel_table(self) -> pa.Table:
        k = self.kernels
        cc = self._coll_col(k["coll"])
        return pa.table(
            {
                "collective": cc["collective"],
                "seq": cc["seq"],
                "comm_hash": cc["comm_hash"],
                "rank": fit_arrow(cc["rank"], pa.int32()),
                "channel": _col(k, "channel", pa.int16()),
                "start_gpu_ns": _col(k, "start_gpu_ns", _U64),
                "stop_gpu_ns": _col(k, "stop_gpu_ns", _U64),
                "duration_seconds": _floats(_gpu_seconds(k)),
            }
        )

    def proxy_op_table(self) -> pa.Table:
        o = self.ops
        cc = self._coll_col(o["coll"])
        return pa.table(
            {
                "collective": cc["collective"],
                "seq": cc["seq"],
                "rank": fit_arrow(cc["rank"], pa.int32()),
                "phase": pa.array(np.where(o["progress"], "progress", "schedule"), _STR),
                "direction": pa.array(np.where(o["send"], "send", "recv"), _STR),
                "channel": _col(o, "channel", pa.int16()),
                "peer": _col(o, "peer", pa.int32()),
                "steps": _col(o, "steps", pa.int32()),
                "chunk_size": _col(o, "chunk_size", pa.int64()),
                "trans_size": _col(o, "trans_size", pa.int64()),
                "duration_seconds": _floats(_span(o)),
            }
        )

    def _step_op_col(self, refs: np.ndarray, name: str, typ: pa.DataType) -> pa.Array:
        o = self.ops
        ok = refs >= 0
        if not o.n:
            return pa.nulls(len(refs), typ)
        i = np.maximum(refs, 0)
        return fit_arrow(pa.array(o[name][i], pa.int64(), mask=~(ok & o[f"{name}_ok"][i])), typ)

    def proxy_step_table(self) -> pa.Table:
        s = self.steps
        cc = self._coll_col(s["coll"])
        return pa.table(
            {
                "collective": cc["collective"],
                "seq": cc["seq"],
                "rank": fit_arrow(cc["rank"], pa.int32()),
                "direction": pa.array(np.where(s["send"], "send", "recv"), _STR),
                "state": self.names.array(s["state"]),
                "step": _col(s, "step", pa.int32()),
                "channel": self._step_op_col(s["op"], "channel", pa.int16()),
                "peer": self._step_op_col(s["op"], "peer", pa.int32()),
                "duration_seconds": _floats(_span(s)),
            }
        )

    def net_table(self) -> pa.Table:
        e, s = self.nets, self.steps
        ref = e["step"]
        ok = ref >= 0
        i = np.maximum(ref, 0)
        op = np.where(ok, s["op"][i], _NONE) if s.n else np.full(len(ref), _NONE)
        state = np.where(ok, s["state"][i], _NONE) if s.n else np.full(len(ref), _NONE)
        direction = (
            pa.array(np.where(s["send"][i], "send", "recv"), _STR, mask=~ok)
            if s.n
            else pa.nulls(len(ref), _STR)
        )
        step = (
            fit_arrow(pa.array(s["step"][i], pa.int64(), mask=~(ok & s["step_ok"][i])), pa.int32())
            if s.n
            else pa.nulls(len(ref), pa.int32())
        )
        return pa.table(
            {
                "kind": pa.array(np.where(e["qp"], "qp", "socket"), _STR),
                "direction": direction,
                "state": self.names.array(state),
                "step": step,
                "channel": self._step_op_col(op, "channel", pa.int16()),
                "peer": self._step_op_col(op, "peer", pa.int32()),
                "device": _col(e, "device", pa.int16()),
                "qp_num": _col(e, "qp_num", pa.int64()),
                "opcode": _col(e, "opcode", pa.int32()),
                "wr_id": _col(e, "wr_id", _U64),
                "sock": _col(e, "sock", pa.int32()),
                "size": _col(e, "size", pa.int64()),
                "duration_seconds": _floats(_span(e)),
            }
        )

    def timing_rows(
        self,
        rows: TimingRows,
        *,
        job: str,
        host: str | None = None,
        device: int | None = None,
        observed_us: int | None = None,
        start: int = 0,
    ) -> int:
        """One nccl_timing row per complete KernelCh from ``kernels[start:]``; returns the new start."""
        k, c = self.kernels, self.colls
        idx = np.arange(start, k.n)
        dur = _gpu_seconds(k)[idx]
        coll = k["coll"][idx]
        ci = np.maximum(coll, 0)
        keep = ~np.isnan(dur) & (coll >= 0) & k["channel_ok"][idx]
        if c.n:
            keep &= c["comm_hash_ok"][ci] & c["rank_ok"][ci]
        else:
            keep &= False
        idx, ci = idx[keep], ci[keep]
        n = len(idx)
        if not n:
            return k.n
        comm = self._communicators(c["comm_hash"][ci])
        # str(Datatype) -> bytes per element; code -1 (no Datatype) is str(None), the last entry.
        per_type = np.array([DTYPE_BYTES.get(v, 0) for v in self.names.values] + [DTYPE_BYTES.get("None", 0)])
        per = per_type[c["datatype"][ci]].astype(np.int64)
        count, count_ok = c["count"][ci], c["count_ok"][ci]
        room = np.maximum(per, 1)
        fits = (
            (per > 0)
            & count_ok
            & (count >= np.iinfo(np.int64).min // room)
            & (count <= np.iinfo(np.int64).max // room)
        )
        rows.add_block(
            {
                "job": _constant(job, n),
                "communicator": comm,
                "rank": pa.array(c["rank"][ci], pa.int64()),
                "host": _constant(host, n),
                "device": _constant_int(device, n),
                "collective": self.names.array(c["collective"][ci]),
                "seq": pa.array(c["seq"][ci], pa.int64(), mask=~c["seq_ok"][ci]),
                "message_bytes": pa.array(np.where(fits, count * per, 0), pa.int64(), mask=~fits),
                "channel": pa.array(k["channel"][idx], pa.int64()),
                "duration_seconds": pa.array(_gpu_seconds(k)[idx], pa.float64()),
                "observed_us": _constant_int(observed_us, n),
            }
        )
        return k.n

    def proxy_rows(
        self,
        rows: ProxyRows,
        *,
        job: str,
        host: str | None = None,
        device_of: DeviceOf | None = None,
        port_of: PortOf | None = None,
        observed_us: int | None = None,
    ) -> int:
        """One nccl_proxy row per finished ``Progress`` op not added before; returns how many."""
        o, c = self.ops, self.colls
        i = self._next_op
        passed = o["emitted"][i:] | ~o["progress"][i:]
        ahead = np.flatnonzero(~passed)
        i = self._next_op = i + (int(ahead[0]) if len(ahead) else len(passed))
        idx = np.arange(i, o.n)
        coll = o["coll"][idx]
        ci = np.maximum(coll, 0)
        has_coll = coll >= 0
        coll_done = has_coll & ~np.isnan(c["stop_us"][ci]) if c.n else np.zeros(len(idx), bool)
        finished = ~o["emitted"][idx] & o["progress"][idx] & (~np.isnan(o["stop_us"][idx]) | coll_done)
        o["emitted"][idx[finished]] = True
        out = finished & has_coll & o["channel_ok"][idx] & o["peer_ok"][idx]
        if c.n:
            out &= c["comm_hash_ok"][ci] & c["rank_ok"][ci]
        else:
            out &= False
        idx, ci = idx[out], ci[out]
        n = len(idx)
        if not n:
            return 0
        pid = np.where(o["pid_ok"][idx], o["pid"][idx], c["pid"][ci])
        pid_ok = o["pid_ok"][idx] | c["pid_ok"][ci]
        rank, channel, peer, send = c["rank"][ci], o["channel"][idx], o["peer"][idx], o["send"][idx]
        ask = np.flatnonzero(pid_ok) if host else np.empty(0, np.int64)
        dev: list[Any] = [None] * n
        port: list[Any] = [None] * n
        if device_of is not None and len(ask):
            for j, d in zip(
                ask.tolist(), _memo([pid[ask], rank[ask]], lambda p, r: device_of(host, p, r)), strict=True
            ):
                dev[j] = d
        if port_of is not None and len(ask):
            got = _memo(
                [pid[ask], rank[ask], channel[ask], peer[ask], send[ask]],
                lambda p, r, ch, pe, s: port_of(host, p, r, ch, pe, "send" if s else "recv"),
            )
            for j, v in zip(ask.tolist(), got, strict=True):
                port[j] = v
        sums, seen = self.wait_sums()
        distinct = self._distinct_steps(idx[~o["steps_ok"][idx]])[idx]
        steps = np.where(o["steps_ok"][idx], o["steps"][idx], distinct)
        steps_ok = o["steps_ok"][idx] | (distinct > 0)
        first_qp, n_qps, net_dev = (a[idx] for a in self._qps())
        trans = o["trans_size"][idx]
        block: dict[str, pa.Array] = {
            "job": _constant(job, n),
            "communicator": self._communicators(c["comm_hash"][ci]),
            "rank": pa.array(rank, pa.int64()),
            "host": _constant(host, n),
            "device": fitted_array(dev, pa.int64()),
            "pid": pa.array(pid, pa.int64(), mask=~pid_ok),
            "collective": self.names.array(c["collective"][ci]),
            "seq": pa.array(c["seq"][ci], pa.int64(), mask=~c["seq_ok"][ci]),
            "channel": pa.array(channel, pa.int64()),
            "peer": pa.array(peer, pa.int64()),
            "direction": pa.array(np.where(send, "send", "recv"), _STR),
            "steps": pa.array(steps, pa.int64(), mask=~steps_ok),
            "bytes": pa.array(trans, pa.int64(), mask=~(o["trans_size_ok"][idx] & (trans != 0))),
            "duration_seconds": _floats(_span(o)[idx]),
            "port": fitted_array(port, _STR),
            "net_device": pa.array(net_dev, pa.int64(), mask=net_dev == np.iinfo(np.int64).min),
            "qp_num": pa.array(first_qp, pa.int64(), mask=n_qps == 0),
            "qps": pa.array(n_qps, pa.int64(), mask=n_qps == 0),
            "observed_us": _constant_int(observed_us, n),
        }
        for j, col in enumerate(_WAIT_COLUMNS):  # an op's own direction only
            mine = send if col.startswith("send_") else ~send
            block[col] = pa.array(sums[idx, j], pa.float64(), mask=~(seen[idx, j] & mine))
        rows.add_block(block)
        return n

    @staticmethod
    def _communicators(hashes: np.ndarray) -> pa.Array:
        """CommHash as the Inspector names a communicator (``0x%lx``), formatted once per hash."""
        uniq, inverse = np.unique(hashes, return_inverse=True)
        names = pa.array([f"0x{h:x}" for h in uniq.tolist()], _STR)
        return pa.DictionaryArray.from_arrays(pa.array(np.asarray(inverse).ravel().astype(np.int32)), names)

    def _distinct_steps(self, ops: np.ndarray) -> np.ndarray:
        """Per op (of ``ops``; 0 for the others): how many distinct step numbers its counted steps
        had (a missing one counts once)."""
        s = self.steps
        out = np.zeros(self.ops.n, np.int64)
        if not len(ops):
            return out
        wanted = np.zeros(self.ops.n, bool)
        wanted[ops] = True
        c = np.flatnonzero(s["counted"] & wanted[np.maximum(s["op"], 0)])
        if len(c):
            ok = s["step_ok"][c]
            key = np.stack([s["op"][c], ok.astype(np.int64), np.where(ok, s["step"][c], 0)], 1)
            np.add.at(out, np.unique(key, axis=0)[:, 0], 1)
        return out

    def _qps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per op: its first QP, how many distinct ones, and its NIC (the first device seen), from
        the QP events of its steps in file order; device -2**63 where none was seen."""
        n = self.ops.n
        first, count = np.zeros(n, np.int64), np.zeros(n, np.int64)
        device = np.full(n, np.iinfo(np.int64).min, np.int64)
        op, qp, qp_ok, dev, dev_ok = self._net_ops()
        if len(op):
            m = np.flatnonzero(qp_ok)
            if len(m):
                np.add.at(count, np.unique(np.stack([op[m], qp[m]], 1), axis=0)[:, 0], 1)
                uo, at = np.unique(op[m], return_index=True)  # first occurrence of each op
                first[uo] = qp[m][at]
            m = np.flatnonzero(dev_ok)
            if len(m):
                uo, at = np.unique(op[m], return_index=True)
                device[uo] = dev[m][at]
        return first, count, device


def _key_order(keys: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The order of (category, name, id kind, id) keys, each key's events in file order: one
    sort of packed integers when the codes are small and the ids whole numbers below 2**40."""
    ids = keys[:, 3]
    small = len(keys) and keys[:, :2].max() < 2**10 and np.all(np.abs(ids) < 2**40)
    if small and np.all(ids == np.trunc(ids)):
        packed = (
            (keys[:, 0].astype(np.int64) << 52)
            | (keys[:, 1].astype(np.int64) << 42)
            | (keys[:, 2].astype(np.int64) << 41)
            | (ids.astype(np.int64) + 2**40)
        )
        first = np.argsort(pos, kind="stable")  # carried begins (-1) first
        return first[np.argsort(packed[first], kind="stable")]
    return np.lexsort((pos, keys[:, 3], keys[:, 2], keys[:, 1], keys[:, 0]))


def _stop(ts: np.ndarray, close: np.ndarray, m: int) -> np.ndarray:
    return np.where(close < m, ts[np.minimum(close, max(m - 1, 0))] if m else np.nan, np.nan)


def _wait_index(state: str) -> int:
    col = WAIT_COLUMN.get(state.lower())
    return _WAIT_COLUMNS.index(col) if col is not None else -1


def _gpu_seconds(k: _Store) -> np.ndarray:
    """(stop - start) / 1e9 of each kernel whose GPU clocks are both set (non-zero) and ordered."""
    start, stop = k["start_gpu_ns"], k["stop_gpu_ns"]
    ok = k["start_gpu_ns_ok"] & k["stop_gpu_ns_ok"] & (start > 0) & (stop > 0) & (stop > start)
    diff = np.where(ok, stop - np.where(ok, start, 0), 0)
    return np.where(ok, diff.astype(np.float64) / 1e9, np.nan)


def _span(s: _Store) -> np.ndarray:
    start, stop = s["start_us"], s["stop_us"]
    with np.errstate(invalid="ignore"):
        return np.where(stop >= start, (stop - start) / 1e6, np.nan)


def _col(s: _Store, name: str, typ: pa.DataType) -> pa.Array:
    v = s[name]
    return fit_arrow(
        pa.array(v, pa.uint64() if v.dtype == np.uint64 else pa.int64(), mask=~s[f"{name}_ok"]), typ
    )


def _floats(v: np.ndarray) -> pa.Array:
    return pa.array(v, pa.float64(), mask=np.isnan(v))


def _constant(value: str | None, n: int) -> pa.Array:
    if value is None:
        return pa.nulls(n, _STR)
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value], _STR))


def _constant_int(value: int | None, n: int) -> pa.Array:
    if value is None or not -(2**63) <= value < 2**63:
        return pa.nulls(n, pa.int64())
    return pa.array(np.full(n, value, np.int64), pa.int64())


def _memo(keys: list[np.ndarray], call: Callable[..., Any]) -> list[Any]:
    """``call`` once per distinct key row, mapped back to every row (keys as Python values)."""
    rows = list(zip(*(k.tolist() for k in keys), strict=True))
    answers: dict[tuple[Any, ...], Any] = {}
    out = []
    for r in rows:
        if r not in answers:
            answers[r] = call(*r)
        out.append(answers[r])
    return out
