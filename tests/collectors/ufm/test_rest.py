"""UFM REST payloads -> port state/speed/width, capabilities and links."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.schemas import LOGICAL_ACTIVE, PHYS_LINK_UP, PHYS_POLLING, record_kind
from graywire.collectors.ufm.ports import PortKeys
from graywire.collectors.ufm.rest import expected_from_capabilities, parse_links, parse_ports, port_speed_bps

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
G = 10**9


def port(
    guid: str, number: int, speed: str, width: str, phys: str = "Link Up", **extra: Any
) -> dict[str, Any]:
    """A port object with the fields UFM's /resources/ports returns."""
    return {
        "guid": guid,
        "name": f"{guid}_{number}",
        "number": number,
        "external_number": number,
        "dname": str(number),
        "system_name": "sw",
        "physical_state": phys,
        "logical_state": "Active" if phys == "Link Up" else "Down",
        "active_speed": speed,
        "active_width": width,
        "enabled_speed": ["SDR", "DDR", "QDR", "FDR", "EDR", "HDR", "NDR"],
        "enabled_width": ["1x", "4x"],
        "supported_speed": ["SDR", "DDR", "QDR", "FDR", "EDR", "HDR", "NDR", "XDR"],
        "supported_width": ["1x", "2x", "4x", "8x", "12x"],
        "severity": "Info",
        **extra,
    }


@pytest.mark.parametrize(
    ("speed", "width", "bps"),
    [
        ("HDR", "4x", 200 * G),
        ("NDR", "4x", 400 * G),
        ("XDR", "4x", 800 * G),
        ("NDR", "2x", 200 * G),
        ("XDR", "1x", 200 * G),
        ("EDR", "4x", 100 * G),
        ("FDR", "4x", 56 * G),
        ("hdr", "4X", 200 * G),
        ("NDR 400G", "4x", 400 * G),
        ("N/A", "4x", None),
        ("NDR", "", None),
    ],
)
def test_speed_names_scale_with_width(speed: str, width: str, bps: int | None) -> None:
    assert port_speed_bps(speed, width) == bps


def test_ports_state_speed_width_and_capabilities() -> None:
    payload = [
        port("1c34da0300728606", 1, "NDR", "4x"),
        port("1c34da0300728606", 2, "HDR", "4x"),  # downgraded: enabled up to NDR
        port("0x1C34DA0300728606", 3, "NDR", "4x", phys="Polling"),  # down: no speed, no width
        port("0c42a10300280000", 1, "NDR", "2x"),
    ]
    batch, caps = parse_ports(payload, PortKeys(None), NOW)
    assert record_kind(batch.schema) == "port_sample"
    got = {r["port"]: r for r in batch.to_pylist()}
    sw = "0x1c34da0300728606"
    assert got[f"{sw}/1"]["speed_bps"] == 400 * G and got[f"{sw}/1"]["width"] == 4
    assert got[f"{sw}/1"]["phys_state"] == PHYS_LINK_UP and got[f"{sw}/1"]["logical_state"] == LOGICAL_ACTIVE
    assert got[f"{sw}/2"]["speed_bps"] == 200 * G
    assert got[f"{sw}/3"]["phys_state"] == PHYS_POLLING
    assert got[f"{sw}/3"]["speed_bps"] is None and got[f"{sw}/3"]["width"] is None
    assert got["0x0c42a10300280000/1"]["speed_bps"] == 200 * G and got["0x0c42a10300280000/1"]["width"] == 2
    assert got[f"{sw}/1"]["tx_bytes"] is None  # REST carries no counters
    assert got[f"{sw}/1"]["time"] == NOW
    assert record_kind(caps.schema) == "port_capability" and set(caps.column("time").to_pylist()) == {NOW}
    cap = {r["port"]: r for r in caps.drop_columns(["time"]).to_pylist()}
    assert cap[f"{sw}/2"] == {
        "port": f"{sw}/2",
        "enabled_speed_bps": 400 * G,  # NDR x 4 lanes
        "enabled_width": 4,
        "supported_speed_bps": 2400 * G,  # XDR x 12 lanes
        "supported_width": 12,
        "max_speed_bps": 400 * G,
    }


def test_ports_resolve_through_the_inventory() -> None:
    fabric = Fabric.from_specs(
        {"h1": "host", "leaf": "leaf"},
        [
            PortSpec("h1", "mlx5_0", guid="0c42a10300280000", num=1),
            PortSpec("leaf", "p6", guid="0x0c42a103005de2f0", num=6),
        ],
        [("h1/mlx5_0", "leaf/p6")],
    )
    payload = [port("0C42A10300280000", 1, "HDR", "4x"), port("c42a103005de2f0", 6, "HDR", "4x")]
    batch, _ = parse_ports(payload, PortKeys(fabric), NOW)
    assert batch.column("port").to_pylist() == ["h1/mlx5_0", "leaf/p6"]


def test_expected_from_capabilities_fills_only_unknown_expectations() -> None:
    fabric = Fabric.from_specs(
        {"h1": "host", "h2": "host", "leaf": "leaf"},
        [
            PortSpec("h1", "mlx5_0", guid="0xa1", num=1),  # no expected speed in the inventory
            PortSpec("h2", "mlx5_0", guid="0xa2", num=1, expected_speed_bps=800 * G),
            PortSpec("leaf", "p1", guid="0xb0", num=1),
            PortSpec("leaf", "p2", guid="0xb0", num=2),
        ],
        [("h1/mlx5_0", "leaf/p1"), ("h2/mlx5_0", "leaf/p2")],
    )
    keys = PortKeys(fabric)
    hca = port("a1", 1, "HDR", "4x")
    hca["enabled_speed"] = ["HDR"]  # the NIC enables HDR only: the link can do 200G
    payload = [hca, port("b0", 1, "HDR", "4x"), port("b0", 2, "NDR", "4x"), port("a2", 1, "NDR", "4x")]
    _, caps = parse_ports(payload, keys, NOW)
    expected = expected_from_capabilities(fabric, caps)
    assert expected.tolist() == [200 * G, 800 * G, 200 * G, 400 * G]
    assert expected.dtype == np.int64


def test_links_become_port_key_pairs() -> None:
    fabric = Fabric.from_specs(
        {"leaf": "leaf", "spine": "spine"},
        [
            PortSpec("leaf", "p37", guid="1c34da0300728606", num=37),
            PortSpec("spine", "p2", guid="1c34da0300728a06", num=2),
        ],
        [],
    )
    links = [
        {
            "cable_info": {},
            "capabilities": [],
            "destination_guid": "1c34da0300728a06",
            "destination_port": "2",
            "destination_port_dname": "2",
            "name": "1c34da0300728606_37:1c34da0300728a06_2",
            "severity": "Info",
            "source_guid": "1c34da0300728606",
            "source_port": "37",
            "source_port_dname": "37",
            "width": "4x",
        },
        {"source_guid": "0xabc", "source_port": 1, "destination_guid": "0xdef", "destination_port": 3},
    ]
    table = parse_links(links, PortKeys(fabric))
    assert table.to_pylist() == [
        {"a_port": "leaf/p37", "b_port": "spine/p2", "source": "ufm"},
        {"a_port": "0x0000000000000abc/1", "b_port": "0x0000000000000def/3", "source": "ufm"},
    ]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"error": "x"}, "expected a JSON list of objects"),
        ([{"number": 1, "physical_state": "Link Up"}], "without a GUID"),
        ([port("zz", 1, "NDR", "4x")], "not a GUID"),
        ([port("0xa", 1, "NDR", "4x") | {"number": "one"}], "not a port number"),
    ],
)
def test_port_garbage_fails(payload: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_ports(payload, PortKeys(None), NOW)
