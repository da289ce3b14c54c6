"""nccl_hop_slow: a slow hop is blamed on its NIC pair; stragglers, job-wide shifts and paths are not."""

from __future__ import annotations

import pyarrow as pa

from detectors.findings import Finding
from detectors.nccl_peer import NcclHopDetector
from fabricsim.sim import FabricSim, SimConfig
from fabricsim.topology import TopologySpec


def _run(faults: str, duration: float = 400.0, seed: int = 1) -> tuple[FabricSim, list[Finding]]:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=64), interval_s=10.0, duration_s=duration,
                              seed=seed, faults=faults))  # fmt: skip
    det = NcclHopDetector(sim.fabric)
    found: list[Finding] = []
    for step in sim.run():
        if step.nccl_proxy is not None:
            found += det.observe(step.nccl_proxy)
    return sim, found


def test_a_slow_hop_opens_on_its_nic_pair_and_closes_after() -> None:
    sim, found = _run("slow_hop@60s+200s=0.2:gpu-0010/mlx5_4")
    (hop,) = sim.faults
    firing = [f for f in found if f.status == "firing"]
    cleared = [f for f in found if f.status == "cleared"]
    assert len(firing) == 1 and len(cleared) == 1
    f = firing[0]
    assert f.link == "gpu-0010/mlx5_4<->gpu-0011/mlx5_4" == f"{hop.port}<->{hop.peer}"
    assert f.port == "gpu-0010/mlx5_4" and f.node is None
    assert (f.evidence["src_rank"], f.evidence["dst_rank"]) == (84, 92)
    assert f.evidence["channels"] == [0, 1, 2, 3]
    assert 0.1 < f.evidence["windowed_slowdown"] < 0.3
    assert f.evidence["src_other_slow_edges"] == 0 and f.evidence["dst_other_slow_edges"] == 0
    assert 60 < (f.time - sim.cfg.start).total_seconds() <= 100  # a window, not one sample
    assert 260 <= (cleared[0].time - sim.cfg.start).total_seconds() <= 320
    assert cleared[0].entity == f.entity


def test_one_slow_channel_of_a_hop() -> None:
    _, found = _run("slow_hop@60s+200s=0.5:gpu-0020/mlx5_0:2")
    (f,) = [f for f in found if f.status == "firing"]
    assert f.evidence["channels"] == [2] and f.link == "gpu-0020/mlx5_0<->gpu-0021/mlx5_0"


def test_compute_straggler_job_slowdown_and_checkpoints_blame_no_hop() -> None:
    faults = ("straggler@50s+300s=0.5:gpu-0005/mlx5_2,job_slowdown@50s+300s=0.5,"
              "checkpoint_burst@100s+60s,slow_step@200s+10s=1.0")  # fmt: skip
    sim, found = _run(faults)
    assert {f.kind for f in sim.faults} == {"straggler", "job_slowdown", "checkpoint_burst", "slow_step"}
    assert found == []


def test_a_slow_leaf_is_a_path_not_many_hops() -> None:
    _, found = _run("nccl_slow_path@60s+200s=0.5:leaf-r3-000:1")
    assert [f for f in found if f.kind == "nccl_hop_slow"] == []


def test_a_downgraded_nic_slows_both_its_hops() -> None:
    _, found = _run("speed_downgrade@60s+200s=0.5:gpu-0007/mlx5_5")
    firing = [f for f in found if f.status == "firing"]
    assert sorted(f.link for f in firing if f.link) == [
        "gpu-0006/mlx5_5<->gpu-0007/mlx5_5", "gpu-0007/mlx5_5<->gpu-0008/mlx5_5",
    ]  # fmt: skip


def test_receiver_only_rows_judge_nothing_and_empty_batches_are_fine() -> None:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=64), interval_s=10.0, duration_s=200.0, seed=2,
                              faults="slow_hop@20s+300s=1.0:gpu-0001/mlx5_1"))  # fmt: skip
    det = NcclHopDetector(sim.fabric)
    for step in sim.run():
        if step.nccl_proxy is not None:
            b = step.nccl_proxy
            recv = b.filter(pa.compute.equal(b.column("direction").cast(pa.string()), "recv"))
            assert det.observe(recv) == []
            assert det.observe(b.slice(0, 0)) == []
