"""The simulator: determinism, counter behaviour, and what each fault does to the counters."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.schemas import (
    LOGICAL_ACTIVE,
    LOGICAL_DOWN,
    NCCL_TIMING,
    PHYS_LINK_UP,
    PHYS_POLLING,
    PORT_SAMPLE,
)
from graywire.fabricsim.sim import EPOCH, SIM_COUNTERS, FabricSim, SimConfig, SimStep, truth_document
from graywire.fabricsim.topology import TopologySpec

G = 10**9
NIC = "gpu-0001/mlx5_2"
LEAF = "leaf-r2-000/p2"  # the other end of NIC's link
OTHER = "gpu-0004/mlx5_5"  # an unrelated NIC


def simulate(
    faults: str, duration: float = 200.0, seed: int = 0, hosts: int = 8
) -> tuple[FabricSim, list[SimStep]]:
    cfg = SimConfig(
        topology=TopologySpec(hosts=hosts),
        interval_s=10.0,
        duration_s=duration,
        seed=seed,
        job_hosts=8,
        faults=faults,
    )
    sim = FabricSim(cfg)
    return sim, list(sim.run())


def by_port(step: SimStep, column: str) -> dict[str, Any]:
    b = step.port_sample
    return dict(zip(b.column("port").to_pylist(), b.column(column).to_pylist(), strict=True))


def series(steps: list[SimStep], column: str, key: str) -> list[Any]:
    return [by_port(s, column).get(key, "missing") for s in steps]


def test_steps_times_and_schemas() -> None:
    sim, steps = simulate("none", duration=50)
    assert sim.n_steps == 6
    assert [s.index for s in steps] == list(range(6))
    assert [(s.time - EPOCH).total_seconds() for s in steps] == [0, 10, 20, 30, 40, 50]
    assert steps[0].nccl_timing is None  # no collective has run at the first poll
    for s in steps:
        assert s.port_sample.schema.equals(PORT_SAMPLE, check_metadata=True)
        assert s.port_sample.num_rows == 256
        assert set(s.port_sample.column("time").to_pylist()) == {s.time}
    for s in steps[1:]:
        assert s.nccl_timing.schema.equals(NCCL_TIMING, check_metadata=True)
        assert s.nccl_timing.num_rows == 64 * 4  # 64 ranks x 4 channels
    b = steps[1].port_sample
    assert set(b.column("source").to_pylist()) == {"fabricsim"}
    assert set(b.column("phys_state").to_pylist()) == {PHYS_LINK_UP}
    assert set(b.column("logical_state").to_pylist()) == {LOGICAL_ACTIVE}
    assert set(b.column("speed_bps").to_pylist()) == {800 * G}
    assert set(b.column("width").to_pylist()) == {4}
    # Counters a device lacks are null: RoCE NP/RP counters exist on NICs only, PFC on priority 3 only.
    ecn = by_port(steps[1], "ecn_marked_packets")
    assert all(v is not None for k, v in ecn.items() if k.startswith("gpu-"))
    assert all(v is None for k, v in ecn.items() if not k.startswith("gpu-"))
    assert b.column("pfc0_rx_pause_frames").null_count == 256
    assert b.column("pfc3_rx_pause_frames").null_count == 0
    assert b.column("fec_lane_errors").null_count == 256


def test_nccl_batch_layout() -> None:
    _, steps = simulate("none", duration=20)
    b = steps[1].nccl_timing
    assert b.column("rank").to_pylist()[:8] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert b.column("channel").to_pylist()[:8] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert set(b.column("nranks").to_pylist()) == {64}
    assert b.column("host").to_pylist()[4 * 9] == "gpu-0001"  # rank 9 = host 1, GPU 1
    assert b.column("device").to_pylist()[4 * 9] == 1
    assert set(b.column("job").to_pylist()) == {"job-000"}
    assert set(b.column("communicator").to_pylist()) == {"job-000:world"}
    assert set(b.column("collective").to_pylist()) == {"AllReduce"}
    assert set(b.column("transport").to_pylist()) == {"NET/IB"}
    assert set(b.column("message_bytes").to_pylist()) == {512 * 2**20}
    assert steps[2].nccl_timing.column("seq")[0].as_py() - b.column("seq")[0].as_py() == 8  # 10 s / 1.2 s
    dur = np.array(b.column("duration_seconds").to_pylist())
    assert 0.01 < np.median(dur) < 0.02
    busbw = np.array(b.column("bus_bandwidth_bps").to_pylist())
    expected = 512 * 2**20 * 2 * 63 / 64 / dur * 8
    assert np.allclose(busbw, expected)


def test_jobs_split_hosts() -> None:
    cfg = SimConfig(topology=TopologySpec(hosts=20, gpus=2), duration_s=10, job_hosts=8, faults="none")
    sim = FabricSim(cfg)
    assert sim.jobs == {"job-000": list(range(8)), "job-001": list(range(8, 16)), "job-002": [16, 17, 18, 19]}
    steps = list(sim.run())
    b = steps[1].nccl_timing
    assert b.num_rows == 40 * 4
    nranks = dict(zip(b.column("job").to_pylist(), b.column("nranks").to_pylist(), strict=True))
    assert nranks == {"job-000": 16, "job-001": 16, "job-002": 8}


def test_same_seed_same_run_other_seed_differs() -> None:
    a_sim, a = simulate("default", duration=130, seed=11)
    b_sim, b = simulate("default", duration=130, seed=11)
    c_sim, c = simulate("default", duration=130, seed=12)
    assert a_sim.faults == b_sim.faults
    assert truth_document(a_sim) == truth_document(b_sim)
    for x, y in zip(a, b, strict=True):
        assert x.port_sample.equals(y.port_sample)
        assert x.nccl_timing is None or x.nccl_timing.equals(y.nccl_timing)
    assert [(f.kind, f.port, f.node) for f in a_sim.faults] != [
        (f.kind, f.port, f.node) for f in c_sim.faults
    ]
    assert not a[5].port_sample.equals(c[5].port_sample)
    assert not a[5].nccl_timing.equals(c[5].nccl_timing)


def test_counters_monotonic_without_resets() -> None:
    _, steps = simulate("speed_downgrade@50+50:" + NIC + ",pfc_storm@20+60:" + OTHER, duration=150)
    prev = None
    for s in steps:
        b = s.port_sample
        cur = {c: np.array(b.column(c).to_pylist(), dtype=object) for c in SIM_COUNTERS}
        cur |= {
            c: np.array(b.column(c).to_pylist()) for c in ("pfc3_rx_pause_seconds", "pfc3_tx_pause_seconds")
        }
        if prev is not None:
            for c, v in cur.items():
                ok = np.array(
                    [p is None or (x is not None and x >= p) for p, x in zip(prev[c], v, strict=True)]
                )
                assert ok.all(), c
        prev = cur
    # Counters start mid-life (non-zero) and move: bytes at ~base utilization of 800G.
    rx = by_port(steps[0], "rx_bytes")
    assert min(rx.values()) >= 10**11
    quiet = "gpu-0005/mlx5_1"
    delta = by_port(steps[2], "rx_bytes")[quiet] - by_port(steps[1], "rx_bytes")[quiet]
    assert 0.3 * 800 * G * 10 / 8 < delta < 0.6 * 800 * G * 10 / 8
    downed = [by_port(s, "link_downed") for s in steps]
    assert all(v == 0 for d in downed for v in d.values())


def test_speed_downgrade_halves_both_ends_while_active() -> None:
    sim, steps = simulate(f"speed_downgrade@50+50:{NIC}", duration=150)
    assert sim.faults[0].peer == LEAF
    for s in steps:
        t = (s.time - EPOCH).total_seconds()
        want = 400 * G if 50 <= t < 100 else 800 * G
        speed = by_port(s, "speed_bps")
        assert speed[NIC] == want and speed[LEAF] == want, t
        assert sum(v != 800 * G for v in speed.values()) == (2 if want != 800 * G else 0)
        assert by_port(s, "width")[NIC] == 4
        assert by_port(s, "phys_state")[NIC] == PHYS_LINK_UP
    assert series(steps, "link_downed", NIC) == [0] * len(steps)
    assert series(steps, "link_downed", LEAF) == [0] * len(steps)
    # A slower link carries fewer bytes per interval.
    tx = series(steps, "tx_bytes", NIC)
    slow, fast = tx[8] - tx[7], tx[3] - tx[2]
    assert 0.35 < slow / fast < 0.65


def test_width_downgrade_gives_width_two_on_both_ends() -> None:
    _, steps = simulate(f"width_downgrade@50+50:{NIC}", duration=150)
    assert series(steps, "width", NIC)[4:11] == [4, 2, 2, 2, 2, 2, 4]
    assert series(steps, "width", LEAF)[4:11] == [4, 2, 2, 2, 2, 2, 4]
    assert series(steps, "speed_bps", NIC)[5] == 400 * G  # half the lanes, half the speed
    assert series(steps, "width", OTHER)[6] == 4
    assert series(steps, "link_downed", NIC)[-1] == 0


def test_short_retrain_down_then_back_at_full_speed() -> None:
    _, steps = simulate(f"short_retrain@95:{NIC}", duration=150)
    for key in (NIC, LEAF):
        assert (
            series(steps, "phys_state", key)[8:14]
            == [PHYS_LINK_UP, PHYS_LINK_UP] + [PHYS_POLLING] * 2 + [PHYS_LINK_UP] * 2
        )
        assert series(steps, "logical_state", key)[10:13] == [LOGICAL_DOWN, LOGICAL_DOWN, LOGICAL_ACTIVE]
        assert series(steps, "speed_bps", key)[9:13] == [800 * G, None, None, 800 * G]
        assert series(steps, "width", key)[9:13] == [4, None, None, 4]
        assert series(steps, "link_downed", key)[8:14] == [0, 0, 1, 1, 1, 1]
        assert series(steps, "link_recovery", key)[-1] == 1
    assert series(steps, "link_downed", OTHER)[-1] == 0
    # No bytes move while the link is down.
    tx = series(steps, "tx_bytes", NIC)
    assert tx[11] - tx[10] == 0
    assert tx[13] - tx[12] > 10**11


def test_link_down_is_counted_when_first_seen_down() -> None:
    # An outage starting exactly on a poll: every poll that shows the link down must already
    # count that outage in link_downed, on both ends.
    _, steps = simulate(f"short_retrain@100:{NIC}", duration=150)
    for key in (NIC, LEAF):
        state = series(steps, "phys_state", key)
        downed = series(steps, "link_downed", key)
        down = [i for i, v in enumerate(state) if v == PHYS_POLLING]
        assert len(down) == 2
        assert [downed[i] for i in down] == [1, 1], key
        assert downed[-1] == 1


def down_runs(states: list[int]) -> int:
    """Number of separate stretches of polls that show the link down."""
    down = [v == PHYS_POLLING for v in states]
    return sum(1 for i, d in enumerate(down) if d and (i == 0 or not down[i - 1]))


def test_link_flap_counts_every_flap() -> None:
    _, steps = simulate(f"link_flap@20+120=4:{NIC}", duration=150)
    # Four outages of 15 s starting at 20, 50, 80 and 110 s.
    for key in (NIC, LEAF):
        assert series(steps, "link_downed", key)[-1] == 4
        assert series(steps, "link_recovery", key)[-1] == 4
        assert down_runs(series(steps, "phys_state", key)) == 4
    assert series(steps, "link_downed", OTHER)[-1] == 0
    assert series(steps, "phys_state", NIC)[-1] == PHYS_LINK_UP


def test_counter_reset_drops_that_node_only() -> None:
    _, steps = simulate("counter_reset@50:gpu-0001", duration=100)
    node_ports = [f"gpu-0001/mlx5_{g}" for g in range(8)]
    at_reset = steps[5]
    for c in ("rx_bytes", "tx_packets", "phy_received_bits", "fec_corrected_bits"):
        vals = by_port(at_reset, c)
        assert [vals[k] for k in node_ports] == [0] * 8, c
    assert by_port(at_reset, "pfc3_tx_pause_seconds")[NIC] == 0.0
    # Before the reset the counters were large; afterwards they grow again from zero.
    rx = series(steps, "rx_bytes", NIC)
    assert rx[4] > 10**11
    assert 0 < rx[6] < rx[7] < rx[4]
    # The leaf end of the same link and other hosts keep counting.
    for key in (LEAF, OTHER):
        r = series(steps, "rx_bytes", key)
        assert all(b > a for a, b in itertools.pairwise(r)), key


def test_counter_wrap_wraps_rx_packets_below_2_32() -> None:
    _, steps = simulate(f"counter_wrap@50:{NIC}", duration=150)
    rx = series(steps, "rx_packets", NIC)
    step = rx[4] - rx[3]
    after = rx[5:]
    assert 2**32 - 4 * step < after[0] < 2**32  # jumps to just below 2**32
    assert all(v < 2**32 for v in after)
    drops = [i for i in range(1, len(after)) if after[i] < after[i - 1]]
    assert len(drops) == 1  # wraps once within a few polls
    i = drops[0]
    assert 1 <= i <= 4
    # Across the wrap the true increment is the 32-bit modular difference, a normal rate.
    inc = (after[i] - after[i - 1]) % 2**32
    normal = after[i - 1] - after[i - 2] if i >= 2 else after[i + 1] - after[i]
    assert 0.7 < inc / normal < 1.3
    assert series(steps, "tx_packets", NIC)[-1] < 2**32
    assert series(steps, "rx_bytes", NIC)[-1] > 2**32  # only packet counters are 32-bit
    leaf = series(steps, "rx_packets", LEAF)
    assert all(b > a for a, b in itertools.pairwise(leaf))  # the other end is unaffected


def test_collector_outage_drops_leaf_rows() -> None:
    _, steps = simulate("collector_outage@50+30:leaf-r2-000", duration=100)
    rows = [s.port_sample.num_rows for s in steps]
    assert rows == [256] * 5 + [240] * 3 + [256] * 3
    keys = steps[6].port_sample.column("port").to_pylist()
    assert not any(k.startswith("leaf-r2-000/") for k in keys)
    assert NIC in keys and "leaf-r3-000/p1" in keys
    # Counters kept counting while unseen.
    rx = series(steps, "rx_bytes", LEAF)
    assert rx[5:8] == ["missing"] * 3
    assert rx[8] - rx[4] > 3 * (rx[4] - rx[3])


def test_pfc_storm_pauses_for_the_whole_interval() -> None:
    _, steps = simulate(f"pfc_storm@50+50:{NIC}", duration=150)
    tx_pause = series(steps, "pfc3_tx_pause_seconds", NIC)
    rx_pause = series(steps, "pfc3_rx_pause_seconds", LEAF)
    for k in range(5, 10):
        assert tx_pause[k] - tx_pause[k - 1] == pytest.approx(9.95)
        assert rx_pause[k] - rx_pause[k - 1] == pytest.approx(9.95)
    assert tx_pause[4] < 0.01
    assert tx_pause[-1] - tx_pause[10] < 0.01  # over once the window ends
    frames = series(steps, "pfc3_tx_pause_frames", NIC)
    assert frames[6] - frames[5] == round(10 / 3.3e-6)
    tx = series(steps, "tx_bytes", NIC)
    assert tx[7] - tx[6] == 800 * G * 10 // 8 // 100  # 1% utilization while pausing
    assert series(steps, "pfc3_tx_pause_seconds", OTHER)[-1] < 0.1


def test_ber_ramp_raises_corrected_bits_by_orders_of_magnitude() -> None:
    _, steps = simulate(f"ber_ramp@50+100:{NIC}", duration=200)
    for key in (NIC, LEAF):
        c = np.diff(series(steps, "fec_corrected_bits", key))
        before = np.median(c[:4])
        assert 500 < before < 1e5  # healthy PAM4: 1e-10..5e-9 of 8e12 bits per poll
        assert c[13] > 300 * before  # late in the ramp (t = 140 s)
        assert c[5] < c[9] < c[13]  # and rising
        assert c[16] < 3 * before  # back to healthy after the window
    other = np.diff(series(steps, "fec_corrected_bits", OTHER))
    assert other.max() < 10 * np.median(other)


def test_ecn_hotspot_raises_marks_on_the_nic() -> None:
    _, steps = simulate(f"ecn_hotspot@50+50:{NIC}", duration=150)
    marks = np.diff(series(steps, "ecn_marked_packets", NIC))
    assert marks[6] > 20 * max(1, marks[:4].max())
    other = np.diff(series(steps, "ecn_marked_packets", OTHER))
    assert other[6] < 5 * max(10, other[:4].max())


def nccl_frame(step: SimStep) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = step.nccl_timing
    return (
        np.array(b.column("rank").to_pylist()),
        np.array(b.column("channel").to_pylist()),
        np.array(b.column("duration_seconds").to_pylist()),
    )


def test_slow_channel_slows_that_rank_and_channel() -> None:
    sim, steps = simulate("slow_channel@50+50=0.3:gpu-0002/mlx5_3:1", duration=150)
    f = sim.faults[0]
    assert (f.rank, f.channel) == (19, 1)
    ratio = []
    for s in steps[1:]:
        rank, ch, dur = nccl_frame(s)
        hit = (rank == 19) & (ch == 1)
        ratio.append(dur[hit][0] / np.median(dur[~hit]))
        if s.index in range(5, 10):
            assert np.median(dur[(rank == 19) & (ch != 1)]) < 1.1 * np.median(dur[~hit])
    during = ratio[4:9]  # t = 50 .. 90
    outside = ratio[:4] + ratio[9:]
    assert min(during) >= 1.2
    assert np.median(outside) < 1.05


def test_slow_nic_slows_every_channel_of_the_rank() -> None:
    _, steps = simulate("slow_nic@50+50=0.5:gpu-0006/mlx5_0", duration=150)
    rank, _, dur = nccl_frame(steps[7])
    mine = rank == 48
    assert mine.sum() == 4
    assert (dur[mine] >= 1.2 * np.median(dur[~mine])).all()


def test_checkpoint_burst_slows_whole_job_and_loads_links() -> None:
    _, steps = simulate("checkpoint_burst@50+30", duration=100)
    med = [float(np.median(nccl_frame(s)[2])) for s in steps[1:]]
    during, before, after = np.median(med[4:7]), np.median(med[:4]), np.median(med[7:])
    assert 1.15 < during / before < 1.45  # x1.3, give or take the job's step-to-step noise
    assert 0.9 < after / before < 1.1
    tx = series(steps, "tx_bytes", OTHER)
    assert tx[6] - tx[5] > 0.85 * 800 * G * 10 / 8


def test_speed_downgrade_slows_the_nics_rank() -> None:
    _, steps = simulate(f"speed_downgrade@50+50:{NIC}", duration=100)
    rank, _, dur = nccl_frame(steps[7])
    mine = rank == 10  # gpu-0001 GPU 2
    assert (dur[mine] > 1.5 * np.median(dur[~mine])).all()


def test_truth_document() -> None:
    sim, _ = simulate(f"speed_downgrade@50+50:{NIC},counter_reset@20:gpu-0003", duration=100, seed=4)
    doc = truth_document(sim)
    assert doc == {
        "version": 1,
        "seed": 4,
        "hosts": 8,
        "ports": 256,
        "interval_s": 10.0,
        "duration_s": 100.0,
        "start": "2026-01-05T00:00:00+00:00",
        "faults": [
            {
                "id": "f000",
                "kind": "speed_downgrade",
                "start_s": 50.0,
                "end_s": 100.0,
                "magnitude": 0.5,
                "port": NIC,
                "peer": LEAF,
                "node": "gpu-0001",
                "benign": False,
            },
            {
                "id": "f001",
                "kind": "counter_reset",
                "start_s": 20.0,
                "end_s": 120.0,  # default duration: max(10 polls, 30% of the run)
                "magnitude": 0.0,
                "node": "gpu-0003",
                "benign": True,
            },
        ],
        "polls": 11,
    }


def test_port_dictionary_is_the_fabric_key_array() -> None:
    sim, steps = simulate("none", duration=10)
    port = steps[0].port_sample.column("port")
    assert isinstance(port, pa.DictionaryArray)
    assert port.dictionary.to_pylist() == sim.fabric.keys
    assert sim.fabric.lookup(port).tolist() == list(range(256))


def _tx_util(sim_faults: str, storage_nics: int = 2) -> tuple[FabricSim, list[tuple[float, float]]]:
    """Per poll: mean tx utilisation of the compute NICs and of the storage NICs."""
    from graywire.detectors.rates import CounterRates

    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=16, storage_nics=storage_nics), duration_s=300.0,
                              faults=sim_faults))  # fmt: skip
    f = sim.fabric
    purpose = np.array(f.purpose, dtype=object)
    rates = CounterRates()
    out = []
    for st in sim.run():
        b = rates.observe(st.port_sample)
        idx = f.lookup(b.column("port"))
        u = b.column("tx_bytes_per_second").to_numpy(zero_copy_only=False) * 8 / f.expected_speed_bps[idx]
        if st.index:
            out.append(
                (float(u[purpose[idx] == "compute"].mean()), float(u[purpose[idx] == "storage"].mean()), 0.0)
            )
    return sim, out


def test_a_checkpoint_writes_over_the_storage_nics_where_there_are_some_and_over_compute_when_misrouted() -> (
    None
):
    _, ok = _tx_util("checkpoint_burst@100s+60s")
    _, bad = _tx_util("checkpoint_on_compute@100s+200s=120")
    during, before = 13, 5  # polls at 140 s and 60 s
    assert ok[during][1] > 0.85 and ok[during][0] < 0.6 and ok[before][1] < 0.05
    assert bad[during][0] > 0.85 and bad[during][1] < 0.05 and bad[before][0] < 0.6
    # Periodic: the misrouted checkpoint comes back one period later, and is quiet between.
    assert bad[during + 12][0] > 0.85 and bad[during + 7][0] < 0.6
    with pytest.raises(ValueError, match="no storage NICs"):
        FabricSim(SimConfig(topology=TopologySpec(hosts=16), duration_s=60.0, faults="checkpoint_on_compute"))


def test_a_polarized_leaf_moves_its_upward_bytes_onto_its_hot_uplinks() -> None:
    from graywire.detectors.rates import CounterRates

    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=64), duration_s=200.0,
                              faults="ecmp_polarization@100s+200s=0.25:leaf-r3-001"))  # fmt: skip
    (fault,) = sim.faults
    f = sim.fabric
    rates = CounterRates()
    leaf = f.node_names.index("leaf-r3-001")
    ups = np.flatnonzero((f.node_of_port == leaf) & (f.port_role[f.peer] == "spine"))
    hot = np.isin(ups, [f.keys.index(k) for k in fault.extra["hot_uplinks"]])
    assert hot.sum() == 8 and ups.size == 32
    totals = []
    for st in sim.run():
        b = rates.observe(st.port_sample)
        if not st.index:
            continue
        tx = np.zeros(f.n_ports)
        tx[f.lookup(b.column("port"))] = b.column("tx_bytes_per_second").to_numpy(zero_copy_only=False)
        totals.append((tx[ups].sum(), tx[ups][hot].sum() / tx[ups].sum()))
    assert totals[5][1] == pytest.approx(8 / 32, abs=0.05)  # even before
    assert totals[15][1] > 0.9  # the hot quarter carries nearly all of it
    # The hot uplinks run at line rate and carry what fits of it: the rest waits (the job slows).
    assert totals[15][0] * totals[15][1] == pytest.approx(8 * 0.97 * 800e9 / 8, rel=0.02)
    assert totals[15][0] < totals[5][0]
