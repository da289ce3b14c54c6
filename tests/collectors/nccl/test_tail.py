"""Tailing a job's directory (partial lines, new files, rotation, truncation), the collector."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from graywire.collectors.base import ScrapeResult
from graywire.collectors.nccl import NcclFileCollector, NcclSourceConfig, build_collectors
from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.inspector import InspectorParser
from graywire.collectors.nccl.tail import DirectoryTailer, job_from_path
from graywire.collectors.schemas import NCCL_PROXY, NCCL_TIMING

NCCL = Path("nccl")


def lines_of(chunks: list) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for c in chunks:
        out.setdefault(c.file.path.name, []).extend(c.lines)
    return out


def test_partial_lines_wait_for_their_newline(tmp_path: Path) -> None:
    f = tmp_path / "a.log"
    f.write_bytes(b'{"x": 1}\n{"x": ')
    t = DirectoryTailer(tmp_path, "*.log")
    assert lines_of(t.poll()) == {"a.log": [b'{"x": 1}']}
    assert t.poll() == []  # still no newline
    with f.open("ab") as fh:
        fh.write(b"2}\r\n{")
    (chunk,) = t.poll()
    assert (chunk.lines, chunk.first_line, chunk.reset) == ([b'{"x": 2}'], 2, False)
    with f.open("ab") as fh:
        fh.write(b'"x": 3}\n')
    assert lines_of(t.poll()) == {"a.log": [b'{"x": 3}']}


def test_a_chunk_holds_the_bytes_read_and_costs_what_its_lines_do(tmp_path: Path) -> None:
    """Parsers that read whole buffers take the bytes as read; the lines (and the poll budget)
    are still those without carriage returns."""
    (tmp_path / "a.log").write_bytes(b'{"x": 1}\r\n\r\n{"x": 2}\n{"x": 3}\n')
    (tmp_path / "b.log").write_bytes(b"one\ntwo\n")
    t = DirectoryTailer(tmp_path, "*.log", max_bytes_per_poll=4096)
    a, b = t.poll()
    assert a.data == b'{"x": 1}\r\n\r\n{"x": 2}\n{"x": 3}'
    assert a.lines == [b'{"x": 1}', b"", b'{"x": 2}', b'{"x": 3}'] and a.size == sum(
        len(x) + 1 for x in a.lines
    )
    assert (b.data, b.lines, b.size, b.first_line) == (b"one\ntwo", [b"one", b"two"], 8, 1)
    assert t.files[next(iter(t.files))].line_no == 4


def test_new_files_are_picked_up_and_deleted_ones_forgotten(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("1\n")
    t = DirectoryTailer(tmp_path, "*.log")
    assert lines_of(t.poll()) == {"a.log": [b"1"]}
    (tmp_path / "b.log").write_text("2\n")
    (tmp_path / "ignored.txt").write_text("3\n")
    assert lines_of(t.poll()) == {"b.log": [b"2"]}
    (tmp_path / "a.log").unlink()
    t.poll()
    assert sorted(tf.path.name for tf in t.files.values()) == ["b.log"]


def test_truncation_restarts_the_file_and_its_parser(tmp_path: Path) -> None:
    f = tmp_path / "a.log"
    f.write_text("one\ntwo\n")
    states = iter(range(100))
    t = DirectoryTailer(tmp_path, "*.log", new_state=lambda _p: next(states))
    (c,) = t.poll()
    assert c.file.state == 0
    f.write_text("x\n")  # truncated in place (copytruncate), smaller than the old offset
    (c,) = t.poll()
    assert (c.lines, c.reset, c.first_line, c.file.state) == ([b"x"], True, 1, 1)
    # Truncated and regrown past the old offset between two polls: the first bytes changed.
    f.write_text("y" * 40 + "\n" + "z\n")
    (c,) = t.poll()
    assert (c.lines, c.reset, c.file.state) == ([b"y" * 40, b"z"], True, 2)
    assert t.resets == 2


def test_rotation_by_rename_keeps_reading_both_files(tmp_path: Path) -> None:
    f = tmp_path / "a.log"
    f.write_text("1\n2\n")
    t = DirectoryTailer(tmp_path, "a.log*")
    t.poll()
    with f.open("a") as fh:
        fh.write("3\n")
    os.rename(f, tmp_path / "a.log.1")  # rotated before the collector saw line 3
    f.write_text("new-1\n")
    got = lines_of(t.poll())
    assert got == {"a.log": [b"new-1"], "a.log.1": [b"3"]}


def test_over_long_lines_are_dropped(tmp_path: Path) -> None:
    f = tmp_path / "a.log"
    f.write_bytes(b"x" * 100)
    t = DirectoryTailer(tmp_path, "*.log", max_line_bytes=64)
    assert t.poll() == []
    with f.open("ab") as fh:
        fh.write(b"x" * 10 + b"\nok\n")
    assert lines_of(t.poll()) == {"a.log": [b"ok"]}
    assert t.dropped_lines == 1


def test_start_at_end_skips_existing_content(tmp_path: Path) -> None:
    f = tmp_path / "a.log"
    f.write_text("old\nold-partial")
    t = DirectoryTailer(tmp_path, "*.log", start_at="end")
    assert t.poll() == []
    with f.open("a") as fh:
        fh.write("-done\nnew\n")
    assert lines_of(t.poll()) == {"a.log": [b"old-partial-done", b"new"]}


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        DirectoryTailer(tmp_path / "nope", "*").poll()


def test_job_from_path(tmp_path: Path) -> None:
    assert job_from_path(tmp_path / "nccl-inspector-48213" / "h-pid1.log", tmp_path) == "48213"
    assert job_from_path(tmp_path / "job-000" / "h-pid1.log", tmp_path) == "job-000"


# -- the collector ---------------------------------------------------------------------------------


def inspector_line(real_fixtures: Path, **overrides: object) -> str:
    rec = json.loads(
        (real_fixtures / NCCL / "nccl_inspector_readme_coll_perf_verbose_example.json").read_text()
    )
    rec["coll_perf"].update(overrides)
    return json.dumps(rec, separators=(",", ":"))


def test_collector_returns_rows_appended_since_the_last_scrape(tmp_path: Path, real_fixtures: Path) -> None:
    job = tmp_path / "nccl-inspector-777"
    job.mkdir()
    f = job / "example-hostname-pid438776.log"
    line = inspector_line(real_fixtures)
    f.write_text(line + "\n" + line[:50])  # a dump being written
    col = NcclFileCollector(tmp_path, "*/*-pid*.log")
    res = asyncio.run(col.scrape())
    assert isinstance(res, ScrapeResult) and res.ok and res.error is None
    (batch,) = res.batches
    assert batch.schema == NCCL_TIMING
    assert batch.column("job").to_pylist() == ["777", "777"]
    assert batch.column("channel").to_pylist() == [None, 0]
    assert asyncio.run(col.scrape()).batches == ()  # nothing new
    with f.open("a") as fh:
        fh.write(line[50:] + "\nnot json\n" + inspector_line(real_fixtures, coll_sn=1300) + "\n")
    res = asyncio.run(col.scrape())
    assert res.ok
    (batch,) = res.batches
    assert batch.column("seq").to_pylist() == [1231, 1231, 1300, 1300]
    assert col.skipped_lines == 1
    assert res.error is not None and "example-hostname-pid438776.log line 3: not JSON" in res.error
    assert col.rows_total == 6
    assert res.target == str(tmp_path / "*/*-pid*.log")


def test_a_directory_taken_over_from_another_reader_yields_only_new_records(
    tmp_path: Path, real_fixtures: Path
) -> None:
    """A replica whose share grew reads what the files gain from now on; the rows already there
    reached the leader through the replica that read them."""
    job = tmp_path / "nccl-inspector-777"
    job.mkdir()
    f = job / "example-hostname-pid438776.log"
    f.write_text(inspector_line(real_fixtures) + "\n")
    col = NcclFileCollector(tmp_path, "*/*-pid*.log")
    col.skip_existing()
    assert asyncio.run(col.scrape()).batches == ()
    with f.open("a") as fh:
        fh.write(inspector_line(real_fixtures, coll_sn=1300) + "\n")
    (batch,) = asyncio.run(col.scrape()).batches
    assert batch.column("seq").to_pylist() == [1300, 1300]


def test_v43_dump_context_survives_a_dump_split_across_scrapes(tmp_path: Path, real_fixtures: Path) -> None:
    rec = json.loads(inspector_line(real_fixtures))
    marker = {"header": rec["header"], "metadata": rec["metadata"], "dump_stats": {"coll_records": 1}}
    f = tmp_path / "example-hostname-pid438776.log"
    f.write_text(json.dumps(marker) + "\n" + json.dumps({"coll_perf": rec["coll_perf"]})[:40])
    col = NcclFileCollector(tmp_path, job="j")
    assert col.collect() is None  # the marker alone has no rows; the record is not complete yet
    with f.open("a") as fh:
        fh.write(json.dumps({"coll_perf": rec["coll_perf"]})[40:] + "\n")
    batch = col.collect()
    assert batch is not None
    assert batch.column("communicator").to_pylist() == ["0xe62dedaa97644a"] * 2
    assert batch.column("host").to_pylist() == ["example-hostname"] * 2
    assert col.skipped_lines == 0


def test_collector_failures_are_results_not_exceptions(tmp_path: Path) -> None:
    res = asyncio.run(NcclFileCollector(tmp_path / "gone").scrape())
    assert (res.ok, res.source) == (False, "nccl")
    assert res.error == f"FileNotFoundError: directory {tmp_path / 'gone'} does not exist"
    col = NcclFileCollector(tmp_path)
    with col._busy:  # a timed-out scrape still reading in its thread
        res = asyncio.run(col.scrape())
    assert res.error == "RuntimeError: the previous scrape of this directory is still reading"
    assert asyncio.run(col.scrape()).ok
    with pytest.raises(ValueError, match="unknown NCCL format"):
        NcclFileCollector(tmp_path, format="xml")  # type: ignore[arg-type]


def test_collector_reads_nccl_tests_output_as_it_grows(tmp_path: Path, real_fixtures: Path) -> None:
    lines = (
        (real_fixtures / NCCL / "superbench_nccl_tests_alltoall.log").read_text().splitlines(keepends=True)
    )
    f = tmp_path / "nccl_tests_alltoall.log"
    f.write_text("".join(lines[:20]))
    col = NcclFileCollector(tmp_path, format="nccl_tests", job="bench")
    first = col.collect()
    assert first is not None and first.num_rows == 5
    f.write_text("".join(lines))
    second = col.collect()
    assert second is not None and second.num_rows == 29
    assert second.column("collective").to_pylist()[-1] == "AllToAll"
    assert second.column("seq").to_pylist()[-1] == 33
    assert second.column("duration_seconds").to_pylist()[-1] == pytest.approx(0.033508)
    assert second.column("communicator").to_pylist()[0] == "nccl_tests_alltoall"
    assert second.column("time")[0].value == int(f.stat().st_mtime * 1e6)  # output files carry no clock


def test_collector_reads_profiler_traces(tmp_path: Path, real_fixtures: Path) -> None:
    shutil.copy(
        real_fixtures / NCCL / "nccl_profiler_example_readme_trace.txt", tmp_path / "prof-gpu-0007-31.txt"
    )
    col = NcclFileCollector(tmp_path, "*.txt", format="profiler", job="j")
    batch = col.collect()
    assert batch is not None
    (row,) = batch.to_pylist()
    assert (row["host"], row["channel"], row["communicator"]) == ("gpu-0007", 0, "0x14ba61f9a096f33f")
    assert row["duration_seconds"] == pytest.approx(0.008159232)
    proxy = col.collect_proxy()
    assert proxy is not None and proxy.schema == NCCL_PROXY
    assert [(r["direction"], r["peer"], r["host"]) for r in proxy.to_pylist()] == [
        ("recv", 1, "gpu-0007"), ("send", 1, "gpu-0007"),
    ]  # fmt: skip
    assert col.collect() is None and col.collect_proxy() is None


# -- configuration --------------------------------------------------------------------------------


def test_config_and_build_collectors(tmp_path: Path) -> None:
    cfg = NcclSourceConfig.model_validate(
        {"type": "nccl", "directory": str(tmp_path), "debug_pattern": "nccl.*", "gpus_per_host": 8}
    )
    (col,) = build_collectors(cfg, None)
    assert isinstance(col, NcclFileCollector)
    assert (col.source, col.pattern, col.format, col.gpus_per_host) == ("nccl", "*-pid*.log", "inspector", 8)
    assert col.topology is not None
    tests = NcclSourceConfig(directory=tmp_path, format="nccl_tests", placement="in_place")
    (col,) = build_collectors(tests)
    assert (col.pattern, col.placement) == ("*.log", "in_place")
    with pytest.raises(ValidationError):
        NcclSourceConfig.model_validate({"type": "nccl", "directory": str(tmp_path), "format": "csv"})
    with pytest.raises(ValidationError):
        NcclSourceConfig.model_validate({"type": "nccl", "directory": str(tmp_path), "bogus": 1})


def test_an_absurd_number_skips_its_line_and_keeps_the_rows_around_it(
    tmp_path: Path, real_fixtures: Path
) -> None:
    """A 400-digit duration between two good records is one skipped line, not a failed scrape
    that loses its neighbours (the offsets have moved past them by then)."""
    f = tmp_path / "example-hostname-pid438776.log"
    bad = inspector_line(real_fixtures, coll_sn=2, coll_exec_time_us=10**400)
    huge_rank = json.loads(inspector_line(real_fixtures, coll_sn=3))
    huge_rank["header"]["rank"] = 2**70
    f.write_text("\n".join([inspector_line(real_fixtures, coll_sn=1), bad, json.dumps(huge_rank),
                            inspector_line(real_fixtures, coll_sn=4)]) + "\n")  # fmt: skip
    col = NcclFileCollector(tmp_path, job="j")
    res = asyncio.run(col.scrape())
    assert res.ok
    (batch,) = res.batches
    assert sorted(set(batch.column("seq").to_pylist())) == [1, 4]
    assert col.skipped_lines == 2 and res.skipped == {"malformed_line": 2}
    assert "is not a duration" in (res.error or "") and len(res.error or "") < 1000


def test_a_parse_that_raises_keeps_its_files_offset_and_loses_no_row(
    tmp_path: Path, real_fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tailer moves a file's offset when it hands out lines, before they are parsed. A
    parser that raises on one file (a bug, a file gone between two reads) used to fail the
    scrape after every file's offset had moved: the rows of both files were never delivered
    and never read again. Now the other file's rows are delivered and the failing file's
    lines are read again by the next scrape."""
    (tmp_path / "a-pid1.log").write_text(inspector_line(real_fixtures, coll_sn=1) + "\n")
    (tmp_path / "b-pid2.log").write_text(inspector_line(real_fixtures, coll_sn=2) + "\n")
    col = NcclFileCollector(tmp_path, job="j")
    feed, failures = InspectorParser.feed_data, [1]

    def flaky(self: InspectorParser, data: bytes, rows: TimingRows, prefix: str = "", first: int = 1) -> None:
        feed(self, data, rows, prefix, first)
        if prefix.startswith("a-pid1") and failures:
            failures.pop()
            raise RuntimeError("parser bug")

    monkeypatch.setattr(InspectorParser, "feed_data", flaky)
    res = asyncio.run(col.scrape())
    assert res.ok and "parser bug" in (res.error or "")
    assert set(res.batches[0].column("seq").to_pylist()) == {2}
    res = asyncio.run(col.scrape())
    assert set(res.batches[0].column("seq").to_pylist()) == {1}
    assert asyncio.run(col.scrape()).batches == ()  # and only once


def test_a_batch_that_cannot_be_built_keeps_every_offset(
    tmp_path: Path, real_fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-pid1.log").write_text(inspector_line(real_fixtures, coll_sn=1) + "\n")
    (tmp_path / "b-pid2.log").write_text(inspector_line(real_fixtures, coll_sn=2) + "\n")
    col = NcclFileCollector(tmp_path, job="j")
    build, failures = TimingRows.to_batch, [1]

    def flaky(self: TimingRows, time: datetime | None = None) -> pa.RecordBatch:
        if failures:
            failures.pop()
            raise RuntimeError("batch bug")
        return build(self, time)

    monkeypatch.setattr(TimingRows, "to_batch", flaky)
    assert not asyncio.run(col.scrape()).ok
    res = asyncio.run(col.scrape())
    assert res.ok and set(res.batches[0].column("seq").to_pylist()) == {1, 2}


_T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _init_lines(host: str, pid: int, ptr: str, rank: int, nranks: int, comm_id: str) -> str:
    """One rank's Init START and COMPLETE, as NCCL 2.28 prints them (src/init.cc)."""
    head = f"{host}:{pid}:{pid} [{rank % 8}] NCCL INFO ncclCommInitRankConfig comm {ptr} rank {rank}"
    head += f" nranks {nranks}"
    tail = f"cudaDev {rank % 8} nvmlDev {rank % 8} busId 1{rank % 8}000 commId {comm_id}"
    return f"{head} {tail} - Init START\n{head} {tail} - Init COMPLETE\n"


def test_jobs_sharing_one_debug_directory_are_told_apart_by_their_communicators(tmp_path: Path) -> None:
    """Many jobs write NCCL_DEBUG_FILE=nccl.%h.%p into one directory: the job is not the
    directory. Processes that share a communicator are one job; a split joins its parent's."""
    shared = tmp_path / "nccl"
    shared.mkdir()
    for rank, host in enumerate(["gpu-1", "gpu-2"]):
        (shared / f"nccl.{host}.{100 + rank}").write_text(
            _init_lines(host, 100 + rank, "0xa1", rank, 2, "0xaaaa")
        )
    for rank, host in enumerate(["gpu-3", "gpu-4"]):
        text = _init_lines(host, 200 + rank, "0xb1", rank, 2, "0xbbbb")
        text += (  # the job then splits its world communicator
            f"{host}:{200 + rank}:{200 + rank} [0] NCCL INFO ncclCommSplit comm 0xb2 rank {rank} nranks 2 "
            f"cudaDev 0 nvmlDev 0 busId 1000 parent 0xb1 splitCount 1 color 7 key {rank}- Init START\n"
        )
        (shared / f"nccl.{host}.{200 + rank}").write_text(text)
    collector = NcclFileCollector(shared, debug_pattern="nccl.*", clock=lambda: _T0)
    collector.collect()
    batch = collector.collect_init()
    assert batch is not None
    jobs = dict(zip(batch.column("communicator").cast("string").to_pylist(),
                    batch.column("job").cast("string").to_pylist(), strict=True))  # fmt: skip
    assert jobs == {"0xaaaa": "nccl/0xaaaa", "0xbbbb": "nccl/0xbbbb", "0xbbbb/split1/color7": "nccl/0xbbbb"}
    assert collector._jobs() == {
        ("gpu-1", 100): "nccl/0xaaaa",
        ("gpu-2", 101): "nccl/0xaaaa",
        ("gpu-3", 200): "nccl/0xbbbb",
        ("gpu-4", 201): "nccl/0xbbbb",
    }


def test_a_job_regex_names_the_job_its_file_name_carries(tmp_path: Path) -> None:
    """NCCL_DEBUG_FILE=nccl.${SLURM_JOB_ID}.%h.%p: ``job_regex`` reads the Slurm job off the name."""
    shared = tmp_path / "logs"
    shared.mkdir()
    (shared / "nccl.481206.gpu-1.100").write_text(_init_lines("gpu-1", 100, "0xa1", 0, 1, "0xaaaa"))
    collector = NcclFileCollector(
        shared, debug_pattern="nccl.*", clock=lambda: _T0, job_regex=r"^nccl\.(?P<job>\d+)\."
    )
    collector.collect()
    assert collector._jobs() == {("gpu-1", 100): "481206"}
    with pytest.raises(ValidationError, match="job_regex needs a"):
        NcclSourceConfig(directory=shared, job_regex=r"nccl\.(\d+)")
