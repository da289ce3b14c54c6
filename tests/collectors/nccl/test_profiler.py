"""The example profiler plugin's trace: lenient parsing, per-channel kernel times, per-peer proxy steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.profiler import (
    ProfilerParser,
    dump_name_parts,
    host_from_dump_name,
    lenient_event,
    parse_profiler_trace,
)
from graywire.collectors.nccl.proxy import ProxyRows

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


DUMPS = Path(__file__).parent / "profiler_dumps"
V5 = DUMPS / "gpu-0002_9210617411243260523_2.json"
V4 = DUMPS / "node07_1311768467463790320_0.json"


def _proxy(path: Path, **kw: object) -> list[dict]:
    parser = parse_profiler_trace(path.read_text(encoding="utf-8"))
    rows = ProxyRows()
    host, _, _ = dump_name_parts(path.name)
    parser.proxy_rows(rows, job="j", host=host, observed_us=1_700_000_000_000_000, **kw)  # type: ignore[arg-type]
    return rows.to_batch().to_pylist()


def test_readme_trace_gives_one_proxy_row_per_progress_op(trace: ProfilerParser) -> None:
    rows = ProxyRows()
    assert trace.proxy_rows(rows, job="j", host="h") == 2
    recv, send = rows.to_batch().to_pylist()
    assert (recv["direction"], recv["channel"], recv["peer"]) == ("recv", 0, 1)
    assert (recv["steps"], recv["bytes"]) == (4, 524288)
    # Steps overlap (pipelined): their waits add up to more than the op's own span.
    assert recv["recv_wait_seconds"] == pytest.approx(
        (119807.691986 - 119707.677979 + 119844.401001 - 119733.647980 + 120038.847992 - 119753.023987
         + 120062.944977 - 119772.510986) / 1e6
    )  # fmt: skip
    assert recv["send_wait_seconds"] is None  # a receive has no send states: null, not 0
    # The excerpt cuts the send op after its first step's SendPeerWait: SendWait is unknown.
    assert send["send_gpu_wait_seconds"] == pytest.approx((119808.636993 - 119710.632996) / 1e6)
    assert send["send_wait_seconds"] is None and send["duration_seconds"] is None
    assert trace.proxy_rows(rows, job="j") == 0  # each op once


def test_v5_dump_with_ib_qp_events() -> None:
    assert dump_name_parts(V5.name) == ("gpu-0002", 9210617411243260523, 2)
    parser = parse_profiler_trace(V5.read_text(encoding="utf-8"))
    assert parser.skipped == 0
    (coll,) = parser.colls
    assert (coll["collective"], coll["seq"], coll["rank"], coll["nchannels"]) == ("AllReduce", 7, 2, 2)
    qps = parser.net_table().to_pylist()
    assert len(qps) == 8 and {q["kind"] for q in qps} == {"qp"}
    assert {(q["direction"], q["state"], q["channel"], q["qp_num"]) for q in qps} == {
        ("recv", "RecvWait", 0, 4712), ("send", "SendWait", 0, 4711),
        ("recv", "RecvWait", 1, 4714), ("send", "SendWait", 1, 4713),
    }  # fmt: skip
    assert {q["device"] for q in qps} == {0}
    rows = _proxy(V5, port_of=lambda h, pid, r, ch, peer, d: f"{h}/mlx5_{ch}" if pid == 48211 else None)
    assert [(r["channel"], r["direction"], r["peer"]) for r in rows] == [
        (0, "recv", 1), (0, "send", 3), (1, "recv", 1), (1, "send", 3),
    ]  # fmt: skip
    send0, send1 = rows[1], rows[3]
    assert (send0["communicator"], send0["rank"], send0["host"]) == ("0x7fd2afbc4f2eba6b", 2, "gpu-0002")
    assert send0["send_wait_seconds"] == pytest.approx((30.0 + 31.0) / 1e6)
    assert send1["send_wait_seconds"] == pytest.approx((60.0 + 61.0) / 1e6)  # the slow hop
    assert send0["send_gpu_wait_seconds"] == pytest.approx(15.5e-6)
    assert send0["send_peer_wait_seconds"] == pytest.approx(3e-6)
    assert (send0["qp_num"], send0["qps"], send0["net_device"]) == (4711, 1, 0)
    assert (send0["bytes"], send0["steps"], send0["port"]) == (1048576, 2, "gpu-0002/mlx5_0")
    recv0 = rows[0]
    assert recv0["recv_wait_seconds"] == pytest.approx(82e-6)
    assert recv0["recv_flush_wait_seconds"] == pytest.approx(6e-6)
    assert recv0["recv_gpu_wait_seconds"] == pytest.approx(12.5e-6)
    assert recv0["qp_num"] == 4712 and recv0["send_wait_seconds"] is None


def test_v4_dump_with_socket_events() -> None:
    parser = parse_profiler_trace(V4.read_text(encoding="utf-8"))
    assert parser.skipped == 0
    socks = parser.net_table().to_pylist()
    assert [(s["kind"], s["sock"], s["direction"]) for s in socks] == [
        ("socket", 38, "recv"), ("socket", 37, "send"),
    ]  # fmt: skip
    recv, send = _proxy(V4)
    assert (recv["collective"], recv["seq"], recv["host"]) == ("ReduceScatter", 3, "node07")
    assert send["send_wait_seconds"] == pytest.approx(50e-6)
    assert send["qp_num"] is None  # sockets have no QP
    assert recv["recv_wait_seconds"] == pytest.approx(55e-6)
