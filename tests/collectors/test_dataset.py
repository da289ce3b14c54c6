"""The Parquet dataset: hour partitions, one batch per poll on read, replay merge, pruning, rolling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graywire.collectors.dataset import DatasetWriter, hour_of, iter_polls, iter_replay, prune, write_links
from graywire.collectors.schemas import LINK, NCCL_TIMING, PORT_SAMPLE, TS, make_batch, record_kind

T0 = datetime(2026, 1, 5, 9, 59, 30, tzinfo=UTC)  # 30 s before an hour boundary


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ports(t: datetime, keys: list[str], value: int = 0) -> pa.RecordBatch:
    n = len(keys)
    return make_batch(
        PORT_SAMPLE,
        n,
        {
            "time": pa.array([t] * n, type=TS),
            "port": pa.array(keys).dictionary_encode(),
            "source": pa.array(["ufm"] * n).dictionary_encode(),
            "rx_bytes": pa.array([value] * n, type=pa.uint64()),
        },
    )


def nccl(t: datetime, ranks: int) -> pa.RecordBatch:
    return make_batch(
        NCCL_TIMING,
        ranks,
        {
            "time": pa.array([t] * ranks, type=TS),
            "job": pa.array(["j"] * ranks).dictionary_encode(),
            "communicator": pa.array(["j:world"] * ranks).dictionary_encode(),
            "rank": pa.array(range(ranks), type=pa.int32()),
            "collective": pa.DictionaryArray.from_arrays(
                pa.array([0] * ranks, type=pa.int8()), pa.array(["AllReduce"])
            ),
            "duration_seconds": pa.array([0.01] * ranks),
        },
    )


def files(root: Path, kind: str = "port_sample") -> list[str]:
    return sorted(str(p.relative_to(root / kind)) for p in (root / kind).rglob("*.parquet"))


def test_hour_of() -> None:
    assert hour_of(ports(at(29.9), ["a/1"])) == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert hour_of(ports(at(30), ["a/1"])) == datetime(2026, 1, 5, 10, tzinfo=UTC)


def test_writer_hive_hour_partitions(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path) as w:
        for k in range(6):  # 09:59:30 .. 10:00:20
            w.write(ports(at(10 * k), ["a/1", "b/1"], k))
        w.write(ports(at(20), [])[:0])  # empty batches are ignored
    assert sorted(p.name for p in (tmp_path / "port_sample").iterdir()) == [
        "hour=2026-01-05T09",
        "hour=2026-01-05T10",
    ]
    assert files(tmp_path) == [
        "hour=2026-01-05T09/part-20260105T095930000000-00001.parquet",
        "hour=2026-01-05T10/part-20260105T100000000000-00002.parquet",
    ]
    assert not list(tmp_path.rglob("*.tmp"))  # closed files are renamed into place
    t9 = pq.read_table(tmp_path / "port_sample" / "hour=2026-01-05T09")
    assert t9.column("rx_bytes").to_pylist() == [0, 0, 1, 1, 2, 2]


def test_open_file_is_not_visible_until_closed(tmp_path: Path) -> None:
    w = DatasetWriter(tmp_path)
    w.write(ports(at(0), ["a/1"]))
    assert files(tmp_path) == []
    assert list(iter_polls(tmp_path, "port_sample")) == []
    w.close()
    assert len(files(tmp_path)) == 1


def test_iter_polls_one_batch_per_poll_across_row_groups_and_files(tmp_path: Path) -> None:
    # Two sources report each poll separately; with row_group_rows=2 every write is its own row
    # group, so each poll is split over two row groups, and the run crosses an hour (two files).
    with DatasetWriter(tmp_path, row_group_rows=2) as w:
        for k in range(6):
            w.write(ports(at(10 * k), ["a/1", "b/1", "c/1"], k))
            w.write(ports(at(10 * k), ["d/1", "e/1"], 100 + k))
    assert len(files(tmp_path)) == 2
    assert [
        pq.ParquetFile(tmp_path / "port_sample" / f).metadata.num_row_groups for f in files(tmp_path)
    ] == [
        6,
        6,
    ]
    polls = list(iter_polls(tmp_path, "port_sample"))
    assert [b.column("time")[0].as_py() for b in polls] == [at(10 * k) for k in range(6)]
    for k, b in enumerate(polls):
        assert isinstance(b, pa.RecordBatch)
        assert record_kind(b.schema) == "port_sample"
        assert b.column("port").to_pylist() == ["a/1", "b/1", "c/1", "d/1", "e/1"]
        assert b.column("rx_bytes").to_pylist() == [k, k, k, 100 + k, 100 + k]
        assert len(set(b.column("time").to_pylist())) == 1


def test_iter_polls_merges_a_poll_split_over_files(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path, roll_seconds=0) as w:  # every write opens a new file
        w.write(ports(at(0), ["a/1"], 1))
        w.write(ports(at(0), ["b/1"], 2))
        w.write(ports(at(10), ["a/1"], 3))
    assert len(files(tmp_path)) == 3
    polls = [b.to_pydict() for b in iter_polls(tmp_path, "port_sample")]
    assert [(p["port"], p["rx_bytes"]) for p in polls] == [(["a/1", "b/1"], [1, 2]), (["a/1"], [3])]


def test_iter_polls_missing_kind_and_bad_file(tmp_path: Path) -> None:
    assert list(iter_polls(tmp_path, "port_sample")) == []
    part = tmp_path / "port_sample" / "hour=2026-01-05T09"
    part.mkdir(parents=True)
    (part / "part-x.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="unreadable Parquet file"):
        list(iter_polls(tmp_path, "port_sample"))


def test_iter_replay_merges_records_by_time(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path) as w:
        for k in range(4):
            w.write(ports(at(10 * k), ["a/1", "b/1"]))
        for k in (0, 1.5, 3):  # NCCL at 0 s, 15 s, 30 s
            w.write(nccl(at(10 * k), 3))
    seq = [(record_kind(b.schema), b.column("time")[0].as_py(), b.num_rows) for b in iter_replay(tmp_path)]
    assert seq == [
        ("port_sample", at(0), 2),
        ("nccl_timing", at(0), 3),  # port samples first at equal times
        ("port_sample", at(10), 2),
        ("nccl_timing", at(15), 3),
        ("port_sample", at(20), 2),
        ("port_sample", at(30), 2),
        ("nccl_timing", at(30), 3),
    ]
    only_nccl = list(iter_replay(tmp_path, kinds=("nccl_timing",)))
    assert len(only_nccl) == 3


def test_prune_removes_old_hours_only(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path) as w:
        for h in range(5):  # 08:00 .. 12:00
            t = datetime(2026, 1, 5, 8 + h, 15, tzinfo=UTC)
            w.write(ports(t, ["a/1"]))
            w.write(nccl(t, 1))
    write_links(tmp_path, pa.table({"a_port": ["a/1"], "b_port": ["b/1"], "source": ["x"]}, schema=LINK))
    now = datetime(2026, 1, 5, 12, 30, tzinfo=UTC)
    removed = prune(tmp_path, timedelta(hours=2), now=now)  # cutoff: 10:00
    assert sorted(str(p.relative_to(tmp_path)) for p in removed) == [
        "nccl_timing/hour=2026-01-05T08",
        "nccl_timing/hour=2026-01-05T09",
        "port_sample/hour=2026-01-05T08",
        "port_sample/hour=2026-01-05T09",
    ]
    assert sorted(p.name for p in (tmp_path / "port_sample").iterdir()) == [
        "hour=2026-01-05T10",
        "hour=2026-01-05T11",
        "hour=2026-01-05T12",
    ]
    assert (tmp_path / "link" / "links.parquet").exists()
    assert prune(tmp_path, timedelta(hours=2), now=now) == []
    assert [b.column("time")[0].as_py().hour for b in iter_polls(tmp_path, "port_sample")] == [10, 11, 12]


def test_prune_ignores_foreign_directories(tmp_path: Path) -> None:
    (tmp_path / "port_sample" / "hour=garbage").mkdir(parents=True)
    assert prune(tmp_path, timedelta(0), now=datetime(2030, 1, 1, tzinfo=UTC)) == []
    assert (tmp_path / "port_sample" / "hour=garbage").is_dir()


def test_roll_seconds_rolls_files(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path, roll_seconds=30) as w:
        for k in range(7):  # 09:59:30 .. 10:00:30; the hour boundary also rolls
            w.write(ports(at(10 * k), ["a/1"], k))
    assert files(tmp_path) == [
        "hour=2026-01-05T09/part-20260105T095930000000-00001.parquet",
        "hour=2026-01-05T10/part-20260105T100000000000-00002.parquet",
        "hour=2026-01-05T10/part-20260105T100030000000-00003.parquet",
    ]
    rows = [
        pq.read_table(tmp_path / "port_sample" / f).column("rx_bytes").to_pylist() for f in files(tmp_path)
    ]
    assert rows == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.column("rx_bytes")[0].as_py() for b in iter_polls(tmp_path, "port_sample")] == list(range(7))


def test_read_back_batches_carry_the_canonical_schema(tmp_path: Path) -> None:
    from graywire.collectors.schemas import with_counter_widths

    b = ports(at(0), ["a/1"], 7)
    narrow = pa.RecordBatch.from_arrays(b.columns, schema=with_counter_widths(PORT_SAMPLE, {"rx_bytes": 32}))
    with DatasetWriter(tmp_path) as w:
        w.write(narrow)
    (back,) = list(iter_polls(tmp_path, "port_sample"))
    assert back.schema.metadata[b"graywire.record"] == b"port_sample"
    assert back.schema.names == PORT_SAMPLE.names
    assert [f.type for f in back.schema] == [f.type for f in PORT_SAMPLE]
    assert back.column("rx_bytes").to_pylist() == [7]
    assert back.column("port").to_pylist() == ["a/1"]


def test_an_archive_written_before_a_column_existed_replays_with_it_null(tmp_path: Path) -> None:
    """An older nccl_timing file (no start_time) beside a new one: one stream, the old rows null."""
    from graywire.collectors.nccl.common import TimingRows

    def rows(t_us: int, start: int | None) -> pa.Table:
        r = TimingRows()
        r.add(job="j", communicator="c", rank=0, collective="AllReduce", duration_seconds=0.01,
              seq=1, observed_us=t_us, start_us=start)  # fmt: skip
        return pa.Table.from_batches([r.to_batch()])

    d = tmp_path / "nccl_timing" / "hour=2026-01-05T09"
    d.mkdir(parents=True)
    old = rows(1_767_603_600_000_000, None).drop_columns(["start_time"])
    pq.write_table(old, d / "a.parquet")
    pq.write_table(rows(1_767_603_610_000_000, 1_767_603_609_000_000), d / "b.parquet")
    polls = list(iter_polls(tmp_path, "nccl_timing"))
    assert [p.num_rows for p in polls] == [1, 1]
    assert polls[0].column("start_time").to_pylist() == [None]
    assert polls[1].column("start_time").to_pylist()[0] is not None
