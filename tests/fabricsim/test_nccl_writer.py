"""fabricsim nccl_timing -> Inspector JSON lines (and NCCL_DEBUG logs) in the plugin's exact layout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from graywire.collectors.nccl import NcclFileCollector
from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.debug_log import NcclTopology
from graywire.collectors.nccl.inspector import InspectorParser
from graywire.fabricsim.nccl_writer import InspectorWriter, comm_hash
from graywire.fabricsim.sim import FabricSim, SimConfig, SimStep
from graywire.fabricsim.topology import TopologySpec


def steps(n: int = 3, faults: str = "none") -> list[SimStep]:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=4, gpus=4), job_hosts=4, duration_s=10.0 * n,
                              faults=faults, seed=1))  # fmt: skip
    return [s for s in sim.run() if s.nccl_timing is not None]


def test_v43_file_layout_is_the_plugins(tmp_path: Path) -> None:
    (step,) = steps(1)
    w = InspectorWriter(tmp_path)
    assert w.write(step.nccl_timing) == 16  # 4 hosts x 4 GPUs, one record per rank
    files = sorted((tmp_path / "job-000").iterdir())
    assert [f.name for f in files][:2] == ["gpu-0000-pid40000.log", "gpu-0000-pid40001.log"]
    text = (tmp_path / "job-000" / "gpu-0001-pid40006.log").read_text()
    marker, record, end = text.split("\n")
    assert end == ""  # every line ends with a newline
    assert " " not in marker and " " not in record  # compact, as json.cc prints
    m = json.loads(marker)
    assert list(m) == ["header", "metadata", "dump_stats"]
    assert m["header"] == {"id": f"0x{comm_hash('job-000:world'):x}", "comm_name": "job-000:world",
                           "rank": 6, "n_ranks": 16, "nnodes": 4}  # fmt: skip
    assert list(m["metadata"]) == ["inspector_output_format_version", "git_rev", "rec_mechanism",
                                   "dump_timestamp_us", "hostname", "pid"]  # fmt: skip
    assert m["metadata"]["dump_timestamp_us"] == int(step.time.timestamp() * 1e6)
    assert (m["metadata"]["hostname"], m["metadata"]["pid"]) == ("gpu-0001", 40006)
    assert m["dump_stats"]["coll_records"] == 1
    body = json.loads(record)["coll_perf"]
    assert list(body) == [
        "coll", "coll_algo", "coll_proto", "coll_sn", "coll_msg_size_bytes", "coll_exec_time_us",
        "coll_timing_source", "coll_algobw_gbs", "coll_busbw_gbs", "event_trace_sn", "event_trace_ts",
    ]  # fmt: skip
    assert re.search(r'"coll_busbw_gbs":\d+\.\d{6},', record)  # %lf
    assert [e["channel_id"] for e in body["event_trace_ts"]["kernel_events"]] == [0, 1, 2, 3]
    assert body["coll_sn"] == 8 and body["coll_msg_size_bytes"] == 512 * 2**20
    # busbw = algbw x 2(n-1)/n for AllReduce, algbw = bytes / exec time
    algbw = 512 * 2**20 / body["coll_exec_time_us"] / 1e3
    assert body["coll_busbw_gbs"] == pytest.approx(algbw * 2 * 15 / 16, abs=1e-6)


def test_round_trip_keeps_every_channel_duration(tmp_path: Path) -> None:
    w = InspectorWriter(tmp_path)
    col = NcclFileCollector(tmp_path / "job-000", gpus_per_host=4)  # no debug log: GPU = rank % 4
    for step in steps(3, "slow_channel@5s+60s=0.3:gpu-0002/mlx5_1:3"):
        w.write(step.nccl_timing)
        got = col.collect()
        assert got is not None
        sim = step.nccl_timing
        chan = got.filter(pc.is_valid(got.column("channel")))
        assert chan.num_rows == sim.num_rows
        key = lambda b: np.lexsort((b.column("channel").to_numpy(), b.column("rank").to_numpy()))  # noqa: E731
        a, b = chan.take(pa.array(key(chan))), sim.take(pa.array(key(sim)))
        assert np.array_equal(a.column("rank").to_numpy(), b.column("rank").to_numpy())
        assert np.array_equal(a.column("device").to_numpy(), b.column("device").to_numpy())
        assert a.column("host").to_pylist() == b.column("host").to_pylist()
        assert (
            np.abs(a.column("duration_seconds").to_numpy() - b.column("duration_seconds").to_numpy()).max()
            <= 6e-7
        )
        assert set(a.column("seq").to_pylist()) == set(b.column("seq").to_pylist())
        assert abs((got.column("time")[0].as_py() - step.time).total_seconds()) < 0.01
    assert col.skipped_lines == 0
    text = (tmp_path / "job-000" / "gpu-0002-pid40009.log").read_text().splitlines()
    assert len(text) == 6  # three dumps appended: marker + record each
    slow = a.filter(pc.and_(pc.equal(a.column("rank"), 9), pc.equal(a.column("channel"), 3)))
    assert slow.column("duration_seconds")[0].as_py() > 1.2 * np.median(
        a.column("duration_seconds").to_numpy()
    )


def test_v40_records_carry_their_own_header(tmp_path: Path) -> None:
    (step,) = steps(1)
    InspectorWriter(tmp_path, version="v4.0", per_job_dirs=False, verbose=False).write(step.nccl_timing)
    (line,) = (tmp_path / "gpu-0003-pid40015.log").read_text().splitlines()
    rec = json.loads(line)
    assert list(rec) == ["header", "metadata", "coll_perf"]
    assert "comm_name" not in rec["header"] and "event_trace_ts" not in rec["coll_perf"]
    assert rec["metadata"]["inspector_output_format_version"] == "v4.0"
    rows = TimingRows()
    InspectorParser("j").feed_lines([line], rows)
    assert rows.column("rank") == [15] and rows.column("channel") == [None]
    dur = step.nccl_timing.filter(pc.equal(step.nccl_timing.column("rank"), 15)).column("duration_seconds")
    assert rows.column("duration_seconds")[0] == pytest.approx(max(dur.to_pylist()) + 4e-6, abs=1e-6)


def test_debug_log_gives_gpu_nic_and_ring(tmp_path: Path) -> None:
    (step,) = steps(1)
    batch = step.nccl_timing
    # Rank 9 lost its IB: its rows say NET/Socket.
    transport = pa.array(np.where(batch.column("rank").to_numpy() == 9, "NET/Socket", "NET/IB"))
    field = batch.schema.field("transport")
    batch = batch.set_column(batch.schema.get_field_index("transport"), field, transport.cast(field.type))
    w = InspectorWriter(tmp_path, debug_log=True)
    w.write(batch)
    w.write(batch)  # init lines are written once per process and communicator
    log = (tmp_path / "job-000" / "nccl.gpu-0002.40009").read_text().splitlines()
    assert len(log) == 2 + 2 + 4 * 3 + 1
    assert log[0].startswith(
        "gpu-0002:40009:40009 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB"
    )
    assert log[3].endswith(" rank 9 nRanks 16 nNodes 4 localRanks 4 localRank 1 MNNVL 0")
    topo = NcclTopology()
    for f in sorted((tmp_path / "job-000").glob("nccl.*")):
        topo.feed(f.read_text().splitlines())
    assert topo.malformed == 0
    assert topo.device_of("gpu-0002", 40009) == 1
    links = {(lk.rank, lk.channel, lk.direction): lk for lk in topo.links}
    hop = links[(6, 2, "send")]  # gpu-0001 GPU 2 -> next host on rail 2
    assert (hop.to_rank, hop.transport, hop.nic, hop.gdrdma, hop.port) == (
        10,
        "NET/IB",
        2,
        True,
        "gpu-0001/mlx5_2",
    )
    assert topo.rings[(next(iter({lk.communicator for lk in topo.links})), 2)][6] == (2, 10)
    issues = topo.transport_issues()
    assert {(i.kind, i.host, i.rank) for i in issues} == {("net_fallback", "gpu-0002", 9)}
    assert sorted((i.channel, i.via, i.port) for i in issues) == [
        (c, "NET/Socket/0", None) for c in (0, 0, 1, 1, 2, 2, 3, 3)
    ]  # four channels, send and receive; no Socket device list was logged, so no port


def test_only_nccl_timing_batches(tmp_path: Path) -> None:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=2), duration_s=0.0, faults="none"))
    with pytest.raises(ValueError, match="takes nccl_timing batches, not port_sample"):
        InspectorWriter(tmp_path).write(sim.step().port_sample)
