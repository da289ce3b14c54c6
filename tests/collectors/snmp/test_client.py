"""graywire's SNMP client against a real agent (snmpsim), checked against pysnmp's own walk.

The collector once walked through pysnmp's engine; it now encodes and decodes the messages
itself. Here pysnmp's high-level API walks the same columns of the real recordings and of a
fabricsim switch, and both must read exactly the same values, over v2c and v3; every SNMPv3
protocol graywire offers must talk to the agent, and the error paths must stay failed scrapes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pyasn1.type import univ
from pysnmp.hlapi.v3arch.asyncio import (
    CommunityData,
    ContextData,
    ObjectIdentity,
    ObjectType,
    SnmpEngine,
    UdpTransportTarget,
    UsmUserData,
    bulk_walk_cmd,
)
from pysnmp.proto.rfc1902 import ObjectName

from graywire.collectors.snmp import SnmpCollector, SnmpSession, SnmpSourceConfig, usm
from graywire.collectors.snmp.lldp import LLDP_COLUMNS
from graywire.collectors.snmp.parse import columns_to_walk
from graywire.collectors.snmp.walk import Tables, Value
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.snmprec import write_snmprec
from graywire.fabricsim.topology import TopologySpec
from tests.collectors.snmp.conftest import REAL, V3_PRIV, SnmpsimServer, free_udp_port, snmpsim_binary

CFG = SnmpSourceConfig(targets=[{"host": "h"}], lldp=True)
COLUMNS = sorted({*columns_to_walk(CFG, need_sys_name=True), *LLDP_COLUMNS})


def _py(value: Any) -> Value:
    """A pyasn1 value as the pysnmp-based walk handed it over."""
    if isinstance(value, univ.Integer):
        return int(value)
    if isinstance(value, univ.OctetString):
        return bytes(value)
    if isinstance(value, univ.ObjectIdentifier):
        return tuple(value)
    return None


async def pysnmp_walk(port: int, auth: Any, context: str) -> Tables:
    """Each column walked on its own by pysnmp's bulk_walk_cmd: the reference."""
    engine = SnmpEngine()
    try:
        target = await UdpTransportTarget.create(("127.0.0.1", port), timeout=5, retries=0)
        out: Tables = {}
        for col in COLUMNS:
            values: dict[tuple[int, ...], Value] = {}
            walk = bulk_walk_cmd(
                engine, auth, target, ContextData(contextName=context), 0, 25,
                ObjectType(ObjectIdentity(ObjectName(col))), lexicographicMode=False, lookupMib=False,
            )  # fmt: skip
            async for err, status, _, varbinds in walk:
                assert not err and not int(status), (err, status)
                for name, value in varbinds:
                    o = tuple(name)
                    if o[: len(col)] == col and not isinstance(value, univ.Null):
                        values[o[len(col) :]] = _py(value)
            out[col] = values
        return out
    finally:
        engine.close_dispatcher()


def graywire_walk(cfg: SnmpSourceConfig) -> Tables:
    collector = SnmpCollector(cfg, cfg.targets[0], SnmpSession(1))
    return asyncio.run(collector._walk(COLUMNS))


def v3(user: tuple[str, str, str, str | None, str | None]) -> dict[str, Any]:
    name, auth_proto, auth_key, priv_proto, priv_key = user
    out: dict[str, Any] = {"user": name, "auth_protocol": auth_proto, "auth_key": auth_key}
    return out | ({"priv_protocol": priv_proto, "priv_key": priv_key} if priv_key else {})


@pytest.mark.parametrize("switch", sorted(REAL))
def test_real_recordings_read_as_pysnmp_reads_them(real_agent: SnmpsimServer, switch: str) -> None:
    community = REAL[switch]
    target = {"host": "127.0.0.1", "port": real_agent.port, "name": switch, "community": community}
    ours = graywire_walk(SnmpSourceConfig(targets=[target], timeout_s=30))
    theirs = asyncio.run(pysnmp_walk(real_agent.port, CommunityData(community, mpModel=1), ""))
    assert ours == theirs
    assert sum(map(len, ours.values())) > 50  # the recording was read, not two empty walks


@pytest.mark.parametrize("switch", ["nxos", "sonic"])
def test_snmpv3_authpriv_reads_as_pysnmp_reads(real_agent: SnmpsimServer, switch: str) -> None:
    name, _, auth_key, _, priv_key = V3_PRIV
    target = {"host": "127.0.0.1", "port": real_agent.port, "name": switch, "context": REAL[switch]}
    ours = graywire_walk(SnmpSourceConfig(targets=[target], version="3", v3=v3(V3_PRIV), timeout_s=30))
    auth = UsmUserData(name, authKey=auth_key, privKey=priv_key, authProtocol=usm.AUTH_PROTOCOLS["SHA"],
                       privProtocol=usm.PRIV_PROTOCOLS["AES"])  # fmt: skip
    assert ours == asyncio.run(pysnmp_walk(real_agent.port, auth, REAL[switch]))


#: Every auth protocol with AES, every privacy protocol with SHA (and the SHA-2 HMACs with it).
MATRIX = [
    *[(a, "AES") for a in ("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")],
    *[(a, p) for a in ("SHA", "SHA512") for p in ("DES", "3DES", "AES192", "AES256")],
    ("MD5", None),
    ("SHA256", None),
]
USERS = tuple(
    (f"u-{a}-{p}".lower(), a, f"auth-{a}-key", p, f"priv-{p}-key" if p else None) for a, p in MATRIX
)


@pytest.fixture(scope="module")
def fabricsim_agent(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """snmpsim serving one 16-port fabricsim leaf (ARISTA-PFC-MIB), knowing every MATRIX user."""
    data = tmp_path_factory.mktemp("sim-snmprec")
    topo = TopologySpec(hosts=8, gpus=1, hosts_per_leaf=8)
    sim = FabricSim(SimConfig(topology=topo, interval_s=10.0, duration_s=60.0, faults="none"))
    write_snmprec(sim.step().port_sample, sim.fabric, data, nodes=["leaf-r0-000"], pfc_mib="arista")
    server = SnmpsimServer(data, tmp_path_factory.mktemp("snmpsim"), users=USERS)
    server.start(snmpsim_binary(), "leaf-r0-000")
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("user", USERS, ids=[u[0] for u in USERS])
def test_every_snmpv3_protocol_talks_to_the_agent(fabricsim_agent: SnmpsimServer, user: Any) -> None:
    target = {"host": "127.0.0.1", "port": fabricsim_agent.port, "name": "leaf", "context": "leaf-r0-000"}
    cfg = SnmpSourceConfig(targets=[target], version="3", v3=v3(user), timeout_s=20)
    collector = SnmpCollector(cfg, cfg.targets[0], SnmpSession(1))
    res = asyncio.run(collector.scrape())
    assert res.error is None and res.samples == 16


def test_fabricsim_switch_v2c_reads_as_pysnmp_reads(fabricsim_agent: SnmpsimServer) -> None:
    port = fabricsim_agent.port
    target = {"host": "127.0.0.1", "port": port, "name": "leaf", "community": "leaf-r0-000"}
    ours = graywire_walk(SnmpSourceConfig(targets=[target]))
    assert ours == asyncio.run(pysnmp_walk(port, CommunityData("leaf-r0-000", mpModel=1), ""))


def test_a_stale_agent_clock_is_resynchronized(fabricsim_agent: SnmpsimServer) -> None:
    """An agent that rebooted (or a clock far off) answers notInTimeWindow: the walk takes the
    agent's boots and time from that authenticated report and sends the request again."""
    target = {"host": "127.0.0.1", "port": fabricsim_agent.port, "name": "leaf", "context": "leaf-r0-000"}
    cfg = SnmpSourceConfig(targets=[target], version="3", v3=v3(V3_PRIV), timeout_s=20)
    session = SnmpSession(1)
    collector = SnmpCollector(cfg, cfg.targets[0], session)

    async def twice() -> tuple[Any, Any]:
        first = await collector.scrape()
        for engine in session._engines.values():
            engine.boots, engine.time = engine.boots + 5, 0
        return first, await collector.scrape()

    first, second = asyncio.run(twice())
    assert first.error is None and second.error is None and second.samples == 16


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("no-such-host.invalid", "bad IPv4/UDP transport address no-such-host.invalid:"),
        ("300.1.1.1", "bad IPv4/UDP transport address 300.1.1.1:"),
    ],
)
def test_an_unknown_host_is_a_failed_scrape(host: str, why: str) -> None:
    cfg = SnmpSourceConfig(targets=[{"host": host, "port": free_udp_port(), "name": "x"}], timeout_s=5)
    res = asyncio.run(SnmpCollector(cfg, cfg.targets[0]).scrape())
    assert not res.ok and res.error is not None and res.error.startswith(f"SNMP: {why}"), res.error


def test_a_v3_agent_that_never_answers_times_out() -> None:
    target = {"host": "127.0.0.1", "port": free_udp_port(), "name": "x"}
    cfg = SnmpSourceConfig(targets=[target], version="3", v3=v3(V3_PRIV), request_timeout_s=0.3)
    res = asyncio.run(SnmpCollector(cfg, cfg.targets[0]).scrape())
    assert not res.ok and res.error == "SNMP: No SNMP response received before timeout"
