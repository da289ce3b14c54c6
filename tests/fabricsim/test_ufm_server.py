"""The fake UFM: UFM's wire formats, GUID layout and auth, rendered from a FabricSim."""

from __future__ import annotations

import base64
import csv
import io
import json
import re

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.fabricsim.ufm_server import FakeUfm, prometheus_text, speed_name

G = 10**9


@pytest.fixture
def fake() -> FakeUfm:
    sim = FabricSim(
        SimConfig(
            topology=TopologySpec(hosts=4),
            interval_s=10.0,
            duration_s=600.0,
            seed=2,
            faults="width_downgrade@20s+300s:gpu-0001/mlx5_3",
        )
    )
    return FakeUfm(sim, username="admin", password="pw", token="tok")


@pytest.fixture
def client(fake: FakeUfm) -> TestClient:
    return TestClient(fake.app)


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.parametrize(
    ("bps", "width", "name"),
    [(800 * G, 4, "XDR"), (400 * G, 4, "NDR"), (200 * G, 4, "HDR"), (400 * G, 2, "XDR"), (40 * G, 4, "QDR"),
     (56 * G, 4, "FDR"), (123 * G, 4, "N/A"), (None, 4, "N/A")],
)  # fmt: skip
def test_speed_names(bps: int | None, width: int, name: str) -> None:
    assert speed_name(bps, width) == name


def test_rest_auth_basic_and_token(client: TestClient) -> None:
    assert client.get("/ufmRest/resources/ports", headers=basic("admin", "pw")).status_code == 200
    assert client.get("/ufmRest/resources/ports", headers=basic("admin", "nope")).status_code == 401
    assert client.get("/ufmRest/resources/ports").status_code == 401
    assert client.get("/ufmRestV3/resources/ports", headers={"Authorization": "Basic tok"}).status_code == 200
    assert client.get("/ufmRestV3/resources/ports", headers={"Authorization": "Basic tik"}).status_code == 401
    # The token scheme is not basic auth: base64("admin:pw") is not accepted under /ufmRestV3.
    assert client.get("/ufmRestV3/resources/ports", headers=basic("admin", "pw")).status_code == 401
    assert client.get("/ufmRest/resources/systems", headers=basic("admin", "pw")).status_code == 404


def test_ports_use_ufm_fields_and_the_fabric_guids(fake: FakeUfm, client: TestClient) -> None:
    fake.advance(3)  # t = 30 s: gpu-0001/mlx5_3 trained at 2x since 20 s
    ports = client.get("/ufmRest/resources/ports", headers=basic("admin", "pw")).json()
    assert len(ports) == fake.fabric.n_ports
    nic = next(p for p in ports if p["node_description"] == "gpu-0001 mlx5_3")
    assert (nic["active_speed"], nic["active_width"]) == ("XDR", "2x")  # 400G on 2 lanes of 200G
    assert nic["physical_state"] == "Link Up" and nic["logical_state"] == "Active"
    assert nic["number"] == 1 and nic["name"] == f"{nic['guid']}_1"
    assert nic["guid"] == fake.fabric.guids[fake.fabric.keys.index("gpu-0001/mlx5_3")][2:]
    assert nic["peer_node_name"] == "leaf-r3-000"
    ok = next(p for p in ports if p["node_description"] == "gpu-0002 mlx5_3")
    assert (ok["active_speed"], ok["active_width"]) == ("XDR", "4x")
    assert ok["enabled_speed"][-1] == "XDR" and ok["enabled_width"] == ["1x", "2x", "4x"]
    # An HCA port has its own GUID; a switch's ports share the node GUID and differ by number.
    leaf = [p for p in ports if p["system_name"] == "leaf-r3-000"]
    assert len({p["guid"] for p in leaf}) == 1
    assert sorted(p["number"] for p in leaf) == list(range(1, 9))
    hcas = [p for p in ports if p["description"] == "Computer IB Port"]
    assert len({p["guid"] for p in hcas}) == len(hcas) == 32


def test_links_name_both_ends(fake: FakeUfm, client: TestClient) -> None:
    links = client.get("/ufmRestV3/resources/links", headers={"Authorization": "Basic tok"}).json()
    assert len(links) == len(fake.fabric.link_a)
    first = links[0]
    assert set(first) >= {"source_guid", "source_port", "destination_guid", "destination_port", "width"}
    a = f"{first['source_guid']}_{first['source_port']}"
    b = f"{first['destination_guid']}_{first['destination_port']}"
    assert first["name"] == f"{a}:{b}"
    assert first["width"] == "4x"


def test_prometheus_text_layout(fake: FakeUfm, client: TestClient) -> None:
    resp = client.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    lines = resp.text.splitlines()
    assert lines[0] == "# HELP PortXmitDataExtended PortXmitDataExtended"
    assert lines[1] == "# TYPE PortXmitDataExtended counter"
    m = re.match(
        r'^PortXmitDataExtended\{source="(0x[0-9a-f]{16})", node_guid="([0-9a-f]+)", '
        r'port_guid="([0-9a-f]+)", port_num="(\d+)"\} (\d+) (\d+)$',
        lines[2],
    )
    assert m is not None, lines[2]
    assert int(m.group(1), 16) == int(m.group(3), 16) and m.group(1) != m.group(3)  # spelled two ways
    assert m.group(2) == m.group(3)  # a single-port HCA: node and port GUID alike
    assert int(m.group(6)) == int(fake.step.time.timestamp() * 1000)
    sim_tx = fake.step.port_sample.column("tx_bytes")[0].as_py()
    assert int(m.group(5)) == sim_tx // 4  # 4-octet words
    families = [ln.split()[2] for ln in lines if ln.startswith("# TYPE")]
    assert "phy_corrected_bits" in families and "CableInfo_Temperature" in families
    assert resp.text.endswith("\n")


def test_csv_and_json_forms(fake: FakeUfm, client: TestClient) -> None:
    fake.advance()
    table = list(csv.reader(io.StringIO(client.get("/csv/xcset/anything").text)))
    header, rows = table[0], table[1:]
    assert header[:6] == ["timestamp", "source_id", "tag", "node_guid", "port_guid", "port_num"]
    assert len(rows) == fake.fabric.n_ports and all(len(r) == len(header) for r in rows)
    assert rows[0][0] == str(int(fake.step.time.timestamp() * 1_000_000))
    assert rows[0][header.index("PortRcvPktsExtended")] == str(fake.step.port_sample.column("rx_packets")[0])
    doc = json.loads(client.get("/json").content)
    assert doc["type"] == "full" and len(doc["values"]) == fake.fabric.n_ports
    rec = doc["values"][0]
    assert rec["port_guid"].startswith("0x") and rec["port_num"] == 1
    assert rec["Infiniband_PckIn_u_Packets"] == fake.step.port_sample.column("rx_packets")[0].as_py()


def test_advance_moves_every_endpoint(fake: FakeUfm, client: TestClient) -> None:
    before = client.get("/metrics").text
    step = fake.advance()
    assert step.index == 1 and fake.step is step
    assert client.get("/metrics").text != before


def test_failure_knobs(fake: FakeUfm, client: TestClient) -> None:
    fake.telemetry_body = b"garbage\n"
    assert client.get("/csv").content == b"garbage\n"


def test_prometheus_text_helper_skips_nulls() -> None:
    text = prometheus_text(
        [("a", pa.array([1, None], pa.uint64())), ("b", pa.array(["x", "y"]))],
        pa.array(['p="1"', 'p="2"']),
        None,
        help_text=False,
    )
    assert text == b'a{p="1"} 1\nb{p="1"} x\nb{p="2"} y\n'


def test_a_port_that_is_not_up_has_null_speed_and_width_and_links_carry_the_ends_descriptions() -> None:
    """As the UFM guide's examples show them (tests/fixtures/corpus/ufm_rest_ports, ufm_rest_links):
    a Polling port's ``active_speed``/``active_width`` are JSON null, not "N/A"; a link names its
    ends' ports and node descriptions beside their GUIDs."""
    missing = "cable_missing@0s:gpu-0002/mlx5_1"
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=4), seed=2, faults=missing))
    fake = FakeUfm(sim, username="admin", password="pw", token="tok")
    fake.advance(2)
    client = TestClient(fake.app)
    ports = client.get("/ufmRest/resources/ports", headers=basic("admin", "pw")).json()
    down = next(p for p in ports if p["node_description"] == "gpu-0002 mlx5_1")
    assert down["physical_state"] != "Link Up"
    assert (down["active_speed"], down["active_width"]) == (None, None)
    links = client.get("/ufmRest/resources/links", headers=basic("admin", "pw")).json()
    nic = next(x for x in links if "gpu-0001 mlx5_1" in (x["source_port_node_description"],
                                                         x["destination_port_node_description"]))  # fmt: skip
    assert nic["source_port_name"] == f"{nic['source_guid']}_{nic['source_port']}"
    assert nic["destination_port_name"] == f"{nic['destination_guid']}_{nic['destination_port']}"
    assert "leaf-r1-000:" in nic["source_port_node_description"] + nic["destination_port_node_description"]


def test_a_ports_peer_is_the_cable_ufm_sees_now_not_the_models() -> None:
    """UFM discovers peers: a port whose cable moved names the port it now reaches, and one that
    is not up names none (``peer_port_dname`` "N/A", no peer GUID), as the guide's Polling port."""
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=4), seed=2, faults="cable_moved@0s+600s:gpu-0002/mlx5_1")
    )
    fake = FakeUfm(sim, username="admin", password="pw", token="tok")
    fake.advance(6)  # the cable is out 20 s, then in its new port
    moved = next(f for f in sim.faults if f.kind == "cable_moved")
    client = TestClient(fake.app)
    ports = {
        p["node_description"]: p
        for p in client.get("/ufmRest/resources/ports", headers=basic("admin", "pw")).json()
    }
    nic = ports["gpu-0002 mlx5_1"]
    links = fake.step.links
    now = dict(zip(links.column("a_port").to_pylist(), links.column("b_port").to_pylist(), strict=True))
    now |= {b: a for a, b in now.items()}
    new_end = now["gpu-0002/mlx5_1"]
    assert new_end != sim.fabric.keys[int(sim.fabric.peer[sim.fabric.keys.index("gpu-0002/mlx5_1")])]
    node, _, num = new_end.partition("/")
    assert (nic["peer_node_name"], nic["peer_port_dname"]) == (node, num.removeprefix("p"))
    assert moved.extra["to"] == new_end
    # The port the cable left is not up: no peer at all.
    left = sim.fabric.keys[int(sim.fabric.peer[sim.fabric.keys.index("gpu-0002/mlx5_1")])]
    old = next(
        p
        for p in ports.values()
        if p["system_name"] == left.split("/")[0] and p["number"] == int(left.split("/p")[1])
    )
    assert old["physical_state"] != "Link Up"
    assert old["peer_port_dname"] == "N/A" and "peer_guid" not in old
