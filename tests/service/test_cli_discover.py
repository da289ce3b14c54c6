"""``graywire inventory discover``: from the real ibnetdiscover fixture and from a fake UFM over
HTTP to an inventory file that loads and that the service starts with."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from graywire.collectors.model import load_inventory
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.fabricsim.ufm_server import FakeUfm
from graywire.service.app import create_app
from graywire.service.cli import main
from graywire.service.config import load_settings
from tests.collectors.ufm.httpserver import serve

G = 10**9


def test_discover_from_the_real_fixture_then_serve(
    real_fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = real_fixtures / "infiniband" / "ibnetdiscover_ports_test.out"
    out = tmp_path / "inventory.yaml"
    rc = main(
        [
            "inventory",
            "discover",
            "--ibnetdiscover",
            str(src),
            "--expect",
            "role=host:100G/4",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "discovered 7 nodes, 10 ports, 4 cables" in err
    fabric = load_inventory(out)
    assert fabric.n_ports == 10 and "o0001/HCA-1" in fabric.keys
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{tmp_path / 'g.db'}",
        inventory=str(out),
        sources=[{"type": "agent", "url_template": "http://{host}:9470"}],  # the hosts' agents
    )
    with TestClient(create_app(settings, run_loop=False)) as client:
        assert client.get("/healthz").status_code == 200
        ports = client.get("/api/v1/ports", params={"limit": 100}).json()
    assert ports["total"] == 10 and {p["key"] for p in ports["items"]} == set(fabric.keys)
    leaf_end = next(p for p in ports["items"] if p["key"] == "o0001/HCA-1")
    assert leaf_end["switch"] == "ib-i1l1s01" and leaf_end["expected_speed_bps"] == 100 * G


def test_discover_reads_stdin(real_fixtures: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import io

    text = (real_fixtures / "infiniband" / "ibnetdiscover_ports_test.out").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["inventory", "discover", "--ibnetdiscover", "-"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert len(doc["links"]) == 4


def test_discover_from_ufm_over_http(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=4), interval_s=10.0, duration_s=60.0, seed=1, faults="none")
    )
    fake = FakeUfm(sim, username="admin", password="pw", token="tok")
    out = tmp_path / "inv.yaml"
    token = tmp_path / "token"
    token.write_text("tok\n")
    with serve(fake.app) as url:
        args = ["inventory", "discover", "--ufm", url, "--auth", "token", "--token-file", str(token)]
        assert main([*args, "--expect", "role=host:400G/4", "--out", str(out)]) == 0
        bad = tmp_path / "bad"
        bad.write_text("nope")
        assert main(["inventory", "discover", "--ufm", url, "--auth", "token", "--token-file", str(bad)]) == 2
    assert "HTTP 401" in capsys.readouterr().err
    fabric = load_inventory(out)
    truth = sim.fabric
    assert sorted(fabric.keys) == sorted(truth.keys)
    idx = fabric.lookup(truth.key_array)
    assert fabric.rail[idx].tolist() == truth.rail.tolist()
    host = truth.host_port
    assert set(fabric.expected_speed_bps[idx][host].tolist()) == {400 * G}
    assert "expect: rule role=host:400G/4" in out.read_text()


def test_discover_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inventory", "discover"]) == 2
    assert "give one of --ibnetdiscover" in capsys.readouterr().err
    assert main(["inventory", "discover", "--ibnetdiscover", "-", "--expect", "bogus"]) == 2
    assert "--expect 'bogus'" in capsys.readouterr().err


def test_an_agent_whose_keys_match_no_modelled_port_is_no_data_and_counted_never_ok(
    real_fixtures: Path, real_sysfs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An inventory discovered from a real ibnetdiscover (NICs named by node description,
    ``o0001/HCA-1``) and a real agent on a real sysfs tree (``o0001/mlx5_0``): not one row matches.
    Changed: the status page read "10 ports · 10 ok" and /healthz ok."""
    from graywire.collectors.host.agent_server import AgentConfig, create_agent_app
    from tests.collectors.host.httpserver import serve

    src = real_fixtures / "infiniband" / "ibnetdiscover_ports_test.out"
    out = tmp_path / "inventory.yaml"
    assert main(["inventory", "discover", "--ibnetdiscover", str(src), "--out", str(out)]) == 0
    agent = create_agent_app(AgentConfig(sysfs_root=real_sysfs, hostname="o0001", ethtool=None))
    with serve(agent) as url:
        settings = load_settings(
            None,
            data_dir=tmp_path / "data",
            database_url=f"sqlite:///{tmp_path / 'g.db'}",
            inventory=str(out),
            archive={"enabled": False},
            sources=[{"type": "agent", "urls": [url]}],
        )
        with TestClient(create_app(settings, run_loop=False)) as client:
            for _ in range(2):
                client.app.state.runner.tick()  # type: ignore[attr-defined]
            health = client.get("/healthz").json()
            sources = client.get("/api/v1/sources").json()
            grid = client.get("/api/v1/fabric/grid").json()
            ok_ports = client.get("/api/v1/ports", params={"health": "ok"}).json()["total"]
            metrics = client.get("/metrics").text
    assert (health["status"], health["ports_without_data"]) == ("no_data", 10)
    (agent_row,) = sources["items"]
    assert agent_row["ok"] is True and agent_row["unmatched_rows"] >= 1
    assert all(k.startswith("o0001/") for k in agent_row["unmatched_examples"])
    assert sources["unmatched_rows"] == agent_row["unmatched_rows"]
    assert grid["health"] == {"ok": 0, "warning": 0, "critical": 0, "no_data": 10} and ok_ports == 0
    assert f'graywire_unmatched_rows_total{{source="agent"}} {2.0 * agent_row["unmatched_rows"]}' in metrics
    assert "graywire_ports_without_data 10.0" in metrics
    said = [r.getMessage() for r in caplog.records if "match no port of the fabric model" in r.getMessage()]
    assert len(said) == 1 and "o0001/" in said[0]  # logged once, with examples
