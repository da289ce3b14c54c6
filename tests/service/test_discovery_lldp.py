"""Discovery over LLDP names host NICs by RDMA device: the agents say which netdev and MAC each
graywire port is, since a NIC's LLDP agent names its port by netdev (lldpd) or MAC (NIC firmware)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from graywire.collectors.discovery import discover, facts_from_lldp, nic_aliases
from graywire.collectors.host.agent_server import AgentConfig, create_agent_app
from graywire.collectors.host.config import AgentSourceConfig
from graywire.collectors.schemas import LINK
from graywire.collectors.snmp.lldp import LLDP_NEIGHBOR, SWITCH_INTERFACE, LldpDiscovery
from graywire.service.discovery import agent_aliases
from tests.collectors.host.httpserver import serve

G = 10**9


def _lldp(neighbours: list[tuple[str, int, str, str | None, str]]) -> LldpDiscovery:
    """One leaf; each neighbour is (leaf port, port id subtype, port id, system name, chassis id)."""
    n_rows, i_rows, links = [], [], []
    for k, (local, subtype, port_id, sys_name, chassis) in enumerate(neighbours):
        remote = f"{sys_name or chassis}/{port_id}"
        n_rows.append({"switch": "leaf1", "local_port": f"leaf1/{local}", "lldp_port_num": k + 1,
                       "chassis_id_subtype": 4, "chassis_id": chassis, "port_id_subtype": subtype,
                       "port_id": port_id, "port_desc": None, "sys_name": sys_name, "mgmt_address": None,
                       "remote_port": remote})  # fmt: skip
        i_rows.append({"switch": "leaf1", "port": f"leaf1/{local}", "if_index": k + 1, "if_descr": local,
                       "speed_bps": 400 * G, "oper_up": True})  # fmt: skip
        links.append({"a_port": f"leaf1/{local}", "b_port": remote, "source": "lldp"})
    return LldpDiscovery(
        links=pa.Table.from_pylist(links, LINK),
        neighbors=pa.Table.from_pylist(n_rows, LLDP_NEIGHBOR),
        interfaces=pa.Table.from_pylist(i_rows, SWITCH_INTERFACE),
        switches=(),
    )


AGENT_PORTS = [
    {"port": "gpu1/mlx5_0", "netdev": "ens1f0np0", "mac": "AA:BB:CC:00:00:01"},
    {"port": "gpu1/mlx5_1", "netdev": "ens2f0np0", "mac": "aa:bb:cc:00:00:02"},
    {"port": "gpu2/mlx5_0", "netdev": "ens1f0np0", "mac": "aa:bb:cc:00:00:03"},
]


def test_nics_named_by_netdev_or_mac_become_their_rdma_devices() -> None:
    found = _lldp([
        ("Ethernet0", 5, "ens1f0np0", "gpu1", "aa:bb:cc:00:00:00"),  # lldpd: interface name
        ("Ethernet4", 3, "aa:bb:cc:00:00:02", "gpu1", "aa:bb:cc:00:00:00"),  # NIC firmware: MAC
        ("Ethernet8", 3, "aa:bb:cc:00:00:03", None, "aa:bb:cc:00:00:10"),  # and no system name
        ("Ethernet12", 5, "eno1", "gpu9", "aa:bb:cc:00:00:20"),  # a host without an agent
    ])  # fmt: skip
    facts, links, notes = facts_from_lldp(found, nic_aliases(AGENT_PORTS))
    hosts = sorted(k for k, kind in zip(facts["port"].to_pylist(), facts["kind"].to_pylist(), strict=True)
                   if kind == "host")  # fmt: skip
    assert hosts == ["gpu1/mlx5_0", "gpu1/mlx5_1", "gpu2/mlx5_0", "gpu9/eno1"]
    assert sorted(links["b_port"].to_pylist()) == hosts
    assert any("1 host NIC(s) match no host agent" in n for n in notes)
    result = discover(facts, links)
    assert sorted(result.fabric.node_names) == ["gpu1", "gpu2", "gpu9", "leaf1"]
    # Without the agents' names the same view keeps LLDP's, MAC-keyed ports included.
    plain, _, notes = facts_from_lldp(found)
    assert "aa:bb:cc:00:00:10/aa:bb:cc:00:00:03" in plain["port"].to_pylist()
    assert any("send no system name" in n for n in notes)


def test_agent_aliases_over_http_from_a_real_sysfs_tree(real_sysfs: Path) -> None:
    cfg = AgentConfig(sysfs_root=real_sysfs, hostname="gpu7", ethtool=None, include_plain_netdevs=True)
    with serve(create_agent_app(cfg)) as url:
        template = url.replace("127.0.0.1", "{host}")
        sources = [AgentSourceConfig(url_template=template, timeout=5)]
        aliases, notes = agent_aliases(sources, ["127.0.0.1", "localhost-not-there.invalid"])
    assert aliases["gpu7/eth0"] == "gpu7/eth0" and aliases["01:01:01:01:01:01"] == "gpu7/eth0"
    assert len(notes) == 1 and "localhost-not-there.invalid" in notes[0]


def test_the_discovered_aliases_let_lldp_views_be_judged(tmp_path: Path) -> None:
    """The names the agents gave ride in the inventory as ``aliases``, so the poll's LLDP views
    (which keep LLDP's names) resolve to the model's ports: quiet when the cabling is as
    discovered, one ``cabling_changed`` when a NIC moves."""
    from datetime import UTC, datetime

    from graywire.collectors.model import load_inventory
    from graywire.detectors.topology import TopologyDetector

    found = _lldp([
        ("Ethernet0", 5, "ens1f0np0", "gpu1", "aa:bb:cc:00:00:00"),  # by netdev
        ("Ethernet4", 3, "aa:bb:cc:00:00:03", None, "aa:bb:cc:00:00:11"),  # by MAC, no system name
        ("Ethernet12", 5, "eno1", "gpu9", "aa:bb:cc:00:00:20"),  # a port no agent claims
    ])  # fmt: skip
    facts, links, _ = facts_from_lldp(found, nic_aliases(AGENT_PORTS))
    out = tmp_path / "inventory.yaml"
    out.write_text(discover(facts, links).to_yaml())
    fabric = load_inventory(out)
    assert fabric.aliases[fabric.keys.index("gpu2/mlx5_0")] == ("aa:bb:cc:00:00:03", "ens1f0np0")
    det = TopologyDetector(fabric, clock=lambda: datetime(2026, 1, 5, tzinfo=UTC))
    lldp = found.links.to_batches()[0]  # LLDP's own names, as the collector sends them each poll
    for _ in range(4):
        assert det.observe(lldp) == []
    # gpu2's NIC (known to LLDP by its MAC) moves to gpu1's leaf port; gpu1 is unplugged.
    moved = pa.RecordBatch.from_pylist(
        [
            {"a_port": "leaf1/Ethernet0", "b_port": "aa:bb:cc:00:00:11/aa:bb:cc:00:00:03", "source": "lldp"},
            {"a_port": "leaf1/Ethernet12", "b_port": "gpu9/eno1", "source": "lldp"},
        ],
        LINK,
    )
    changed = [f for f in det.observe(moved) if f.status == "firing"]
    assert [(f.kind, f.link) for f in changed] == [("cabling_changed", "gpu2/mlx5_0<->leaf1/Ethernet0")]
