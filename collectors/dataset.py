"""The on-disk form of canonical records: a Parquet dataset, hive-partitioned by hour.

``<root>/<record>/hour=YYYY-MM-DDTHH/part-<first time>-<n>.parquet``. ``graywire sim`` writes
it, the service archives what it ingests in it, and ``graywire replay`` reads either one, so a
simulation and live history are the same thing to the detectors.
"""

from __future__ import annotations

import heapq
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graywire.collectors.schemas import SCHEMAS, RecordKind, record_kind

HOUR_FMT = "%Y-%m-%dT%H"
#: A file the writer has open has this name until it is closed: Parquet keeps its index at the
#: end, so the file is unreadable until then, and readers skip it.
OPEN_SUFFIX = ".parquet.tmp"


def hour_of(batch: pa.RecordBatch) -> datetime:
    """The hour partition of a batch (batches hold one poll, so one time)."""
    t = batch.column("time")[0].as_py()
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


@dataclass
class _OpenFile:
    hour: datetime
    path: Path
    writer: pq.ParquetWriter
    opened: datetime
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_rows: int = 0


class DatasetWriter:
    """Appends canonical batches; one open file per record, rolled by hour or age.

    A file is only readable once closed (Parquet keeps its index at the end), so a live
    archive rolls files every ``roll_seconds`` of data time; a simulation rolls by hour.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        row_group_rows: int = 1_000_000,
        roll_seconds: float | None = None,
        compression: str = "zstd",
    ) -> None:
        self.root = Path(root)
        self.row_group_rows = row_group_rows
        self.roll_seconds = roll_seconds
        self.compression = compression
        self._open: dict[str, _OpenFile] = {}
        self._seq = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        kind = record_kind(batch.schema)
        schema = SCHEMAS[kind]
        batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
        hour = hour_of(batch)
        t = batch.column("time")[0].as_py()
        f = self._open.get(kind)
        if f is not None and (
            f.hour != hour
            or (self.roll_seconds is not None and (t - f.opened).total_seconds() >= self.roll_seconds)
        ):
            self._close(kind)
            f = None
        if f is None:
            part = self.root / kind / f"hour={hour.strftime(HOUR_FMT)}"
            part.mkdir(parents=True, exist_ok=True)
            self._seq += 1
            path = part / f"part-{t.strftime('%Y%m%dT%H%M%S%f')}-{self._seq:05d}.parquet"
            tmp = path.with_suffix(OPEN_SUFFIX)
            # Dictionary-encode only the key columns: counters are high-cardinality, and trying
            # a dictionary on them first costs a third of the write time for nothing.
            dict_cols = [f.name for f in schema if pa.types.is_dictionary(f.type)]
            writer = pq.ParquetWriter(tmp, schema, compression=self.compression, use_dictionary=dict_cols)
            f = self._open[kind] = _OpenFile(hour, path, writer, t)
        f.pending.append(batch)
        f.pending_rows += batch.num_rows
        if f.pending_rows >= self.row_group_rows:
            self._flush(f)

    def _flush(self, f: _OpenFile) -> None:
        if f.pending:
            f.writer.write_table(pa.Table.from_batches(f.pending), row_group_size=max(f.pending_rows, 1))
            f.pending.clear()
            f.pending_rows = 0

    def _close(self, kind: str) -> None:
        f = self._open.pop(kind)
        self._flush(f)
        f.writer.close()
        f.path.with_suffix(OPEN_SUFFIX).rename(f.path)

    def close(self) -> None:
        for kind in list(self._open):
            self._close(kind)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_links(root: str | Path, table: pa.Table) -> None:
    path = Path(root) / "link"
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / "links.parquet")


def _files(root: Path, kind: str) -> list[Path]:
    base = root / kind
    if not base.is_dir():
        return []
    return sorted(p for d in sorted(base.glob("hour=*")) for p in d.glob("*.parquet"))


def open_files(root: str | Path) -> list[Path]:
    """Files a writer still has open under ``root`` (a live archive), which readers skip."""
    return sorted(Path(root).glob(f"*/hour=*/*{OPEN_SUFFIX}"))


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    if table.column(0).num_chunks != 1:
        table = table.combine_chunks()
    return table.to_batches()[0]


def _as_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A table written by an older (or newer) graywire in today's record schema: columns added
    since are null, columns since removed are dropped, so archives replay across upgrades."""
    if table.schema.remove_metadata() == schema.remove_metadata():
        return table
    cols = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            cols.append(col if col.type == f.type else col.cast(f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    meta = {**(schema.metadata or {}), **(table.schema.metadata or {})}
    return pa.Table.from_arrays(cols, schema=schema.with_metadata(meta))


def iter_polls(root: str | Path, kind: str) -> Iterator[pa.RecordBatch]:
    """Yield one batch per poll time, in time order, streaming (never the whole dataset).

    Reads a row group at a time and slices it (zero-copy); the writer never splits a poll
    across row groups, but a poll that does span two is still joined.
    """
    carry: pa.Table | None = None
    for path in _files(Path(root), kind):
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as e:
            raise ValueError(f"{path}: unreadable Parquet file: {e}") from e
        for rg in range(pf.num_row_groups):
            table = _as_schema(pf.read_row_group(rg), SCHEMAS[kind])
            if table.num_rows == 0:
                continue
            if carry is not None:
                table = pa.concat_tables([carry, table])
                carry = None
            times = table.column("time").cast(pa.int64()).to_numpy()
            cuts = np.flatnonzero(np.diff(times)) + 1
            starts = np.concatenate(([0], cuts))
            ends = np.concatenate((cuts, [len(times)]))
            for s, e in zip(starts[:-1], ends[:-1], strict=True):
                yield _one_batch(table.slice(s, e - s))
            carry = table.slice(starts[-1], ends[-1] - starts[-1])
    if carry is not None and carry.num_rows:
        yield _one_batch(carry)


def iter_replay(
    root: str | Path,
    kinds: tuple[str, ...] = (
        RecordKind.PORT_SAMPLE,
        RecordKind.NCCL_TIMING,
        RecordKind.NCCL_TRANSPORT,
        RecordKind.NCCL_PROXY,
        RecordKind.NCCL_INIT,
    ),
) -> Iterator[pa.RecordBatch]:
    """Merge several records' polls in time order (at equal times in the order of ``kinds``)."""
    streams = [
        ((b.column("time")[0].as_py(), i, b) for b in iter_polls(root, kind)) for i, kind in enumerate(kinds)
    ]
    for _, _, batch in heapq.merge(*streams, key=lambda x: (x[0], x[1])):
        yield batch


def prune(root: str | Path, keep: timedelta, now: datetime | None = None) -> list[Path]:
    """Delete hour partitions older than ``keep``; returns what was removed."""
    now = now or datetime.now(UTC)
    cutoff = (now - keep).replace(minute=0, second=0, microsecond=0)
    removed = []
    for d in Path(root).glob("*/hour=*"):
        try:
            hour = datetime.strptime(d.name.removeprefix("hour="), HOUR_FMT).replace(tzinfo=UTC)
        except ValueError:
            continue
        if hour < cutoff:
            shutil.rmtree(d)
            removed.append(d)
    return removed
