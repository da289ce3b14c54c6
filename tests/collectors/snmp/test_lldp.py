"""LLDP-MIB over SNMP: ids by subtype, local ports by lldpLocPortTable or ifIndex, bad rows
skipped and counted; the real SONiC recording through a real agent; the collector's option."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graywire.collectors.base import BAD_PORT, MALFORMED_LINE
from graywire.collectors.schemas import LINK, record_kind
from graywire.collectors.snmp import SnmpCollector, SnmpSession, SnmpSourceConfig
from graywire.collectors.snmp import oids as O
from graywire.collectors.snmp.lldp import (
    CHASSIS_MAC,
    CHASSIS_NETWORK_ADDRESS,
    LLDP_COLUMNS,
    LLDP_NEIGHBOR,
    PORT_MAC,
    PORT_NETWORK_ADDRESS,
    SWITCH_INTERFACE,
    LldpDiscovery,
    lldp_columns,
    merge_links,
    parse_lldp,
    render_id,
    walk_lldp,
)
from graywire.collectors.snmp.parse import PortSelector
from graywire.collectors.snmp.walk import Tables, Value
from tests.collectors.snmp.conftest import REAL, SnmpsimServer
from tests.strategies import PROPERTY

CFG = SnmpSourceConfig(targets=[{"host": "h", "name": "sw"}])
G = 10**9


def chassis(subtype: int | None, raw: Value) -> str | None:
    return render_id(subtype, raw, CHASSIS_MAC, CHASSIS_NETWORK_ADDRESS)


def port(subtype: int | None, raw: Value) -> str | None:
    return render_id(subtype, raw, PORT_MAC, PORT_NETWORK_ADDRESS)


def test_ids_render_by_subtype() -> None:
    mac = bytes.fromhex("7486e20a0c04")
    assert chassis(4, mac) == port(3, mac) == "74:86:e2:0a:0c:04"  # macAddress: 6 octets
    for text in (b"74:86:E2:0A:0C:04", b"74-86-e2-0a-0c-04", b"7486.e20a.0c04", b"7486e20a0c04"):
        assert chassis(4, text) == "74:86:e2:0a:0c:04", text  # as some agents (SONiC) send it
    # networkAddress: an IANA address family octet, then the address.
    assert chassis(5, bytes([1, 192, 0, 2, 7])) == port(4, bytes([1, 192, 0, 2, 7])) == "192.0.2.7"
    assert port(4, bytes([2]) + bytes(15) + b"\x01") == "::1"
    assert port(4, bytes([1, 1, 2])) == "01:01:02"  # no IPv4 address in 2 octets: raw hex
    # Names and the rest: text, NUL padding dropped; not printable -> hex.
    assert port(5, b"Ethernet1/1\x00") == "Ethernet1/1"
    assert port(7, b"Eth1/54") == chassis(7, b"Eth1/54") == "Eth1/54"
    assert port(6, b"\x01\x04\xc0\x00") == "01:04:c0:00"  # agentCircuitId: binary
    assert chassis(6, b"swp1") == "swp1" and port(1, b"uplink") == "uplink"
    # A 6-character interface name under the macAddress subtype of the other enumeration is a name.
    assert port(4, b"Eth1/1") == "Eth1/1"
    assert port(3, b"not-a-mac") == "not-a-mac"  # a broken agent: still the id it sent
    assert port(None, b"p1") == "p1"  # subtype missing
    for empty in (b"", b"\x00\x00", b"  ", None, 5):
        assert port(5, empty) is None


def rem(mark: int, num: int, index: int, **cols: Value) -> dict[O.Oid, dict[O.Oid, Value]]:
    names = {
        "cs": O.LLDP_REM_CHASSIS_ID_SUBTYPE, "chassis": O.LLDP_REM_CHASSIS_ID,
        "ps": O.LLDP_REM_PORT_ID_SUBTYPE, "port": O.LLDP_REM_PORT_ID,
        "desc": O.LLDP_REM_PORT_DESC, "name": O.LLDP_REM_SYS_NAME,
    }  # fmt: skip
    return {names[k]: {(mark, num, index): v} for k, v in cols.items()}


def tables(*parts: dict[O.Oid, dict[O.Oid, Value]]) -> Tables:
    out: Tables = {}
    for part in parts:
        for col, rows in part.items():
            out.setdefault(col, {}).update(rows)
    return out


#: A switch whose ifIndex (101..104) is not its LLDP port number (1..4), as on a bridge.
SWITCH = {
    O.IF_NAME: {(100 + i,): f"Ethernet{i}".encode() for i in range(1, 5)} | {(999,): b"mgmt0"},
    O.IF_TYPE: {(100 + i,): 6 for i in range(1, 5)} | {(999,): 6},
    O.IF_HIGH_SPEED: {(101,): 400_000, (102,): 400_000, (103,): 100_000, (104,): 0},
    O.IF_OPER_STATUS: {(101,): 1, (102,): 1, (103,): 2, (104,): 1},
    O.LLDP_LOC_PORT_ID_SUBTYPE: {(i,): 5 for i in range(1, 5)} | {(9,): 5},
    O.LLDP_LOC_PORT_ID: {(i,): f"Ethernet{i}".encode() for i in range(1, 5)} | {(9,): b"mgmt0"},
}


def parse(t: Tables) -> tuple[list[dict[str, object]], Counter[str]]:
    skipped: Counter[str] = Counter()
    view = parse_lldp(t, "leaf1", PortSelector(CFG).ports(t), skipped)
    assert view.links.schema == LINK and view.neighbors.schema == LLDP_NEIGHBOR
    assert view.links.column("a_port").to_pylist() == view.neighbors.column("local_port").to_pylist()
    assert view.links.column("b_port").to_pylist() == view.neighbors.column("remote_port").to_pylist()
    assert set(view.links.column("source").to_pylist()) <= {"lldp"}
    return view.neighbors.to_pylist(), skipped


def test_local_ports_map_through_lldp_loc_port_table_then_if_index() -> None:
    host = rem(7, 1, 1, cs=4, chassis=bytes.fromhex("b8cef6000001"), ps=5, port=b"ens1f0np0",
               desc=b"ens1f0np0", name=b"gpu-0001")  # fmt: skip
    spine = rem(7, 2, 3, cs=7, chassis=b"spine1", ps=5, port=b"Ethernet9", name=b"spine1")
    rows, skipped = parse(tables(SWITCH, host, spine))
    assert [(r["local_port"], r["remote_port"]) for r in rows] == [
        ("leaf1/Ethernet1", "gpu-0001/ens1f0np0"),  # LLDP port 1 = lldpLocPortId Ethernet1 = ifIndex 101
        ("leaf1/Ethernet2", "spine1/Ethernet9"),
    ]
    assert rows[0]["chassis_id"] == "b8:ce:f6:00:00:01" and rows[0]["port_desc"] == "ens1f0np0"
    assert (rows[0]["chassis_id_subtype"], rows[0]["port_id_subtype"], rows[0]["lldp_port_num"]) == (4, 5, 1)
    assert skipped == Counter()
    # Without lldpLocPortTable the LLDP port number is taken as the ifIndex (the MIB's non-bridge case).
    bare = {k: v for k, v in SWITCH.items() if k not in (O.LLDP_LOC_PORT_ID, O.LLDP_LOC_PORT_ID_SUBTYPE)}
    rows, skipped = parse(tables(bare, rem(0, 103, 1, cs=7, chassis=b"h", ps=5, port=b"eth0", name=b"h")))
    assert [r["local_port"] for r in rows] == ["leaf1/Ethernet3"] and skipped == Counter()


def test_bad_rows_are_skipped_and_counted_never_raised() -> None:
    good = rem(0, 1, 1, cs=7, chassis=b"gpu-0001", ps=5, port=b"mlx5_0", name=b"gpu-0001")
    rows, skipped = parse(tables(
        SWITCH, good,
        rem(0, 2, 1, cs=4, chassis=bytes.fromhex("b8cef6000002"), ps=5, name=b"gpu-0002"),  # no port id
        rem(0, 3, 1, ps=5, port=b"mlx5_0", name=b"gpu-0003"),  # no chassis id
        rem(0, 77, 1, cs=7, chassis=b"x", ps=5, port=b"p1", name=b"x"),  # port 77: no such interface
        {O.LLDP_LOC_PORT_ID: {(55,): b"00:11:22:33:44:55"}},  # named by a MAC, and no ifIndex 55
        rem(0, 55, 1, cs=7, chassis=b"y", ps=5, port=b"p1", name=b"y"),
        {O.LLDP_REM_PORT_ID: {(1, 4): b"short-index"}},  # index is not (time mark, port, index)
        rem(0, 9, 1, cs=7, chassis=b"oob", ps=5, port=b"p1", name=b"oob"),  # on mgmt0: not reported
        {O.LLDP_REM_CHASSIS_ID_SUBTYPE: {(0, 4, 1): b"garbage"}, O.LLDP_REM_CHASSIS_ID: {(0, 4, 1): 12}},
    ))  # fmt: skip
    assert [r["remote_port"] for r in rows] == ["gpu-0001/mlx5_0"]
    assert skipped == Counter({MALFORMED_LINE: 4, BAD_PORT: 2})


def test_duplicates_and_neighbours_without_a_system_name() -> None:
    old = rem(5, 1, 1, cs=7, chassis=b"gpu-0001", ps=5, port=b"mlx5_0", name=b"gpu-0001", desc=b"old")
    new = rem(9, 1, 2, cs=7, chassis=b"gpu-0001", ps=5, port=b"mlx5_0", name=b"gpu-0001", desc=b"new")
    phone = rem(0, 2, 1, cs=4, chassis=b"00:26:fd:a0:54:cf", ps=3, port=b"00:26:fd:a0:54:cf", name=b"")
    slashed = rem(0, 4, 1, cs=7, chassis=b"host-7", ps=5, port=b"eth1", name=b"a/b")
    rows, skipped = parse(tables(SWITCH, old, new, phone, slashed))
    assert [(r["remote_port"], r["port_desc"]) for r in rows] == [
        ("gpu-0001/mlx5_0", "new"),  # the same neighbour under two time marks: the latest, once
        ("00:26:fd:a0:54:cf/00:26:fd:a0:54:cf", None),  # no system name: keyed by its chassis id
        ("host-7/eth1", None),  # a system name a key cannot hold ('/'): the chassis id
    ]
    assert rows[1]["sys_name"] is None and rows[2]["sys_name"] == "a/b" and skipped == Counter()


def test_management_address_comes_from_the_index() -> None:
    n = rem(3, 1, 1, cs=7, chassis=b"spine1", ps=7, port=b"Eth1/54", name=b"spine1")
    addrs = {(3, 1, 1, 1, 4, 192, 168, 25, 217): 2, (3, 1, 1, 2, 3, 1, 2, 3): 2, (3, 1, 1, 1, 9, 300): 2}
    (row,), _ = parse(tables(SWITCH, n, {O.LLDP_REM_MAN_ADDR_IF_SUBTYPE: addrs}))
    assert row["mgmt_address"] == "192.168.25.217"


def test_interfaces_and_a_switch_without_lldp() -> None:
    t = {k: v for k, v in SWITCH.items() if k[: len(O.LLDP_LOC)] != O.LLDP_LOC}
    view = parse_lldp(t, "leaf1", PortSelector(CFG).ports(t))
    assert not view.has_lldp and view.links.num_rows == 0
    assert view.interfaces.schema == SWITCH_INTERFACE
    assert view.interfaces.to_pydict() == {
        "switch": ["leaf1"] * 4,
        "port": [f"leaf1/Ethernet{i}" for i in range(1, 5)],  # mgmt0 is not a fabric port
        "if_index": [101, 102, 103, 104],
        "if_descr": [None] * 4,
        "speed_bps": [400 * G, 400 * G, 100 * G, None],  # down: the configured speed; 0: unknown
        "oper_up": [True, True, False, True],
    }
    assert parse_lldp(SWITCH, "leaf1", PortSelector(CFG).ports(SWITCH)).has_lldp


def test_merge_links_keeps_one_row_per_cable() -> None:
    a = pa.RecordBatch.from_pylist([{"a_port": "leaf1/p1", "b_port": "spine1/p1", "source": "lldp"}], LINK)
    rows = [("spine1/p1", "leaf1/p1"), ("spine1/p2", "leaf2/p1")]
    b = pa.RecordBatch.from_pylist([{"a_port": x, "b_port": y, "source": "lldp"} for x, y in rows], LINK)
    merged = merge_links([a, b])
    assert merged.schema == LINK
    assert list(zip(merged["a_port"].to_pylist(), merged["b_port"].to_pylist(), strict=True)) == [
        ("leaf1/p1", "spine1/p1"), ("leaf2/p1", "spine1/p2"),
    ]  # fmt: skip


# -- the real SONiC recording ------------------------------------------------------------------


def sonic_tables(real_fixtures: Path) -> Tables:
    """The recording's LLDP and IF-MIB objects as a walk hands them over (ints, bytes)."""
    cols = lldp_columns(need_sys_name=False)
    out: Tables = {c: {} for c in cols}
    for line in (real_fixtures / "snmp" / f"{REAL['sonic']}.snmprec").read_text().splitlines():
        oid, typ, value = line.split("|", 2)
        o = O.oid(oid)
        for c in cols:
            if o[: len(c)] == c:
                v: Value = int(value) if typ in ("2", "65", "66", "67", "70") else value.encode()
                out[c][o[len(c) :]] = bytes.fromhex(value) if typ == "4x" else v
    return out


def test_real_sonic_recording_every_mutation_parses(real_fixtures: Path) -> None:
    """One object of the real recording saying anything: a view, never an exception."""
    seed = sonic_tables(real_fixtures)
    cells = [(c, s) for c in LLDP_COLUMNS for s in seed[c]]
    assert len(cells) == 55 + 23 * 6 + 1  # lldpLocPortId, 6 lldpRemTable columns, one address

    @PROPERTY
    @given(st.integers(0, len(cells) - 1),
           st.one_of(st.integers(-(2**40), 2**40), st.binary(max_size=24), st.none()))  # fmt: skip
    def check(i: int, value: Value) -> None:
        col, sub = cells[i]
        t = {c: dict(rows) for c, rows in seed.items()}
        t[col][sub] = value
        skipped: Counter[str] = Counter()
        view = parse_lldp(t, "sonic", PortSelector(CFG).ports(t), skipped)
        assert 21 <= view.links.num_rows <= 23  # a port id naming eth0 a fabric port adds one
        assert set(skipped) <= {MALFORMED_LINE, BAD_PORT}

    check()


@pytest.fixture(scope="module")
def discovered(real_agent: SnmpsimServer) -> LldpDiscovery:
    targets = [
        {"host": "127.0.0.1", "port": real_agent.port, "name": n, "community": c} for n, c in REAL.items()
    ]
    return walk_lldp(SnmpSourceConfig(targets=targets, timeout_s=30))


def test_real_recordings_walked_through_a_real_agent(
    discovered: LldpDiscovery, real_agent: SnmpsimServer
) -> None:
    d = discovered
    assert d.errors == {} and d.skipped == {}
    # Of the five LibreNMS recordings only the Dell SONiC one carries LLDP-MIB.
    at = f"@127.0.0.1:{real_agent.port}"
    assert sorted(d.without_lldp) == sorted(f"{n}{at}" for n in ("arista", "nxos", "junos", "cumulus"))
    n = d.neighbors.to_pylist()
    # 23 lldpRemTable rows; the one on eth0 (lldpRemLocalPortNum 1000, the management port) is
    # not a fabric port. Every other maps by lldpLocPortId = ifName (ifIndex 57 is Eth1/54).
    assert len(n) == 22 and d.links.num_rows == 22
    assert all(r["switch"] == "sonic" for r in n)
    by_port = {r["local_port"]: r for r in n}
    dist = by_port["sonic/Eth1/53"]
    assert dist["remote_port"] == "xxxxx-xxx-xxx-sw-dist01/Eth1/54"
    assert (dist["chassis_id_subtype"], dist["chassis_id"]) == (4, "e8:65:5f:f5:f5:40")  # MAC sent as text
    assert (dist["port_id_subtype"], dist["port_desc"], dist["mgmt_address"]) == (
        7,
        "Ethernet56",
        "192.168.25.217",
    )
    acc = by_port["sonic/Eth1/48"]
    assert (acc["remote_port"], acc["port_id_subtype"]) == ("xxxxx-xxx-xxx-sw-acc02/Gi1/0/44", 5)
    # 20 neighbours send no system name: keyed by the chassis id (a MAC, or a local name).
    assert sum(r["sys_name"] is None for r in n) == 20
    assert by_port["sonic/Eth1/19"]["remote_port"] == "74:86:e2:0a:0c:04/74:86:e2:0a:0c:04"
    assert by_port["sonic/Eth1/47"]["remote_port"] == "xxxxx-T00634I/c4:5a:b1:e0:c0:f5"
    assert Counter(r["chassis_id_subtype"] for r in n) == {4: 9, 7: 13}
    assert Counter(r["port_id_subtype"] for r in n) == {3: 20, 5: 1, 7: 1}
    # Interfaces: the 54 front-panel ports of SONiC and the selected ports of the others.
    i = d.interfaces
    sonic = {r["port"]: r for r in i.to_pylist() if r["switch"] == "sonic"}
    assert len(sonic) == 54 and sonic["sonic/Eth1/53"]["speed_bps"] == 100 * G
    assert sonic["sonic/Eth1/54"]["if_index"] == 57
    assert (sonic["sonic/Eth1/3"]["oper_up"], sonic["sonic/Eth1/3"]["speed_bps"]) == (False, 1 * G)
    assert Counter(i["switch"].to_pylist()) == {
        "arista": 54,
        "nxos": 54,
        "junos": 34,
        "sonic": 54,
        "cumulus": 57,
    }


def test_collector_sends_links_every_lldp_every(real_agent: SnmpsimServer) -> None:
    targets = [{"host": "127.0.0.1", "port": real_agent.port, "name": n, "community": REAL[n]}
               for n in ("sonic", "nxos")]  # fmt: skip
    cfg = SnmpSourceConfig(targets=targets, lldp=True, lldp_every="10m", timeout_s=20)
    t0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    now = [t0]
    session = SnmpSession(4)
    sonic, nxos = (SnmpCollector(cfg, t, session, clock=lambda: now[0]) for t in cfg.targets)

    async def poll(at: timedelta) -> list[list[str]]:
        now[0] = t0 + at
        results = [await sonic.scrape(), await nxos.scrape()]
        assert all(r.ok for r in results)
        assert all(b.num_rows == 22 for b in results[0].batches[1:])  # the SONiC cables
        return [[record_kind(b.schema) for b in r.batches] for r in results]

    async def run() -> list[list[list[str]]]:
        try:
            return [await poll(timedelta(minutes=m)) for m in (0, 1, 9.9, 10, 15)]
        finally:
            session.close()

    kinds = asyncio.run(run())
    # nxos has no LLDP-MIB: never a link batch (an empty one would say every cable is gone).
    assert [k[1] for k in kinds] == [["port_sample"]] * 5
    assert [k[0] for k in kinds] == [["port_sample", "link"], ["port_sample"], ["port_sample"],
                                     ["port_sample", "link"], ["port_sample"]]  # fmt: skip


def test_lldp_is_off_by_default_and_lldp_every_is_a_duration() -> None:
    assert CFG.lldp is False and CFG.lldp_every == timedelta(minutes=10)
    with pytest.raises(ValueError, match="positive duration"):
        SnmpSourceConfig(targets=[{"host": "h"}], lldp_every="0s")
    assert (
        SnmpSourceConfig(targets=[{"host": "h"}], lldp_every="1h").model_dump(mode="json")["lldp_every"]
        == "1h"
    )


def test_real_sonic_neighbours_discover_into_an_inventory_that_loads(
    discovered: LldpDiscovery, tmp_path: Path
) -> None:
    """The real SONiC switch's LLDP view through discovery: every cable kept, a loadable file,
    and the neighbours that send no system name said to need a name."""
    from graywire.collectors.discovery import discover, facts_from_lldp
    from graywire.collectors.model import load_inventory

    facts, links, notes = facts_from_lldp(discovered)
    assert links.num_rows == 22
    result = discover(facts, links, source="LLDP")
    out = tmp_path / "inventory.yaml"
    out.write_text(result.to_yaml())
    fabric = load_inventory(out)
    assert len(fabric.link_a) == 22
    assert dict(zip(fabric.node_names, fabric.node_roles, strict=True))["sonic"] == "leaf"
    assert any("20 neighbour(s) send no system name" in n for n in notes), notes
