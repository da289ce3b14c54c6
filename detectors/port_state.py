"""One port, whichever sources describe it: the last known state, speed, width and FEC mode.

Sources split a port. UFM REST says its state, speed and width and UFM Telemetry its counters,
with no speed; SNMP's ``ifHighSpeed`` or sysfs ``rate`` may come from one collector and
perfquery's counters from another. Judged apart, no counter row knows its bits per second: BER
over line-rate bits never counts, a rate's plausible maximum falls back to the unknown-speed
one, and the ports API shows a port of no state. :class:`PortStateBook` joins them per modelled
port before the rates stage:

- every ``port_sample`` row with a gauge (state, speed, width, FEC mode) teaches the book that
  value and when it was read, whichever source sent it;
- a row of counters whose gauge is null takes the book's value when it was read at most
  ``max_age_s`` from the row's time, before or after (UFM Telemetry dates its rows by its own
  sample, up to 30 s before REST's reading of the same poll): a fresh reading, not a guess. A
  row's own values always win;
- a row of gauges only (UFM REST) whose port also has a row of counters in the same poll, near
  enough in time to take its values, is folded into that row and dropped, so each port is one
  row; one with no such counter row (its telemetry not in yet) passes as it was.

Ports the fabric model does not know are left as they came; the service counts them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PORT_COUNTERS, PORT_SAMPLE, TS
from graywire.detectors.base import PortIndexer

#: The columns a port's description is made of, as ``port_sample`` types them.
STATE_COLUMNS: tuple[str, ...] = ("phys_state", "logical_state", "speed_bps", "width", "fec_mode")

#: A reading older than this is not carried into another source's rows (10 minutes: several
#: polls of the slowest source, far less than a port takes to be recabled).
MAX_AGE_S = 600.0


def has_counters(batch: pa.RecordBatch) -> bool:
    """Whether a ``port_sample`` batch carries any counter value (UFM REST carries none)."""
    n = batch.num_rows
    names = batch.schema.names
    return any(c in names and batch.column(c).null_count < n for c in PORT_COUNTERS)


class PortStateBook:
    """Per modelled port, each state column's last value and when it was read (µs since epoch)."""

    def __init__(self, fabric: Fabric, max_age_s: float = MAX_AGE_S) -> None:
        self.fabric = fabric
        self.max_age_us = int(max_age_s * 1e6)
        self.index = PortIndexer(fabric, slots=16)
        n = fabric.n_ports
        self.values = {c: np.zeros(n, dtype=_numpy_type(c)) for c in STATE_COLUMNS}
        self.read_at = {c: np.full(n, np.iinfo(np.int64).min, dtype=np.int64) for c in STATE_COLUMNS}

    def join(self, batches: Sequence[pa.RecordBatch]) -> list[pa.RecordBatch | None]:
        """One poll's ``port_sample`` batches, joined: learn from all, then fill and fold.

        Returns one entry per batch given, in order: a batch of counters with its gaps filled;
        a batch of gauges only without the rows a counter row took over (None when none remain).
        """
        indices = [self.index(b.column("port")) for b in batches]
        times = [_times(b) for b in batches]
        for b, idx, t in zip(batches, indices, times, strict=True):
            self._learn(b, idx, t)
        counted = [has_counters(b) for b in batches]
        # The time of each port's counter row this poll (none: the minimum int64).
        counter_at = np.full(self.fabric.n_ports, np.iinfo(np.int64).min, dtype=np.int64)
        for idx, t, c in zip(indices, times, counted, strict=True):
            if c:
                known = idx >= 0
                counter_at[idx[known]] = t[known]
        out: list[pa.RecordBatch | None] = []
        for b, idx, t, c in zip(batches, indices, times, counted, strict=True):
            if c:
                out.append(self._fill(b, idx, t))
                continue
            # Folded only where the counter row took this reading (within max_age of it).
            at = counter_at[np.maximum(idx, 0)]
            near = (at != np.iinfo(np.int64).min) & (np.abs(t - at) <= self.max_age_us)
            keep = ~((idx >= 0) & near)
            out.append(b if keep.all() else b.filter(pa.array(keep)) if keep.any() else None)
        return out

    def fill(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A batch of counters with the state it lacks filled from the book (nothing learned)."""
        return self._fill(batch, self.index(batch.column("port")), _times(batch))

    def _learn(self, batch: pa.RecordBatch, idx: np.ndarray, t: np.ndarray) -> None:
        names = batch.schema.names
        known = idx >= 0
        for c in STATE_COLUMNS:
            if c not in names:
                continue
            col = batch.column(c)
            if col.null_count == len(col):
                continue
            valid = known if col.null_count == 0 else known & col.is_valid().to_numpy(zero_copy_only=False)
            rows = np.flatnonzero(valid)
            if not rows.size:
                continue
            ports = idx[rows]
            # A later reading wins; rows of one batch name each port once.
            newer = t[rows] >= self.read_at[c][ports]
            ports, rows = ports[newer], rows[newer]
            values = col.fill_null(0).to_numpy(zero_copy_only=False)
            self.values[c][ports] = values[rows]
            self.read_at[c][ports] = t[rows]

    def _fill(self, batch: pa.RecordBatch, idx: np.ndarray, t: np.ndarray) -> pa.RecordBatch:
        names = batch.schema.names
        columns = list(batch.columns)
        changed = False
        known = idx >= 0
        safe = np.maximum(idx, 0)
        for c in STATE_COLUMNS:
            if c not in names:
                continue
            i = names.index(c)
            col = batch.column(i)
            if col.null_count == 0:
                continue
            have = col.is_valid().to_numpy(zero_copy_only=False)
            # Either way in time: UFM Telemetry stamps its rows with its own sample time, up to
            # its refresh (30 s) before the REST reading of the same poll.
            age = np.abs(t - self.read_at[c][safe])
            take = known & ~have & (age <= self.max_age_us)
            if not take.any():
                continue
            own = col.fill_null(0).to_numpy(zero_copy_only=False).astype(self.values[c].dtype)
            merged = np.where(take, self.values[c][safe], own)
            columns[i] = pa.array(merged, type=PORT_SAMPLE.field(c).type, mask=~(take | have))
            changed = True
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema) if changed else batch


def _numpy_type(column: str) -> type[np.generic]:
    return np.int64 if column == "speed_bps" else np.int16


def _times(batch: pa.RecordBatch) -> np.ndarray:
    """Each row's time in µs since the epoch."""
    time = batch.column("time")
    if time.type != TS:
        time = time.cast(TS)
    return time.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
