"""NCCL channel outliers: found and localized from fabricsim, quiet on whole-job slowdowns and spikes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cache

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.schemas import NCCL_TIMING, TS, make_batch
from graywire.detectors.findings import Finding
from graywire.detectors.nccl_channel import NcclChannelConfig, NcclChannelOutlier
from graywire.fabricsim.faults import Fault
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric

POLL = 10.0
START = 60.0
SLOW_CHANNEL = "slow_channel@60s+200s={mag}:gpu-0005/mlx5_3:2"


# -- fabricsim ----------------------------------------------------------------------------------------
@cache
def simulate(faults: str, seed: int = 0, duration_s: float = 360.0, hosts: int = 16) -> tuple:
    """(faults, findings, per-poll median duration) of one run; 16 hosts = one 128-rank job."""
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=hosts), duration_s=duration_s, seed=seed, faults=faults)
    )
    det = NcclChannelOutlier(sim.fabric)
    findings: list[Finding] = []
    medians: list[float] = []
    for st in sim.run():
        if st.nccl_timing is not None:
            findings += det.observe(st.nccl_timing)
            medians.append(float(np.median(st.nccl_timing.column("duration_seconds").to_numpy())))
    return tuple(sim.faults), tuple(findings), tuple(medians)


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


def check_localized(f: Finding, fault: Fault, channel: int) -> None:
    assert f.kind == "nccl_channel_slow"
    assert f.node == "gpu-0005" == fault.node
    assert f.port == "gpu-0005/mlx5_3" == fault.port
    ev = f.evidence
    assert (ev["job"], ev["communicator"], ev["collective"]) == ("job-000", "job-000:world", "AllReduce")
    assert (ev["host"], ev["device"], ev["rank"], ev["channel"]) == ("gpu-0005", 3, fault.rank, channel)
    assert fault.rank == 5 * 8 + 3
    assert ev["peers"] == 128  # ranks on the same channel


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_slow_channel_30_percent_found_within_30_s(seed: int) -> None:
    faults, findings, _ = simulate(SLOW_CHANNEL.format(mag=0.3), seed)
    fault = faults[0]
    assert (fault.start_s, fault.end_s, fault.channel) == (START, 260.0, 2)
    firing = [f for f in findings if f.status == "firing"]
    assert len(firing) == 1
    f = firing[0]
    assert START <= rel(f) <= START + 30
    check_localized(f, fault, channel=2)
    # Peers on the slow hop's ring wait 15% of the slowdown (fabricsim's model).
    assert f.evidence["slowdown_vs_peers"] == pytest.approx(1.3 / 1.045 - 1, abs=0.05)
    assert f.evidence["windowed_slowdown"] >= 0.05
    assert f.score >= 5.0
    assert "slower" in f.summary


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_slow_channel_10_percent_found_and_localized(seed: int) -> None:
    faults, findings, _ = simulate(SLOW_CHANNEL.format(mag=0.1), seed)
    fault = faults[0]
    firing = [f for f in findings if f.status == "firing"]
    assert len(firing) == 1
    assert START <= rel(firing[0]) <= START + 60
    check_localized(firing[0], fault, channel=2)
    assert firing[0].evidence["slowdown_vs_peers"] == pytest.approx(1.1 / 1.015 - 1, abs=0.04)


def test_slow_channel_10_percent_found_within_30_s() -> None:
    delays = []
    for seed in range(5):
        _, findings, _ = simulate(SLOW_CHANNEL.format(mag=0.1), seed)
        delays.append(min(rel(f) for f in findings if f.status == "firing") - START)
    assert max(delays) <= 30


def test_slow_channel_is_cleared_after_the_fault_ends() -> None:
    faults, findings, _ = simulate(SLOW_CHANNEL.format(mag=0.3), 0)
    fault = faults[0]
    assert [f.status for f in findings] == ["firing", "cleared"]
    cleared = findings[1]
    assert fault.end_s < rel(cleared) <= fault.end_s + 60
    assert cleared.entity == findings[0].entity
    check_localized(cleared, fault, channel=2)


def test_slow_nic_found_on_every_channel_as_one_rank_incident() -> None:
    faults, findings, _ = simulate("slow_nic@60s+200s:gpu-0005/mlx5_3", 0)
    fault = faults[0]
    firing = [f for f in findings if f.status == "firing"]
    assert sorted(f.evidence["channel"] for f in firing) == [0, 1, 2, 3]
    assert {f.entity for f in firing} == {"job-000:world|AllReduce|29|rank 43"}  # one incident
    assert firing[-1].evidence["channels"] == [0, 1, 2, 3]
    for f in firing:
        assert START <= rel(f) <= START + 30
        check_localized(f, fault, channel=f.evidence["channel"])
        # 20% slower, while every peer waits 3% longer for it: 1.2 / 1.03 against the median.
        assert f.evidence["windowed_slowdown"] == pytest.approx(1.2 / 1.03 - 1, abs=0.04)
    cleared = [f for f in findings if f.status == "cleared"]
    assert len(cleared) == 1  # when its last slow channel recovers
    assert all(fault.end_s < rel(f) <= fault.end_s + 60 for f in cleared)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_runs_give_no_finding(seed: int) -> None:
    _, findings, _ = simulate("none", seed, duration_s=1200.0)
    assert findings == ()


def test_checkpoint_burst_blames_no_one() -> None:
    _, findings, medians = simulate("checkpoint_burst@60s+120s", 0)
    assert findings == ()
    # The whole job really did slow down by ~30% for the burst.
    before, during = np.median(medians[:5]), np.median(medians[7:17])
    assert during / before == pytest.approx(1.3, abs=0.05)


def test_two_jobs_blame_the_right_communicator() -> None:
    faults, findings, _ = simulate("slow_channel@60s+100s=0.3:gpu-0040/mlx5_6:1", 0, 240.0, 64)
    fault = faults[0]
    assert (fault.job, fault.rank) == ("job-001", 8 * 8 + 6)
    firing = [f for f in findings if f.status == "firing"]
    assert len(firing) == 1
    ev = firing[0].evidence
    assert (ev["communicator"], ev["rank"], ev["channel"], ev["peers"]) == ("job-001:world", 70, 1, 256)
    assert (firing[0].node, firing[0].port) == ("gpu-0040", "gpu-0040/mlx5_6")


# -- hand-built batches -----------------------------------------------------------------------------
T0 = datetime(2026, 2, 1, tzinfo=UTC)
BASE = 0.0125


def nccl_batch(
    poll: int,
    dur: np.ndarray,
    channel: Sequence[int | None] | None = None,
    comm: str = "job-a:world",
    message_bytes: int = 64 * 2**20,
    host_prefix: str = "node-",
) -> pa.RecordBatch:
    """One poll of a communicator: ``dur`` is (ranks, channels), or flat with explicit ``channel``."""
    if channel is None:
        ranks, chans = dur.shape
        rank = np.repeat(np.arange(ranks), chans)
        channel = np.tile(np.arange(chans), ranks).tolist()
    else:
        rank = np.arange(dur.size) % 64
    dur = dur.ravel()
    n = dur.size
    return make_batch(
        NCCL_TIMING,
        n,
        {
            "time": pa.array([T0 + timedelta(seconds=POLL * poll)] * n, type=TS),
            "job": pa.array(["job-a"] * n).dictionary_encode(),
            "communicator": pa.array([comm] * n).dictionary_encode(),
            "rank": pa.array(rank, pa.int32()),
            "host": pa.array([f"{host_prefix}{r // 8}" for r in rank]).dictionary_encode(),
            "device": pa.array(rank % 8, pa.int16()),
            "collective": pa.array(["AllReduce"] * n).dictionary_encode(),
            "message_bytes": pa.array([message_bytes] * n, pa.int64()),
            "channel": pa.array(channel, pa.int16()),
            "duration_seconds": pa.array(dur, pa.float64()),
        },
    )


def healthy(rng: np.random.Generator, ranks: int, chans: int) -> np.ndarray:
    return BASE * np.exp(rng.normal(0.0, 0.01, (ranks, chans)))


def test_single_slow_samples_never_open() -> None:
    rng = np.random.default_rng(0)
    det = NcclChannelOutlier()
    found: list[Finding] = []
    for p in range(64):
        d = healthy(rng, 16, 2)
        d.flat[p % 32] *= 2.0  # every (rank, channel) gets one 2x spike, one per poll
        if p in (40, 43):  # and one gets two within a window: still only 2 of 5
            d[5, 1] *= 3.0
        found += det.observe(nccl_batch(p, d))
    assert found == []
    # Control: three slow samples in a row on one channel do open, on the third.
    opened = []
    for p in range(64, 67):
        d = healthy(rng, 16, 2)
        d[9, 0] *= 1.5
        opened.append(det.observe(nccl_batch(p, d)))
    assert [len(o) for o in opened] == [0, 0, 1]
    f = opened[2][0]
    # Without a fabric model the NIC is named from host and device, unchecked.
    assert (f.status, f.evidence["rank"], f.evidence["channel"], f.node, f.port) == (
        "firing", 9, 0, "node-1", "node-1/mlx5_1",
    )  # fmt: skip
    assert f.evidence["device"] == 1
    assert f.evidence["windowed_slowdown"] == pytest.approx(0.5, abs=0.03)


@pytest.mark.parametrize(("ranks", "min_peers", "fires"), [(7, 8, False), (8, 8, True), (7, 4, True)])
def test_groups_with_fewer_than_min_peers_are_not_judged(ranks: int, min_peers: int, fires: bool) -> None:
    rng = np.random.default_rng(1)
    det = NcclChannelOutlier(cfg=NcclChannelConfig(min_peers=min_peers))
    per_poll = []
    for p in range(10):
        d = healthy(rng, ranks, 1)
        d[0, 0] *= 1.5
        per_poll.append(det.observe(nccl_batch(p, d)))
    if not fires:
        assert per_poll == [[]] * 10
        return
    # The window must fill first (5 polls), then it opens at once.
    assert [len(x) for x in per_poll] == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    f = per_poll[4][0]
    assert (f.evidence["rank"], f.evidence["channel"], f.evidence["peers"]) == (0, 0, ranks)
    assert f.evidence["peer_median_seconds"] == pytest.approx(BASE, rel=0.03)
    assert f.evidence["duration_seconds"] == pytest.approx(1.5 * BASE, rel=0.05)


def test_invalid_rows_are_ignored_and_not_counted_as_peers() -> None:
    rng = np.random.default_rng(2)

    def poll(p: int, valid: int) -> pa.RecordBatch:
        d = healthy(rng, valid, 1).ravel()
        d[0] *= 1.5
        # Whole-collective rows (no channel), far slower: not peers of channel rows.
        whole = np.full(valid, 50 * BASE)
        bad = np.array([0.0, -BASE, np.nan, np.inf])  # broken timings on extra ranks
        dur = np.concatenate([d, whole, bad])
        channel = [0] * valid + [None] * valid + [0] * bad.size
        return nccl_batch(p, dur, channel=channel)

    seven = NcclChannelOutlier()
    assert [seven.observe(poll(p, 7)) for p in range(8)] == [[]] * 8
    eight = NcclChannelOutlier()
    got = [eight.observe(poll(p, 8)) for p in range(8)]
    assert [len(x) for x in got] == [0, 0, 0, 0, 1, 0, 0, 0]
    ev = got[4][0].evidence
    assert (ev["rank"], ev["channel"], ev["peers"]) == (0, 0, 8)
    assert ev["peer_median_seconds"] == pytest.approx(BASE, rel=0.03)


def test_batches_with_only_invalid_rows_or_no_rows() -> None:
    det = NcclChannelOutlier()
    only_whole = nccl_batch(0, np.full(16, BASE), channel=[None] * 16)
    only_bad = nccl_batch(1, np.array([0.0, -1.0, np.nan, 0.0]), channel=[0, 1, 2, 3])
    empty = nccl_batch(2, np.zeros(0), channel=[])
    for b in (only_whole, only_bad, empty):
        assert det.observe(b) == []


def test_whole_communicator_shift_blames_no_one() -> None:
    rng = np.random.default_rng(3)
    det = NcclChannelOutlier()
    found = []
    for p in range(30):
        factor = 1.5 if 10 <= p < 20 else 1.0  # everyone slows down together
        found += det.observe(nccl_batch(p, factor * healthy(rng, 16, 4)))
    assert found == []


def test_groups_are_separated_by_communicator_and_message_size() -> None:
    rng = np.random.default_rng(4)
    det = NcclChannelOutlier()
    found = []
    for p in range(8):
        small = healthy(rng, 16, 1)
        big = 4 * healthy(rng, 16, 1)  # 4x the bytes, 4x the time: its own peer group
        other = healthy(rng, 16, 1)
        other[3, 0] *= 1.4
        batch = pa.Table.from_batches(
            [
                nccl_batch(p, small, message_bytes=2**20),
                nccl_batch(p, big, message_bytes=2**22),
                nccl_batch(p, other, comm="job-b:world", message_bytes=2**20),
            ]
        ).combine_chunks()
        found += det.observe(batch.to_batches()[0])
    assert [(f.evidence["communicator"], f.evidence["rank"], f.evidence["peers"]) for f in found] == [
        ("job-b:world", 3, 16)
    ]


def test_cleared_after_the_channel_recovers() -> None:
    rng = np.random.default_rng(5)
    det = NcclChannelOutlier()
    statuses = []
    for p in range(25):
        d = healthy(rng, 16, 2)
        if 5 <= p < 12:
            d[2, 1] *= 1.3
        statuses += [(p, f.status) for f in det.observe(nccl_batch(p, d))]
    # Opens on the third slow poll (window full since poll 4); once healthy again, the windowed
    # median drops on the third healthy poll (14) and three good polls later (16) it closes.
    assert statuses == [(7, "firing"), (16, "cleared")]


@pytest.mark.parametrize(("prefix", "port"), [("gpu-000", "gpu-0002/mlx5_5"), ("node-", None)])
def test_port_is_named_only_when_the_fabric_knows_it(prefix: str, port: str | None) -> None:
    rng = np.random.default_rng(6)
    det = NcclChannelOutlier(build_fabric(TopologySpec(hosts=8)))
    found = []
    for p in range(5):
        d = healthy(rng, 32, 1)
        d[21, 0] *= 1.5  # rank 21 = host 2, GPU 5
        found += det.observe(nccl_batch(p, d, host_prefix=prefix))
    assert [(f.node, f.port, f.evidence["device"]) for f in found] == [(f"{prefix}2", port, 5)]


def test_two_collective_instances_in_one_poll_give_one_finding() -> None:
    rng = np.random.default_rng(8)
    det = NcclChannelOutlier()
    found = []
    for p in range(8):
        seq = []
        for _ in range(2):
            d = healthy(rng, 16, 2)
            d[3, 1] *= 1.5
            seq.append(nccl_batch(p, d))
        found += det.observe(pa.Table.from_batches(seq).combine_chunks().to_batches()[0])
    assert [(f.status, f.evidence["rank"], f.evidence["channel"]) for f in found] == [("firing", 3, 1)]
    assert found[0].evidence["peers"] == 16  # ranks on the channel, not rows


def test_a_job_that_ends_while_slow_clears_its_rank() -> None:
    rng = np.random.default_rng(3)
    det = NcclChannelOutlier(cfg=NcclChannelConfig(expire_polls=4))
    found = []
    for p in range(8):
        d = healthy(rng, 32, 4)
        d[21, :] *= 1.5  # rank 21: every channel slow
        found += det.observe(nccl_batch(p, d))
    assert [f.status for f in found] == ["firing"] * 4  # one rank incident, updated per channel
    for p in range(8, 14):  # job-a has ended; another communicator keeps reporting
        found += det.observe(nccl_batch(p, healthy(rng, 32, 4), comm="job-b:world"))
    cleared = [f for f in found if f.status == "cleared"]
    assert len(cleared) == 1
    assert cleared[0].entity == found[0].entity
    assert "stopped reporting" in cleared[0].summary


def test_cells_of_ended_jobs_are_forgotten_and_live_ones_keep_working() -> None:
    """Job after job must not grow the per-cell state for ever."""
    rng = np.random.default_rng(5)
    det = NcclChannelOutlier(cfg=NcclChannelConfig(expire_polls=4))
    poll = 0
    for job in range(6):  # six jobs of 32 ranks x 4 channels, one after the other
        for _ in range(6):
            det.observe(nccl_batch(poll, healthy(rng, 32, 4), comm=f"job-{job}:world"))
            poll += 1
    # Only the last job's cells (and at most one ended job awaiting compaction) remain.
    assert det._n_entities <= 2 * 32 * 4
    assert det.windows.hist.shape[0] == det.windows.count.size == det.last_seen.size == det._n_entities
    # The live job still opens and clears a slow rank after its ids were renumbered.
    found = []
    for _ in range(8):
        d = healthy(rng, 32, 4)
        d[7, :] *= 1.5
        found += det.observe(nccl_batch(poll, d, comm="job-5:world"))
        poll += 1
    assert {f.status for f in found} == {"firing"} and found[0].evidence["rank"] == 7
    for _ in range(8):
        found += det.observe(nccl_batch(poll, healthy(rng, 32, 4), comm="job-5:world"))
        poll += 1
    assert [f.status for f in found][-1] == "cleared"
