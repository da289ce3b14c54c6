"""fabricsim host trees: the files as a device writes them, and the agent reading them back."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest

from graywire.collectors.host.agent_server import AgentConfig, HostReader
from graywire.collectors.host.sysfs import SysfsConfig, read_ports
from graywire.collectors.schemas import PORT_COUNTERS
from graywire.fabricsim.hostfs import HostTreeWriter, rate_text, write_host_trees
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

G = 10**9
BAD = "gpu-0001/mlx5_2"


def make_sim(faults: str = f"speed_downgrade@10s+300s:{BAD}") -> FabricSim:
    return FabricSim(
        SimConfig(
            topology=TopologySpec(hosts=2, gpus=4, hosts_per_leaf=2),
            interval_s=10.0,
            duration_s=120.0,
            seed=11,
            job_hosts=2,
            faults=faults,
        )
    )


def rows_of(batch: pa.RecordBatch, host: str) -> dict[str, dict]:
    return {r["port"]: r for r in batch.to_pylist() if r["port"].startswith(host + "/")}


def agent_batch(writer: HostTreeWriter, host: str, t: datetime, **kw) -> pa.RecordBatch:
    cfg = AgentConfig(
        sysfs_root=writer.host_root(host), hostname=host, ethtool_dir=writer.ethtool_dir(host), **kw
    )
    return HostReader(cfg, clock=lambda: t).batch()


@pytest.mark.parametrize(
    ("speed", "width", "text"),
    [
        (800 * G, 4, "800 Gb/sec (4X XDR)"),
        (400 * G, 4, "400 Gb/sec (4X NDR)"),
        (400 * G, 2, "400 Gb/sec (2X XDR)"),
        (200 * G, 4, "200 Gb/sec (4X HDR)"),
        (25 * G, 1, "25 Gb/sec (1X EDR)"),
        (2_500_000_000, 1, "2.5 Gb/sec (1X SDR)"),
        (300 * G, 4, "300 Gb/sec (4X)"),
    ],
)
def test_rate_text(speed: int, width: int, text: str) -> None:
    assert rate_text(speed, width) == text


def test_files_look_like_a_roce_host(tmp_path: Path) -> None:
    sim = make_sim()
    sim.step()
    step = sim.step()  # t = 10 s: the downgrade is on
    writer = write_host_trees(tmp_path, sim.fabric, step.port_sample)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-0000", "gpu-0001"]
    sys = writer.host_root("gpu-0001") / "sys"
    ib = sys / "class/infiniband"
    assert sorted(p.name for p in ib.iterdir()) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert os.readlink(ib / "mlx5_2") == "../../devices/pci0000:00/0000:30:00.0/infiniband/mlx5_2"
    assert os.readlink(ib / "mlx5_2/device") == "../../../0000:30:00.0"
    assert sorted(p.name for p in (ib / "mlx5_2/device/net").iterdir()) == ["enp48s0np0"]
    port = ib / "mlx5_2/ports/1"
    assert (port / "rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert (ib / "mlx5_1/ports/1/rate").read_text() == "800 Gb/sec (4X XDR)\n"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "phys_state").read_text() == "5: LinkUp\n"
    assert (port / "link_layer").read_text() == "Ethernet\n"
    row = rows_of(step.port_sample, "gpu-0001")[BAD]
    assert (port / "counters/port_xmit_data").read_text() == f"{row['tx_bytes'] // 4}\n"
    assert (port / "counters/port_rcv_packets").read_text() == f"{row['rx_packets']}\n"
    assert (port / "hw_counters/np_ecn_marked_roce_packets").read_text() == f"{row['ecn_marked_packets']}\n"
    assert (port / "hw_counters/rp_cnp_handled").read_text() == f"{row['cnp_handled']}\n"
    net = sys / "class/net/enp48s0np0"
    assert ((net / "speed").read_text(), (net / "operstate").read_text()) == ("400000\n", "up\n")
    eth = writer.ethtool_dir("gpu-0001") / "enp48s0np0"
    stats = (eth / "statistics").read_text().splitlines()
    assert stats[0] == "NIC statistics:"
    assert f"     rx_prio3_pause: {row['pfc3_rx_pause_frames']}" in stats
    assert f"     rx_prio3_pause_duration: {round(row['pfc3_rx_pause_seconds'] * 1e6)}" in stats
    assert f"     rx_corrected_bits_phy: {row['fec_corrected_bits']}" in stats
    assert not any("prio0" in line for line in stats)  # PFC only on the RoCE priority
    fec = (eth / "fec").read_text()
    assert (
        "Active FEC encoding: LLRS\n" in fec and f"  corrected_blocks: {row['fec_corrected_blocks']}\n" in fec
    )
    assert "\tSpeed: 400000Mb/s\n\tLanes: 4\n" in (eth / "settings").read_text()


def test_agent_reads_back_what_the_sim_said(tmp_path: Path) -> None:
    sim = make_sim()
    writer = HostTreeWriter(tmp_path, sim.fabric)
    for _ in range(3):
        step = sim.step()
        writer.write(step.port_sample)
        got = rows_of(agent_batch(writer, "gpu-0001", step.time), "gpu-0001")
        want = rows_of(step.port_sample, "gpu-0001")
        assert list(got) == list(want)
        for key, w in want.items():
            g = got[key]
            assert (g["time"], g["source"]) == (step.time, "agent")
            for col in ("phys_state", "logical_state", "speed_bps", "width"):
                assert g[col] == w[col], (key, col)
            assert g["fec_mode"] == 9  # UFM's PLR mode 14 is LLRS to ethtool, read back as 9
            # Data counters cross sysfs as 4-octet words.
            assert (g["rx_bytes"], g["tx_bytes"]) == (w["rx_bytes"] // 4 * 4, w["tx_bytes"] // 4 * 4)
            for col in PORT_COUNTERS:
                if col in ("rx_bytes", "tx_bytes"):
                    continue
                if col == "fec_corrected_symbols":  # an IB PM RS-FEC counter: not in sysfs or ethtool
                    assert g[col] is None
                    continue
                if col.endswith("_seconds") and w[col] is not None:
                    assert g[col] == pytest.approx(w[col], abs=1e-6), (key, col)
                else:
                    assert g[col] == w[col], (key, col)
            assert (g["fec_lane_errors"], g["temperature_celsius"]) == (None, None)
    assert got[BAD]["speed_bps"] == 400 * G and got["gpu-0001/mlx5_1"]["speed_bps"] == 800 * G


def test_rewrite_moves_counters_forward(tmp_path: Path) -> None:
    sim = make_sim("none")
    writer = HostTreeWriter(tmp_path, sim.fabric)
    first = sim.step()
    writer.write(first.port_sample, hosts=["gpu-0000"])
    assert not writer.host_root("gpu-0001").exists()
    path = writer.host_root("gpu-0000") / "sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data"
    before = int(path.read_text())
    second = sim.step()
    assert writer.write(second.port_sample, hosts=["gpu-0000"]) == ["gpu-0000"]
    after = int(path.read_text())
    want = rows_of(second.port_sample, "gpu-0000")["gpu-0000/mlx5_0"]["rx_bytes"]
    assert after == want // 4 and after > before


def test_down_port_and_saturated_counters(tmp_path: Path) -> None:
    sim = make_sim(f"link_flap@5s+100s=1:{BAD}")
    sim.step()
    step = sim.step()  # t = 10 s: inside the flap's 15 s outage
    batch = step.port_sample
    i = batch.column("port").to_pylist().index(BAD)
    recov = batch.column("link_recovery").to_pylist()
    recov[i] = 300  # beyond the 8-bit LinkErrorRecoveryCounter
    batch = batch.set_column(
        batch.schema.get_field_index("link_recovery"), "link_recovery", pa.array(recov, pa.uint64())
    )
    writer = write_host_trees(tmp_path, sim.fabric, batch)
    port = writer.host_root("gpu-0001") / "sys/class/infiniband/mlx5_2/ports/1"
    assert (port / "phys_state").read_text() == "2: Polling\n"
    assert (port / "state").read_text() == "1: DOWN\n"
    assert (port / "counters/link_error_recovery").read_text() == "255\n"  # stuck at its maximum
    assert (writer.host_root("gpu-0001") / "sys/class/net/enp48s0np0/speed").read_text() == "-1\n"
    settings = (writer.ethtool_dir("gpu-0001") / "enp48s0np0/settings").read_text()
    assert "Speed: Unknown!" in settings and "Link detected: no" in settings
    row = rows_of(agent_batch(writer, "gpu-0001", step.time), "gpu-0001")[BAD]
    assert (row["phys_state"], row["logical_state"], row["speed_bps"], row["width"]) == (2, 1, None, None)
    assert row["link_recovery"] == 255 and row["link_downed"] == 1


def test_infiniband_hosts_have_no_roce_or_phy_counters(tmp_path: Path) -> None:
    sim = make_sim("none")
    sim.step()
    step = sim.step()
    writer = HostTreeWriter(tmp_path, sim.fabric, link_layer="InfiniBand")
    writer.write(step.port_sample)
    port = writer.host_root("gpu-0000") / "sys/class/infiniband/mlx5_3/ports/1"
    assert (port / "link_layer").read_text() == "InfiniBand\n"
    assert list((port / "hw_counters").iterdir()) == []
    assert sorted(p.name for p in (writer.ethtool_dir("gpu-0000") / "ibp56s0").iterdir()) == ["settings"]
    readings = {r.label: r for r in read_ports(SysfsConfig(writer.host_root("gpu-0000")))}
    assert readings["mlx5_3"].netdev == "ibp56s0"
    row = rows_of(agent_batch(writer, "gpu-0000", step.time), "gpu-0000")["gpu-0000/mlx5_3"]
    want = rows_of(step.port_sample, "gpu-0000")["gpu-0000/mlx5_3"]
    assert (row["speed_bps"], row["symbol_errors"], row["rx_packets"]) == (
        800 * G,
        want["symbol_errors"],
        want["rx_packets"],
    )
    for col in ("ecn_marked_packets", "pfc3_rx_pause_frames", "fec_corrected_bits", "fec_mode"):
        assert row[col] is None, col
    with pytest.raises(ValueError, match="link_layer"):
        HostTreeWriter(tmp_path, sim.fabric, link_layer="Omni-Path")
