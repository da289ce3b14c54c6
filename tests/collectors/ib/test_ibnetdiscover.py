"""ibnetdiscover parsing: the real ``-p`` ports report (../shared/fixtures/real/infiniband) and
the default topology format, with bad lines skipped and counted."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given

from graywire.collectors.ib.ibnetdiscover import ROUTER, UNREADABLE, parse_ibnetdiscover
from tests.strategies import PROPERTY, spliced

TOPOLOGY = """\
#
# Topology file: generated on Tue Jun  5 14:15:10 2024
#
# Initiated from node 98039b03006c5c1a port 98039b03006c5c1b

vendid=0x2c9
devid=0xd2f0
sysimgguid=0x7cfe900300a5a2c0
switchguid=0x7cfe900300a5a2c0(7cfe900300a5a2c0)
Switch\t64 "S-7cfe900300a5a2c0"\t\t# "MF0;leaf01:MQM9700/U1" enhanced port 0 lid 1 lmc 0
[1]\t"H-98039b03006c5c1a"[1](98039b03006c5c1b) \t\t# "gpu001 mlx5_0" lid 12 4xNDR
[33]\t"S-7cfe900300a5a2d0"[2]\t\t# "spine01" lid 3 4xNDR

vendid=0x2c9
devid=0x1021
sysimgguid=0x98039b03006c5c1a
caguid=0x98039b03006c5c1a
Ca\t1 "H-98039b03006c5c1a"\t\t# "gpu001 mlx5_0"
[1](98039b03006c5c1b) \t"S-7cfe900300a5a2c0"[1]\t\t# lid 12 lmc 0 "MF0;leaf01:MQM9700/U1" lid 1 4xHDR
"""


def test_real_ports_report(real_fixtures: Path) -> None:
    text = (real_fixtures / "infiniband" / "ibnetdiscover_ports_test.out").read_text()
    r = parse_ibnetdiscover(text)
    assert r.formats == {"ports"} and not r.skipped
    assert len(r.ports) == 9
    first = r.ports[0]
    assert (first.end.type, first.end.lid, first.end.num, first.end.guid) == (
        "CA",
        134,
        1,
        "0x7cfe9003003b4bde",
    )
    assert first.end.description == "o0001 HCA-1"
    assert (first.width, first.speed, first.speed_bps) == (4, "EDR", 100 * 10**9)
    assert first.peer is not None
    assert (first.peer.type, first.peer.lid, first.peer.num) == ("SW", 1719, 10)
    assert first.peer.guid == "0x7cfe9003009ce5b0" and first.peer.description == "ib-i1l1s01"
    down = r.ports[7]  # SW 2052 37 ... 4x ???  'ib-i4l1s01'
    assert down.peer is None and down.speed is None and down.width == 4
    assert down.end.description == "ib-i4l1s01" and down.end.num == 37
    sdr = r.ports[8]
    assert sdr.peer is None and sdr.speed == "SDR" and sdr.end.guid == "0x08c0eb0300add20e"


def test_topology_format() -> None:
    r = parse_ibnetdiscover(TOPOLOGY + "garbage line\n")
    assert r.formats == {"topology"}
    assert r.skipped == {UNREADABLE: 1} and r.skipped_lines == [TOPOLOGY.count("\n") + 1]
    sw1, sw33, ca = r.ports
    assert (sw1.end.type, sw1.end.guid, sw1.end.num, sw1.end.lid) == ("SW", "0x7cfe900300a5a2c0", 1, 1)
    assert sw1.end.description == "MF0;leaf01:MQM9700/U1"
    assert sw1.peer is not None and sw1.peer.guid == "0x98039b03006c5c1b"  # the CA's port GUID
    assert sw1.peer.description == "gpu001 mlx5_0" and sw1.peer.lid == 12
    assert (sw1.width, sw1.speed, sw1.speed_bps) == (4, "NDR", 400 * 10**9)
    assert sw33.peer is not None and (sw33.peer.type, sw33.peer.guid, sw33.peer.num) == (
        "SW",
        "0x7cfe900300a5a2d0",
        2,
    )
    assert (ca.end.type, ca.end.guid, ca.end.lid, ca.speed) == ("CA", "0x98039b03006c5c1b", 12, "HDR")
    assert ca.peer is not None and ca.peer.num == 1 and ca.peer.type == "SW"


def test_routers_and_orphan_port_lines_are_skipped_and_counted() -> None:
    text = (
        "RT    5  1 0x0002c90300000001 4x EDR - SW     1  3 0x0002c90300000002 ( 'r1' - 'sw1' )\n"
        '[1]\t"S-7cfe900300a5a2c0"[1]\t\t# "x" lid 1 4xHDR\n'
        "CA    7  1 0xZZ 4x EDR 'h'\n"
    )
    r = parse_ibnetdiscover(text)
    assert not r.ports
    assert r.skipped == {ROUTER: 1, UNREADABLE: 2}


def test_ports_report_with_junk_spliced_in(real_fixtures: Path) -> None:
    text = (real_fixtures / "infiniband" / "ibnetdiscover_ports_test.out").read_text()

    @PROPERTY
    @given(spliced(text))
    def check(mutated: str) -> None:
        r = parse_ibnetdiscover(mutated)  # never raises
        assert sum(r.skipped.values()) + len(r.ports) <= mutated.count("\n") + 1

    check()


def test_only_newlines_end_lines_so_line_numbers_are_the_files() -> None:
    """\\r, \\x85 or \\u2028 inside a line do not split it (str.splitlines would, and count more
    lines than the file has)."""
    text = "0\r0\r0\x85" + TOPOLOGY
    r = parse_ibnetdiscover(text)
    assert sum(r.skipped.values()) + len(r.ports) <= text.count("\n") + 1
    assert r.skipped_lines[0] == 1
    lines = text.split("\n")
    assert r.ports and all(lines[p.line - 1].lstrip().startswith("[") for p in r.ports)
