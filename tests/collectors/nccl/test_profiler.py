"""The example profiler plugin's trace: lenient parsing, per-channel kernel times, per-peer proxy steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.nccl.common import TimingRows
from collectors.nccl.profiler import ProfilerParser, host_from_dump_name, lenient_event, parse_profiler_trace

TRACE = Path("nccl") / "nccl_profiler_example_readme_trace.txt"


@pytest.fixture
def trace(real_fixtures: Path) -> ProfilerParser:
    return parse_profiler_trace((real_fixtures / TRACE).read_text(encoding="utf-8"))


def test_readme_trace_parses_despite_its_json_errors(trace: ProfilerParser) -> None:
    assert trace.skipped == 0
    (coll,) = trace.colls
    assert coll["collective"] == "AllReduce"
    assert (coll["seq"], coll["rank"], coll["nchannels"]) == (0, 0, 2)
    assert coll["comm_hash"] == 1493613951195738943
    assert (coll["algorithm"], coll["protocol"], coll["datatype"]) == ("RING", "SIMPLE", "ncclFloat32")
    assert coll["stop_us"] == pytest.approx(170633.535980)


def test_kernel_channel_time_comes_from_the_gpu_clock(trace: ProfilerParser) -> None:
    (k,) = trace.kernel_table().to_pylist()
    assert k["channel"] == 0
    assert (k["start_gpu_ns"], k["stop_gpu_ns"]) == (1756135989724672000, 1756135989732831232)
    assert k["duration_seconds"] == pytest.approx(8159232e-9)  # globaltimer nanoseconds
    assert (k["collective"], k["seq"], k["rank"]) == ("AllReduce", 0, 0)


def test_proxy_ops_name_channel_peer_and_direction(trace: ProfilerParser) -> None:
    ops = trace.proxy_op_table().to_pylist()
    assert [(o["phase"], o["direction"], o["channel"], o["peer"]) for o in ops] == [
        ("schedule", "recv", 0, 1), ("progress", "recv", 0, 1),
        ("schedule", "send", 0, 1), ("progress", "send", 0, 1),
    ]  # fmt: skip
    assert ops[1]["duration_seconds"] == pytest.approx((120165.356995 - 119686.300995) / 1e6)
    assert (ops[1]["steps"], ops[1]["chunk_size"], ops[1]["trans_size"]) == (4, 4194304, 524288)
    assert ops[3]["duration_seconds"] is None  # its end was cut from the README excerpt


def test_network_steps_belong_to_their_progress_op(trace: ProfilerParser) -> None:
    steps = trace.proxy_step_table().to_pylist()
    assert len(steps) == 14
    recv = [s for s in steps if s["direction"] == "recv"]
    assert [s["state"] for s in recv[:3]] == ["RecvWait", "RecvFlushWait", "RecvGpuWait"]
    assert sorted({s["step"] for s in recv}) == [0, 1, 2, 3]
    # The first RecvWait line opens with a typographic quote in the README.
    assert recv[0]["duration_seconds"] == pytest.approx((119807.691986 - 119707.677979) / 1e6)
    assert {(s["channel"], s["peer"]) for s in steps} == {(0, 1)}
    assert [s["state"] for s in steps if s["direction"] == "send"] == ["SendGpuWait", "SendPeerWait"]
    assert steps[-1]["duration_seconds"] == pytest.approx((119818.972992 - 119808.636993) / 1e6)


def test_timing_rows_one_per_kernel_channel(trace: ProfilerParser) -> None:
    rows = TimingRows()
    assert trace.timing_rows(rows, job="j", host="gpu-0001", device=3, observed_us=1_700_000_000_000_000) == 1
    (row,) = rows.to_batch().to_pylist()
    assert row["communicator"] == "0x14ba61f9a096f33f"  # CommHash as the Inspector prints it
    assert (row["rank"], row["channel"], row["seq"]) == (0, 0, 0)
    assert row["message_bytes"] == 262144 * 4  # Count x sizeof(ncclFloat32)
    assert row["duration_seconds"] == pytest.approx(0.008159232)
    assert (row["host"], row["device"], row["nranks"]) == ("gpu-0001", 3, None)


def test_lenient_repairs() -> None:
    ev = lenient_event(
        '{"name": "X", "args": {"Stream": 0x5020000567d0, "datatype": ncclFloat32, "p": (nil)}},'
    )
    assert ev == {"name": "X", "args": {"Stream": "0x5020000567d0", "datatype": "ncclFloat32", "p": "(nil)"}}
    assert lenient_event('[{"a": true, "b": null, "ts": nan}') == {"a": True, "b": None, "ts": "nan"}
    assert lenient_event("{}]") == {}
    assert lenient_event("{\u201cname\u201d: 1}") == {"name": 1}
    assert lenient_event('{"name": "X", "id": }') is None
    assert lenient_event(" ... [ trace truncated ]") is None


def test_lines_fed_in_pieces_give_the_same_result(real_fixtures: Path, trace: ProfilerParser) -> None:
    lines = (real_fixtures / TRACE).read_text(encoding="utf-8").splitlines()
    parser = ProfilerParser()
    parser.feed(lines[:9])  # stops inside the ProgressRecv op
    parser.feed([*lines[9:], '{"name": "Broken", "cat": "GPU", "ph": "b", "id": }', "not an event"])
    assert parser.proxy_step_table().equals(trace.proxy_step_table())
    assert parser.kernel_table().equals(trace.kernel_table())
    assert parser.skipped == 1
    assert parser.problems[0].startswith(f"line {len(lines) + 1}: cannot repair")


def test_host_from_dump_file_name() -> None:
    assert host_from_dump_name("nccl_profile-gpu-0003-4242.txt") == "gpu-0003"
    assert host_from_dump_name("prof-node01-17.txt") == "node01"
    assert host_from_dump_name("trace.json") is None
