"""The real node_exporter over prometheus/procfs's sysfs fixture, read by the prometheus source.

The binary is Debian's ``prometheus-node-exporter``; the tree is the ttar archive in
``../shared/fixtures/real/host``. What the source reads from the exporter must be what
graywire's own host agent reads from the same tree.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from graywire.collectors.host.sysfs import SysfsConfig, read_ports, readings_to_batch
from graywire.collectors.prometheus import PrometheusCollector
from graywire.service.app import create_app
from graywire.service.config import load_settings
from tests.collectors.host.ttar import extract
from tests.scrape import in_ci

BINARIES = ("prometheus-node-exporter", "node_exporter")
HOST = "fixture-host"
IB_PORTS = {f"{HOST}/hfi1_0", f"{HOST}/mlx4_0", f"{HOST}/mlx4_0:2", f"{HOST}/mlx5_0"}


def node_exporter_binary() -> str:
    for name in BINARIES:
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if found:
            return found
    reason = "node_exporter not found (apt-get install prometheus-node-exporter)"
    if in_ci():
        pytest.fail(f"CI is set but {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sysfs(real_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The archive's sys tree (class links and the devices they point at)."""
    dest = tmp_path_factory.mktemp("procfs")
    assert extract(real_fixtures / "host" / "procfs_sysfs_fixtures.ttar", dest, only=["fixtures/sys"]) > 200
    return dest / "fixtures"


@pytest.fixture(scope="module")
def exporter(sysfs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """node_exporter with only the infiniband and netclass collectors, over the fixture tree."""
    binary = node_exporter_binary()
    port = free_port()
    log_path = tmp_path_factory.mktemp("node_exporter") / "log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--path.sysfs={sysfs / 'sys'}",
                f"--path.procfs={sysfs / 'proc'}",
                "--collector.disable-defaults",
                "--collector.infiniband",
                "--collector.netclass",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"node_exporter exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"node_exporter not answering: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def by_port(batch: pa.RecordBatch) -> dict[str, dict[str, object]]:
    return {
        r["port"]: {k: v for k, v in r.items() if v is not None and k not in ("port", "time", "source")}
        for r in batch.to_pylist()
    }


def test_the_source_reads_what_the_agent_reads_from_the_same_tree(exporter: str, sysfs: Path) -> None:
    res = asyncio.run(PrometheusCollector(exporter, node=HOST).scrape())
    assert res.ok, res.error
    (batch,) = res.batches
    got = by_port(batch)
    assert set(got) >= IB_PORTS
    agent = readings_to_batch(read_ports(SysfsConfig(root=sysfs)), HOST, batch.column("time")[0].as_py())
    want = by_port(agent)
    # The fixture's mlx5_0 phys_state file reads "4: ACTIVE" (a logical state's name): the agent
    # refuses the mismatch, node_exporter exports the number (4, training: not up, so no speed).
    assert got[f"{HOST}/mlx5_0"]["phys_state"] == 4 and "phys_state" not in want[f"{HOST}/mlx5_0"]
    for key in IB_PORTS:
        shared = set(got[key]) & set(want[key])
        if key != f"{HOST}/mlx5_0":
            assert {"phys_state", "logical_state", "speed_bps"} <= shared, key
        else:
            shared -= {"speed_bps", "width"}
        # Every counter the exporter carries.
        assert {"rx_bytes", "tx_bytes", "symbol_errors", "xmit_wait_ticks", "link_downed"} <= shared, key
        assert {c: got[key][c] for c in shared} == {c: want[key][c] for c in shared}, key
    assert got[f"{HOST}/hfi1_0"]["rx_bytes"] == 1380366808104  # port_rcv_data x 4, as both read it
    assert got[f"{HOST}/mlx4_0"]["speed_bps"] == 40_000_000_000
    # The legacy error fields saturate: declared as the agent declares them.
    meta, agent_meta = batch.schema.metadata or {}, agent.schema.metadata or {}
    assert meta[b"graywire.counter_bits"] == agent_meta[b"graywire.counter_bits"]
    assert meta[b"graywire.saturating"] == agent_meta[b"graywire.saturating"]


def test_the_exporter_output_is_what_its_collector_documents(exporter: str) -> None:
    """A guard on the fixture itself: the families read are there, with their labels."""
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(exporter, timeout=10).text)}
    rx = families["node_infiniband_port_data_received_bytes"]
    assert rx.type == "counter"
    assert {(s.labels["device"], s.labels["port"]) for s in rx.samples} == {
        ("hfi1_0", "1"),
        ("mlx4_0", "1"),
        ("mlx4_0", "2"),
        ("mlx5_0", "1"),
    }


def test_a_service_polls_node_exporter_and_exports_its_counters(exporter: str, tmp_path: Path) -> None:
    """``type: prometheus`` end to end: config, sources, the poll, the raw counters on /metrics."""
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "nodes": [
                    {"name": HOST, "role": "host", "ports": ["hfi1_0", "mlx4_0", "mlx4_0:2", "mlx5_0"]},
                ],
            }
        )
    )
    settings = load_settings(
        None,
        data_dir=tmp_path / "gw",
        inventory=str(inventory),
        poll_interval="10s",
        sources=[{"type": "prometheus", "targets": [{"url": exporter, "node": HOST}]}],
    )
    app = create_app(settings, run_loop=False)
    with TestClient(app) as client:
        app.state.runner.tick()
        app.state.runner.tick()
        sources = client.get("/api/v1/sources").json()
        text = client.get("/metrics").text
    (target,) = sources["items"]
    assert target["source"] == "prometheus" and target["ok"], target
    samples = {
        (s.name, s.labels.get("port")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("source") == "prometheus"
    }
    assert samples[("graywire_port_receive_bytes_total", f"{HOST}/hfi1_0")] == 1380366808104
    assert samples[("graywire_port_transmit_wait_ticks_total", f"{HOST}/mlx4_0")] == 3599
