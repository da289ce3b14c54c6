"""The collector against real switch recordings served by a real agent (snmpsim), v2c and v3.

Values are read from the recordings (../shared/fixtures/real/snmp, see SOURCES.md there).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import pytest

from graywire.collectors.base import ScrapeResult
from graywire.collectors.schemas import COUNTER_BITS_KEY, PORT_SAMPLE
from graywire.collectors.snmp import SnmpCollector, SnmpSession, SnmpSourceConfig, build_collectors
from graywire.collectors.snmp.walk import Tables
from tests.collectors.snmp.conftest import REAL, V3_AUTH, V3_PRIV, SnmpsimServer, free_udp_port

G = 10**9


#: Timeouts for the tests that are not about timeouts: snmpsim on a busy machine answers late.
PATIENT: dict[str, Any] = {"timeout_s": 60, "request_timeout_s": 20}


def targets(agent: SnmpsimServer, **names: str) -> list[dict[str, Any]]:
    """One target per switch name -> recording (community), all on the test agent."""
    return [{"host": "127.0.0.1", "port": agent.port, "name": n, "community": c} for n, c in names.items()]


def scrape_all(cfg: SnmpSourceConfig, collectors: list[SnmpCollector] | None = None) -> list[ScrapeResult]:
    cols = collectors if collectors is not None else build_collectors(cfg)

    async def run() -> list[ScrapeResult]:
        try:
            return await asyncio.gather(*(c.scrape() for c in cols))
        finally:
            cols[0].session.close()

    return asyncio.run(run())


def rows(batch: pa.RecordBatch) -> dict[str, dict[str, Any]]:
    """Row dicts by port key, null columns left out."""
    d = batch.to_pydict()
    return {d["port"][i]: {k: v[i] for k, v in d.items() if v[i] is not None} for i in range(batch.num_rows)}


def counter_bits(batch: pa.RecordBatch) -> dict[str, int]:
    raw = (batch.schema.metadata or {}).get(COUNTER_BITS_KEY)
    return json.loads(raw) if raw else {}


@pytest.fixture(scope="module")
def v2c(real_agent: SnmpsimServer) -> dict[str, pa.RecordBatch]:
    """One v2c poll of all five recordings, concurrently."""
    cfg = SnmpSourceConfig(targets=targets(real_agent, **REAL), **PATIENT)
    results = scrape_all(cfg)
    assert [r.error for r in results] == [None] * 5
    return {r.target.split("@")[0]: r.batches[0] for r in results}


def test_batches_are_canonical_port_samples(v2c: dict[str, pa.RecordBatch]) -> None:
    for name, batch in v2c.items():
        assert batch.schema.remove_metadata() == PORT_SAMPLE.remove_metadata(), name
        assert batch.column("source").to_pylist() == ["snmp"] * batch.num_rows
        assert len(set(batch.column("time").to_pylist())) == 1
        assert all(k.startswith(f"{name}/") for k in batch.column("port").to_pylist())


def test_arista_7280r_pfc_per_priority_and_no_ifxtable(v2c: dict[str, pa.RecordBatch]) -> None:
    b = v2c["arista"]
    r = rows(b)
    # 48 Ethernet ports and Ethernet49/1..54/1; Management1, Port-Channel and Vlan SVIs skipped.
    assert b.num_rows == 54
    assert {"arista/Ethernet1", "arista/Ethernet48", "arista/Ethernet49/1", "arista/Ethernet54/1"} <= set(r)
    assert not any(k.split("/", 1)[1].startswith(("Management", "Port-Channel", "Vlan")) for k in r)
    # ARISTA-PFC-MIB aristaPfcPriorityTable has all 8 priorities of ifIndex 50001: real zeros.
    up = r["arista/Ethernet50/1"]
    for p in range(8):
        assert up[f"pfc{p}_tx_pause_frames"] == 0 and up[f"pfc{p}_rx_pause_frames"] == 0
    # No ifXTable: names come from ifDescr, octets from the Counter32 ifTable, declared 32 bits.
    assert (up["phys_state"], up["logical_state"]) == (5, 4)
    assert (up["rx_bytes"], up["tx_bytes"]) == (4169610301, 599737332)
    assert (up["rx_packets"], up["tx_packets"]) == (154930616, 230175636)
    narrow = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rcv_errors", "xmit_discards")
    assert counter_bits(b) == dict.fromkeys(narrow, 32)
    # ifSpeed reads 4294967295 ("faster than 4.29G, see ifHighSpeed") and there is no ifHighSpeed:
    # the speed is unknown, so null, never 4.29 Gb/s.
    assert "speed_bps" not in up
    assert b.column("speed_bps").null_count == b.num_rows
    # Ethernet2 is down (ifOperStatus 2), Ethernet1 notPresent (6): both down.
    assert (r["arista/Ethernet2"]["phys_state"], r["arista/Ethernet1"]["phys_state"]) == (3, 3)


def test_nxos_high_speed_and_hc_octets(v2c: dict[str, pa.RecordBatch]) -> None:
    b = v2c["nxos"]
    r = rows(b)
    assert b.num_rows == 54  # Ethernet1/1..1/54; mgmt0, loopbacks, Vlan1, nve1 skipped
    e53, e54 = r["nxos/Ethernet1/53"], r["nxos/Ethernet1/54"]
    assert e53["speed_bps"] == 100 * G and e54["speed_bps"] == 100 * G
    assert (e53["rx_bytes"], e53["tx_bytes"]) == (11975662305, 12094558485)  # Counter64, past 2^32
    assert (e53["rx_packets"], e53["tx_packets"]) == (169396405, 171156006)
    assert (e53["rcv_errors"], e53["xmit_discards"]) == (0, 0)
    assert e54["rx_bytes"] == 12070657919
    # Ethernet1/1 is admin- and oper-down at ifHighSpeed 25000: a configured speed, not reported.
    e1 = r["nxos/Ethernet1/1"]
    assert (e1["phys_state"], e1["logical_state"]) == (3, 1) and "speed_bps" not in e1
    assert counter_bits(b) == {"rcv_errors": 32, "xmit_discards": 32}
    assert not any(f"pfc{p}_rx_pause_frames" in e53 for p in range(8))  # no PFC MIB: null


def test_junos_qfx_all_ports_down_report_no_speed(v2c: dict[str, pa.RecordBatch]) -> None:
    b = v2c["junos"]
    r = rows(b)
    assert sorted(r) == sorted(f"junos/et-0/0/{i}" for i in range(34))  # units (.0) and re0:mgmt-0 skipped
    assert set(b.column("phys_state").to_pylist()) == {3}
    assert set(b.column("logical_state").to_pylist()) == {1}
    # ifHighSpeed says 400000 on every et- port, but they are all oper-down.
    assert b.column("speed_bps").null_count == 34


def test_cumulus_sparse_recording_gives_null_counters_not_zero(v2c: dict[str, pa.RecordBatch]) -> None:
    b = v2c["cumulus"]
    r = rows(b)
    assert {f"cumulus/swp{i}" for i in range(1, 57)} <= set(r)
    for skipped in ("lo", "eth0", "eth1", "bond10", "bond23", "mgmt", "bridge", "peerlink", "peerlink.4094"):
        assert f"cumulus/{skipped}" not in r
    assert (r["cumulus/swp1"]["phys_state"], r["cumulus/swp2"]["phys_state"]) == (5, 3)
    for col in ("rx_bytes", "tx_bytes", "rx_packets", "rcv_errors", "xmit_discards", "speed_bps"):
        assert b.column(col).null_count == b.num_rows, col
    assert counter_bits(b) == {}


def test_sonic(v2c: dict[str, pa.RecordBatch]) -> None:
    b = v2c["sonic"]
    r = rows(b)
    assert b.num_rows == 54 and "sonic/eth0" not in r and "sonic/Vlan1" not in r
    e53 = r["sonic/Eth1/53"]
    assert e53["speed_bps"] == 100 * G
    assert (e53["rx_bytes"], e53["tx_bytes"], e53["xmit_discards"]) == (55449979539, 60547033030, 585)
    assert r["sonic/Eth1/1"]["speed_bps"] == 1 * G
    assert r["sonic/Eth1/2"]["xmit_discards"] == 715
    assert "speed_bps" not in r["sonic/Eth1/3"]  # down at 1G configured


def test_a_switch_without_name_or_sysname_fails_readably(real_agent: SnmpsimServer) -> None:
    # The Cumulus recording has no sysName.0, and the target sets no name: its ports cannot be keyed.
    target = {"host": "127.0.0.1", "port": real_agent.port, "community": REAL["cumulus"]}
    (res,) = scrape_all(SnmpSourceConfig(targets=[target], **PATIENT))
    assert res.target == f"127.0.0.1:{real_agent.port}"
    assert not res.ok and res.error == "switch has no usable sysName (None); set 'name' for it"


@pytest.mark.parametrize(
    ("user", "switch", "port", "rx_bytes"),
    [(V3_PRIV, "nxos", "Ethernet1/53", 11975662305), (V3_AUTH, "sonic", "Eth1/53", 55449979539)],
    ids=["authPriv-SHA-AES", "authNoPriv-SHA"],
)
def test_snmpv3(
    real_agent: SnmpsimServer, user: tuple[str, ...], switch: str, port: str, rx_bytes: int
) -> None:
    name, auth_proto, auth_key, priv_proto, priv_key = user
    v3: dict[str, Any] = {"user": name, "auth_protocol": auth_proto, "auth_key": auth_key}
    if priv_key:
        v3 |= {"priv_protocol": priv_proto, "priv_key": priv_key}
    target = {"host": "127.0.0.1", "port": real_agent.port, "name": switch, "context": REAL[switch]}
    cfg = SnmpSourceConfig(targets=[target], version="3", v3=v3, **PATIENT)
    (res,) = scrape_all(cfg)
    assert res.error is None
    row = rows(res.batches[0])[f"{switch}/{port}"]
    assert (row["rx_bytes"], row["speed_bps"]) == (rx_bytes, 100 * G)


def test_snmpv3_wrong_keys_fail_readably(real_agent: SnmpsimServer) -> None:
    name, _, auth_key, _, priv_key = V3_PRIV
    target = {"host": "127.0.0.1", "port": real_agent.port, "name": "nxos", "context": REAL["nxos"]}
    bad_auth = SnmpSourceConfig(
        targets=[target],
        version="3",
        v3={"user": name, "auth_key": "not-the-key", "priv_key": priv_key},
        **PATIENT,
    )
    bad_priv = SnmpSourceConfig(
        targets=[target],
        version="3",
        v3={"user": name, "auth_key": auth_key, "priv_key": "not-the-key"},
        **PATIENT,
    )
    (a,) = scrape_all(bad_auth)
    (p,) = scrape_all(bad_priv)
    assert not a.ok and a.error == "SNMP: Wrong SNMP PDU digest" and a.batches == ()
    assert not p.ok and p.error is not None and p.error.startswith("SNMP: Ciphering services not available")


@pytest.mark.alone  # a 1 s request timeout against snmpsim: a busy second core would time the machine
def test_a_dead_switch_fails_within_its_timeout_others_do_not_notice(real_agent: SnmpsimServer) -> None:
    dead = {"host": "127.0.0.1", "port": free_udp_port(), "name": "dead"}
    wrong_community = {"host": "127.0.0.1", "port": real_agent.port, "name": "nope", "community": "nope"}
    real = {n: REAL[n] for n in ("nxos", "junos", "cumulus")}
    cfg = SnmpSourceConfig(
        targets=[*targets(real_agent, **real), dead, wrong_community], timeout_s=15, request_timeout_s=1.0
    )
    t0 = time.perf_counter()
    results = {r.target.split("@")[0]: r for r in scrape_all(cfg)}
    elapsed = time.perf_counter() - t0
    for name in ("dead", "nope"):
        r = results[name]
        assert not r.ok and r.error == "SNMP: No SNMP response received before timeout" and r.samples == 0
        assert r.duration_s < 5.0  # one request timeout (1 s) plus pysnmp's timer tick, not 15 s
    assert {n: r.samples for n, r in results.items() if r.ok} == {"nxos": 54, "junos": 34, "cumulus": 57}
    assert elapsed < 15


def test_whole_switch_timeout(real_agent: SnmpsimServer) -> None:
    # The Arista walk needs ~40 requests; 0.05 s cannot hold them.
    cfg = SnmpSourceConfig(targets=targets(real_agent, arista=REAL["arista"]), timeout_s=0.05)
    (res,) = scrape_all(cfg)
    assert not res.ok and res.error == "no complete answer within 0.05 s" and res.batches == ()


def test_concurrency_is_bounded(real_agent: SnmpsimServer) -> None:
    small = {n: REAL[n] for n in ("nxos", "junos", "cumulus")}
    cfg = SnmpSourceConfig(targets=targets(real_agent, **small), max_concurrency=2, **PATIENT)
    session = SnmpSession(cfg.max_concurrency)
    collectors = [SnmpCollector(cfg, t, session) for t in cfg.targets]
    active, peak = 0, 0
    for c in collectors:
        walk = c._walk

        async def tracked(walk: Callable[[], Awaitable[Tables]] = walk) -> Tables:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            try:
                return await walk()
            finally:
                active -= 1

        c._walk = tracked  # type: ignore[method-assign]  # count walks in flight
    results = scrape_all(cfg, collectors)
    assert all(r.ok for r in results) and peak == 2


def test_port_dictionary_is_reused_across_polls(real_agent: SnmpsimServer) -> None:
    cfg = SnmpSourceConfig(targets=targets(real_agent, sonic=REAL["sonic"]), **PATIENT)
    (collector,) = build_collectors(cfg)

    async def twice() -> tuple[ScrapeResult, ScrapeResult]:
        try:
            return await collector.scrape(), await collector.scrape()
        finally:
            collector.session.close()

    a, b = asyncio.run(twice())
    da, db = (r.batches[0].column("port").dictionary for r in (a, b))
    # Same buffers: detectors that cache port lookups by dictionary keep their cache.
    assert [x.address for x in da.buffers() if x] == [x.address for x in db.buffers() if x]
    assert len(da) == 54


def test_include_and_exclude_select_ports(real_agent: SnmpsimServer) -> None:
    cfg = SnmpSourceConfig(
        targets=targets(real_agent, cumulus=REAL["cumulus"]),
        include=r"^swp\d+$",
        exclude=r"^swp(1|2)$",
        **PATIENT,
    )
    (res,) = scrape_all(cfg)
    keys = res.batches[0].column("port").to_pylist()
    assert keys == [f"cumulus/swp{i}" for i in range(3, 57)]
