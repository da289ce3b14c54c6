"""Flight Recorder dumps and watchdog lines read from a job's files by the NCCL file source.

The dumps are the tutorial's dict (tests/collectors/nccl/test_flight_recorder.py), pickled as
PyTorch writes them; the watchdog line is ProcessGroupNCCL.cpp's message with its newer prefix.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
from pathlib import Path

import pytest

from graywire.collectors.nccl.config import NcclSourceConfig
from graywire.collectors.nccl.tail import NcclFileCollector
from tests.collectors.nccl.test_flight_recorder import dump

WATCHDOG = (
    "[rank0]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=12, "
    "NumelOut=12, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n"
)


def job_files(root: Path) -> None:
    """Job ``job-42``: rank 0 (gpu-0004) timed out in all_reduce #3; rank 1 (gpu-0005) never
    launched it; one file that is no dump."""
    for host, rank, states, enq in (("gpu-0004", 0, ["completed", "completed", "scheduled"], 3),
                                     ("gpu-0005", 1, ["completed", "completed"], 2)):  # fmt: skip
        d = root / "job-42" / host
        d.mkdir(parents=True, exist_ok=True)
        (d / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump(states, enq)))
    (root / "job-42" / "gpu-0004" / "train.err").write_text("step 10 loss 1.2\n" + WATCHDOG)
    (root / "job-42" / "gpu-0006").mkdir()
    (root / "job-42" / "gpu-0006" / "nccl_trace_rank_2").write_bytes(b"\x80\x05 half a pickle")


def collector(root: Path, **kw: object) -> NcclFileCollector:
    return NcclFileCollector(
        root,
        "*/*-pid*.log",
        flight_recorder_pattern="*/*/nccl_trace_rank_*",
        watchdog_pattern="*/*/*.err",
        host_regex=r"^[^/]+/(?P<host>[^/]+)/",
        **kw,  # type: ignore[arg-type]
    )


def rows(c: NcclFileCollector) -> list[tuple]:
    batch = c.collect_rank_state()
    if batch is None:
        return []
    return sorted(
        (r["job"], r["host"], r["rank"], r["state"], r["seq"], r["source"]) for r in batch.to_pylist()
    )


def test_dumps_and_watchdog_lines_become_rows_named_by_job_rank_and_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job_files(tmp_path)
    c = collector(tmp_path)
    with caplog.at_level(logging.WARNING, "graywire.nccl"):
        assert rows(c) == [
            ("job-42", "gpu-0004", 0, "timeout", 3, "flight_recorder"),
            ("job-42", "gpu-0004", 0, "timeout", 3, "watchdog"),
            ("job-42", "gpu-0005", 1, "running", 2, "flight_recorder"),
        ]
    assert any(
        "nccl_trace_rank_2" in m and "not read as a Flight Recorder dump" in m for m in caplog.messages
    )
    assert any("nccl_trace_rank_2" in p for p in c.last_problems)
    assert rows(c) == []  # each dump once, each line once


def test_a_dump_rewritten_is_read_again_and_a_new_watchdog_line_is_read(tmp_path: Path) -> None:
    job_files(tmp_path)
    c = collector(tmp_path)
    rows(c)
    f = tmp_path / "job-42" / "gpu-0005" / "nccl_trace_rank_1"
    f.write_bytes(pickle.dumps(dump(["completed", "completed", "completed"], 3)))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    with (tmp_path / "job-42" / "gpu-0004" / "train.err").open("a") as fh:
        fh.write(WATCHDOG.replace("SeqNum=3", "SeqNum=4"))
    assert rows(c) == [
        ("job-42", "gpu-0004", 0, "timeout", 4, "watchdog"),
        ("job-42", "gpu-0005", 1, "running", 3, "flight_recorder"),
    ]


def test_start_at_end_skips_what_was_there_and_a_missing_directory_is_a_failed_scrape(tmp_path: Path) -> None:
    job_files(tmp_path)
    c = collector(tmp_path, start_at="end")
    assert rows(c) == []
    gone = asyncio.run(collector(tmp_path / "nope").scrape())
    assert not gone.ok and "does not exist" in (gone.error or "")


def test_the_scrape_carries_the_rows_and_names_the_bad_file(tmp_path: Path) -> None:
    job_files(tmp_path)
    res = asyncio.run(collector(tmp_path).scrape())
    (batch,) = res.batches
    assert res.ok and batch.schema.metadata[b"graywire.record"] == b"nccl_rank_state"
    assert batch.num_rows == 3 and "nccl_trace_rank_2" in (res.error or "")


def test_host_regex_must_name_a_host_group() -> None:
    with pytest.raises(ValueError, match="host"):
        NcclSourceConfig(directory=Path("."), host_regex="^([^/]+)/")
    with pytest.raises(ValueError, match="regular expression"):
        NcclSourceConfig(directory=Path("."), host_regex="(")


def test_a_directory_taken_over_from_another_reader_is_read_from_where_it_ends(tmp_path: Path) -> None:
    """A replica whose share grew reads only what the files gain: the one before it read the
    rest. Once it has scraped, skipping is too late and changes nothing."""
    job_files(tmp_path)
    c = collector(tmp_path)
    c.skip_existing()
    assert rows(c) == []
    with (tmp_path / "job-42" / "gpu-0004" / "train.err").open("a") as fh:
        fh.write(WATCHDOG.replace("SeqNum=3", "SeqNum=5"))
    assert rows(c) == [("job-42", "gpu-0004", 0, "timeout", 5, "watchdog")]
    late = collector(tmp_path)
    assert len(rows(late)) == 4  # it read everything first
    late.skip_existing()
    with (tmp_path / "job-42" / "gpu-0004" / "train.err").open("a") as fh:
        fh.write(WATCHDOG.replace("SeqNum=3", "SeqNum=6"))
    assert [r[4] for r in rows(late)] == [6]
