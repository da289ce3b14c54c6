"""Exporters' own test outputs read into canonical records (fixtures/SOURCES.md says whose)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.prometheus import parse_exposition
from graywire.collectors.schemas import COUNTER_BITS_KEY, LINK, PORT_SAMPLE, record_kind

FIXTURES = Path(__file__).parent / "fixtures"
T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

SWITCH_A, SWITCH_B = "0x7cfe9003009ce5b0", "0x506b4b03005c2740"
HCA_1, HCA_2 = "0x7cfe9003003b4bde", "0x7cfe9003003b4b96"


def rows(batch: pa.RecordBatch) -> dict[str, dict[str, object]]:
    """Non-null cells by port key."""
    out = {}
    for r in batch.to_pylist():
        out[r["port"]] = {k: v for k, v in r.items() if v is not None and k not in ("port", "time", "source")}
    return out


def ib_fabric(*, guids: bool = True) -> Fabric:
    """The fixtures' fabric: ib-i1l1s01 (ports 1, 2, 10, 11) cabled to hosts o0001 and o0002."""

    def g(x: str) -> str | None:
        return x if guids else None

    ports = [PortSpec("ib-i1l1s01", f"p{n}", guid=g(SWITCH_A), num=n) for n in (1, 2, 10, 11)]
    ports += [
        PortSpec("o0001", "mlx5_0", guid=g(HCA_1), num=1),
        PortSpec("o0002", "mlx5_0", guid=g(HCA_2), num=1),
    ]
    links = [("ib-i1l1s01/p10", "o0001/mlx5_0"), ("ib-i1l1s01/p11", "o0002/mlx5_0")]
    return Fabric.from_specs({"ib-i1l1s01": "leaf", "o0001": "host", "o0002": "host"}, ports, links)


def test_infiniband_exporter_switches_by_guid_and_port_number() -> None:
    text = (FIXTURES / "infiniband_exporter_switch.prom").read_text()
    skipped: Counter[str] = Counter()
    port, link = parse_exposition(text, fabric=ib_fabric(), time=T, skipped=skipped)
    assert record_kind(port.schema) == "port_sample" and port.schema.remove_metadata() == PORT_SAMPLE
    got = rows(port)
    p1 = got["ib-i1l1s01/p1"]
    # perfquery's 4-octet words times 4, as the exporter already multiplied them.
    assert p1["rx_bytes"] == 49116115103004 and p1["tx_bytes"] == 145192107443712
    assert p1["rx_packets"] == 32262508468 and p1["tx_packets"] == 101733204203
    assert p1["xmit_wait_ticks"] == 22730501 and p1["symbol_errors"] == 0
    assert p1["speed_bps"] == 100_000_000_000  # 1.25e10 bytes/s: 4x EDR
    assert "phys_state" not in p1  # the exporter says nothing of the state: unknown, not up
    assert "speed_bps" not in got["ib-i1l1s01/p2"]  # no rate series for port 2
    # The other switch is not in the model: its ports keep a stable key of their own.
    other = got[f"{SWITCH_B}/1"]
    assert (
        other["link_downed"] == 1
        and other["xmit_discards"] == 20046
        and other["rcv_switch_relay_errors"] == 7
    )
    # perfquery -x counters are 64-bit: nothing declared narrow or saturating.
    assert COUNTER_BITS_KEY not in (port.schema.metadata or {})
    # Cables the model can place: the switch's uplinks to o0001 and o0002 (not to an unknown switch).
    assert link.schema == LINK
    assert sorted(zip(link.column("a_port").to_pylist(), link.column("b_port").to_pylist(), strict=True)) == [
        ("ib-i1l1s01/p10", "o0001/mlx5_0"),
        ("ib-i1l1s01/p11", "o0002/mlx5_0"),
    ]
    assert set(link.column("source").to_pylist()) == {"prometheus"}
    assert skipped == {"bad_port": 2}  # the uplinks involving the switch the model lacks


def test_infiniband_exporter_hcas_take_the_hca_rate_for_their_ports() -> None:
    text = (FIXTURES / "infiniband_exporter_hca.prom").read_text()
    port, link = parse_exposition(text, fabric=ib_fabric(), time=T)
    got = rows(port)
    assert set(got) == {"o0001/mlx5_0", "o0002/mlx5_0"}
    assert got["o0001/mlx5_0"]["rx_bytes"] == 39009938353200
    assert got["o0002/mlx5_0"]["tx_packets"] == 96917117320
    assert got["o0001/mlx5_0"]["speed_bps"] == got["o0002/mlx5_0"]["speed_bps"] == 100_000_000_000
    assert sorted(link.column("b_port").to_pylist()) == ["ib-i1l1s01/p10", "ib-i1l1s01/p11"]


def test_without_guids_in_the_model_ports_are_found_by_the_names_discovery_gives() -> None:
    text = (FIXTURES / "infiniband_exporter_switch.prom").read_text()
    # The HCAs' descriptions (``o0001 HCA-1``) name no device the model has: no cable is placed.
    (port,) = parse_exposition(text, fabric=ib_fabric(guids=False), time=T)
    keys = set(port.column("port").to_pylist())
    assert {"ib-i1l1s01/p1", "ib-i1l1s01/p2", "ib-i1l1s01/p10", "ib-i1l1s01/p11"} <= keys
    assert f"{SWITCH_B}/1" in keys  # ib-i4l1s01 is not in the model under any name


def test_without_a_model_every_port_and_cable_keeps_its_guid_key() -> None:
    text = (FIXTURES / "infiniband_exporter_switch.prom").read_text()
    port, link = parse_exposition(text, time=T)
    assert f"{SWITCH_A}/10" in set(port.column("port").to_pylist())
    assert (f"{SWITCH_A}/10", f"{HCA_1}/1") in set(
        zip(link.column("a_port").to_pylist(), link.column("b_port").to_pylist(), strict=True)
    )


def test_node_exporter_ethtool_output_of_a_plain_nic() -> None:
    """node_exporter's own expected ethtool output (e1000e): the netdev is a port of its own."""
    text = (FIXTURES / "node_exporter_ethtool_eth0.prom").read_text()
    skipped: Counter[str] = Counter()
    (port,) = parse_exposition(text, node="host-a", time=T, skipped=skipped)
    got = rows(port)
    assert set(got) == {"host-a/eth0"}
    eth0 = got["host-a/eth0"]
    # node_exporter's named statistics (received_packets_total...) back to the kernel's.
    assert eth0["rx_packets"] == 1260062 and eth0["tx_packets"] == 961500 and eth0["rcv_errors"] == 0
    # No byte counters in this driver's statistics: none, rather than 0.
    assert "rx_bytes" not in eth0 and "tx_bytes" not in eth0
    assert not skipped


def test_mlx5_ethtool_statistics_as_node_exporter_names_them_join_the_rdma_port() -> None:
    """mlx5's PFC, FEC and PHY statistics under node_exporter's names (its ``buildEthtoolFQName``:
    rx -> received, tx -> transmitted; HELP ``Network interface <statistic>``), on a netdev the
    model lists as the RDMA port's alias: one row, with the RDMA device's counters."""
    text = "\n".join(
        [
            "# HELP node_infiniband_port_data_received_bytes_total Number of data octets received",
            "# TYPE node_infiniband_port_data_received_bytes_total counter",
            'node_infiniband_port_data_received_bytes_total{device="mlx5_0",port="1"} 4096',
            "# HELP node_infiniband_rate_bytes_per_second Maximum signal transfer rate",
            "# TYPE node_infiniband_rate_bytes_per_second gauge",
            'node_infiniband_rate_bytes_per_second{device="mlx5_0",port="1"} 5e+10',
            "# HELP node_infiniband_physical_state_id Physical state of the InfiniBand port",
            "# TYPE node_infiniband_physical_state_id gauge",
            'node_infiniband_physical_state_id{device="mlx5_0",port="1"} 5',
            "# HELP node_ethtool_received_prio3_pause Network interface rx_prio3_pause",
            "# TYPE node_ethtool_received_prio3_pause untyped",
            'node_ethtool_received_prio3_pause{device="ens1f0np0"} 42',
            "# HELP node_ethtool_transmitted_prio3_pause_duration Network interface tx_prio3_pause_duration",
            "# TYPE node_ethtool_transmitted_prio3_pause_duration untyped",
            'node_ethtool_transmitted_prio3_pause_duration{device="ens1f0np0"} 2.5e+06',
            "# HELP node_ethtool_received_corrected_bits_phy Network interface rx_corrected_bits_phy",
            "# TYPE node_ethtool_received_corrected_bits_phy untyped",
            'node_ethtool_received_corrected_bits_phy{device="ens1f0np0"} 77',
            "# HELP node_ethtool_received_crc_errors_phy Network interface rx_crc_errors_phy",
            "# TYPE node_ethtool_received_crc_errors_phy untyped",
            'node_ethtool_received_crc_errors_phy{device="ens1f0np0"} 3',
            "# HELP node_network_speed_bytes Value of /sys/class/net/<iface>/speed",
            "# TYPE node_network_speed_bytes gauge",
            'node_network_speed_bytes{device="ens1f0np0"} 5e+10',
            "",
        ]
    )
    fabric = Fabric.from_specs({"gpu-01": "host"}, [PortSpec("gpu-01", "mlx5_0", aliases=("ens1f0np0",))], [])
    (port,) = parse_exposition(text, node="gpu-01", fabric=fabric, time=T)
    got = rows(port)
    assert set(got) == {"gpu-01/mlx5_0"}
    r = got["gpu-01/mlx5_0"]
    assert r["rx_bytes"] == 4096 and r["speed_bps"] == 400_000_000_000
    assert r["pfc3_rx_pause_frames"] == 42 and r["pfc3_tx_pause_seconds"] == 2.5  # µs -> s
    assert r["fec_corrected_bits"] == 77 and r["crc_errors"] == 3
    assert "pfc3_tx_pause_frames" not in r and "pfc0_rx_pause_frames" not in r  # missing stays missing


def test_node_exporter_text_without_a_host_name_is_refused() -> None:
    text = (FIXTURES / "node_exporter_ethtool_eth0.prom").read_text()
    with pytest.raises(ValueError, match="names no host"):
        parse_exposition(text, time=T)
    named = text + '# TYPE node_uname_info gauge\nnode_uname_info{nodename="gpu-07.example.com"} 1\n'
    (port,) = parse_exposition(named, time=T)
    assert port.column("port").to_pylist() == ["gpu-07/eth0"]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('infiniband_switch_port_symbol_error_total{guid="0x1",port="1"} NaN', "not_a_number"),
        ('infiniband_switch_port_symbol_error_total{guid="0x1",port="1"} -3', "out_of_range"),
        ('infiniband_switch_port_symbol_error_total{guid="0x1",port="1"} 1.9e+20', "out_of_range"),
        ('infiniband_switch_port_symbol_error_total{guid="not-a-guid",port="1"} 5', "bad_port"),
        ('infiniband_switch_port_symbol_error_total{guid="0x1",port="x"} 5', "bad_port"),
    ],
)
def test_values_that_are_no_counter_are_null_and_counted(line: str, reason: str) -> None:
    text = f"# TYPE infiniband_switch_port_symbol_error_total counter\n{line}\n"
    skipped: Counter[str] = Counter()
    out = parse_exposition(text, time=T, skipped=skipped)
    assert skipped == {reason: 1}
    for batch in out:
        assert batch.column("symbol_errors").null_count == batch.num_rows


def test_text_that_is_not_the_format_fails_whole() -> None:
    with pytest.raises(ValueError):
        parse_exposition('infiniband_switch_port_symbol_error_total{guid="0x1" 5\n', time=T)


def test_a_text_without_the_families_read_gives_nothing() -> None:
    assert parse_exposition("# TYPE up gauge\nup 1\n", time=T) == ()


def test_the_port_dictionary_is_the_same_every_poll() -> None:
    text = (FIXTURES / "infiniband_exporter_hca.prom").read_text()
    a = parse_exposition(text, fabric=ib_fabric(), time=T)[0].column("port")
    b = parse_exposition(text, fabric=ib_fabric(), time=T)[0].column("port")
    assert a.dictionary.equals(b.dictionary) and json.dumps(a.to_pylist()) == json.dumps(b.to_pylist())


def test_families_not_read_are_left_out_before_parsing() -> None:
    """node_exporter's other collectors (CPU, filesystems...) are never parsed, garbage or not."""
    text = (FIXTURES / "infiniband_exporter_hca.prom").read_text()
    noise = (
        "# HELP node_cpu_seconds_total Seconds.\n# TYPE node_cpu_seconds_total counter\n"
        'node_cpu_seconds_total{cpu="0" 1\n'
    )
    port, _ = parse_exposition(noise + text, fabric=ib_fabric(), time=T)
    assert port.num_rows == 2
