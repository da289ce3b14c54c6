"""``inventory: discover``: the service builds its model from its UFM source, keeps it across
restarts, and finds a fault against expectations it discovered."""

from __future__ import annotations

from pathlib import Path

import pytest

from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.fabricsim.ufm_server import FakeUfm
from graywire.service.config import load_settings
from graywire.service.discovery import DISCOVERED
from graywire.service.runner import Runner
from graywire.service.sources import build_sources
from tests.collectors.ufm.httpserver import serve

NIC = "gpu-0003/mlx5_2"


def _sim(faults: str = "none") -> FabricSim:
    return FabricSim(
        SimConfig(topology=TopologySpec(hosts=4), interval_s=10.0, duration_s=600.0, seed=1, faults=faults)
    )


def _settings(tmp_path: Path, url: str) -> object:
    ufm = {
        "type": "ufm",
        "url": url,
        "username": "admin",
        "password": "pw",
        "telemetry_url": f"{url}/metrics",
    }
    return load_settings(
        None, data_dir=tmp_path, inventory="discover", sources=[ufm], archive={"enabled": False}
    )


def test_the_model_is_discovered_once_and_kept(tmp_path: Path) -> None:
    sim = _sim()
    with serve(FakeUfm(sim, username="admin", password="pw").app) as url:
        settings = _settings(tmp_path, url)
        fabric, collectors = build_sources(settings)  # type: ignore[arg-type]
        assert sorted(fabric.keys) == sorted(sim.fabric.keys)
        idx = fabric.lookup(sim.fabric.key_array)
        assert fabric.expected_speed_bps[idx].tolist() == sim.fabric.expected_speed_bps.tolist()
        assert fabric.rail[idx].tolist() == sim.fabric.rail.tolist()
        assert collectors, "the UFM source's collectors are built over the discovered model"
    written = tmp_path / DISCOVERED
    before = written.read_text()
    # A restart with UFM away still starts: the model is the one discovered first.
    again, _ = build_sources(settings)  # type: ignore[arg-type]
    assert sorted(again.keys) == sorted(fabric.keys) and written.read_text() == before


def test_a_downgrade_is_found_against_discovered_expectations(tmp_path: Path) -> None:
    sim = _sim(f"speed_downgrade@30s+600s:{NIC}")
    fake = FakeUfm(sim, username="admin", password="pw")
    with serve(fake.app) as url:
        settings = _settings(tmp_path, url)
        fabric, collectors = build_sources(settings)  # type: ignore[arg-type]
        from graywire.service.models.engine import make_engine, upgrade
        from graywire.service.state.fabric import StateBoard
        from graywire.service.store import IncidentStore

        db = f"sqlite:///{tmp_path / 'g.db'}"
        upgrade(db)
        store = IncidentStore(make_engine(db))
        runner = Runner(settings, fabric, collectors, store, StateBoard(fabric))  # type: ignore[arg-type]
        found = []
        for _ in range(8):
            fake.advance()
            found += runner.tick()
    downgrades = [(f.kind, f.status, f.port) for f in found if f.kind == "speed_downgrade"]
    assert downgrades == [("speed_downgrade", "firing", NIC)]
    assert {f.kind for f in found} == {"speed_downgrade"}


def test_bad_discovery_rules_are_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"discovery\.expect: .*role=host"):
        load_settings(None, data_dir=tmp_path, inventory="discover", discovery={"expect": ["role=host"]})
    with pytest.raises(ValueError, match=r"discovery\.purpose: .*mlx5_8=gpu"):
        load_settings(None, data_dir=tmp_path, discovery={"purpose": ["mlx5_8=gpu"]})


def test_discover_true_compares_with_the_declared_file_which_stays_the_model(tmp_path: Path) -> None:
    import yaml

    from graywire.service.discovery import compare_with_discovery

    sim = _sim()
    declared = tmp_path / "declared.yaml"
    sim.fabric.write_inventory(declared)
    doc = yaml.safe_load(declared.read_text())
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] != "gpu-0003"]
    doc["links"] = [c for c in doc["links"] if not any(k.startswith("gpu-0003/") for k in c)]
    declared.write_text(yaml.safe_dump(doc))
    with serve(FakeUfm(sim, username="admin", password="pw").app) as url:
        ufm = {"type": "ufm", "url": url, "username": "admin", "password": "pw"}
        settings = load_settings(None, data_dir=tmp_path, inventory=declared, discover=True, sources=[ufm])
        fabric, _ = build_sources(settings)
        diff = compare_with_discovery(settings, fabric)
    nics = [k for k in sim.fabric.keys if k.startswith("gpu-0003/")]
    assert not any(k.startswith("gpu-0003/") for k in fabric.keys), "the declared file stays the model"
    assert diff == {
        "undeclared_ports": len(nics), "unseen_ports": 0, "undeclared_cables": len(nics), "unseen_cables": 0,
    }  # fmt: skip
    assert "gpu-0003" in (tmp_path / DISCOVERED).read_text()
    # Sources away: the comparison is unknown, and the service still starts on the file.
    gone = {"type": "ufm", "url": "http://127.0.0.1:9", "username": "a", "password": "b"}
    away = load_settings(None, data_dir=tmp_path, inventory=declared, discover=True, sources=[gone])
    assert compare_with_discovery(away, fabric) is None
    assert build_sources(away)[0].n_ports == fabric.n_ports


def test_discovery_turns_lldp_on_unless_a_source_says_otherwise(tmp_path: Path) -> None:
    from graywire.collectors.snmp import SnmpSourceConfig
    from graywire.service.discovery import lldp_on

    quiet = {"type": "snmp", "targets": [{"host": "127.0.0.1", "name": "sw1"}]}
    said = {**quiet, "lldp": False}
    settings = load_settings(None, data_dir=tmp_path, sources=[quiet, said])
    got = [s.lldp for s in lldp_on(settings.sources) if isinstance(s, SnmpSourceConfig)]
    assert got == [True, False]
    with pytest.raises(ValueError, match="discover: true compares"):
        load_settings(None, data_dir=tmp_path, discover=True, sources=[quiet])


def test_every_ufm_port_shows_rests_speed_and_state_beside_telemetrys_counters(tmp_path: Path) -> None:
    """UFM REST and UFM Telemetry are two targets; the ports API shows one port with REST's
    state and speed (changed: every port read ``state: unknown, speed_bps: 0``)."""
    from fastapi.testclient import TestClient

    from graywire.service.app import create_app

    sim = _sim()
    fake = FakeUfm(sim, username="admin", password="pw")
    with serve(fake.app) as url:
        app = create_app(_settings(tmp_path, url), run_loop=False)  # type: ignore[arg-type]
        with TestClient(app) as client:
            for _ in range(2):
                fake.advance()
                client.app.state.runner.tick()  # type: ignore[attr-defined]
            ports = client.get("/api/v1/ports", params={"limit": 1000}).json()
            sources = client.get("/api/v1/sources").json()
    assert len(sources["items"]) == 2  # REST and Telemetry
    assert ports["total"] == sim.fabric.n_ports
    states = {(p["state"], p["speed_bps"], p["health"]) for p in ports["items"]}
    assert states == {("up", 800 * 10**9, "ok")}
