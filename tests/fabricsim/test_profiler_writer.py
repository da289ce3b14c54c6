"""fabricsim's proxy steps through the example plugin's dump format, the real parser and the detector."""

from __future__ import annotations

import json
from pathlib import Path

from graywire.collectors.nccl.tail import NcclFileCollector
from graywire.detectors.nccl_peer import NcclHopDetector
from graywire.fabricsim.profiler_writer import ProfilerWriter
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec


def _sim(faults: str, duration: float = 150.0) -> FabricSim:
    spec = TopologySpec(hosts=16, gpus=2, hosts_per_leaf=8)
    return FabricSim(SimConfig(topology=spec, interval_s=10.0, duration_s=duration, seed=3, faults=faults,
                               job_hosts=16))  # fmt: skip


def test_slow_hop_is_blamed_on_its_nic_pair_through_the_dump_format(tmp_path: Path) -> None:
    sim = _sim("slow_hop@30s+600s=0.5:gpu-0003/mlx5_1")
    (hop,) = sim.faults
    assert (hop.port, hop.peer) == ("gpu-0003/mlx5_1", "gpu-0004/mlx5_1")
    writer = ProfilerWriter(tmp_path)
    col = NcclFileCollector(tmp_path / "job-000", format="profiler", debug_pattern="nccl.*", job="job-000")
    det = NcclHopDetector(sim.fabric)
    found = []
    for step in sim.run():
        if step.nccl_proxy is None:
            continue
        writer.write(step.nccl_proxy)
        col.collect()
        batch = col.collect_proxy()
        assert batch is not None and batch.num_rows == step.nccl_proxy.num_rows
        found += det.observe(batch)
    writer.close()
    assert col.skipped_lines == 0
    # Every dump is valid JSON once closed, as the plugin leaves it.
    dump = next((tmp_path / "job-000").glob("gpu-0003_*_7.json"))
    assert json.loads(dump.read_text())[-1] == {}
    (f,) = [f for f in found if f.status == "firing"]
    assert f.kind == "nccl_hop_slow" and f.node is None
    assert f.link == "gpu-0003/mlx5_1<->gpu-0004/mlx5_1"
    ev = f.evidence
    assert (ev["src_rank"], ev["dst_rank"]) == (7, 9)
    assert (ev["src_host"], ev["dst_host"], ev["src_device"], ev["dst_device"]) == (
        "gpu-0003",
        "gpu-0004",
        1,
        1,
    )
    assert ev["channels"] == [0, 1, 2, 3] and ev["side"] == "network"
    assert ev["sender_send_wait_seconds_per_gib"] > 1.3 * ev["peers_median_sender_send_wait_seconds_per_gib"]
    assert (
        ev["receiver_recv_wait_seconds_per_gib"] > 1.2 * ev["peers_median_receiver_recv_wait_seconds_per_gib"]
    )
    assert f.evidence["communicator"].startswith("0x")  # the profiler's CommHash
