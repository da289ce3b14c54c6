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
        collector = AgentCollector(url, timeout=5)
        first, second = scrape(collector), scrape(collector)
    assert health == {
        "status": "ok",
        "hostname": "h1",
        "sysfs_root": str(real_sysfs),
        "ethtool": "off",
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
        res = scrape(AgentCollector(url, timeout=5))
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
