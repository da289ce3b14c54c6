"""Cumulative counters -> per-second rates: the first stage of every port detector.

Collectors keep counters cumulative (see ``graywire.collectors.schemas``); every detector wants rates.
Between two polls a counter can move forward (the normal case), *wrap* (SNMP Counter32 and
other narrow counters restart at zero after 2**bits - 1), *reset* (UFM or perfquery clears,
reboots, driver reloads), or *saturate* (legacy IB error counters stick at their maximum). A
rate computed naively across any of the last three is negative or absurd, and one absurd
rate is enough to page someone, so this stage decides per value which case it is and says
"unknown" (null) rather than guess.

State is a set of numpy arrays indexed by an internal port index; port keys are mapped to
indices with one vectorized hash lookup per new dictionary. There is no per-row Python code:
one call handles 500,000 ports.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.ib.counters import ERROR_COLUMNS
from graywire.collectors.schemas import (
    COUNTER_BITS_KEY,
    PORT_COUNTERS,
    PORT_SAMPLE,
    SATURATING_KEY,
    TS,
    null_array,
)

#: Gauges copied unchanged from the input, so one batch carries everything a detector needs.
GAUGES: tuple[str, ...] = (
    "source",
    "phys_state",
    "logical_state",
    "speed_bps",
    "width",
    "fec_mode",
    "temperature_celsius",
)

#: Fallback plausible maxima when a port's speed is unknown (2 Tb/s either way).
MAX_BYTES_PER_SECOND_UNKNOWN_SPEED = 2.5e11
MAX_BITS_PER_SECOND_UNKNOWN_SPEED = 2.0e12
#: Headroom over line rate before a rate counts as impossible (encoding, clock and poll jitter).
LINE_RATE_HEADROOM = 1.25
MAX_PACKETS_PER_SECOND = 5e9
#: A port cannot be paused for more than the wall time; 5% covers poll timing jitter.
MAX_PAUSE_SECONDS_PER_SECOND = 1.05
MAX_OTHER_PER_SECOND = 1e12

#: Without a source time, a busy port's counters standing still this long after its last real
#: sample are a repeated snapshot (unknown); longer, the port went idle (real zeros).
MAX_REPEAT_SECONDS = 120.0
_DICT_CACHE_SIZE = 16
#: Counters whose saturation is reported: the error counters, then xmit wait (congestion).
SATURATION_COLUMNS: tuple[str, ...] = (*ERROR_COLUMNS, "xmit_wait_ticks")
#: Bit i of ``saturated_counters`` is ``SATURATION_COLUMNS[i]`` read at its saturating maximum.
SATURATION_BITS: dict[str, int] = {c: 1 << i for i, c in enumerate(SATURATION_COLUMNS)}
#: Counters that always move on a live link: when every one of them, and every other counter,
#: reads exactly as before, the row is the source's previous snapshot served again.
_MOVING = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "phy_received_bits")
_TWO_31 = np.uint64(2**31)
_TWO_32 = np.uint64(2**32)


def default_max_rate(column: str) -> tuple[float, float]:
    """Plausible maximum rate of a counter as ``(per_bps, fallback)``.

    The limit for a row is ``per_bps * speed_bps`` when the port's speed is known and
    ``per_bps`` is non-zero, else ``fallback``. Data counters scale with the link: a byte rate
    fine on an 800G port is impossible on a 100G one, and that is how a wrap is told from a
    reset. ``*_bits`` (PHY received / FEC corrected bits) scale too, because a fixed 1e12 would
    null every valid rate on a 1.6T port.
    """
    if column.endswith("_bytes"):
        return LINE_RATE_HEADROOM / 8, MAX_BYTES_PER_SECOND_UNKNOWN_SPEED
    if column.endswith("_bits"):
        return LINE_RATE_HEADROOM, MAX_BITS_PER_SECOND_UNKNOWN_SPEED
    if column.endswith(("_packets", "_frames")):
        return 0.0, MAX_PACKETS_PER_SECOND
    if column.endswith("_seconds"):
        return 0.0, MAX_PAUSE_SECONDS_PER_SECOND
    return 0.0, MAX_OTHER_PER_SECOND


def rate_column(column: str) -> str:
    """Name of the rate column for a counter column."""
    return f"{column}_per_second"


def rates_schema(columns: Sequence[str] = PORT_COUNTERS) -> pa.Schema:
    """Schema of the batches :meth:`CounterRates.observe` returns (fixed, so batches concatenate)."""
    return pa.schema(
        [
            PORT_SAMPLE.field("time"),
            PORT_SAMPLE.field("port"),
            *(PORT_SAMPLE.field(g) for g in GAUGES),
            pa.field("interval_seconds", pa.float64()),
            pa.field("counter_reset", pa.bool_(), nullable=False),
            *(pa.field(rate_column(c), pa.float64()) for c in columns),
            pa.field("saturated_counters", pa.uint32(), nullable=False),
        ],
        metadata={"graywire.record": "port_rate", "graywire.version": "1"},
    )


def _validity(arr: pa.Array) -> np.ndarray | None:
    """Boolean validity of an array, or None when it has no nulls (the common case, no copy)."""
    if arr.null_count == 0:
        return None
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")[arr.offset :].view(bool)


def _values(arr: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    """The data buffer of a fixed-width array as numpy, zero-copy; null slots hold garbage."""
    want = pa.from_numpy_dtype(dtype)
    if arr.type != want:
        arr = arr.cast(want, safe=False)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))[arr.offset :]


def _float_array(values: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """A float64 Arrow array over ``values`` with nulls where ``valid`` is False (no copy)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    mask = None
    if valid is not None and not valid.all():
        mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.float64(), len(values), [mask, pa.py_buffer(values)])


def _parse_meta(schema: pa.Schema) -> tuple[dict[str, int], frozenset[str]]:
    meta = schema.metadata or {}
    bits: dict[str, int] = {}
    raw = meta.get(COUNTER_BITS_KEY)
    if raw:
        for col, b in json.loads(raw).items():
            if not isinstance(b, int) or not 1 <= b <= 64:
                raise ValueError(f"counter width for {col} must be an integer in 1..64, not {b!r}")
            bits[col] = b
    raw = meta.get(SATURATING_KEY)
    saturating = frozenset(json.loads(raw)) if raw else frozenset()
    return bits, saturating


class CounterRates:
    """Streaming conversion of ``port_sample`` batches into per-second rates.

    Rules, per port and counter (each vectorized over the batch):

    - null when the port has no previous sample, either value is null, or the interval is <= 0;
    - forward: ``(cur - prev) / dt``, the difference exact in uint64, times ``1 / dt``;
    - backward is a *wrap* only when the counter's width is declared (``COUNTER_BITS_KEY``), it
      does not saturate, and the previous value stood near the top of that width: within four
      intervals of the counter's own last rate (or 1/1024 of its range when no rate is known
      yet), and the wrapped rate is plausible (see :func:`default_max_rate`);
    - every other backward step is a *reset*: rate null, ``counter_reset`` true, and the new
      value is the baseline. An undeclared counter never wraps: a driver reload that takes a
      counter from 3e9 back to 0 is not a 32-bit wrap;
    - a reset of a traffic counter (bytes, packets, PHY bits) or of two counters of one row is
      the port's reset (a driver reload, a clear): every rate of the row is null, wraps and
      forward steps alike, since each was measured across the reset;
    - saturating counters (``SATURATING_KEY``, width declared) never wrap; a value stuck at
      ``2**bits - 1`` on both samples is null (unknown) and never a reset, while a rise up to the
      maximum is kept as a lower bound;
    - any rate above the plausible maximum is null (e.g. a device swapped under the same key).

    Ports missing from a batch keep their state, so their next rate covers the whole gap.
    """

    def __init__(
        self,
        columns: Sequence[str] = PORT_COUNTERS,
        max_rates: Mapping[str, float] | None = None,
    ) -> None:
        self.columns: tuple[str, ...] = tuple(columns)
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("counter columns must be unique")
        unknown = set(max_rates or {}) - set(self.columns)
        if unknown:
            raise ValueError(f"max_rates names columns not converted: {sorted(unknown)}")
        self._limits: dict[str, tuple[float, float]] = {c: default_max_rate(c) for c in self.columns}
        for col, limit in (max_rates or {}).items():
            self._limits[col] = (0.0, float(limit))
        self.schema = rates_schema(self.columns)
        self.reset_state()

    # -- state ------------------------------------------------------------------------------------
    def reset_state(self) -> None:
        """Forget every port (all next rates are null), as after a restart."""
        self._keys: pa.Array = pa.array([], type=pa.string())
        self._cap = 0
        self._time = np.zeros(0, dtype=np.int64)  # us since epoch of the previous sample
        self._seen = np.zeros(0, dtype=bool)
        self._speed = np.zeros(0, dtype=np.float64)  # previous speed_bps, 0 = unknown
        self._vals: dict[str, np.ndarray] = {}
        self._valid: dict[str, np.ndarray] = {}
        self._wide: dict[str, np.ndarray] = {}  # a declared-narrow column seen above its width
        #: A declared-narrow column's last rate (float32, NaN unknown): how near its top a wrap starts.
        self._pace: dict[str, np.ndarray] = {}
        self._moving = np.zeros(0, dtype=bool)  # the previous interval moved a traffic counter
        self._dict_cache: OrderedDict[tuple[int, ...], tuple[pa.Array, np.ndarray]] = OrderedDict()
        self._work: dict[tuple[int, np.dtype], np.ndarray] = {}

    @property
    def keys(self) -> pa.Array:
        """Port keys known so far, in internal index order."""
        return self._keys

    def _grow(self, n: int) -> None:
        if n <= self._cap:
            return
        cap = max(n, 2 * self._cap, 1024)

        def grown(a: np.ndarray) -> np.ndarray:
            out = np.zeros(cap, dtype=a.dtype)
            out[: len(a)] = a
            return out

        self._time, self._seen, self._speed = grown(self._time), grown(self._seen), grown(self._speed)
        self._moving = grown(self._moving)
        self._vals = {c: grown(a) for c, a in self._vals.items()}
        self._valid = {c: grown(a) for c, a in self._valid.items()}
        self._wide = {c: grown(a) for c, a in self._wide.items()}
        self._pace = {c: _grown_nan(a, cap) for c, a in self._pace.items()}
        self._cap = cap

    def _map_keys(self, keys: pa.Array) -> np.ndarray:
        """Internal indices for port keys, assigning new indices to keys never seen."""
        if keys.type != pa.string():
            keys = keys.cast(pa.string())
        if keys.null_count:
            raise ValueError("port keys must not be null")
        known = len(self._keys)
        if known:
            found = pc.index_in(keys, value_set=self._keys)
            pos = found.fill_null(-1).to_numpy().astype(np.intp)
            if not found.null_count:
                return pos
            missing = np.flatnonzero(pos < 0)
            fresh = keys.take(pa.array(missing))
        else:
            pos = np.empty(len(keys), dtype=np.intp)
            missing, fresh = slice(None), keys
        # One hash pass both dedupes the new keys and numbers them.
        enc = pc.dictionary_encode(fresh)
        pos[missing] = known + enc.indices.to_numpy().astype(np.intp)
        self._keys = pa.concat_arrays([self._keys, enc.dictionary])
        self._grow(len(self._keys))
        return pos

    def _indices(self, port: pa.Array) -> np.ndarray:
        """Internal index of each row's port.

        Collectors reuse one dictionary every poll, so the dictionary -> index mapping is cached
        by buffer identity; the cache holds the dictionary, so its memory cannot be reused by a
        different dictionary while the entry lives.
        """
        if not pa.types.is_dictionary(port.type):
            return self._map_keys(port)
        d = port.dictionary
        ident = (len(d), d.offset, *(b.address if b is not None else 0 for b in d.buffers()))
        hit = self._dict_cache.get(ident)
        if hit is None:
            hit = (d, self._map_keys(d))
            self._dict_cache[ident] = hit
            if len(self._dict_cache) > _DICT_CACHE_SIZE:
                self._dict_cache.popitem(last=False)
        else:
            self._dict_cache.move_to_end(ident)
        if port.null_count:
            raise ValueError("port keys must not be null")
        return hit[1][port.indices.to_numpy()]

    def _scratch(self, slot: int, dtype: type | np.dtype, n: int) -> np.ndarray:
        """A reused work array of ``n`` values: fresh memory per column per poll costs page
        faults that outweigh the arithmetic at fabric scale."""
        key = (slot, np.dtype(dtype))
        buf = self._work.get(key)
        if buf is None or buf.size < n:
            buf = self._work[key] = np.empty(max(n, 1024), dtype=dtype)
        return buf[:n]

    def _state(self, col: str, is_float: bool) -> tuple[np.ndarray, np.ndarray]:
        if col not in self._vals:
            self._vals[col] = np.zeros(self._cap, dtype=np.float64 if is_float else np.uint64)
            self._valid[col] = np.zeros(self._cap, dtype=bool)
        return self._vals[col], self._valid[col]

    # -- the stage --------------------------------------------------------------------------------
    def observe(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Rates for one poll's ``port_sample`` batch (any subset of ports, each at most once).

        A batch with no counter values at all (UFM REST: state and speed only) passes its
        gauges through and leaves every baseline alone, so the counters-only batch of the same
        poll (UFM Telemetry) still gets its rates.
        """
        n = batch.num_rows
        names = set(batch.schema.names)
        if n and not any(c in names and batch.column(c).null_count < n for c in self.columns):
            return self._gauges_only(batch)
        idx = self._indices(batch.column("port"))
        sel: slice | np.ndarray
        if n and idx[-1] - idx[0] == n - 1 and bool((np.diff(idx) == 1).all()):
            sel = slice(int(idx[0]), int(idx[0]) + n)  # the usual full poll: views, no gathers
        else:
            if n and int(np.bincount(idx).max()) > 1:
                dup = np.bincount(idx).argmax()
                raise ValueError(f"port {self._keys[int(dup)].as_py()} appears twice in one batch")
            sel = idx

        time = batch.column("time")
        if time.type != TS:
            time = time.cast(TS)
        t = time.cast(pa.int64()).to_numpy()
        timed = np.zeros(n, dtype=bool)
        if "source_time" in names and batch.column("source_time").null_count < n:
            # The source's own sample time: a scrape landing late on the same snapshot is not
            # a longer interval, and two scrapes of one snapshot are one sample.
            st = batch.column("source_time").cast(TS).cast(pa.int64())
            timed = st.is_valid().to_numpy(zero_copy_only=False)
            t = np.where(timed, st.fill_null(0).to_numpy(), t)
        seen = self._seen[sel].copy()
        # A repeat: the source's own time did not move; without one, a busy port whose every
        # counter stood still (scrapes landing on one snapshot) for at most MAX_REPEAT_SECONDS
        # since its last real sample. Longer than that it went idle: real zeros, not unknown.
        recent = (t - self._time[sel]) <= MAX_REPEAT_SECONDS * 1e6
        guessed = self._unchanged(batch, sel, names, ~timed & self._moving[sel] & recent)
        repeat = seen & np.where(timed, t == self._time[sel], guessed)
        dt = (t - self._time[sel]) / 1e6
        dt_ok = seen & (dt > 0) & ~repeat
        # 1/dt once per poll: a multiply per counter is several times cheaper than a divide.
        # Garbage rows are masked later; 1.0 avoids the division by zero.
        per_s = 1.0 / np.where(dt_ok, dt, 1.0)

        speed_arr = batch.column("speed_bps") if "speed_bps" in batch.schema.names else None
        if speed_arr is None or speed_arr.null_count == n:
            cur_speed = np.zeros(n)
        else:
            cur_speed = _values(speed_arr, np.int64).astype(np.float64)
            sv = _validity(speed_arr)
            if sv is not None:
                cur_speed[~sv] = 0.0
            np.maximum(cur_speed, 0.0, out=cur_speed)
        # The larger of the two speeds: a link that renegotiated down mid-interval still carried
        # traffic at the old speed for part of it.
        speed = np.maximum(cur_speed, self._speed[sel])
        limits: dict[tuple[float, float], np.ndarray | float] = {}

        bits, saturating = _parse_meta(batch.schema)
        reset = np.zeros(n, dtype=bool)
        sat_mask = np.zeros(n, dtype=np.uint32)
        judged: list[tuple[np.ndarray | None, np.ndarray | None]] = []
        port_reset = np.zeros(n, dtype=bool)
        #: Rows where a counter went back and did not wrap, per column (a sparse few).
        dropped: list[np.ndarray] = []
        drops_of_traffic: list[np.ndarray] = []
        for col in self.columns:
            key = self._limits[col]
            if key not in limits:
                per_bps, fallback = key
                limits[key] = np.where(speed > 0, speed * per_bps, fallback) if per_bps else fallback
            arr = batch.column(col) if col in names else None
            # Null slots hold garbage (possibly inf/NaN); they are masked, so their warnings are noise.
            with np.errstate(invalid="ignore", over="ignore"):
                rate, valid, stuck, back = self._column(
                    col, arr, sel, per_s, dt_ok, limits[key], bits.get(col), col in saturating
                )
            if stuck is not None and col in SATURATION_BITS:
                sat_mask[stuck] |= np.uint32(SATURATION_BITS[col])
            judged.append((rate, valid))
            if back.size:
                dropped.append(back)
                if col in _MOVING:
                    drops_of_traffic.append(back)
        if dropped:
            every = np.concatenate(dropped)
            reset[every] = True
            # The port's own reset: a traffic counter, or two counters, went back in one sample.
            if drops_of_traffic:
                port_reset[np.concatenate(drops_of_traffic)] = True
            port_reset |= np.bincount(every, minlength=n) >= 2
            gone = np.flatnonzero(port_reset)
            if gone.size:
                for _, valid in judged:
                    if valid is not None:
                        valid[gone] = False
        rates = [null_array(pa.float64(), n) if r is None else _float_array(r, v) for r, v in judged]

        moving = np.zeros(n, dtype=bool)
        for col, rate in zip(self.columns, rates, strict=True):
            if col in _MOVING and rate.null_count < n:
                moving |= rate.fill_null(0).to_numpy(zero_copy_only=False) > 0
        # A repeated snapshot keeps the baseline's time: the next real sample spans the gap.
        self._time[sel] = np.where(repeat, self._time[sel], t)
        # A reset says nothing of whether the port is busy: it keeps what the last interval said.
        self._moving[sel] = np.where(repeat | ~dt_ok | port_reset, self._moving[sel], moving)
        self._seen[sel] = True
        self._speed[sel] = cur_speed

        out: dict[str, pa.Array] = {"time": time, "port": batch.column("port")}
        for g in GAUGES:
            out[g] = batch.column(g) if g in names else null_array(self.schema.field(g).type, n)
        out["interval_seconds"] = _float_array(dt, seen & ~repeat)
        out["counter_reset"] = pa.array(reset)
        cols = [*out.values(), *rates, pa.array(sat_mask)]
        cols = [c if c.type == f.type else c.cast(f.type) for c, f in zip(cols, self.schema, strict=True)]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _gauges_only(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        names = set(batch.schema.names)
        time = batch.column("time")
        time = time if time.type == TS else time.cast(TS)
        out: dict[str, pa.Array] = {"time": time, "port": batch.column("port")}
        for g in GAUGES:
            out[g] = batch.column(g) if g in names else null_array(self.schema.field(g).type, n)
        out["interval_seconds"] = null_array(pa.float64(), n)
        out["counter_reset"] = pa.array(np.zeros(n, dtype=bool))
        cols = [
            *out.values(),
            *(null_array(pa.float64(), n) for _ in self.columns),
            pa.array(np.zeros(n, dtype=np.uint32)),
        ]
        cols = [c if c.type == f.type else c.cast(f.type) for c, f in zip(cols, self.schema, strict=True)]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _unchanged(
        self, batch: pa.RecordBatch, sel: slice | np.ndarray, names: set[str], rows: np.ndarray
    ) -> np.ndarray:
        """Of ``rows``, those whose every counter known before reads exactly as before (at least
        one compared). The traffic counters go first: a row they show moving is dropped at
        once, so a live poll compares one column and the rest only where it stood still."""
        n = batch.num_rows
        out = np.zeros(n, dtype=bool)
        cand = np.flatnonzero(rows)
        compared = np.zeros(cand.size, dtype=bool)
        for col in sorted(self.columns, key=lambda c: c not in _MOVING):
            if not cand.size:
                return out
            if col not in names or col not in self._vals:
                continue
            arr = batch.column(col)
            if arr.null_count == n:
                continue
            state = cand + sel.start if isinstance(sel, slice) else sel[cand]
            prev, pvalid = self._vals[col][state], self._valid[col][state]
            cur = _values(arr, np.float64 if prev.dtype.kind == "f" else np.uint64)[cand]
            cv = _validity(arr)
            both = pvalid if cv is None else pvalid & cv[cand]
            with np.errstate(invalid="ignore"):
                keep = ~both | (cur == prev)
            compared = (compared | both)[keep]
            cand = cand[keep]
        out[cand[compared]] = True
        return out

    def _column(
        self,
        col: str,
        arr: pa.Array | None,
        sel: slice | np.ndarray,
        per_s: np.ndarray,
        dt_ok: np.ndarray,
        limit: np.ndarray | float,
        bits: int | None,
        saturates: bool,
    ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray]:
        """Rate of one counter (values and validity; None when all null), the rows where it reads
        its saturating maximum, and the rows where it went back without wrapping (resets).

        Updates its state. A declared-narrow counter whose value exceeds its width is the wide
        counter under a legacy name: that port's column is taken as 64-bit from then on, so its
        rate is kept and its maximum is not saturation.
        """
        n = len(per_s)
        none = np.zeros(0, dtype=np.intp)
        if arr is None or arr.null_count == n:
            if col in self._valid:
                self._valid[col][sel] = False
            return None, None, None, none
        # The first batch that carries a column fixes its kind: float (pause seconds) or integer.
        known = self._vals.get(col)
        is_float = pa.types.is_floating(arr.type) if known is None else known.dtype.kind == "f"
        vals, valid = self._state(col, is_float)
        cur = _values(arr, np.float64 if is_float else np.uint64)
        cur_valid = _validity(arr)
        if is_float:
            finite = np.isfinite(cur)
            cur_valid = finite if cur_valid is None else cur_valid & finite
        prev = vals[sel]
        ok = np.logical_and(dt_ok, valid[sel], out=self._scratch(0, bool, n))
        if cur_valid is not None:
            ok &= cur_valid
        narrow = not is_float and bits is not None and bits < 64
        wraps = not is_float and not saturates and bits is not None
        wide: np.ndarray | None = None
        stuck_now: np.ndarray | None = None
        if narrow:
            assert bits is not None
            top = np.uint64(2**bits - 1)
            state = self._wide.setdefault(col, np.zeros(self._cap, dtype=bool))
            above = cur > top
            if cur_valid is not None:
                above &= cur_valid
            wide = state[sel] | above
            state[sel] = wide
            if saturates:
                stuck_now = cur >= top
                stuck_now &= ~wide
                if cur_valid is not None:
                    stuck_now &= cur_valid

        if not ok.any():  # first sight of these ports (or all nulls): nothing to judge, only store
            vals[sel] = cur
            valid[sel] = True if cur_valid is None else cur_valid
            return None, None, stuck_now, none

        # uint64 subtraction is exact where cur >= prev (and modulo 2**64 elsewhere, judged below).
        # Scratch arrays for what stays here; the rate is new, it leaves with the batch.
        diff = np.subtract(cur, prev, out=self._scratch(1, cur.dtype, n))
        rate = np.multiply(diff, per_s)  # the product casts to float64 in its one pass
        # NaN and absurd forward steps fail this test; so does every backward integer step
        # (modulo 2**64 it is absurd), and backward float steps fail the second.
        out_valid = np.less_equal(rate, limit, out=self._scratch(2, bool, n))
        if is_float:
            out_valid &= np.greater_equal(rate, 0.0, out=self._scratch(3, bool, n))
        out_valid &= ok
        # Every judged row valid (the usual poll): no backward step to look for.
        judged_all = np.count_nonzero(out_valid) == np.count_nonzero(ok)
        back = none if judged_all else np.flatnonzero(ok & (cur < prev))
        pace = self._pace.get(col) if wraps and bits is not None and bits < 64 else None
        if pace is None and wraps and bits is not None and bits < 64:
            pace = self._pace[col] = np.full(self._cap, np.nan, dtype=np.float32)
        if len(back):
            c, p = cur[back], prev[back]
            wrapped = np.zeros(len(back), dtype=bool)
            if wraps:
                assert bits is not None
                lim = limit[back] if isinstance(limit, np.ndarray) else limit
                span = np.uint64(2**bits % 2**64)
                to_top = (span - p).astype(np.float64)  # 2**64 - p for a 64-bit counter, exact mod 2**64
                wrap_rate = (c - p + span).astype(np.float64) * per_s[back]  # uint64 arithmetic, exact
                # Near the top: within four intervals at its own last pace (a counter standing
                # still far below the top did not cross it), or 1/1024 of its range.
                reach = float(2**bits) / 1024.0
                if pace is not None:
                    last = pace[sel][back].astype(np.float64)
                    reach = np.where(np.isfinite(last), np.maximum(reach, 4.0 * last / per_s[back]), reach)
                wrapped = (to_top <= reach) & (wrap_rate <= lim)
                if wide is not None:
                    wrapped &= ~wide[back]  # a 64-bit counter does not wrap: a drop is a clear
                rate[back] = wrap_rate
            stuck = np.zeros(len(back), dtype=bool)
            if saturates and narrow:
                stuck = c >= np.uint64(2**bits - 1)  # type: ignore[operator]  # never a reset
                if wide is not None:
                    stuck &= ~wide[back]
            out_valid[back] = wrapped
            back = back[~wrapped & ~stuck]
        if saturates and narrow:
            top = np.uint64(2**bits - 1)  # type: ignore[operator]
            stuck_both = (cur >= top) & (prev >= top)
            if wide is not None:
                stuck_both &= ~wide
            out_valid &= ~stuck_both  # stuck at the maximum: the rate is unknown (the count is not)
        if pace is not None:
            seen = pace[sel]
            pace[sel] = np.where(out_valid, rate, seen)

        vals[sel] = cur
        valid[sel] = True if cur_valid is None else cur_valid
        return rate, out_valid.copy(), stuck_now, back


def _grown_nan(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.full(cap, np.nan, dtype=a.dtype)
    out[: len(a)] = a
    return out
