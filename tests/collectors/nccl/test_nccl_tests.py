"""nccl-tests output: both column layouts, blank redop, noise in the table, footer, timing rows."""

# ruff: noqa: E501  (format samples keep their real line width)
from __future__ import annotations

from pathlib import Path

import pytest

from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.nccl_tests import NccltestsParser, collective_from_name, parse_nccl_tests

ALLREDUCE = Path("nccl") / "superbench_nccl_tests_allreduce.log"
ALLTOALL = Path("nccl") / "superbench_nccl_tests_alltoall.log"

# The current layout (nccl-tests 2.x): root column, #wrong, "Collective test" lines, MPI noise.
NEW_LAYOUT = """\
# nccl-tests version 2.17.9 nccl-headers=22903 nccl-library=22903
# Collective test starting: reduce_scatter_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   9747 on gpu-0003 device  0 [0000:1b:00] NVIDIA H200
#  Rank  1 Group  0 Pid   9748 on gpu-0004 device  0 [0000:1b:00] NVIDIA H200
NCCL version 2.29.3+cuda13.1
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
[gpu-0003:02705] 1 more process has sent help message help-mca-var.txt / mutually-exclusive-vars
        1024           128     float     sum      -1    45.06    0.02    0.01       0    43.74    0.02    0.01       0
        2048           256     float     sum      -1    43.84    0.05    0.02       2    43.70    0.05    0.02     N/A
        4096           512     float     sum      -1    43.51    0.09
# Out of bounds values : 2 FAILED
# Avg bus bandwidth    : 0.0150 GB/s
#
# Collective test concluded: reduce_scatter_perf
"""


def test_old_layout_allreduce_values(real_fixtures: Path) -> None:
    p = parse_nccl_tests((real_fixtures / ALLREDUCE).read_text(), collective_from_name(ALLREDUCE.name))
    assert len(p.rows) == 34  # the NCCL INFO line inside the table is not a row
    assert p.skipped == 0
    assert p.columns is not None and "root" not in p.columns
    s = p.summary
    assert (s.check_column, s.avg_bus_bandwidth_gbs, s.out_of_bounds, s.out_of_bounds_ok) == (
        "error",
        68.4048,
        0,
        True,
    )
    assert s.params["nGpus"] == "8" and s.params["iters"] == "20" and s.params["warmup iters"] == "5"
    assert [r["device"] for r in s.ranks] == list(range(8))
    assert {r["host"] for r in s.ranks} == {"localhost"}
    row = {r["size"]: r for r in p.rows}[134217728]
    assert (row["count"], row["type"], row["redop"], row["root"]) == (33554432, "float", "sum", None)
    assert (row["oop_time_us"], row["oop_algbw_gbs"], row["oop_busbw_gbs"]) == (1162.2, 115.49, 202.11)
    assert (row["ip_time_us"], row["ip_algbw_gbs"], row["ip_busbw_gbs"]) == (1162.5, 115.46, 202.05)
    assert row["oop_check"] is None  # N/A: validation off
    table = p.table()
    last = table.slice(33).to_pylist()[0]
    assert last["size_bytes"] == 8589934592
    assert last["oop_busbw_bps"] == pytest.approx(235.26 * 8e9)
    assert last["ip_busbw_bps"] == pytest.approx(235.03 * 8e9)
    assert last["oop_duration_seconds"] == pytest.approx(0.063896)


def test_old_layout_alltoall_blank_redop_keeps_columns_in_place(real_fixtures: Path) -> None:
    p = parse_nccl_tests((real_fixtures / ALLTOALL).read_text(), collective_from_name(ALLTOALL.name))
    assert len(p.rows) == 34 and p.skipped == 0
    assert {r["redop"] for r in p.rows} == {None}
    row = {r["size"]: r for r in p.rows}[32]
    assert (row["count"], row["type"]) == (1, "float")
    assert (row["oop_time_us"], row["oop_algbw_gbs"], row["oop_busbw_gbs"]) == (89.00, 0.00, 0.00)
    assert (row["ip_time_us"], row["ip_algbw_gbs"], row["ip_busbw_gbs"]) == (85.13, 0.00, 0.00)
    big = p.rows[-1]
    assert (big["size"], big["count"], big["oop_time_us"], big["oop_busbw_gbs"]) == (
        8589934592,
        268435456,
        33508,
        224.31,
    )
    assert (big["ip_time_us"], big["ip_algbw_gbs"], big["ip_busbw_gbs"]) == (33234, 258.47, 226.16)
    assert p.summary.avg_bus_bandwidth_gbs == 58.6481
    assert p.collective == "AllToAll"


def test_timing_rows_for_each_placement(real_fixtures: Path) -> None:
    p = parse_nccl_tests((real_fixtures / ALLREDUCE).read_text(), "AllReduce")
    oop, ip = TimingRows(), TimingRows()
    assert (
        p.timing_rows(oop, job="bench-1", communicator="superbench", observed_us=1_700_000_000_000_000) == 34
    )
    p.timing_rows(ip, job="bench-1", placement="in_place")
    row = oop.to_batch().to_pylist()[33]
    assert (row["job"], row["communicator"], row["collective"]) == ("bench-1", "superbench", "AllReduce")
    assert (row["rank"], row["nranks"], row["host"], row["device"]) == (0, 8, "localhost", 0)
    assert (row["seq"], row["message_bytes"], row["channel"]) == (33, 8589934592, None)
    assert row["duration_seconds"] == pytest.approx(0.063896)
    assert row["bus_bandwidth_bps"] == pytest.approx(235.26 * 8e9)
    assert ip.column("duration_seconds")[33] == pytest.approx(0.063959)
    assert ip.column("bus_bandwidth_bps")[33] == pytest.approx(235.03 * 8e9)


def test_new_layout_root_wrong_and_noise() -> None:
    p = parse_nccl_tests(NEW_LAYOUT)
    assert p.summary.test == "reduce_scatter_perf" and p.collective == "ReduceScatter"
    assert p.summary.check_column == "#wrong"
    assert [r["size"] for r in p.rows] == [1024, 2048]
    assert p.rows[1]["root"] == -1 and p.rows[1]["oop_check"] == 2 and p.rows[1]["ip_check"] is None
    assert p.skipped == 1 and p.problems == ["line 16: 7 fields do not fit the header"]
    assert (p.summary.out_of_bounds, p.summary.out_of_bounds_ok, p.summary.avg_bus_bandwidth_gbs) == (
        2,
        False,
        0.015,
    )
    assert [(r["host"], r["pid"], r["bus_id"], r["gpu"]) for r in p.summary.ranks] == [
        ("gpu-0003", 9747, "0000:1b:00", "NVIDIA H200"), ("gpu-0004", 9748, "0000:1b:00", "NVIDIA H200"),
    ]  # fmt: skip
    rows = TimingRows()
    p.timing_rows(rows, job="j", communicator="file-stem")
    assert rows.column("communicator") == ["reduce_scatter_perf"] * 2  # the test name wins
    assert rows.column("nranks") == [2, 2] and rows.column("host") == ["gpu-0003"] * 2


def test_incremental_feed_emits_only_new_rows(real_fixtures: Path) -> None:
    lines = (real_fixtures / ALLREDUCE).read_text().splitlines()
    p = NccltestsParser(collective="AllReduce")
    rows = TimingRows()
    p.feed(lines[:20])
    start = p.timing_rows(rows, job="j")
    assert start == 4  # header at line 15, INFO at 17, rows on 18..20
    p.feed(lines[20:])
    assert p.timing_rows(rows, job="j", start=start) == 34
    assert rows.column("seq") == list(range(34))


def test_collective_from_file_name() -> None:
    assert collective_from_name("superbench_nccl_tests_allreduce.log") == "AllReduce"
    assert collective_from_name("reduce_scatter_perf.out") == "ReduceScatter"
    assert collective_from_name("run.log") is None
