"""ethtool text: real node_exporter captures, mlx5 counter names, --show-fec variants, sources."""

from __future__ import annotations

import shutil
import stat
import textwrap
from pathlib import Path

import pytest

from graywire.collectors.host.ethtool import (
    EthtoolCommand,
    EthtoolDirectory,
    EthtoolReading,
    apply_all,
    apply_ethtool,
    fec_mode_code,
    parse_fec,
    parse_settings,
    parse_statistics,
)
from graywire.collectors.host.sysfs import PortReading

G = 10**9
SETTINGS = "host/node_exporter_ethtool_eth0_settings.txt"
STATISTICS = "host/node_exporter_ethtool_eth0_statistics.txt"

# ethtool -S of a ConnectX port with PFC on priority 3 (names from the kernel's mlx5 counters.rst).
MLX5_STATS = textwrap.dedent("""\
    NIC statistics:
         rx_packets: 10
         rx_bytes_phy: 4000
         tx_bytes_phy: 8000
         rx_packets_phy: 4
         rx_pcs_symbol_err_phy: 3
         rx_symbol_err_phy: 2
         rx_crc_errors_phy: 8
         link_down_events_phy: 5
         tx_discards_phy: 6
         rx_discards_phy: 7
         rx_corrected_bits_phy: 1234
         rx_bits_phy: 98765432100
         rx_err_lane_0_phy: 11
         rx_err_lane_1_phy: 12
         rx_err_lane_2_phy: 13
         rx_err_lane_3_phy: 14
         rx_prio3_pause: 300
         rx_prio3_pause_duration: 1500000
         rx_prio3_pause_transition: 150
         tx_prio3_pause: 40
         tx_prio3_pause_duration: 250
         tx_pause_storm_warning_events: 1
         tx_pause_storm_error_events: 0
    """)

FEC_NETLINK = textwrap.dedent("""\
    FEC parameters for enp23s0np0:
    Supported/Configured FEC encodings: Auto RS BaseR
    Active FEC encoding: RS
    Statistics:
      corrected_blocks: 256
        Lane 0: 255
        Lane 1: 1
      uncorrectable_blocks: 145
        Lane 0: 128
        Lane 1: 17
    """)
FEC_IOCTL = (
    "FEC parameters for eth0:\nConfigured FEC encodings: Auto Off RS BaseR\nActive FEC encodings: BaseR\n"
)
FEC_HISTOGRAM = textwrap.dedent("""\
    FEC parameters for eni8np1:
    Supported/Configured FEC encodings: None
    Active FEC encoding: None
    Statistics:
      corrected_blocks: 123
      uncorrectable_blocks: 4
      fec_symbol_err_0: 445 [ per_lane:  125, 120, 100, 100 ]
    """)


def roce_port(**counters: int) -> PortReading:
    r = PortReading("mlx5_0", "mlx5_0", 1, "enp23s0np0", "Ethernet", 5, 4, 400 * G, 4)
    for name, value in counters.items():
        r.set_counter(name, value, 16)
    return r


# -- real captures ------------------------------------------------------------------------------


def test_real_statistics_keep_dotted_and_spaced_keys(real_fixtures: Path) -> None:
    stats = parse_statistics((real_fixtures / STATISTICS).read_text())
    assert len(stats) == 16
    assert stats["port.rx_dropped"] == 12028
    assert stats["duplicate metric"] == 1 and stats["duplicate_metric"] == 2
    assert (stats["tx_packets"], stats["rx_packets"], stats["rx_missed"], stats["rx_multicast"]) == (
        961500,
        1260062,
        401,
        23973,
    )
    assert "NIC statistics" not in stats


def test_real_settings_survive_the_stray_netlink_error(real_fixtures: Path) -> None:
    text = (real_fixtures / SETTINGS).read_text()
    assert "netlink error: Operation not permitted" in text
    s = parse_settings(text)
    assert s is not None
    assert (s.speed_bps, s.lanes, s.duplex, s.link_detected) == (1000 * 10**6, None, "Full", True)
    # Run through the statistics parser, only the numeric lines come out.
    assert parse_statistics(text) == {"PHYAD": 1}


def test_real_captures_from_a_directory(real_fixtures: Path, tmp_path: Path) -> None:
    (tmp_path / "eth0").mkdir()
    shutil.copy(real_fixtures / STATISTICS, tmp_path / "eth0" / "statistics")
    shutil.copy(real_fixtures / SETTINGS, tmp_path / "eth0" / "settings")
    got = EthtoolDirectory(tmp_path).read_many(["eth0", "eth1", "-x"])
    assert got["eth0"].statistics is not None and got["eth0"].statistics["rx_missed"] == 401
    assert got["eth0"].settings is not None and got["eth0"].settings.speed_bps == 10**9
    assert got["eth0"].fec is None  # no capture: unknown
    assert got["eth1"] == EthtoolReading()
    assert got["-x"].errors == ("invalid interface name '-x'",)


# -- mlx5 counters into a port ------------------------------------------------------------------


def test_mlx5_statistics_map_to_canonical_columns() -> None:
    r = roce_port(symbol_errors=0, link_downed=0, xmit_discards=0)
    r.set_counter("rx_bytes", 4444)
    apply_ethtool(r, EthtoolReading(statistics=parse_statistics(MLX5_STATS), fec=parse_fec(FEC_NETLINK)))
    c = r.counters
    assert (c["pfc3_rx_pause_frames"], c["pfc3_tx_pause_frames"]) == (300, 40)
    assert c["pfc3_rx_pause_seconds"] == pytest.approx(1.5)  # 1,500,000 µs
    assert c["pfc3_tx_pause_seconds"] == pytest.approx(250e-6)
    assert "pfc0_rx_pause_frames" not in c  # PFC off on priority 0: null, not 0
    assert (c["fec_corrected_bits"], c["phy_received_bits"]) == (1234, 98765432100)
    assert r.fec_lane_errors == [11, 12, 13, 14]
    # On an Ethernet port the PHY's own 64-bit counters replace the PMA emulation.
    assert (c["symbol_errors"], c["link_downed"], c["xmit_discards"]) == (3, 5, 6)
    assert not {"symbol_errors", "link_downed", "xmit_discards"} & set(r.narrow)
    assert c["rx_bytes"] == 4444  # sysfs wins for data
    assert (c["tx_bytes"], c["rx_packets"]) == (8000, 4)  # PHY fills what sysfs lacked
    assert (c["fec_corrected_blocks"], c["fec_uncorrectable_blocks"]) == (256, 145)
    assert r.fec_mode == 7  # RS at 100 Gb/s per lane: RS(544,514)
    # FCS errors and packets dropped on symbol errors: the RoCE NIC's receive errors.
    assert (c["crc_errors"], c["symbol_error_packets"]) == (8, 2)
    assert r.extra == {
        "ethtool/rx_discards_phy": 7,
        "ethtool/rx_prio3_pause_transition": 150,
        "ethtool/tx_pause_storm_warning_events": 1,
        "ethtool/tx_pause_storm_error_events": 0,
    }


def test_ib_port_keeps_sysfs_error_counters() -> None:
    r = roce_port(symbol_errors=9)
    r.link_layer = "InfiniBand"
    apply_ethtool(r, EthtoolReading(statistics={"rx_pcs_symbol_err_phy": 3, "link_down_events_phy": 1}))
    assert r.counters["symbol_errors"] == 9 and r.narrow["symbol_errors"] == 16
    assert r.counters["link_downed"] == 1  # sysfs had none: the PHY fills in


def test_lane_gaps_are_not_a_lane_list() -> None:
    r = roce_port()
    apply_ethtool(r, EthtoolReading(statistics={"rx_err_lane_0_phy": 1, "rx_err_lane_2_phy": 3}))
    assert r.fec_lane_errors is None


def test_settings_fill_speed_and_lanes_when_sysfs_has_none() -> None:
    r = PortReading("eth5", None, None, "eth5", "Ethernet", 5, 4)
    text = "Settings for eth5:\n\tSpeed: 200000Mb/s\n\tLanes: 4\n\tLink detected: yes\n"
    apply_ethtool(r, EthtoolReading(settings=parse_settings(text), fec=parse_fec(FEC_NETLINK)))
    assert (r.speed_bps, r.width, r.fec_mode) == (200 * G, 4, 7)


# -- --show-fec and settings variants -----------------------------------------------------------


def test_fec_netlink_with_lane_statistics() -> None:
    fec = parse_fec(FEC_NETLINK)
    assert fec is not None
    assert (fec.active, fec.configured) == ("RS", ("Auto", "RS", "BaseR"))
    assert fec.stats == {"corrected_blocks": 256, "uncorrectable_blocks": 145}
    assert fec.lanes == {"corrected_blocks": [255, 1], "uncorrectable_blocks": [128, 17]}


def test_fec_ioctl_and_histogram_variants() -> None:
    old = parse_fec(FEC_IOCTL)
    assert old is not None and (old.active, old.configured) == ("BaseR", ("Auto", "Off", "RS", "BaseR"))
    hist = parse_fec(FEC_HISTOGRAM)
    assert hist is not None and hist.active == "None"
    assert hist.stats == {"corrected_blocks": 123, "uncorrectable_blocks": 4, "fec_symbol_err_0": 445}
    assert hist.lanes == {"fec_symbol_err_0": [125, 120, 100, 100]}
    spaced = parse_fec("Configured FEC encodings : Auto\nActive FEC encodings : LLRS\n")
    assert spaced is not None and (spaced.active, spaced.configured) == ("LLRS", ("Auto",))
    assert parse_fec("netlink error: Operation not supported\n") is None


@pytest.mark.parametrize(
    ("active", "speed", "lanes", "code"),
    [
        ("Off", None, None, 0),
        ("BaseR", 25 * G, 1, 1),
        ("RS", 100 * G, 4, 2),  # 25G NRZ lanes: RS(528,514)
        ("RS", 400 * G, 4, 7),  # 100G PAM4 lanes: RS(544,514)
        ("RS", 400 * G, None, 7),
        ("RS", 25 * G, None, 2),
        ("RS", 100 * G, None, None),  # 4x25 NRZ or 2x50/1x100 PAM4: can't tell
        ("RS", None, 4, None),
        ("LLRS", 800 * G, 4, 9),
        ("None", 400 * G, 4, None),
        ("Auto", 400 * G, 4, None),
        (None, 400 * G, 4, None),
    ],
)
def test_fec_mode_codes(active: str | None, speed: int | None, lanes: int | None, code: int | None) -> None:
    assert fec_mode_code(active, speed, lanes) == code


def test_settings_when_link_is_down() -> None:
    s = parse_settings("Settings for x:\n\tSpeed: Unknown!\n\tDuplex: Unknown! (255)\n\tLink detected: no\n")
    assert s is not None and (s.speed_bps, s.link_detected, s.lanes) == (None, False, None)
    assert parse_settings("no such device\n") is None


# -- running ethtool ----------------------------------------------------------------------------


def fake_ethtool(tmp_path: Path, body: str) -> str:
    """An executable speaking ethtool's output format (no NIC here to run the real one)."""
    path = tmp_path / "ethtool"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_command_reads_all_three_outputs(tmp_path: Path) -> None:
    (tmp_path / "stats").write_text(MLX5_STATS)
    (tmp_path / "fec").write_text(FEC_IOCTL)
    binary = fake_ethtool(
        tmp_path,
        f"""case "$1" in
  -S) cat {tmp_path}/stats ;;
  -I) echo "ethtool: bad command line argument(s)" >&2; exit 1 ;;
  --show-fec) cat {tmp_path}/fec ;;
  *) printf 'Settings for %s:\\n\\tSpeed: 400000Mb/s\\n\\tLanes: 4\\n' "$1"; \
echo "netlink error: Operation not permitted" >&2; exit 75 ;;
esac
""",
    )
    got = EthtoolCommand(binary, timeout=5).read_many(["enp23s0np0", "enp23s0np0"])
    assert list(got) == ["enp23s0np0"]
    eth = got["enp23s0np0"]
    assert eth.statistics is not None and eth.statistics["rx_prio3_pause"] == 300
    assert eth.fec is not None and eth.fec.active == "BaseR"  # the -I form failed, the plain one ran
    assert eth.settings is not None and (eth.settings.speed_bps, eth.settings.lanes) == (400 * G, 4)
    assert eth.errors == (f"{binary} enp23s0np0: exit 75: netlink error: Operation not permitted",)
    r = roce_port()
    assert apply_all([r], EthtoolCommand(binary, timeout=5)) == list(eth.errors)
    assert r.counters["pfc3_rx_pause_frames"] == 300 and r.fec_mode == 1


def test_command_timeout_and_missing_binary(tmp_path: Path) -> None:
    slow = EthtoolCommand(fake_ethtool(tmp_path, "exec sleep 5\n"), timeout=0.2).read("eth0")
    assert (slow.statistics, slow.fec, slow.settings) == (None, None, None)
    assert slow.errors[0].endswith("-S eth0: timed out after 0.2 s")
    missing = EthtoolCommand(str(tmp_path / "nope"), timeout=1).read("eth0")
    assert missing.statistics is None and "No such file" in missing.errors[0]
