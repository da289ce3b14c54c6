"""The agent's ``/v1/nccl_rank_state``: a fake NCCL RAS speaking RAS's client protocol (the server
side of src/ras/client_support.cc, as tests/collectors/nccl/test_ras.py has it) behind a real
agent, read by the real agent client."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from graywire.collectors.host.agent_client import AgentCollector
from graywire.collectors.host.agent_server import AgentConfig, create_agent_app
from graywire.fabricsim.hostfs import HostTreeWriter
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from tests.collectors.host.httpserver import serve
from tests.relay import Relay

REPORTS = Path(__file__).parent.parent / "nccl" / "ras_reports"
ME, OTHER = "172.16.64.245", "172.16.64.246"


def report() -> bytes:
    """NCCL's documented JSON status (rank 0 running, rank 1 missing and unresponsive, both on
    ``ME``), with a third rank on another node, which this host's agent must leave out."""
    doc = json.loads((REPORTS / "status_doc.json").read_text())
    comm = doc["communicators"][0]
    other = json.loads(json.dumps(comm["ranks"][0]))
    other.update(rank=2, host=OTHER, pid=7, nvml_dev=0, cuda_dev=0)
    comm["ranks"].append(other)
    comm["size"] = 3
    return json.dumps(doc, indent=2).encode()


@contextmanager
def fake_ras() -> Iterator[tuple[int, list[str]]]:
    """A RAS client socket on 127.0.0.1 in its own thread; yields its port and the commands heard."""
    heard: list[str] = []
    ready = threading.Event()
    box: dict = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := (await reader.readline()).decode().strip():
            heard.append(line)
            if line.upper().startswith("CLIENT PROTOCOL"):
                writer.write(b"SERVER PROTOCOL 2\n")
            elif line.upper().startswith(("TIMEOUT", "SET FORMAT")):
                writer.write(b"OK\n")
            elif line.upper() == "STATUS":
                writer.write(report())
                await writer.drain()
                writer.close()
                return
            await writer.drain()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        box["port"], box["stop"] = server.sockets[0].getsockname()[1], asyncio.Event()
        box["loop"] = asyncio.get_running_loop()
        ready.set()
        async with server:
            await box["stop"].wait()

    t = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    t.start()
    ready.wait(5)
    try:
        yield box["port"], heard
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        t.join(5)


def host_tree(tmp_path: Path) -> tuple[HostTreeWriter, str]:
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=2), interval_s=10.0, duration_s=10.0, seed=1, faults="")
    )
    writer = HostTreeWriter(tmp_path / "hosts", sim.fabric)
    writer.write(next(iter(sim.run())).port_sample)
    return writer, "gpu-0000"


def ras_agent(writer: HostTreeWriter, host: str, ras_port: int, **extra: Any) -> AgentConfig:
    """The agent of ``host``'s tree, reading the local RAS on ``ras_port`` (its address is ME)."""
    return AgentConfig(
        sysfs_root=writer.host_root(host),
        hostname=host,
        ethtool_dir=writer.ethtool_dir(host),
        ncclras=f"127.0.0.1:{ras_port}",
        ncclras_addresses=(ME,),
        **extra,
    )


def test_the_agent_serves_its_hosts_ranks_from_the_local_ras_and_the_client_reads_them(
    tmp_path: Path,
) -> None:
    writer, host = host_tree(tmp_path)
    with fake_ras() as (port, heard):
        cfg = ras_agent(writer, host, port, ncclras_job="job-7")
        with serve(create_agent_app(cfg)) as url:
            c = AgentCollector(url, timeout=60)
            res = asyncio.run(c.scrape())
        assert heard[0] == "CLIENT PROTOCOL 2" and heard[-1] == "STATUS"
    assert res.ok, res.error
    (ranks,) = [b for b in res.batches if b.schema.metadata[b"graywire.record"] == b"nccl_rank_state"]
    got = sorted((r["job"], r["host"], r["rank"], r["device"], r["state"]) for r in ranks.to_pylist())
    assert got == [("job-7", host, 0, 0, "running"), ("job-7", host, 1, 1, "unresponsive")]


def test_a_scrapes_requests_share_one_connection_and_none_outlives_it(tmp_path: Path) -> None:
    """Port samples, then the rank view (and the layout view when due) on the scrape's own
    connections, opened and closed with it, as the agent sees them through a relay."""
    writer, host = host_tree(tmp_path)
    with fake_ras() as (port, _):
        cfg = ras_agent(writer, host, port)
        with serve(create_agent_app(cfg)) as url:
            parts = urlsplit(url)
            relay = Relay((parts.hostname or "127.0.0.1", parts.port or 80))
            relay.start()
            try:
                c = AgentCollector(f"http://127.0.0.1:{relay.port}", timeout=60)
                first = asyncio.run(c.scrape())
                # The layout view (due on a first scrape) and the rank view run side by side:
                # one of them takes the port samples' connection.
                assert relay.accepted == 2
                second = asyncio.run(c.scrape())
                assert relay.accepted == 3  # no layout due: samples and ranks on one connection
            finally:
                relay.cut()
    for res in (first, second):
        assert [b.schema.metadata[b"graywire.record"] for b in res.batches] == [
            b"port_sample",
            b"nccl_rank_state",
        ]


def test_no_ras_is_no_view_and_an_agent_without_the_endpoint_is_not_asked_again(tmp_path: Path) -> None:
    writer, host = host_tree(tmp_path)
    base = {"sysfs_root": writer.host_root(host), "hostname": host, "ethtool_dir": writer.ethtool_dir(host)}
    with fake_ras() as (port, _):
        pass  # the port is closed now: no job running on this host
    gone = AgentConfig(**base, ncclras=f"127.0.0.1:{port}", ncclras_addresses=(ME,))  # type: ignore[arg-type]
    with serve(create_agent_app(gone)) as url:
        c = AgentCollector(url, timeout=60)
        res = asyncio.run(c.scrape())
    assert res.ok and [b.schema.metadata[b"graywire.record"] for b in res.batches] == [b"port_sample"]
    assert (
        c.rank_state_error is not None
        and "HTTP 503" in c.rank_state_error
        and "NCCL RAS" in c.rank_state_error
    )
    assert not c._ranks_off  # asked again next poll: a job may start
    with serve(create_agent_app(AgentConfig(**base))) as url:  # type: ignore[arg-type]
        c = AgentCollector(url, timeout=60)
        assert asyncio.run(c.scrape()).ok and c._ranks_off


@contextmanager
def silent_ras() -> Iterator[int]:
    """A RAS socket that accepts and never answers (a wedged job)."""
    import socket as _socket

    srv = _socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()


@pytest.mark.alone  # a 2 s scrape timeout against a real agent: a busy second core would time the machine
def test_a_wedged_ras_costs_its_own_view_never_the_port_samples(tmp_path: Path) -> None:
    """A RAS that accepts and never answers ends with no rank view (and why), within the
    scrape's one timeout the side views share; the port samples already read stand."""
    writer, host = host_tree(tmp_path)
    with silent_ras() as port:
        cfg = ras_agent(writer, host, port, ncclras_timeout=30.0)
        with serve(create_agent_app(cfg)) as url:
            c = AgentCollector(url, timeout=2)
            res = asyncio.run(c.scrape())
    assert res.ok and [b.schema.metadata[b"graywire.record"] for b in res.batches] == [b"port_sample"]
    assert c.rank_state_error is not None and "TimeoutError" in c.rank_state_error
