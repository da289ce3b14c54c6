"""sysfs reading: the real procfs fixture tree, hand-made edge cases, and the batch it becomes."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from graywire.collectors.host.sysfs import (
    SysfsConfig,
    parse_logical_state,
    parse_phys_state,
    parse_rate,
    read_netdev,
    read_ports,
    readings_to_batch,
)
from graywire.collectors.schemas import COUNTER_BITS_KEY, SATURATING_KEY
from tests.conftest import NETDEV_DOWN

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def by_label(root: Path, **kw) -> dict:
    return {r.label: r for r in read_ports(SysfsConfig(root, **kw))}


# -- the real tree ------------------------------------------------------------------------------


def test_real_tree_lists_ib_ports_in_device_order(real_sysfs: Path) -> None:
    assert list(by_label(real_sysfs)) == ["hfi1_0", "mlx4_0", "mlx4_0:2", "mlx5_0"]
    # eth0 has no RDMA device: a management NIC, skipped unless asked for.
    assert list(by_label(real_sysfs, include_plain_netdevs=True))[-1] == "eth0"
    assert list(by_label(real_sysfs, exclude=r"mlx4_.*")) == ["hfi1_0", "mlx5_0"]


def test_real_mlx5_port(real_sysfs: Path) -> None:
    r = by_label(real_sysfs)["mlx5_0"]
    assert (r.device, r.port_num, r.netdev, r.link_layer) == ("mlx5_0", 1, None, "InfiniBand")
    assert (r.rate_bps, r.rate_width) == (25 * 10**9, 1)  # "25 Gb/sec (1X EDR)"
    assert r.logical_state == 4  # "4: ACTIVE"
    # The fixture's phys_state reads "4: ACTIVE", which contradicts itself (4 is
    # PortConfigurationTraining): unknown, not guessed. Active still implies a trained link.
    assert r.phys_state is None
    assert (r.speed_bps, r.width) == (25 * 10**9, 1)
    assert r.counters["tx_bytes"] == 2880761508848 * 4
    assert r.counters["rx_bytes"] == 18126345378 * 4
    assert r.counters["tx_packets"] == 10907922116
    assert r.counters["rx_packets"] == 541889824
    assert r.counters["xmit_wait_ticks"] == 0
    assert r.narrow == {
        "symbol_errors": 16,
        "link_recovery": 8,
        "link_downed": 8,
        "rcv_errors": 16,
        "rcv_remote_physical_errors": 16,
        "rcv_switch_relay_errors": 16,
        "xmit_discards": 16,
        "xmit_constraint_errors": 8,
        "rcv_constraint_errors": 8,
        "local_link_integrity_errors": 4,
        "excessive_buffer_overrun_errors": 4,
        "vl15_dropped": 16,
        "xmit_wait_ticks": 32,
    }
    # The tree's files for these read 0: a measured 0, not a missing counter.
    assert r.counters["vl15_dropped"] == 0 and r.counters["excessive_buffer_overrun_errors"] == 0
    assert r.counters["local_link_integrity_errors"] == 0 and r.counters["rcv_remote_physical_errors"] == 0
    # No np_ecn/np_cnp/rp_cnp files in this tree: the columns are absent, hence null.
    assert not {"ecn_marked_packets", "cnp_sent", "cnp_handled"} & set(r.counters)
    assert r.extra["hw_counters/out_of_sequence"] == 1
    assert r.extra["hw_counters/local_ack_timeout_err"] == 131
    assert r.extra["hw_counters/roce_slow_restart_cnps"] == 131
    assert r.extra["hw_counters/req_cqe_error"] == 3481
    assert r.extra["counters/unicast_xmit_packets"] == 10907922116
    assert "hw_counters/lifespan" not in r.extra  # a setting, not a counter


def test_real_hfi1_and_mlx4_ports(real_sysfs: Path) -> None:
    ports = by_label(real_sysfs)
    hfi = ports["hfi1_0"]
    assert (hfi.phys_state, hfi.logical_state, hfi.speed_bps, hfi.width) == (5, 4, 100 * 10**9, 4)
    assert hfi.counters["rx_bytes"] == 345091702026 * 4
    mlx4 = ports["mlx4_0:2"]
    assert mlx4.port_num == 2 and mlx4.link_layer == "InfiniBand"  # the file has a blank 2nd line
    assert (mlx4.speed_bps, mlx4.counters["xmit_wait_ticks"]) == (40 * 10**9, 3846)
    assert ports["mlx4_0"].counters["xmit_wait_ticks"] == 3599


def test_real_plain_netdev(real_sysfs: Path) -> None:
    eth0 = by_label(real_sysfs, include_plain_netdevs=True)["eth0"]
    assert (eth0.device, eth0.netdev, eth0.link_layer) == (None, "eth0", "Ethernet")
    assert (eth0.phys_state, eth0.logical_state, eth0.speed_bps, eth0.width) == (5, 4, 1000 * 10**6, None)
    assert eth0.extra == {"net/carrier_changes": 2}
    # The tree has no statistics/ directory: null, never 0.
    assert eth0.counters["rx_bytes"] is None and eth0.counters["rcv_errors"] is None


def test_real_down_netdev_with_empty_speed_file(real_sysfs: Path) -> None:
    info = read_netdev(real_sysfs / NETDEV_DOWN)
    assert (info.name, info.operstate, info.speed_bps) == ("enp162s0f0np0", "down", None)


def test_real_tree_as_a_batch(real_sysfs: Path) -> None:
    readings = read_ports(SysfsConfig(real_sysfs, include_plain_netdevs=True))
    batch = readings_to_batch(readings, "h1", T)
    rows = {row["port"]: row for row in batch.to_pylist()}
    assert list(rows) == ["h1/hfi1_0", "h1/mlx4_0", "h1/mlx4_0:2", "h1/mlx5_0", "h1/eth0"]
    m = rows["h1/mlx5_0"]
    assert (m["time"], m["source"], m["speed_bps"], m["width"], m["phys_state"]) == (
        T,
        "agent",
        25 * 10**9,
        1,
        None,
    )
    assert (m["tx_bytes"], m["ecn_marked_packets"], m["cnp_sent"], m["cnp_handled"]) == (
        11523046035392,
        None,
        None,
        None,
    )
    assert rows["h1/eth0"]["speed_bps"] == 10**9 and rows["h1/eth0"]["rx_bytes"] is None
    meta = batch.schema.metadata
    narrow = {
        "symbol_errors": 16,
        "link_downed": 8,
        "link_recovery": 8,
        "rcv_errors": 16,
        "rcv_remote_physical_errors": 16,
        "rcv_switch_relay_errors": 16,
        "rcv_constraint_errors": 8,
        "xmit_constraint_errors": 8,
        "local_link_integrity_errors": 4,
        "excessive_buffer_overrun_errors": 4,
        "vl15_dropped": 16,
        "xmit_discards": 16,
        "xmit_wait_ticks": 32,
    }
    assert json.loads(meta[COUNTER_BITS_KEY]) == narrow
    assert json.loads(meta[SATURATING_KEY]) == sorted(narrow)


# -- hand-made trees ----------------------------------------------------------------------------


def make_port(root: Path, dev: str, port: int = 1, files: dict[str, str] | None = None) -> Path:
    port_dir = root / "sys/class/infiniband" / dev / "ports" / str(port)
    for rel, text in (files or {}).items():
        p = port_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    port_dir.mkdir(parents=True, exist_ok=True)
    return port_dir


UP = {
    "rate": "400 Gb/sec (4X NDR)\n",
    "state": "4: ACTIVE\n",
    "phys_state": "5: LinkUp\n",
    "link_layer": "Ethernet\n",
}


def test_unreadable_files_give_null_not_zero(tmp_path: Path) -> None:
    port = make_port(
        tmp_path,
        "mlx5_0",
        files={
            **UP,
            "counters/port_xmit_data": "1000\n",
            "counters/symbol_error": "N/A (no PMA)\n",
            "counters/link_downed": "garbage\n",
            "counters/port_rcv_errors": "-1\n",
            "hw_counters/np_cnp_sent": "7\n",
        },
    )
    (port / "counters" / "port_rcv_data").mkdir()  # reading a directory raises: still no crash
    (port / "hw_counters" / "rp_cnp_handled").mkdir()
    r = read_ports(SysfsConfig(tmp_path))[0]
    assert r.counters["tx_bytes"] == 4000
    for column in (
        "rx_bytes",
        "symbol_errors",
        "link_downed",
        "rcv_errors",
        "xmit_wait_ticks",
        "cnp_handled",
    ):
        assert r.counters[column] is None, column
    assert r.counters["cnp_sent"] == 7
    assert "symbol_errors" not in r.narrow  # a null says nothing about width
    batch = readings_to_batch([r], "h", T)
    assert batch.column("symbol_errors").null_count == 1
    assert "symbol_errors" not in json.loads(batch.schema.metadata.get(COUNTER_BITS_KEY, b"{}"))


def test_missing_rate_and_down_link(tmp_path: Path) -> None:
    make_port(
        tmp_path,
        "mlx5_0",
        files={"state": "1: DOWN\n", "phys_state": "2: Polling\n", "rate": "10 Gb/sec (4X SDR)\n"},
    )
    make_port(tmp_path, "mlx5_1", files={"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n"})
    down, norate = read_ports(SysfsConfig(tmp_path))
    assert (down.phys_state, down.logical_state, down.rate_bps) == (2, 1, 10 * 10**9)
    assert (down.speed_bps, down.width) == (None, None)  # a down port says nothing about speed
    assert (norate.phys_state, norate.speed_bps, norate.width) == (5, None, None)


def add_device(root: Path, bus: str, dev: str, netdevs: list[str], speed_mbps: int = 400000) -> None:
    """A PCI function with an RDMA device and netdevs, linked the way sysfs links them."""
    sys = root / "sys"
    pci = sys / "devices" / f"0000:{bus}:00.0"
    (sys / "class/net").mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(netdevs):
        nd = pci / "net" / name
        nd.mkdir(parents=True)
        (nd / "dev_port").write_text(f"{len(netdevs) - 1 - i}\n")  # listed from the last port down
        (nd / "speed").write_text(f"{speed_mbps}\n")
        (nd / "operstate").write_text("up\n")
        (nd / "carrier_changes").write_text("6\n")
        os.symlink(f"../../../0000:{bus}:00.0", nd / "device")  # physical: not skipped as virtual
        os.symlink(f"../../devices/0000:{bus}:00.0/net/{name}", sys / "class/net" / name)
    make_port(root, dev, 1, UP)
    os.symlink(f"../../../devices/0000:{bus}:00.0", sys / "class/infiniband" / dev / "device")


def test_virtual_functions_are_skipped_and_netdevs_linked(tmp_path: Path) -> None:
    add_device(tmp_path, "17", "mlx5_0", ["enp23s0np0"])
    add_device(tmp_path, "18", "mlx5_1", ["ens1", "ens2"])  # ens2 serves port 1, ens1 port 2
    make_port(tmp_path, "mlx5_1", 2, UP)
    vf_pci = tmp_path / "sys/devices/0000:19:00.2"
    vf_pci.mkdir(parents=True)
    os.symlink("../0000:17:00.0", vf_pci / "physfn")
    make_port(tmp_path, "mlx5_2", 1, UP)
    os.symlink("../../../devices/0000:19:00.2", tmp_path / "sys/class/infiniband/mlx5_2/device")
    ports = by_label(tmp_path, include_plain_netdevs=True)
    assert {k: r.netdev for k, r in ports.items()} == {
        "mlx5_0": "enp23s0np0",
        "mlx5_1": "ens2",
        "mlx5_1:2": "ens1",
    }
    assert ports["mlx5_0"].extra == {"net/speed_mbps": 400000, "net/carrier_changes": 6}
    assert ports["mlx5_0"].netdev_speed_bps == 400 * 10**9
    assert list(by_label(tmp_path, exclude="ens2")) == ["mlx5_0", "mlx5_1:2"]  # by netdev name too


def test_ethernet_ports_trust_the_netdev_speed(tmp_path: Path) -> None:
    # A kernel older than the NIC has no name for its lane speed and prints the SDR default.
    add_device(tmp_path, "17", "mlx5_0", ["enp23s0np0"])
    add_device(tmp_path, "18", "mlx5_1", ["ibp24s0"])
    for dev, layer in (("mlx5_0", "Ethernet"), ("mlx5_1", "InfiniBand")):
        port = tmp_path / "sys/class/infiniband" / dev / "ports/1"
        (port / "rate").write_text("10 Gb/sec (4X)\n")
        (port / "link_layer").write_text(f"{layer}\n")
    ports = by_label(tmp_path)
    assert (ports["mlx5_0"].speed_bps, ports["mlx5_0"].width) == (400 * 10**9, 4)
    assert (ports["mlx5_1"].speed_bps, ports["mlx5_1"].width) == (10 * 10**9, 4)  # IB: rate rules


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("400 Gb/sec (4X NDR)", (400 * 10**9, 4)),
        ("800 Gb/sec (4X XDR)\n", (800 * 10**9, 4)),
        ("25 Gb/sec (1X EDR)", (25 * 10**9, 1)),
        ("2.5 Gb/sec (1X SDR)", (2_500_000_000, 1)),
        ("56 Gb/sec (4X FDR)", (56 * 10**9, 4)),
        ("300 Gb/sec (4X)", (300 * 10**9, 4)),
        ("fast", (None, None)),
        ("", (None, None)),
        (None, (None, None)),
    ],
)
def test_parse_rate(text: str | None, expected: tuple) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize(
    ("text", "phys", "logical"),
    [
        ("5: LinkUp", 5, None),
        ("7: Phy Test", 7, None),
        ("2: Polling", 2, None),
        ("4: ACTIVE", None, 4),
        ("5: ACTIVE_DEFER", None, 4),
        ("2: INIT", None, 2),
        ("0: NOP", None, None),
        ("9: <unknown>", None, None),
        ("LinkUp", 5, None),
        ("", None, None),
    ],
)
def test_parse_states(text: str, phys: int | None, logical: int | None) -> None:
    assert parse_phys_state(text) == phys
    assert parse_logical_state(text) == logical
