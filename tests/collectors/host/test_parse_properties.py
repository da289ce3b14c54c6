"""Property tests of the host parsers (sysfs, ethtool), seeded from the real fixtures: whatever a
file says, reading the host gives a valid batch with every port, a bad value only nulls its cell.

Plus one regression test per bug the properties found, with the minimal input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graywire.collectors.base import OUT_OF_RANGE
from graywire.collectors.host.agent_client import AgentCollector
from graywire.collectors.host.agent_server import AgentConfig, HostReader
from graywire.collectors.host.agent_wire import to_ipc
from graywire.collectors.host.ethtool import (
    EthtoolReading,
    apply_ethtool,
    fec_mode_code,
    parse_fec,
    parse_settings,
    parse_statistics,
)
from graywire.collectors.host.sysfs import PortReading, SysfsConfig, read_ports, readings_to_batch
from graywire.collectors.schemas import PORT_SAMPLE
from tests.collectors.host.ttar import extract
from tests.conftest import REAL_FIXTURES, TTAR
from tests.strategies import JUNK, PROPERTY, spliced

HOST = REAL_FIXTURES / "host"
T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

pytestmark = pytest.mark.skipif(
    not HOST.is_dir(),
    reason=f"real fixtures not found at {HOST} (../shared/fixtures/real beside the repository)",
)

#: An mlx5 RoCE port's ``ethtool -S`` and ``--show-fec`` (names from the kernel's counters.rst),
#: spliced like the real captures.
MLX5_STATS = """NIC statistics:
     rx_prio3_pause: 10
     rx_prio3_pause_duration: 500
     tx_prio3_pause: 4
     rx_err_lane_0_phy: 1
     rx_err_lane_1_phy: 2
     rx_bits_phy: 9000
     rx_corrected_bits_phy: 3
     rx_crc_errors_phy: 0
"""
FEC = """FEC parameters for eth0:
Supported/Configured FEC encodings: Auto RS
Active FEC encoding: RS
Statistics:
  corrected_blocks: 5
  uncorrectable_blocks: 0
  corrected_bits: 7 [ per_lane: 1, 2, 3, 4 ]
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[Path], int]]:
    """The real sysfs tree (its own copy: examples overwrite files), its files, its port count."""
    dest = tmp_path_factory.mktemp("sysfs-props")
    extract(HOST.parent / TTAR, dest, only=["fixtures/sys/class/infiniband", "fixtures/sys/class/net"])
    root = dest / "fixtures"
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    yield root, files, len(read_ports(SysfsConfig(root, include_plain_netdevs=True)))


def test_the_real_tree_and_captures_parse(tree: tuple[Path, list[Path], int]) -> None:
    """The seeds are real: unmutated, they give ports and counters."""
    _, files, n = tree
    assert n >= 5 and len(files) > 100
    stats = parse_statistics((HOST / "node_exporter_ethtool_eth0_statistics.txt").read_text())
    settings = parse_settings((HOST / "node_exporter_ethtool_eth0_settings.txt").read_text())
    assert stats and settings is not None and settings.speed_bps == 10**9


def test_a_sysfs_file_saying_anything_nulls_at_most_its_cell(tree: tuple[Path, list[Path], int]) -> None:
    root, files, n = tree

    @PROPERTY
    @given(
        st.sampled_from(files), JUNK | st.sampled_from(["25 Gb/sec (300X EDR)", "9" * 30 + " Gb/sec (4X)"])
    )
    def check(path: Path, text: str) -> None:
        old = path.read_bytes()
        path.write_text(text, errors="surrogateescape")
        try:
            skipped: Counter[str] = Counter()
            readings = read_ports(SysfsConfig(root, include_plain_netdevs=True))
            batch = readings_to_batch(readings, "h", T, skipped=skipped)
        finally:
            path.write_bytes(old)
        assert batch.schema.remove_metadata() == PORT_SAMPLE.remove_metadata()
        assert batch.num_rows in (n, n - 1)  # a port whose `state` says junk may still go; no other
        assert set(skipped) <= {OUT_OF_RANGE}

    check()


@pytest.mark.parametrize("which", ["real", "mlx5"])
def test_ethtool_output_with_junk_spliced_in(which: str) -> None:
    stats_text = (
        (HOST / "node_exporter_ethtool_eth0_statistics.txt").read_text() if which == "real" else MLX5_STATS
    )
    settings_text = (HOST / "node_exporter_ethtool_eth0_settings.txt").read_text()

    @PROPERTY
    @given(spliced(stats_text), spliced(FEC), spliced(settings_text))
    def check(stats: str, fec: str, settings: str) -> None:
        r = PortReading("mlx5_0", "mlx5_0", 1, "eth0", link_layer="Ethernet")
        apply_ethtool(r, EthtoolReading(parse_statistics(stats), parse_fec(fec), parse_settings(settings)))
        batch = readings_to_batch([r], "h", T)
        assert batch.num_rows == 1

    check()


# -- regressions: the minimal inputs the properties found ---------------------------------------


def test_a_counter_file_past_64_bits_nulls_its_cell_and_is_counted(tmp_path: Path) -> None:
    """Was OverflowError out of readings_to_batch: the whole host's scrape failed."""
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "counters" / "symbol_error").write_text(str(2**64))
    (port / "counters" / "port_rcv_packets").write_text("7")
    skipped: Counter[str] = Counter()
    batch = readings_to_batch(read_ports(SysfsConfig(tmp_path)), "h", T, skipped=skipped)
    row = batch.to_pylist()[0]
    assert row["symbol_errors"] is None and row["rx_packets"] == 7
    assert skipped == {OUT_OF_RANGE: 1}


def test_a_rate_of_300_lanes_nulls_the_width_only(tmp_path: Path) -> None:
    """Was ArrowInvalid (300 does not fit uint8) out of readings_to_batch."""
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    (port / "rate").write_text("25 Gb/sec (300X EDR)")
    (port / "state").write_text("4: ACTIVE")
    row = readings_to_batch(read_ports(SysfsConfig(tmp_path)), "h", T).to_pylist()[0]
    assert row["width"] is None and row["speed_bps"] == 25 * 10**9


def test_superscript_digits_are_not_a_number_to_ethtool() -> None:
    """Was ValueError: ``"²".isdigit()`` is true and ``int("²")`` refuses it."""
    assert parse_statistics("rx_bits_phy: ²\nrx_crc_errors_phy: 3\n") == {"rx_crc_errors_phy": 3}
    settings = parse_settings("Speed: 400000Mb/s\nLanes: ²\n")
    assert settings is not None and settings.lanes is None and settings.speed_bps == 400 * 10**9


def test_an_absurd_pause_duration_is_skipped_and_counted() -> None:
    """Was OverflowError: a 400-digit µs count divided into seconds overflows a float."""
    r = PortReading("mlx5_0", "mlx5_0", 1, "eth0", link_layer="Ethernet")
    stats = parse_statistics(f"rx_prio3_pause_duration: {'9' * 400}\nrx_prio3_pause: 5\n")
    apply_ethtool(r, EthtoolReading(stats))
    skipped: Counter[str] = Counter()
    row = readings_to_batch([r], "h", T, skipped=skipped).to_pylist()[0]
    assert row["pfc3_rx_pause_seconds"] is None and row["pfc3_rx_pause_frames"] == 5
    assert skipped == {OUT_OF_RANGE: 1}


def test_an_absurd_speed_gives_no_fec_mode_and_no_overflow() -> None:
    """Was OverflowError: the lane rate was a division of a 400-digit speed."""
    assert fec_mode_code("RS", int("9" * 400), 4) == 7
    settings = parse_settings(f"Speed: {'9' * 400}Mb/s\nLanes: 4\n")
    r = PortReading("mlx5_0", "mlx5_0", 1, "eth0", link_layer="Ethernet", phys_state=5)
    apply_ethtool(r, EthtoolReading(settings=settings, fec=parse_fec(FEC)))
    skipped: Counter[str] = Counter()
    row = readings_to_batch([r], "h", T, skipped=skipped).to_pylist()[0]
    assert row["speed_bps"] is None and skipped == {OUT_OF_RANGE: 1}


def test_the_agent_reports_its_skips_to_the_service(tmp_path: Path) -> None:
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "counters" / "symbol_error").write_text(str(2**70))
    batch = HostReader(AgentConfig(sysfs_root=tmp_path, hostname="gpu-1", ethtool=None), lambda: T).batch()
    decoded, skipped = AgentCollector("http://gpu-1:9470")._decode(to_ipc(batch))
    assert skipped == {OUT_OF_RANGE: 1} and decoded.num_rows == 1
