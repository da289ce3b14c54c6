"""fabricsim -> snmprec -> snmpsim -> SNMP collector -> pipeline -> incident store.

The recordings cross the real SNMP protocol and the real collector, so a silent 800G -> 400G
downgrade injected in the simulator must come out as one incident naming the host port.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.base import ScrapeResult
from graywire.collectors.schemas import COUNTER_BITS_KEY
from graywire.collectors.snmp import SnmpCollector, SnmpSession, SnmpSourceConfig
from graywire.collectors.snmp.lldp import walk_lldp
from graywire.detectors.pipeline import Pipeline
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.snmprec import render_snmprec, write_snmprec
from graywire.fabricsim.topology import TopologySpec
from graywire.service.models.engine import make_engine, upgrade
from graywire.service.store import IncidentStore

NIC = "gpu-0003/mlx5_2"
LEAF_PORT = "leaf-r2-000/p4"  # the other end of NIC's link
FAULT = f"speed_downgrade@10s+300s:{NIC}"
#: Columns an SNMP switch carries, compared between the simulator and what the collector read.
SNMP_COLUMNS = (
    "phys_state", "logical_state", "speed_bps", "rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
    "rcv_errors", "xmit_discards", "pfc3_rx_pause_frames", "pfc3_tx_pause_frames",
)  # fmt: skip


def make_sim() -> FabricSim:
    """4 hosts x 8 rails: 8 leaves of 8 ports (4 down to hosts, 4 up) and one 32-port spine."""
    topo = TopologySpec(hosts=4)
    return FabricSim(SimConfig(topology=topo, interval_s=10.0, duration_s=600.0, faults=FAULT))


def touch_after_rewrite(paths: list[Path], poll: int) -> None:
    """Give rewritten recordings a new, later mtime.

    snmpsim notices a changed recording by its mtime in whole seconds, and rebuilds its index
    only when the recording is newer than the index; polls a few milliseconds apart would
    otherwise be served the previous recording.
    """
    t = time.time() + 60 + poll
    for p in paths:
        os.utime(p, (t, t))


def scrape(collectors: list[SnmpCollector]) -> list[ScrapeResult]:
    async def run() -> list[ScrapeResult]:
        return await asyncio.gather(*(c.scrape() for c in collectors))

    return asyncio.run(run())


def by_port(batch: pa.RecordBatch, ports: list[str]) -> dict[str, list[Any]]:
    rows = pc.index_in(pa.array(ports), value_set=batch.column("port").cast(pa.string())).to_pylist()
    return {c: [batch.column(c)[r].as_py() for r in rows] for c in SNMP_COLUMNS}


def test_sim_recordings_read_back_exactly(tmp_path: Path, start_snmpsim: Any) -> None:
    """What the collector reads from fabricsim's recordings is what the simulator produced."""
    sim = make_sim()
    for _ in range(3):
        step = sim.step()  # t = 20 s: the downgrade is on
    data = tmp_path / "data"
    write_snmprec(step.port_sample, sim.fabric, data, nodes=["leaf-r2-000"])  # IEEE8021-PFC-MIB
    arista = render_snmprec(step.port_sample, sim.fabric, nodes=["leaf-r2-000"], pfc_mib="arista")
    (data / "leaf-r2-000-arista.snmprec").write_text(arista["leaf-r2-000"])
    agent = start_snmpsim(data, "leaf-r2-000")
    session = SnmpSession(8)
    collectors = []
    # The same switch recorded twice; the first is named by its sysName, the second by the config.
    # The second asks for far more than snmpsim's 64 var-binds per response: truncated answers.
    for name, community, most in ((None, "leaf-r2-000", 64), ("leaf-r2-000", "leaf-r2-000-arista", 1000)):
        target = {"host": "127.0.0.1", "port": agent.port, "name": name, "community": community}
        cfg = SnmpSourceConfig(targets=[target], timeout_s=20, max_varbinds=most, max_repetitions=100)
        collectors.append(SnmpCollector(cfg, cfg.targets[0], session))
    ieee, ari = scrape(collectors)
    session.close()
    assert ieee.error is None and ari.error is None
    ports = [f"leaf-r2-000/p{i}" for i in range(1, 9)]
    expected = by_port(step.port_sample, ports)
    assert expected["speed_bps"][3] == 400 * 10**9 and expected["pfc3_rx_pause_frames"][3] is not None
    for res in (ieee, ari):
        b = res.batches[0]
        assert sorted(b.column("port").to_pylist()) == sorted(ports)
        assert by_port(b, ports) == expected
    assert json.loads(ieee.batches[0].schema.metadata[COUNTER_BITS_KEY]) == {
        "rcv_errors": 32, "xmit_discards": 32, "pfc3_tx_pause_frames": 32, "pfc3_rx_pause_frames": 32,
    }  # fmt: skip
    assert json.loads(ari.batches[0].schema.metadata[COUNTER_BITS_KEY]) == {
        "rcv_errors": 32,
        "xmit_discards": 32,
    }


def test_speed_downgrade_end_to_end(tmp_path: Path, start_snmpsim: Any) -> None:
    sim = make_sim()
    fabric = sim.fabric
    switches = [n for n, r in zip(fabric.node_names, fabric.node_roles, strict=True) if r != "host"]
    data = tmp_path / "data"
    step = sim.step()
    paths = write_snmprec(step.port_sample, fabric, data)
    assert sorted(paths) == sorted(switches)  # 8 leaves (one per rail) and the spine
    agent = start_snmpsim(data, "spine-0000")

    cfg = SnmpSourceConfig(
        targets=[{"host": "127.0.0.1", "port": agent.port, "name": s, "community": s} for s in switches],
        timeout_s=20,
    )
    now: list[datetime] = [step.time]
    session = SnmpSession(cfg.max_concurrency)
    collectors = [SnmpCollector(cfg, t, session, clock=lambda: now[0]) for t in cfg.targets]
    db = f"sqlite:///{tmp_path / 'graywire.db'}"
    upgrade(db)
    engine = make_engine(db)
    store = IncidentStore(engine)
    pipeline = Pipeline(fabric)
    firing_at: list[int] = []
    try:
        for poll in range(4):  # t = 0..30 s; the downgrade starts at 10 s
            if poll:
                step = sim.step()
                touch_after_rewrite(list(write_snmprec(step.port_sample, fabric, data).values()), poll)
            now[0] = step.time
            results = scrape(collectors)
            assert [r.error for r in results] == [None] * len(switches)
            leaf = next(r for r in results if r.target.startswith("leaf-r2-000@")).batches[0]
            row = leaf.column("port").to_pylist().index(LEAF_PORT)
            assert leaf.column("speed_bps")[row].as_py() == (400 if poll >= 1 else 800) * 10**9
            findings = [f for r in results for f in pipeline.process(r.batches[0])]
            store.apply(findings)
            firing_at += [poll] * sum(f.status == "firing" for f in findings)
            seen = {k for r in results for k in r.batches[0].column("port").to_pylist()}
        incidents = store.list_incidents(status="open")
    finally:
        session.close()
        engine.dispose()

    # Two polls at 400G confirm it (t = 10, 20 s); one finding per link, not per end, and not again.
    assert firing_at == [2]
    (inc,) = incidents
    assert (inc["kind"], inc["node"], inc["port"]) == ("speed_downgrade", "gpu-0003", NIC)
    assert inc["link"] == f"{NIC}<->{LEAF_PORT}"
    assert inc["summary"].startswith(f"{NIC} negotiated 400G, expected 800G since 00:00:10")
    assert inc["evidence"]["actual"] == {NIC: None, LEAF_PORT: {"speed_bps": 400 * 10**9, "width": None}}
    assert inc["evidence"]["peer_port"] == LEAF_PORT
    # Every switch port of the fabric was polled, under the fabric's own port keys.
    switch_ports = set(np.array(fabric.keys)[np.isin(fabric.port_role, ("leaf", "spine"))].tolist())
    assert seen == switch_ports and len(seen) == 8 * 8 + 32


def test_lldp_walk_gives_back_exactly_the_simulated_cables(tmp_path: Path, start_snmpsim: Any) -> None:
    """fabricsim's recordings through snmpsim and the LLDP walk: every cable of the fabric, once."""
    sim = make_sim()
    fabric = sim.fabric
    switches = [n for n, r in zip(fabric.node_names, fabric.node_roles, strict=True) if r != "host"]
    step = sim.step()
    write_snmprec(step.port_sample, fabric, tmp_path / "data")
    agent = start_snmpsim(tmp_path / "data", "spine-0000")
    # Named by sysName (no 'name'), as discovery of an unknown fabric would.
    cfg = SnmpSourceConfig(
        targets=[{"host": "127.0.0.1", "port": agent.port, "community": s} for s in switches], timeout_s=20
    )
    found = walk_lldp(cfg)
    assert found.errors == {} and found.skipped == {} and found.without_lldp == ()

    def cables(a: list[str], b: list[str]) -> set[frozenset[str]]:
        return {frozenset(pair) for pair in zip(a, b, strict=True)}

    truth = fabric.links_table("fabricsim")
    expected = cables(truth["a_port"].to_pylist(), truth["b_port"].to_pylist())
    assert len(expected) == 4 * 8 + 8 * 4  # 32 host NICs to leaves, 32 leaf uplinks to the spine
    # LLDP names a host NIC as lldpd does, by MAC: the model's aliases say which port it is.
    netdev, mac = fabric.aliases[fabric.keys.index(NIC)]

    def model_key(key: str) -> str:
        i = fabric.resolve_alias(key)
        return key if i < 0 else fabric.keys[i]

    ends = found.links["a_port"].to_pylist() + found.links["b_port"].to_pylist()
    assert f"gpu-0003/{mac}" in ends and NIC not in ends
    got = cables(*([model_key(k) for k in found.links[c].to_pylist()] for c in ("a_port", "b_port")))
    assert got == expected and found.links.num_rows == len(expected)  # leaf-spine cables once, not twice
    # Neighbours: one per switch port (a leaf-spine cable from both ends), hosts by name and MAC.
    n = found.neighbors.to_pylist()
    assert len(n) == 8 * 8 + 32
    nic = next(r for r in n if r["remote_port"] == f"gpu-0003/{mac}")
    assert (nic["local_port"], nic["sys_name"], nic["port_id"], nic["port_id_subtype"], nic["port_desc"]) == (
        LEAF_PORT, "gpu-0003", mac, 3, netdev,
    )  # fmt: skip
    # Interfaces: every switch port at the speed the fabric expects of it.
    speeds = dict(
        zip(found.interfaces["port"].to_pylist(), found.interfaces["speed_bps"].to_pylist(), strict=True)
    )
    idx = fabric.lookup(pa.array(list(speeds)))
    assert (idx >= 0).all()
    assert list(speeds.values()) == fabric.expected_speed_bps[idx].tolist()


def test_inventory_discover_over_lldp_rebuilds_the_simulated_fabric(
    tmp_path: Path, start_snmpsim: Any
) -> None:
    """`graywire inventory discover --snmp CONFIG`: LLDP through snmpsim to an inventory the
    service loads, with the simulated cables, roles, rails and expected speeds. LLDP names each
    host NIC by its MAC; the config's host agents (real ones, over fabricsim's sysfs trees) say
    which RDMA device has that MAC."""
    from contextlib import ExitStack

    import yaml

    from graywire.collectors.host.agent_server import AgentConfig, create_agent_app
    from graywire.collectors.model import load_inventory
    from graywire.fabricsim.hostfs import HostTreeWriter
    from graywire.service.cli import main
    from tests.collectors.host.httpserver import serve

    sim = make_sim()
    fabric = sim.fabric
    switches = [n for n, r in zip(fabric.node_names, fabric.node_roles, strict=True) if r != "host"]
    hosts = [n for n, r in zip(fabric.node_names, fabric.node_roles, strict=True) if r == "host"]
    sample = sim.step().port_sample
    write_snmprec(sample, fabric, tmp_path / "data")
    trees = HostTreeWriter(tmp_path / "hosts", fabric)
    trees.write(sample)
    agent = start_snmpsim(tmp_path / "data", "spine-0000")
    config = tmp_path / "graywire.yaml"
    targets = [{"host": "127.0.0.1", "port": agent.port, "community": s} for s in switches]
    out = tmp_path / "inventory.yaml"
    with ExitStack() as stack:
        apps = [create_agent_app(AgentConfig(sysfs_root=trees.host_root(h), hostname=h)) for h in hosts]
        urls = [stack.enter_context(serve(app)) for app in apps]
        sources = [{"type": "snmp", "targets": targets, "timeout_s": 20}, {"type": "agent", "urls": urls}]
        config.write_text(yaml.safe_dump({"sources": sources}))
        assert main(["inventory", "discover", "--snmp", str(config), "--out", str(out)]) == 0
    found = load_inventory(out)
    netdev, mac = fabric.aliases[fabric.keys.index(NIC)]
    assert found.aliases[found.keys.index(NIC)] == (mac, netdev)  # the names LLDP and the agent gave

    def cables(f: Any) -> set[frozenset[str]]:
        t = f.links_table("x")
        return {frozenset(p) for p in zip(t["a_port"].to_pylist(), t["b_port"].to_pylist(), strict=True)}

    assert cables(found) == cables(fabric)
    roles = dict(zip(found.node_names, found.node_roles, strict=True))
    assert roles == dict(zip(fabric.node_names, fabric.node_roles, strict=True))
    idx = fabric.lookup(pa.array(found.keys))
    assert (idx >= 0).all()
    # Every cabled port expects the speed the simulated fabric does (from ifHighSpeed), and each
    # host NIC's rail is the one the simulator wired it for.
    assert found.expected_speed_bps.tolist() == fabric.expected_speed_bps[idx].tolist()
    host = np.asarray(found.port_role) == "host"
    assert found.rail[host].tolist() == fabric.rail[idx][host].tolist()
