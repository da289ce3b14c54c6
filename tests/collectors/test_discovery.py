"""Discovery: ports and cables from ibnetdiscover or UFM become a reviewable inventory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from graywire.collectors.discovery import (
    PORT_FACTS,
    Discovery,
    ExpectRule,
    PurposeRule,
    ca_name,
    discover,
    facts_from_ibnetdiscover,
    facts_from_ufm,
    switch_name,
)
from graywire.collectors.ib.ibnetdiscover import parse_ibnetdiscover
from graywire.collectors.model import fabric_from_inventory, load_inventory
from graywire.collectors.schemas import LINK
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.fabricsim.ufm_server import FakeUfm

G = 10**9


def _from_fixture(real_fixtures: Path, **kw) -> Discovery:
    text = (real_fixtures / "infiniband" / "ibnetdiscover_ports_test.out").read_text()
    facts, links, _ = facts_from_ibnetdiscover(parse_ibnetdiscover(text))
    return discover(facts, links, source="ibnetdiscover", **kw)


def test_real_fixture_roles_cables_and_expectations(real_fixtures: Path, tmp_path: Path) -> None:
    d = _from_fixture(real_fixtures)
    f = d.fabric
    roles = dict(zip(f.node_names, f.node_roles, strict=True))
    assert roles == {
        "o0001": "host", "o0002": "host", "p0001": "host",
        "ib-i1l1s01": "leaf", "ib-i4l1s01": "leaf", "ib-i1l2s01": "spine", "ib-i7l2s01": "spine",
    }  # fmt: skip
    assert "no cable path to a host" in d.node_notes[f.node_names.index("ib-i7l2s01")]
    links = {tuple(sorted((f.keys[a], f.keys[b]))) for a, b in zip(f.link_a, f.link_b, strict=True)}
    assert links == {
        ("ib-i1l1s01/p10", "o0001/HCA-1"), ("ib-i1l1s01/p11", "o0002/HCA-1"),
        ("ib-i4l1s01/p35", "p0001/HCA-1"), ("ib-i1l1s01/p1", "ib-i1l2s01/p1"),
    }  # fmt: skip
    i = f.keys.index("o0001/HCA-1")
    assert (f.expected_speed_bps[i], f.expected_width[i], f.guids[i]) == (100 * G, 4, "0x7cfe9003003b4bde")
    assert d.expect_how[i] == "seen 100G 4x" and f.purpose[i] == "compute" and f.rail[i] == -1
    down = f.keys.index("ib-i4l1s01/p37")
    assert f.expected_speed_bps[down] == 0 and d.expect_how[down] == "none"
    assert f.port_num[down] == 37 and f.guids[down] == "0x506b4b03005c2740"
    # The YAML reads back as the same fabric.
    path = tmp_path / "inventory.yaml"
    path.write_text(d.to_yaml())
    back = load_inventory(path)
    assert back.keys == f.keys and back.node_roles == f.node_roles
    assert back.expected_speed_bps.tolist() == f.expected_speed_bps.tolist()
    assert back.port_num.tolist() == f.port_num.tolist() and back.purpose == f.purpose
    assert back.peer.tolist() == f.peer.tolist()


def test_rules_override_and_spread_to_the_peer(real_fixtures: Path) -> None:
    d = _from_fixture(
        real_fixtures,
        purpose_rules=[PurposeRule.parse("HCA-*=storage")],
        expect_rules=[ExpectRule.parse("role=host,purpose=storage:200G/4")],
    )
    f = d.fabric
    h, leaf = f.keys.index("o0001/HCA-1"), f.keys.index("ib-i1l1s01/p10")
    assert f.purpose[h] == "storage" and f.expected_speed_bps[h] == 200 * G
    assert d.expect_how[h] == "rule role=host,purpose=storage:200G/4"
    assert f.expected_speed_bps[leaf] == 200 * G and d.expect_how[leaf] == "peer rule"
    assert "--purpose HCA-*=storage" in d.to_yaml()


@pytest.mark.parametrize(
    "text", ["nope", "mlx5_0=gpu", "=storage", "role=host", "role=host:fast", "colour=red:400G", "x=1:400G/0"]
)
def test_bad_rules_say_how_to_write_them(text: str) -> None:
    with pytest.raises(ValueError, match=r"--purpose|--expect"):
        (PurposeRule if "=" in text and ":" not in text else ExpectRule).parse(text)


def test_names() -> None:
    assert switch_name("MF0;leaf-r2-07:MQM9700/U1", "0x1") == "leaf-r2-07"
    assert switch_name("ib-i1l1s01", "0x1") == "ib-i1l1s01"
    assert switch_name("", "0x000000000000abcd") == "sw-000000000000abcd"
    assert ca_name("gpu001 mlx5_3", 1, "0x1") == ("gpu001", "mlx5_3")
    assert ca_name("gpu001 mlx5_3", 2, "0x1") == ("gpu001", "mlx5_3:2")


def _sim_fake(hosts: int = 8) -> FakeUfm:
    return FakeUfm(FabricSim(SimConfig(topology=TopologySpec(hosts=hosts), interval_s=10.0, duration_s=60.0,
                                       seed=1, faults="none")))  # fmt: skip


def test_ufm_discovery_recovers_the_simulated_fabric() -> None:
    fake = _sim_fake()
    truth = fake.fabric
    facts, links, notes, skipped = facts_from_ufm(fake.ports_json(), fake.links_json())
    assert not skipped and not notes
    d = discover(facts, links, source="ufm")
    f = d.fabric
    assert sorted(f.keys) == sorted(truth.keys)
    idx = f.lookup(truth.key_array)
    assert dict(zip(f.node_names, f.node_roles, strict=True)) == dict(
        zip(truth.node_names, truth.node_roles, strict=True)
    )
    assert f.rail[idx].tolist() == truth.rail.tolist()  # rails from the NIC order per leaf
    assert f.peer[idx].tolist() == idx[truth.peer].tolist()
    assert f.expected_speed_bps[idx].tolist() == truth.expected_speed_bps.tolist()  # UFM's enabled max
    assert set(d.expect_how) == {"enabled"}
    assert [f.guids[i] for i in idx] == truth.guids and f.port_num[idx].tolist() == truth.port_num.tolist()
    assert any("rail-optimized" in n for n in d.notes)


def test_a_miscabled_nic_is_flagged_and_the_loader_warns(tmp_path: Path) -> None:
    fake = _sim_fake()
    facts, links, _, _ = facts_from_ufm(fake.ports_json(), fake.links_json())
    # Swap the leaf ends of gpu-0001's mlx5_0 and mlx5_1: both now cross rails.
    rows = links.to_pylist()
    a = next(r for r in rows if "gpu-0001/mlx5_0" in (r["a_port"], r["b_port"]))
    b = next(r for r in rows if "gpu-0001/mlx5_1" in (r["a_port"], r["b_port"]))
    leaf_a = a["b_port"] if a["a_port"] == "gpu-0001/mlx5_0" else a["a_port"]
    leaf_b = b["b_port"] if b["a_port"] == "gpu-0001/mlx5_1" else b["a_port"]
    a.update(a_port="gpu-0001/mlx5_0", b_port=leaf_b)
    b.update(a_port="gpu-0001/mlx5_1", b_port=leaf_a)
    d = discover(facts, pa.Table.from_pylist(rows, schema=LINK), source="ufm")
    f = d.fabric
    i = f.keys.index("gpu-0001/mlx5_0")
    assert f.rail[i] == 1 and "miscabled?" in d.port_notes[i]
    # Two NICs of one host on one rail: the loader warns, naming the line.
    doc = yaml.safe_load(d.to_yaml())
    for n in doc["nodes"]:
        if n["name"] == "gpu-0002":
            n["ports"][1]["rail"] = 0
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    fabric = load_inventory(path)
    assert len(fabric.warnings) == 1
    assert "host gpu-0002 (line" in fabric.warnings[0] and "no NIC on rail(s) [1]" in fabric.warnings[0]


def test_cables_naming_unknown_ports_or_a_port_twice_are_left_out() -> None:
    facts = pa.Table.from_pylist(
        [
            {"port": "h1/mlx5_0", "node": "h1", "label": "mlx5_0", "kind": "host"},
            {"port": "h2/mlx5_0", "node": "h2", "label": "mlx5_0", "kind": "host"},
            {"port": "sw/p1", "node": "sw", "label": "p1", "kind": "switch", "num": 1},
        ],
        schema=PORT_FACTS,
    )
    links = pa.Table.from_pylist(
        [
            {"a_port": "h1/mlx5_0", "b_port": "sw/p1", "source": "x"},
            {"a_port": "sw/p1", "b_port": "h1/mlx5_0", "source": "x"},  # the same cable seen from the switch
            {"a_port": "h2/mlx5_0", "b_port": "sw/p1", "source": "x"},  # sw/p1 on a second cable
            {"a_port": "h2/mlx5_0", "b_port": "ghost/p9", "source": "x"},
        ],
        schema=LINK,
    )
    d = discover(facts, links)
    f = d.fabric
    assert len(f.link_a) == 1 and f.link_label(f.keys.index("h1/mlx5_0")) == "h1/mlx5_0<->sw/p1"
    assert "second cable" in d.port_notes[f.keys.index("h2/mlx5_0")]
    assert any("no source described" in n for n in d.notes)
    fabric_from_inventory(yaml.safe_load(d.to_yaml()))


def test_discovery_is_linear_at_scale() -> None:
    """~100,000 ports (the brief's 10,000 GPUs and their switches) in seconds, not minutes."""
    import time

    fake = _sim_fake(hosts=1280)
    ports, links = fake.ports_json(), fake.links_json()
    t0 = time.perf_counter()
    facts, cables, _, _ = facts_from_ufm(ports, links)
    d = discover(facts, cables, source="ufm")
    text = d.to_yaml()
    elapsed = time.perf_counter() - t0
    assert d.fabric.n_ports == fake.fabric.n_ports > 30_000
    assert elapsed < 30, elapsed
    assert np.count_nonzero(d.fabric.rail >= 0) > 0 and text.count("\n") > d.fabric.n_ports
