"""The rank x channel matrix: a slow column behind one leaf is a path, slow rows are hosts."""

from __future__ import annotations

from datetime import timedelta
from functools import cache

import numpy as np
import pyarrow as pa

from graywire.collectors.schemas import NCCL_TIMING, TS, make_batch
from graywire.detectors.findings import Finding
from graywire.detectors.nccl_channel import NcclChannelOutlier
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric

PATH = "nccl_slow_path@60s+200s={mag}:leaf-r2-000:1"


@cache
def simulate(faults: str, seed: int = 0, with_fabric: bool = True) -> tuple[Finding, ...]:
    """16 hosts: one 128-rank job, every rail's 16 NICs behind one leaf."""
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=16), duration_s=360.0, seed=seed, faults=faults))
    det = NcclChannelOutlier(sim.fabric if with_fabric else None)
    out: list[Finding] = []
    for st in sim.run():
        if st.nccl_timing is not None:
            out += det.observe(st.nccl_timing)
    return tuple(out)


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


def test_slow_path_is_one_network_finding_on_the_leaf_not_sixteen_hosts() -> None:
    for seed in (0, 1, 2):
        findings = simulate(PATH.format(mag=0.1), seed)
        firing = [f for f in findings if f.status == "firing"]
        assert firing and {f.kind for f in firing} == {"nccl_path_slow"}, seed
        assert {(f.node, f.entity) for f in firing} == {
            ("leaf-r2-000", "job-000:world|AllReduce|29|path leaf-r2-000")
        }
        assert 60 <= rel(firing[0]) <= 90  # within 30 s
        ev = firing[-1].evidence
        assert ev["side"] == "network" and ev["pattern"] == "column" and ev["channels"] == [1]
        assert len(ev["hosts"]) >= 14 and all(r % 8 == 2 for r in ev["ranks"])  # GPU 2 = rail 2
        assert ev["column_scores"]["1"]["elevated_hosts"] >= 14
        assert ev["row_score_median"] <= 0.25  # their other channels are normal
        assert 0.05 <= ev["windowed_slowdown"] <= 0.15
        assert "the path (link/switch), not the hosts" in firing[-1].summary
        cleared = [f for f in findings if f.status == "cleared"]
        assert [f.kind for f in cleared] == ["nccl_path_slow"] and 260 < rel(cleared[0]) <= 320


def test_three_slow_ranks_behind_one_leaf_stay_three_host_findings() -> None:
    """Rows, not a column: each rank is slow on every channel, so the leaf is not blamed."""
    faults = ",".join(f"slow_nic@60s+200s=0.2:gpu-{h:04d}/mlx5_2" for h in (1, 4, 9))
    firing = [f for f in simulate(faults) if f.status == "firing"]
    assert {f.kind for f in firing} == {"nccl_channel_slow"}
    assert {f.node for f in firing} == {"gpu-0001", "gpu-0004", "gpu-0009"}
    last = {f.node: f for f in firing}
    for f in last.values():
        assert f.evidence["side"] == "host" and f.evidence["pattern"] == "row"
        assert f.evidence["channels"] == [0, 1, 2, 3] and f.evidence["row_score"] == 1.0


def test_single_slow_channel_is_a_cell_on_its_host() -> None:
    firing = [f for f in simulate("slow_channel@60s+200s=0.3:gpu-0005/mlx5_3:2") if f.status == "firing"]
    assert [(f.kind, f.node, f.evidence["pattern"]) for f in firing] == [
        ("nccl_channel_slow", "gpu-0005", "cell")
    ]
    ev = firing[0].evidence
    assert ev["row_elevated_channels"] == 1 and ev["row_channels"] == 4
    assert ev["column_elevated_hosts_same_leaf"] == 1 and ev["leaf"] == "leaf-r3-000"


def test_without_a_fabric_model_the_path_is_still_not_blamed_on_hosts() -> None:
    firing = [f for f in simulate(PATH.format(mag=0.3), 0, False) if f.status == "firing"]
    assert {f.kind for f in firing} == {"nccl_path_slow"}
    assert {f.node for f in firing} == {None}
    assert "switch unknown" in firing[0].summary


def test_the_first_rank_of_a_slow_path_to_cross_is_the_paths_not_its_hosts() -> None:
    """The ranks behind a slow leaf fill their windows a poll or two apart (samples arrive at
    their own pace). The first to cross waits for its column rather than blaming its host."""
    fabric = build_fabric(TopologySpec(hosts=16))
    rng = np.random.default_rng(3)
    det = NcclChannelOutlier(fabric)
    found: list[Finding] = []
    rail2 = np.arange(128) % 8 == 2
    for poll in range(20):
        dur = 0.0125 * np.exp(rng.normal(0.0, 0.01, (128, 4)))
        if poll >= 10:
            dur[rail2, 1] *= 1.3  # channel 1 behind leaf-r2-000
        if poll == 9:
            dur[2, 1] *= 1.3  # one rank's samples show it a poll before the others'
        if poll >= 8:
            dur[2, 1] *= 1.3
        found += det.observe(timing_batch(poll, dur))
    firing = [f for f in found if f.status == "firing"]
    assert [(f.kind, f.node) for f in firing] == [("nccl_path_slow", "leaf-r2-000")]
    assert 0 in {int(h[-4:]) for h in firing[0].evidence["hosts"]}  # the early rank is in it


def test_a_lone_slow_channel_is_not_held_back() -> None:
    """No column forming beside it: a slow channel fires on the poll its window says so."""
    fabric = build_fabric(TopologySpec(hosts=16))
    rng = np.random.default_rng(4)
    det = NcclChannelOutlier(fabric)
    opened_at = []
    for poll in range(12):
        dur = 0.0125 * np.exp(rng.normal(0.0, 0.01, (128, 4)))
        if poll >= 6:
            dur[42, 1] *= 1.3
        fired = [f for f in det.observe(timing_batch(poll, dur)) if f.status == "firing"]
        opened_at += [(poll, f.kind, f.node) for f in fired]
    assert opened_at == [(8, "nccl_channel_slow", "gpu-0005")]  # the third slow sample of five


def test_a_path_whose_ranks_name_no_gpu_says_how_to_find_the_switch() -> None:
    """Inspector records alone name no GPU: with a model loaded the switch is still unknown,
    and the finding says why and what to set, not that there is no model."""
    det = NcclChannelOutlier(build_fabric(TopologySpec(hosts=16)))
    rng = np.random.default_rng(5)
    found: list[Finding] = []
    for poll in range(14):
        dur = 0.0125 * np.exp(rng.normal(0.0, 0.01, (128, 4)))
        if poll >= 6:
            dur[np.arange(128) % 8 == 2, 1] *= 1.3
        found += det.observe(timing_batch(poll, dur, devices=False))
    firing = [f for f in found if f.status == "firing"]
    assert [(f.kind, f.node) for f in firing][:1] == [("nccl_path_slow", None)]
    assert "gpus_per_host" in firing[0].summary and "no fabric model" not in firing[0].summary


def timing_batch(poll: int, dur: np.ndarray, devices: bool = True) -> pa.RecordBatch:
    """One poll of a 128-rank job on gpu-0000..gpu-0015, eight GPUs (one NIC each) per host;
    without ``devices`` the rows name no GPU, as an Inspector record alone does."""
    ranks, chans = dur.shape
    rank = np.repeat(np.arange(ranks), chans)
    n = rank.size
    return make_batch(
        NCCL_TIMING,
        n,
        {
            "time": pa.array([EPOCH + timedelta(seconds=10 * poll)] * n, type=TS),
            "job": pa.array(["job-000"] * n).dictionary_encode(),
            "communicator": pa.array(["job-000:world"] * n).dictionary_encode(),
            "rank": pa.array(rank, pa.int32()),
            "host": pa.array([f"gpu-{r // 8:04d}" for r in rank]).dictionary_encode(),
            "device": pa.array(rank % 8 if devices else [None] * n, pa.int16()),
            "collective": pa.array(["AllReduce"] * n).dictionary_encode(),
            "message_bytes": pa.array([2**29] * n, pa.int64()),
            "channel": pa.array(np.tile(np.arange(chans), ranks), pa.int16()),
            "duration_seconds": pa.array(dur.ravel(), pa.float64()),
        },
    )
