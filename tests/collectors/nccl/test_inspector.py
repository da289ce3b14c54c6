"""NCCL Inspector records (README examples and every layout version) -> nccl_timing rows."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.debug_log import NcclTopology
from graywire.collectors.nccl.inspector import (
    InspectorParser,
    RecordError,
    parse_inspector_prom,
    parse_inspector_text,
    parse_size_bucket,
)
from graywire.collectors.schemas import NCCL_TIMING

NCCL = Path("nccl")


def load(real_fixtures: Path, name: str) -> dict:
    return json.loads((real_fixtures / NCCL / name).read_text())


def test_readme_coll_perf_record_maps_every_field(real_fixtures: Path) -> None:
    text = (real_fixtures / NCCL / "nccl_inspector_readme_coll_perf_example.json").read_text()
    rows, parser = parse_inspector_text(text, "train-7")
    batch = rows.to_batch()
    assert batch.schema == NCCL_TIMING
    assert (parser.records, parser.skipped) == (1, 0)
    (row,) = batch.to_pylist()
    assert row["time"] == datetime(2025, 5, 23, 19, 59, 37, 748202, tzinfo=UTC)  # dump_timestamp_us
    assert row["job"] == "train-7"
    assert row["communicator"] == "0x7f8c496ae9f661"
    assert (row["rank"], row["nranks"]) == (2, 8)
    assert row["host"] == "example-hostname"
    assert row["device"] is None  # the JSON has no GPU index
    assert (row["collective"], row["seq"], row["message_bytes"]) == ("AllReduce", 1407, 17179869184)
    assert row["channel"] is None
    assert row["duration_seconds"] == pytest.approx(0.061974)
    assert row["bus_bandwidth_bps"] == pytest.approx(485.119099 * 8e9)  # decimal GB/s -> bit/s
    assert row["transport"] is None


def test_gpus_per_host_gives_the_device_only_for_whole_host_communicators(real_fixtures: Path) -> None:
    rec = load(real_fixtures, "nccl_inspector_readme_coll_perf_example.json")  # 8 ranks on 1 node
    rows = TimingRows()
    InspectorParser("j", gpus_per_host=8).feed_record(rec, rows)
    rec["header"]["n_ranks"] = 6  # 6 ranks on one 8-GPU node: local rank need not be the GPU
    InspectorParser("j", gpus_per_host=8).feed_record(rec, rows)
    assert rows.column("device") == [2, None]


def test_verbose_record_gives_a_row_per_channel(real_fixtures: Path) -> None:
    rec = load(real_fixtures, "nccl_inspector_readme_coll_perf_verbose_example.json")
    rows = TimingRows()
    parser = InspectorParser("j")
    parser.feed_lines([json.dumps(rec, separators=(",", ":"))], rows)
    whole, ch0 = rows.to_batch().to_pylist()
    assert (whole["channel"], ch0["channel"]) == (None, 0)
    assert whole["duration_seconds"] == pytest.approx(0.041057)
    # kernel_stop_ts - kernel_start_ts, microseconds
    assert ch0["duration_seconds"] == pytest.approx((1752867229275811 - 1752867229235181) / 1e6)
    assert ch0["bus_bandwidth_bps"] == pytest.approx(366.134533 * 8e9 * 0.041057 / 0.04063)
    assert (ch0["collective"], ch0["seq"], ch0["rank"]) == ("ReduceScatter", 1231, 4)
    # Observed at the last kernel stop, not at the dump.
    assert ch0["time"] == datetime.fromtimestamp(1752867229275811 / 1e6, UTC)


def test_v43_records_take_header_and_metadata_from_their_dump_marker(real_fixtures: Path) -> None:
    rec = load(real_fixtures, "nccl_inspector_readme_coll_perf_verbose_example.json")
    marker = {
        "header": rec["header"],
        "metadata": {**rec["metadata"], "inspector_output_format_version": "v4.3"},
        "dump_stats": {"coll_records": 2, "coll_dropped_total": 9, "coll_dropped_since_last_dump": 3,
                       "p2p_records": 0, "p2p_dropped_total": 0, "p2p_dropped_since_last_dump": 0},
    }  # fmt: skip
    second = json.loads(json.dumps(rec["coll_perf"]))
    second["coll_sn"] = 1232
    lines = [
        json.dumps({"coll_perf": rec["coll_perf"]}),  # before any marker: no context
        json.dumps(marker),
        json.dumps({"coll_perf": rec["coll_perf"]}),
        json.dumps({"coll_perf": second}),
        json.dumps({"p2p_perf": {"p2p": "Send", "p2p_sn": 1}}),
    ]
    rows = TimingRows()
    parser = InspectorParser("j", whole_rows=False)
    parser.feed_lines(lines, rows, "host-pid1.log ")
    assert rows.column("seq") == [1231, 1232]
    assert rows.column("communicator") == ["0xe62dedaa97644a"] * 2
    assert rows.column("host") == ["example-hostname"] * 2
    assert (parser.records, parser.skipped, parser.ignored, parser.dropped) == (2, 1, 2, 3)
    assert parser.problems == [
        "host-pid1.log line 1: coll_perf record without header/metadata "
        "(a v4.3 record before its dump_stats marker)"
    ]


def test_malformed_lines_are_skipped_and_counted(real_fixtures: Path) -> None:
    rec = load(real_fixtures, "nccl_inspector_readme_coll_perf_example.json")
    bad_exec = json.loads(json.dumps(rec))
    bad_exec["coll_perf"]["coll_exec_time_us"] = "soon"
    bad_rank = json.loads(json.dumps(rec))
    bad_rank["header"]["rank"] = -1
    lines = [json.dumps(rec), '{"header": {"id": "0x1"', "[1, 2]", json.dumps(bad_exec), "",
             json.dumps(bad_rank), json.dumps({"hello": 1}), json.dumps(rec)]  # fmt: skip
    rows = TimingRows()
    parser = InspectorParser("j")
    parser.feed_lines(lines, rows)
    assert len(rows) == 2
    assert (parser.records, parser.skipped) == (2, 5)
    assert parser.problems[0].startswith("line 2: not JSON")
    assert parser.problems[1] == "line 3: expected a JSON object, got list"
    assert parser.problems[2] == "line 4: coll_perf.coll_exec_time_us 'soon' is not a duration"
    assert parser.problems[3] == "line 6: header.rank -1 is not a rank"
    with pytest.raises(RecordError, match=r"line 4: coll_perf\.coll_exec_time_us"):
        InspectorParser("j", strict=True).feed_lines(lines[3:4], TimingRows(), first_line=4)


def test_unfinished_kernels_and_nan_bandwidth(real_fixtures: Path) -> None:
    rec = load(real_fixtures, "nccl_inspector_readme_coll_perf_verbose_example.json")
    body = rec["coll_perf"]
    body["coll_busbw_gbs"] = "nan"  # jsonDouble writes NaN as a string
    ev = body["event_trace_ts"]["kernel_events"][0]
    body["event_trace_ts"]["kernel_events"] += [
        {**ev, "channel_id": 1},
        {**ev, "channel_id": 2, "kernel_stop_ts": 0},  # the stop never came
        {**ev, "channel_id": 3},
    ]
    body["event_trace_sn"]["kernel_events"] += [
        {"channel_id": 1, "kernel_start_sn": 4, "kernel_stop_sn": 0, "kernel_record_sn": 0},
    ]
    rows = TimingRows()
    InspectorParser("j").feed_record(rec, rows)
    batch = rows.to_batch()
    assert batch.column("channel").to_pylist() == [None, 0, 3]
    assert batch.column("bus_bandwidth_bps").null_count == 3


def test_gpu_and_transport_come_from_the_debug_log(real_fixtures: Path) -> None:
    rec = load(real_fixtures, "nccl_inspector_readme_coll_perf_verbose_example.json")
    topo = NcclTopology()
    topo.feed(
        [
            "example-hostname:438776:438790 [4] NCCL INFO comm 0x55 rank 4 nRanks 8 nNodes 1 localRanks 8 "
            "localRank 4 MNNVL 0",
            "example-hostname:438776:438790 [4] NCCL INFO Channel 00/0 : 4[4] -> 5[5] via P2P/CUMEM",
        ]
    )
    rows = TimingRows()
    InspectorParser("j", device_of=topo.device_of, transport_of=topo.transport_of).feed_record(rec, rows)
    assert rows.column("device") == [4, 4]
    assert rows.column("transport") == [None, "P2P"]


def test_a_whole_document_may_hold_records_pretty_printed_or_as_an_array(real_fixtures: Path) -> None:
    a = (real_fixtures / NCCL / "nccl_inspector_readme_coll_perf_example.json").read_text()
    b = (real_fixtures / NCCL / "nccl_inspector_readme_coll_perf_verbose_example.json").read_text()
    rows, _ = parse_inspector_text(a + "\n" + b, "j")
    assert rows.column("seq") == [1407, 1231, 1231]
    rows, _ = parse_inspector_text(f"[{a},{b}]", "j")
    assert rows.column("collective") == ["AllReduce", "ReduceScatter", "ReduceScatter"]
    with pytest.raises(ValueError, match="line 1 column 2: not valid JSON"):
        parse_inspector_text("{oops}", "j")


def test_prometheus_textfile_is_an_aggregate_table(real_fixtures: Path) -> None:
    text = (real_fixtures / NCCL / "nccl_inspector_readme_prom_example.prom").read_text()
    table = parse_inspector_prom("# HELP ignored\n" + text, job="train-7")
    coll, p2p = table.to_pylist()
    assert coll == {
        "job": "train-7",  # slurm_job_id="unknown"
        "host": "nvl72004-T01",
        "device": 0,
        "communicator": "DP Group 0",
        "nnodes": 1,
        "nranks": 4,
        "collective": "AllReduce",
        "p2p": False,
        "algo_proto": "Ring_ll",
        "message_bytes_min": 4 * 2**30,
        "message_bytes_max": 5 * 2**30,
        "duration_seconds": pytest.approx(9498.47e-6),
        "bus_bandwidth_bps": pytest.approx(678.263 * 8e9),
    }
    assert (p2p["collective"], p2p["p2p"], p2p["algo_proto"]) == ("Send", True, None)
    assert (p2p["message_bytes_min"], p2p["message_bytes_max"]) == (512 * 2**20, 513 * 2**20)
    assert p2p["duration_seconds"] == pytest.approx(1154.87e-6)
    assert p2p["bus_bandwidth_bps"] == pytest.approx(464.9 * 8e9)
    with pytest.raises(ValueError, match="not a Prometheus sample line"):
        parse_inspector_prom("nccl_bus_bandwidth_gbs{node=")


def test_size_buckets() -> None:
    assert parse_size_bucket("0B") == (0, 0)
    assert parse_size_bucket("1-2KB") == (1024, 2048)
    assert parse_size_bucket("huge") == (None, None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("coll_exec_time_us", 10**400),
        ("coll_exec_time_us", 2**70),
        ("rank", 2**70),
        ("coll_msg_size_bytes", 10**26),
        ("dump_timestamp_us", 2**70),
        ("coll_sn", -(2**70)),
        ("channel_id", 2**40),
        ("kernel_start_ts", 10**26),
    ],
)
def test_integers_of_any_size_never_crash_a_batch(real_fixtures: Path, field: str, value: int) -> None:
    """JSON integers have no size limit; a value that fits no column is refused or nulled, and
    the batch still builds (no OverflowError, no ArrowInvalid)."""
    rec = json.loads(
        (real_fixtures / "nccl" / "nccl_inspector_readme_coll_perf_verbose_example.json").read_text()
    )
    where = {"rank": rec["header"], "dump_timestamp_us": rec["metadata"]}.get(field, rec["coll_perf"])
    if field in ("channel_id", "kernel_start_ts"):
        where = rec["coll_perf"]["event_trace_ts"]["kernel_events"][0]
        if field == "channel_id":
            rec["coll_perf"]["event_trace_sn"]["kernel_events"][0]["channel_id"] = value
    where[field] = value
    good = json.loads((real_fixtures / "nccl" / "nccl_inspector_readme_coll_perf_example.json").read_text())
    text = json.dumps(good) + "\n" + json.dumps(rec) + "\n"
    rows, parser = parse_inspector_text(text, "j")
    batch = rows.to_batch()
    assert parser.records + parser.skipped == 2
    assert parser.records >= 1  # the good record is kept whatever the bad one holds
    assert batch.num_rows >= 1
    if parser.skipped:
        assert "is not a" in parser.problems[0] and len(parser.problems[0]) < 200
    refused = field in ("coll_exec_time_us", "rank", "dump_timestamp_us")  # a dump time that is no time too
    with pytest.raises(RecordError, match="is not a") if refused else contextlib.nullcontext():
        parse_inspector_text(json.dumps(rec), "j", strict=True)[0].to_batch()
