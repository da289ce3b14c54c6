"""nccl_hop_slow: a slow hop is blamed on its NIC pair; stragglers, job-wide shifts and paths are not."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.schemas import NCCL_PROXY, TS, make_batch
from graywire.detectors.findings import Finding
from graywire.detectors.nccl_peer import NcclHopConfig, NcclHopDetector, _pack, _unpack
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec


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


# -- bounded state ------------------------------------------------------------------------------------
def ring(k: int, comm: str, rng: np.random.Generator, slow: int | None = None, n: int = 16) -> pa.RecordBatch:
    """One collective of a 16-rank ring on one channel: each rank's send to the next and the
    next rank's receive from it (so 16 edges, 32 rows); edge ``slow -> slow + 1`` 50% slower."""
    src = np.arange(n)
    dst = (src + 1) % n
    wait = 1e-3 * np.exp(rng.normal(0, 0.005, (2, n)))
    if slow is not None:
        wait[:, slow] *= 1.5
    m = 2 * n
    return make_batch(
        NCCL_PROXY,
        m,
        {
            "time": pa.array([EPOCH + timedelta(seconds=10 * k)] * m, TS),
            "job": pa.array(["j"] * m).dictionary_encode(),
            "communicator": pa.array([comm] * m).dictionary_encode(),
            "rank": pa.array(np.concatenate([src, dst]), pa.int32()),
            "collective": pa.array(["AllReduce"] * m).dictionary_encode(),
            "seq": pa.array([k] * m, pa.int64()),
            "channel": pa.array([0] * m, pa.int16()),
            "peer": pa.array(np.concatenate([dst, src]), pa.int32()),
            "direction": pa.array(["send"] * n + ["recv"] * n).dictionary_encode(),
            "steps": pa.array([8] * m, pa.int32()),
            "bytes": pa.array([2**22] * m, pa.int64()),
            "send_wait_seconds": pa.array(np.concatenate([wait[0], np.full(n, np.nan)])),
            "recv_wait_seconds": pa.array(np.concatenate([np.full(n, np.nan), wait[1]])),
        },
    )


def combined(*batches: pa.RecordBatch) -> pa.RecordBatch:
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def state_rows(det: NcclHopDetector) -> set[int]:
    """Rows of every per-edge array: they must agree with each other."""
    w, r = det.windows["send"], det.last_raw["recv"]
    return {det.cells.n, det._label.shape[0], w.hist.shape[0], det.windows["recv"].count.size, r.size,
            det.last_med["send"].size, det.last_seen.size, det.hyst.is_open.size}  # fmt: skip


def test_a_flood_of_new_communicators_leaves_the_state_bounded() -> None:
    """A new communicator in every poll, 200 of them: one is stale ``expire_polls`` polls after
    its last and gone at the next compaction (every ``expire_polls`` polls), so at most
    ``2 * expire_polls`` keep rows."""
    rng = np.random.default_rng(20)
    det = NcclHopDetector(cfg=NcclHopConfig(expire_polls=5))
    sizes = []
    for k in range(200):
        det.observe(ring(k, f"flood-{k}", rng))
        sizes.append(len(det.comms.keys))
        assert state_rows(det) == {16 * sizes[-1]}
    assert det.polls == 200 and max(sizes) == 2 * 5
    assert det.over_capacity == 0


def test_a_quiet_communicator_is_forgotten_and_a_live_slow_hop_survives_renumbering() -> None:
    rng = np.random.default_rng(21)
    det = NcclHopDetector(cfg=NcclHopConfig(expire_polls=4))
    found: list[Finding] = []
    for k in range(3):  # "early" takes the first ids, then goes quiet
        det.observe(ring(k, "early", rng))
    for k in range(3, 20):
        found += det.observe(ring(k, "live", rng, slow=6))
    assert det.comms.keys == ["live"] and state_rows(det) == {16}
    assert [(f.status, f.entity) for f in found] == [("firing", "live|hop 6->7")]
    for k in range(20, 30):  # the open edge was renumbered by the compaction: it still closes
        found += det.observe(ring(k, "live", rng))
    assert [(f.status, f.entity) for f in found][1:] == [("cleared", "live|hop 6->7")]
    assert "stopped reporting" not in found[1].summary
    # A forgotten communicator that comes back starts afresh: a full window before judging.
    det.observe(ring(30, "early", rng, slow=3))
    assert det.windows["send"].count[det.cells.n - 16 :].tolist() == [1] * 16


def test_the_caps_count_rows_left_out_and_take_whole_communicators() -> None:
    rng = np.random.default_rng(22)
    det = NcclHopDetector(cfg=NcclHopConfig(expire_polls=4, max_edges=40))
    det.observe(combined(*(ring(0, c, rng) for c in ("a", "b", "c"))))
    # Two communicators of 16 edges fit; the third would fit only in part, so none of it does.
    assert det.cells.n == 32 and det.over_capacity == 32
    found: list[Finding] = []
    for k in range(1, 16):  # "a" and "b" end; "c" has a slow hop and gets rows once they go
        found += det.observe(ring(k, "c", rng, slow=2))
    assert det.over_capacity == 32 * 5  # polls 1 to 5: "a" and "b" are stale after poll 5
    assert det.comms.keys == ["c"] and det.cells.n == 16
    assert [(f.status, f.entity) for f in found] == [("firing", "c|hop 2->3")]
    det = NcclHopDetector(cfg=NcclHopConfig(max_communicators=1))
    det.observe(combined(ring(0, "a", rng), ring(0, "b", rng)))
    assert det.comms.keys == ["a"] and det.over_capacity == 32


def test_an_open_hop_that_stops_reporting_clears_once_then_is_forgotten() -> None:
    """Cleared, not kept open: the detector's rule is that an ended job leaves nothing open,
    and a poll without an edge's rows is no news only up to ``expire_polls``. After clearing,
    the edge's rows go with the next compaction, and so do the ranks learnt for it."""
    rng = np.random.default_rng(23)
    det = NcclHopDetector(cfg=NcclHopConfig(expire_polls=4))
    found: list[Finding] = []
    for k in range(8):
        found += det.observe(ring(k, "ended", rng, slow=9))
    for k in range(8, 24):
        found += det.observe(ring(k, "next", rng))
    assert [(f.status, f.entity) for f in found] == [
        ("firing", "ended|hop 9->10"),
        ("cleared", "ended|hop 9->10"),
    ]
    assert found[1].summary == "hop rank 9 -> 10 stopped reporting for 4 polls (job ended?): closed"
    assert det.comms.keys == ["next"] and det.pair_open == {} and det._ranks == {}


def test_edge_keys_cannot_collide() -> None:
    """Keys pack (communicator, channel, sender, receiver) into 15, 8, 20 and 20 bits. Ids were
    once every communicator ever seen: 32,768 and up went negative (named after others) and
    65,536 landed on 0. Now a communicator id is live and below the cap, the cap is at most
    2**15, and ranks or channels past their bits are not judged rather than folded onto others."""
    with pytest.raises(ValueError, match="max_communicators"):
        NcclHopConfig(max_communicators=(1 << 15) + 1)
    top = [np.array([v]) for v in ((1 << 15) - 1, 255, (1 << 20) - 1, (1 << 20) - 2)]
    key = _pack(*top)
    assert key[0] > 0 and _unpack(key).ravel().tolist() == [int(v[0]) for v in top]
    rng = np.random.default_rng(24)
    det = NcclHopDetector()
    b = ring(0, "a", rng)
    b = b.set_column(b.schema.get_field_index("peer"), "peer", pa.array([1 << 20] * 32, pa.int32()))
    det.observe(b)
    assert det.cells.n == 0
