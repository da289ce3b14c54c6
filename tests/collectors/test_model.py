"""The fabric model: inventory files (YAML and JSON), validation, lookups and round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric, PortSpec, fabric_from_inventory, load_inventory
from graywire.collectors.schemas import LINK

G = 10**9

INVENTORY_YAML = """\
version: 1
defaults:
  speed: 400G
  width: 4
nodes:
  - name: gpu-01
    role: host
    ports:
      - {label: mlx5_0, rail: 0, guid: "0x0002C90300000001"}
      - {label: mlx5_1, rail: 1, guid: "2c90300000002", speed: 800Gb/s}
  - name: gpu-02
    ports:
      - {label: mlx5_0, rail: 0, guid: "0002:c903:0000:0003"}
      - mlx5_1
  - name: leaf-1
    role: leaf
    port_defaults: {speed_bps: 800000000000, media: ACC}
    ports: [p1, p2, p3, {label: p4, width: 2}, p5]
links:
  - [gpu-01/mlx5_0, leaf-1/p1]
  - [gpu-01/mlx5_1, leaf-1/p2]
  - [gpu-02/mlx5_0, leaf-1/p3]
  - [gpu-02/mlx5_1, leaf-1/p4]
"""


def small_doc() -> dict[str, Any]:
    return {
        "version": 1,
        "nodes": [
            {"name": "h1", "role": "host", "ports": [{"label": "p1", "speed": "400G"}]},
            {"name": "h2", "role": "host", "ports": [{"label": "p1", "speed": "400G"}]},
            {"name": "sw", "role": "leaf", "ports": ["p1", "p2", "p3"]},
        ],
        "links": [["h1/p1", "sw/p1"], ["h2/p1", "sw/p2"]],
    }


@pytest.fixture
def yaml_fabric(tmp_path: Path) -> Fabric:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY_YAML)
    return load_inventory(path)


def test_yaml_inventory_ports_and_nodes(yaml_fabric: Fabric) -> None:
    f = yaml_fabric
    assert f.keys == [
        "gpu-01/mlx5_0",
        "gpu-01/mlx5_1",
        "gpu-02/mlx5_0",
        "gpu-02/mlx5_1",
        "leaf-1/p1",
        "leaf-1/p2",
        "leaf-1/p3",
        "leaf-1/p4",
        "leaf-1/p5",
    ]
    assert f.node_names == ["gpu-01", "gpu-02", "leaf-1"]
    assert f.node_roles == ["host", "host", "leaf"]  # role defaults to host
    assert f.node_of_port.tolist() == [0, 0, 1, 1, 2, 2, 2, 2, 2]
    assert f.n_ports == 9
    assert f.host_port.tolist() == [True] * 4 + [False] * 5


def test_yaml_inventory_defaults_and_overrides(yaml_fabric: Fabric) -> None:
    f = yaml_fabric
    # defaults -> node port_defaults -> the port's own entry, later wins.
    assert f.expected_speed_bps.tolist() == [400 * G, 800 * G, 400 * G, 400 * G] + [800 * G] * 5
    assert f.expected_width.tolist() == [4, 4, 4, 4, 4, 4, 4, 2, 4]
    assert f.rail.tolist() == [0, 1, 0, -1, -1, -1, -1, -1, -1]
    assert f.media == [None] * 4 + ["ACC"] * 5
    assert f.guids == [
        "0x0002c90300000001",
        "0x0002c90300000002",
        "0x0002c90300000003",
        None,
        None,
        None,
        None,
        None,
        None,
    ]
    assert f.guid_index() == {"0x0002c90300000001": 0, "0x0002c90300000002": 1, "0x0002c90300000003": 2}


def test_port_speed_overrides_default_speed_bps() -> None:
    # A port's own speed must win over a default, whichever of the two spellings each uses.
    doc = {
        "defaults": {"speed_bps": 800 * G},
        "nodes": [{"name": "h", "ports": [{"label": "p1", "speed": "400G"}, "p2"]}],
    }
    assert fabric_from_inventory(doc).expected_speed_bps.tolist() == [400 * G, 800 * G]


def test_yaml_inventory_links_and_peers(yaml_fabric: Fabric) -> None:
    f = yaml_fabric
    assert f.link_a.tolist() == [0, 1, 2, 3]
    assert f.link_b.tolist() == [4, 5, 6, 7]
    assert f.peer.tolist() == [4, 5, 6, 7, 0, 1, 2, 3, -1]
    linked = np.flatnonzero(f.peer >= 0)
    assert (f.peer[f.peer[linked]] == linked).all()
    assert f.link_label(0) == "gpu-01/mlx5_0<->leaf-1/p1"
    assert f.link_label(4) == "gpu-01/mlx5_0<->leaf-1/p1"
    assert f.link_label(8) is None
    assert f.node_of(5) == "leaf-1"


def test_json_inventory_matches_yaml(tmp_path: Path, yaml_fabric: Fabric) -> None:
    import yaml

    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(yaml.safe_load(INVENTORY_YAML)))
    f = load_inventory(path)
    assert f.keys == yaml_fabric.keys
    assert f.expected_speed_bps.tolist() == yaml_fabric.expected_speed_bps.tolist()
    assert f.expected_width.tolist() == yaml_fabric.expected_width.tolist()
    assert f.guids == yaml_fabric.guids
    assert f.peer.tolist() == yaml_fabric.peer.tolist()


def test_load_inventory_reports_path_and_syntax(tmp_path: Path) -> None:
    bad_json = tmp_path / "inv.json"
    bad_json.write_text("{nodes: [")
    with pytest.raises(ValueError, match=r"inv\.json: not valid json"):
        load_inventory(bad_json)
    bad_yaml = tmp_path / "inv.yaml"
    bad_yaml.write_text("nodes: [\n")
    with pytest.raises(ValueError, match=r"inv\.yaml: not valid yaml"):
        load_inventory(bad_yaml)
    dup = tmp_path / "dup.yaml"
    dup.write_text("nodes:\n  - {name: h, ports: [p1, p1]}\n")
    with pytest.raises(ValueError, match=r"dup\.yaml: duplicate ports in inventory: \['h/p1'\]"):
        load_inventory(dup)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["nodes"][2]["ports"].append("p1"), r"duplicate ports in inventory: \['sw/p1'\]"),
        (lambda d: d["nodes"].append(dict(d["nodes"][0])), "node h1 declared twice"),
        (
            lambda d: d["links"].append(["h1/p1", "sw/p9"]),
            "link h1/p1 <-> sw/p9 names an undeclared port sw/p9",
        ),
        (
            lambda d: d["links"].append(["nope/p1", "sw/p3"]),
            "link nope/p1 <-> sw/p3 names an undeclared port nope/p1",
        ),
        (lambda d: d["links"].append(["h1/p1", "sw/p3"]), "a port can be on one link only"),
        (lambda d: d["links"].append(["sw/p3", "sw/p3"]), "a port can be on one link only"),
        (lambda d: d["nodes"][2].update(role="router"), "node sw: role must be one of"),
        (lambda d: d["nodes"][0]["ports"][0].update(guid="zz"), "not a GUID"),
        (lambda d: d["nodes"][0]["ports"][0].update(speed="fast"), "not a speed"),
        (lambda d: d.pop("nodes"), "'nodes' list"),
    ],
)
def test_inventory_errors(mutate: Any, message: str) -> None:
    doc = small_doc()
    fabric_from_inventory(doc)  # valid before the mutation
    mutate(doc)
    with pytest.raises(ValueError, match=message):
        fabric_from_inventory(doc)


def test_inventory_must_be_a_mapping() -> None:
    with pytest.raises(ValueError, match="mapping"):
        fabric_from_inventory([{"name": "h"}])  # type: ignore[arg-type]


def test_ports_on_undeclared_node() -> None:
    with pytest.raises(ValueError, match=r"ports reference undeclared nodes: \['ghost'\]"):
        Fabric.from_specs({"h1": "host"}, [PortSpec("h1", "p1"), PortSpec("ghost", "p1")], [])


def test_lookup_plain_dictionary_and_chunked(yaml_fabric: Fabric) -> None:
    f = yaml_fabric
    plain = pa.array(["leaf-1/p5", "gpu-01/mlx5_0", "nope/p1", "gpu-02/mlx5_1"])
    idx = f.lookup(plain)
    assert idx.dtype == np.int32
    assert idx.tolist() == [8, 0, -1, 3]
    dictionary = pa.DictionaryArray.from_arrays(
        pa.array([2, 0, 0, 1, 2], type=pa.int32()), pa.array(["gpu-02/mlx5_0", "unknown/x", "leaf-1/p2"])
    )
    assert f.lookup(dictionary).tolist() == [5, 2, 2, -1, 5]
    chunked = pa.chunked_array([pa.array(["leaf-1/p1"]), pa.array(["x/y", "gpu-01/mlx5_1"])])
    assert f.lookup(chunked).tolist() == [4, -1, 1]
    assert f.lookup(pa.array([], type=pa.string())).tolist() == []


def test_links_table(yaml_fabric: Fabric) -> None:
    t = yaml_fabric.links_table("ufm")
    assert t.schema.equals(LINK)
    assert t.column("a_port").to_pylist() == [
        "gpu-01/mlx5_0",
        "gpu-01/mlx5_1",
        "gpu-02/mlx5_0",
        "gpu-02/mlx5_1",
    ]
    assert t.column("b_port").to_pylist() == ["leaf-1/p1", "leaf-1/p2", "leaf-1/p3", "leaf-1/p4"]
    assert set(t.column("source").to_pylist()) == {"ufm"}


def test_inventory_round_trip(tmp_path: Path, yaml_fabric: Fabric) -> None:
    doc = yaml_fabric.to_inventory()
    assert doc["version"] == 1
    assert doc["nodes"][0] == {
        "name": "gpu-01",
        "role": "host",
        "ports": [
            {"label": "mlx5_0", "speed_bps": 400 * G, "width": 4, "rail": 0, "guid": "0x0002c90300000001"},
            {"label": "mlx5_1", "speed_bps": 800 * G, "width": 4, "rail": 1, "guid": "0x0002c90300000002"},
        ],
    }
    assert doc["links"][3] == ["gpu-02/mlx5_1", "leaf-1/p4"]
    path = tmp_path / "out.json"
    yaml_fabric.write_inventory(path)
    back = load_inventory(path)
    for name in ("keys", "node_names", "node_roles", "guids", "media"):
        assert getattr(back, name) == getattr(yaml_fabric, name), name
    for name in ("node_of_port", "expected_speed_bps", "expected_width", "rail", "link_a", "link_b"):
        assert getattr(back, name).tolist() == getattr(yaml_fabric, name).tolist(), name


def test_node_without_ports_survives_round_trip() -> None:
    doc = {"nodes": [{"name": "spare", "role": "spine"}, {"name": "h", "ports": ["p1"]}]}
    f = fabric_from_inventory(doc)
    assert f.node_names == ["spare", "h"]
    back = fabric_from_inventory(f.to_inventory())
    assert back.node_names == ["spare", "h"]
    assert back.node_roles == ["spine", "host"]
    assert back.keys == ["h/p1"]
    assert back.expected_speed_bps.tolist() == [0]
    assert back.expected_width.tolist() == [0]


def test_docs_inventory_examples_load(tmp_path: Path) -> None:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "inventory.md").read_text()
    (yaml_text,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (json_text,) = re.findall(r"```json\n(.*?)```", text, re.S)
    (tmp_path / "inv.yaml").write_text(yaml_text)
    (tmp_path / "inv.json").write_text(json_text)
    a, b = load_inventory(tmp_path / "inv.yaml"), load_inventory(tmp_path / "inv.json")
    assert a.n_ports == 9
    assert a.node_roles == ["host", "host", "leaf"]
    assert a.expected_speed_bps.tolist() == [800 * G] * 8 + [400 * G]
    assert a.expected_width.tolist() == [4] * 8 + [2]
    assert a.peer.tolist() == [4, 5, 6, 7, 0, 1, 2, 3, -1]
    for name in ("keys", "guids", "media"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("expected_speed_bps", "expected_width", "rail", "link_a", "link_b"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "nodes:\n  - name: h1\n    ports:\n      - {label: a, guid: '0x1'}\n"
            "  - name: h2\n    ports:\n      - {label: a, guid: '0x01'}\n",
            r"inv\.yaml: duplicate GUID 0x0000000000000001: h1/a \(line 4\) and h2/a \(line 7\)",
        ),
        (
            "nodes:\n  - name: sw\n    ports:\n      - {label: p1, guid: '0x5', num: 1}\n"
            "      - {label: p2, guid: '0x5', num: 1}\n",
            r"duplicate GUID 0x0000000000000005 port 1: sw/p1 \(line 4\) and sw/p2 \(line 5\)",
        ),
        (
            "nodes:\n  - {name: h, ports: [a, b]}\nlinks:\n  - [h/a, h/b]\n  - [h/a, h/zz]\n",
            r"link h/a <-> h/zz names an undeclared port h/zz \(line 5\)",
        ),
        (
            "nodes:\n  - {name: h, ports: [a, b, c]}\nlinks:\n  - [h/a, h/b]\n  - [h/c, h/a]\n",
            r"a port can be on one link only: h/a is already on the link at line 4 \(line 5\)",
        ),
        (
            "nodes:\n  - {name: h, ports: [a]}\n  - {name: h, ports: [b]}\n",
            r"node h declared twice \(line 3; first at line 2\)",
        ),
    ],
)
def test_inventory_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_inventory(path)


def test_json_errors_name_the_path(tmp_path: Path) -> None:
    path = tmp_path / "inv.json"
    doc = {"nodes": [{"name": "h", "ports": ["a"]}], "links": [["h/a", "h/b"]]}
    path.write_text(json.dumps(doc))
    with pytest.raises(
        ValueError, match=r"inv\.json: link h/a <-> h/b names an undeclared port h/b \(links\[0\]\)"
    ):
        load_inventory(path)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("nodes:\n  - {name: h, ports: [a, a]}\nlinks:\n  - [h/a, h/x]\n")
    with pytest.raises(
        ValueError, match=r"(?s)duplicate ports.*\n  link h/a <-> h/x names an undeclared port"
    ):
        load_inventory(path)


def test_purpose_is_read_and_written(tmp_path: Path) -> None:
    doc = {"nodes": [{"name": "h", "ports": [{"label": "mlx5_8", "purpose": "storage"}, "mlx5_0"]}]}
    f = fabric_from_inventory(doc)
    assert f.purpose == ["storage", None]
    assert f.to_inventory()["nodes"][0]["ports"][0]["purpose"] == "storage"
    doc["nodes"][0]["ports"][0]["purpose"] = "gpu"
    with pytest.raises(ValueError, match="purpose must be one of"):
        fabric_from_inventory(doc)


def test_the_host_end_of_a_cable_is_where_a_person_acts() -> None:
    """A NIC's cable: the NIC, from either end. Two hosts back to back: each end itself. A
    switch-to-switch cable and an uncabled switch port: none."""
    nodes = {"h1": "host", "h2": "host", "h3": "host", "leaf": "leaf", "spine": "spine"}
    keys = ["h1/mlx5_0", "leaf/p1", "leaf/p2", "spine/p1", "h2/mlx5_0", "h3/mlx5_0", "leaf/p3"]
    ports = [PortSpec(*k.split("/")) for k in keys]
    links = [("h1/mlx5_0", "leaf/p1"), ("leaf/p2", "spine/p1"), ("h2/mlx5_0", "h3/mlx5_0")]
    f = Fabric.from_specs(nodes, ports, links)
    at = f.keys.index
    assert f.host_end(at("h1/mlx5_0")) == f.host_end(at("leaf/p1")) == at("h1/mlx5_0")
    assert (f.host_end(at("h2/mlx5_0")), f.host_end(at("h3/mlx5_0"))) == (at("h2/mlx5_0"), at("h3/mlx5_0"))
    assert f.host_end(at("leaf/p2")) == f.host_end(at("spine/p1")) == f.host_end(at("leaf/p3")) == -1
