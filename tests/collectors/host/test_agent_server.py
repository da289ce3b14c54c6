"""The agent over real HTTP: what it serves equals what it reads, and what it refuses."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from graywire.collectors.base import ScrapeResult
from graywire.collectors.host.agent_client import AgentCollector
from graywire.collectors.host.agent_server import AgentConfig, HostReader, create_agent_app
from graywire.collectors.host.agent_wire import ARROW_STREAM
from graywire.collectors.schemas import COUNTER_BITS_KEY
from tests.collectors.host.httpserver import serve

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
G = 10**9


def scrape(c: AgentCollector) -> ScrapeResult:
    return asyncio.run(c.scrape())


def dictionary_address(batch: pa.RecordBatch) -> int:
    return batch.column("port").dictionary.buffers()[2].address


def test_agent_over_http_equals_the_direct_read(real_sysfs: Path) -> None:
    cfg = AgentConfig(sysfs_root=real_sysfs, hostname="h1", ethtool=None, include_plain_netdevs=True)
    direct = HostReader(cfg, clock=lambda: T).batch()
    with serve(create_agent_app(cfg, clock=lambda: T)) as url:
        health = httpx.get(f"{url}/healthz").json()
        raw = httpx.get(f"{url}/v1/port_sample")
        extra = httpx.get(f"{url}/v1/port_extra").json()
        collector = AgentCollector(url, timeout=60)
        first, second = scrape(collector), scrape(collector)
    assert health == {
        "status": "ok",
        "hostname": "h1",
        "sysfs_root": str(real_sysfs),
        "ethtool": "off",
        "ncclras": "off",
        "errors": [],
    }
    assert raw.status_code == 200 and raw.headers["content-type"] == ARROW_STREAM
    assert (first.ok, first.source, first.target, first.samples, first.error) == (True, "agent", url, 5, None)
    got = first.batches[0]
    assert got.to_pylist() == direct.to_pylist()
    assert got.schema.equals(direct.schema, check_metadata=True)
    assert json.loads(got.schema.metadata[COUNTER_BITS_KEY])["link_downed"] == 8
    row = got.to_pylist()[3]
    assert (row["port"], row["speed_bps"], row["width"], row["tx_bytes"]) == (
        "h1/mlx5_0",
        25 * G,
        1,
        11523046035392,
    )
    # The collector re-keys every poll onto one dictionary, so lookups cached by it stay valid.
    assert dictionary_address(second.batches[0]) == dictionary_address(got)
    assert extra["h1/mlx5_0"]["hw_counters/out_of_sequence"] == 1
    assert extra["h1/eth0"] == {"net/carrier_changes": 2}


def test_agent_answers_503_without_ports(tmp_path: Path) -> None:
    cfg = AgentConfig(sysfs_root=tmp_path, hostname="h1", ethtool=None)
    with serve(create_agent_app(cfg)) as url:
        res = scrape(AgentCollector(url, timeout=60))
    assert not res.ok and res.batches == ()
    assert res.error == f'HTTP 503: {{"error":"no RDMA ports found under {tmp_path}/sys/class/infiniband"}}'


def test_agent_rejects_a_host_name_with_a_slash(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="may not contain '/'"):
        create_agent_app(AgentConfig(sysfs_root=tmp_path, hostname="rack1/gpu-0001"))


def test_ports_name_each_port_by_device_netdev_and_mac(real_sysfs: Path) -> None:
    """What discovery over LLDP needs from a host: which netdev and MAC each graywire port is."""
    from fastapi.testclient import TestClient

    cfg = AgentConfig(sysfs_root=real_sysfs, hostname="h1", ethtool=None, include_plain_netdevs=True)
    with TestClient(create_agent_app(cfg)) as c:
        r = c.get("/v1/ports")
    assert r.status_code == 200
    ports = {p["port"]: p for p in r.json()}
    eth0 = ports["h1/eth0"]
    assert (eth0["netdev"], eth0["mac"], eth0["device"]) == ("eth0", "01:01:01:01:01:01", None)
    rdma = [p for p in ports.values() if p["device"]]
    assert rdma and all(p["port"] == f"h1/{p['label']}" and p["port_num"] >= 1 for p in rdma)
    assert set(ports) == set(HostReader(cfg).extra()), "the same ports the samples carry"


def test_agent_serves_the_gpu_nic_paths_fabricsim_wrote_and_the_collector_sends_them(tmp_path: Path) -> None:
    from graywire.fabricsim.gpu_layout import base_layout, cross_numa
    from graywire.fabricsim.hostfs import HostTreeWriter
    from graywire.fabricsim.sim import FabricSim, SimConfig
    from graywire.fabricsim.topology import TopologySpec

    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=60.0, faults="none"))
    writer = HostTreeWriter(tmp_path, sim.fabric)
    writer.write(sim.step().port_sample, ["gpu-0001"])
    writer.write_gpu_layout("gpu-0001", cross_numa(base_layout(8), 3))
    cfg = AgentConfig(sysfs_root=writer.host_root("gpu-0001"), hostname="gpu-0001", ethtool=None,
                      topo_file=writer.topo_file("gpu-0001"), nvidia_smi=None)  # fmt: skip
    with serve(create_agent_app(cfg, clock=lambda: T)) as url:
        collector = AgentCollector(url, timeout=60)
        first, second = scrape(collector), scrape(collector)
    assert first.ok and [b.schema.metadata[b"graywire.record"] for b in first.batches] == [
        b"port_sample",
        b"gpu_nic_path",
    ]
    assert len(second.batches) == 1  # the layout is fetched every paths_interval, not every poll
    rows = first.batches[1].to_pylist()
    assert len(rows) == 64 and {r["host"] for r in rows} == {"gpu-0001"}
    gpu3 = {r["nic"]: (r["path"], r["nic_numa"], r["gpu_numa"]) for r in rows if r["gpu"] == 3}
    assert gpu3["mlx5_3"] == ("SYS", 1, 0) and gpu3["mlx5_0"] == ("NODE", 0, 0)


def test_an_agent_without_the_layout_endpoint_is_not_asked_again(real_sysfs: Path) -> None:
    from fastapi import FastAPI

    app = create_agent_app(AgentConfig(sysfs_root=real_sysfs, hostname="h1", ethtool=None))
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", "") != "/v1/gpu_nic_path"]
    assert isinstance(app, FastAPI)
    with serve(app) as url:
        collector = AgentCollector(url, timeout=60, paths_interval=0.0)
        first, second = scrape(collector), scrape(collector)
    assert first.ok and second.ok and len(first.batches) == len(second.batches) == 1
    assert collector._paths_off
