"""The collector that scrapes agents: broken replies, its source config, and a downgrade found end to end."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

import graywire.collectors.host.agent_client as agent_client
from graywire.collectors.base import ScrapeResult
from graywire.collectors.host.agent_client import AgentCollector
from graywire.collectors.host.agent_server import AgentConfig, create_agent_app
from graywire.collectors.host.agent_wire import ARROW_STREAM, to_ipc
from graywire.collectors.host.config import AgentSourceConfig, build_collectors
from graywire.collectors.host.sysfs import PortReading, readings_to_batch
from graywire.collectors.schemas import COUNTER_BITS_KEY, NCCL_TIMING, TS, make_batch
from graywire.detectors.pipeline import Pipeline
from graywire.fabricsim.hostfs import HostTreeWriter
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.models.engine import make_engine, upgrade
from graywire.service.store import IncidentStore
from tests.collectors.host.httpserver import serve

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
G = 10**9


def scrape(c: AgentCollector) -> ScrapeResult:
    return asyncio.run(c.scrape())


# -- failed scrapes -----------------------------------------------------------------------------


def one_port(time_: datetime = T, label: str = "mlx5_0") -> pa.RecordBatch:
    r = PortReading(label, "mlx5_0", 1, None, "InfiniBand", 5, 4, 400 * G, 4)
    r.set_counter("link_downed", 1, 8)
    return readings_to_batch([r], "h1", time_)


def bad_agent() -> FastAPI:
    """Answers /<case>/v1/port_sample with one kind of broken reply each."""
    app = FastAPI()

    def arrow(batch: pa.RecordBatch) -> Response:
        return Response(to_ipc(batch), media_type=ARROW_STREAM)

    @app.get("/{case}/v1/port_sample")
    def sample(case: str) -> Response:
        good = one_port()
        if case == "garbage":
            return Response(b"\xff\xff\xff\xffnot arrow at all" * 4, media_type=ARROW_STREAM)
        if case == "truncated":
            return Response(to_ipc(good)[:-60], media_type=ARROW_STREAM)
        if case == "json":
            return JSONResponse({"ports": []})
        if case == "nccl":
            words = pa.dictionary(pa.int8(), pa.string())
            return arrow(
                make_batch(
                    NCCL_TIMING,
                    1,
                    {
                        "time": pa.array([T], TS),
                        "job": pa.array(["j"]).dictionary_encode(),
                        "communicator": pa.array(["c"]).dictionary_encode(),
                        "rank": pa.array([0], pa.int32()),
                        "collective": pa.array(["AllReduce"]).dictionary_encode().cast(words),
                        "duration_seconds": pa.array([0.1]),
                    },
                )
            )
        if case == "missing_column":
            return arrow(good.drop_columns(["temperature_celsius"]))
        if case == "two_times":
            later = one_port(T + timedelta(seconds=10), "mlx5_1")
            return Response(
                to_ipc(pa.concat_batches([good, later.cast(good.schema)])), media_type=ARROW_STREAM
            )
        if case == "duplicate":
            return arrow(readings_to_batch([PortReading("mlx5_0", None, 1, None)] * 2, "h1", T))
        if case == "bad_widths":
            meta = {**good.schema.metadata, COUNTER_BITS_KEY: b'{"rx_bytes": 99}'}
            return arrow(good.replace_schema_metadata(meta))
        if case == "empty":
            return arrow(good.slice(0, 0))
        if case == "slow":
            time.sleep(1.5)
        if case in ("slow", "good"):
            return arrow(good)
        return JSONResponse({"error": "no such case"}, status_code=404)

    return app


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("garbage", "ArrowInvalid"),
        ("truncated", "OSError: Expected to be able to read"),
        ("json", "content type 'application/json', not application/vnd.apache.arrow.stream"),
        ("nccl", "not a port_sample v1 stream"),
        ("missing_column", "schema differs from port_sample v1"),
        ("two_times", "rows carry different poll times"),
        ("duplicate", "duplicate port keys in one poll"),
        ("bad_widths", "bad graywire.counter_bits metadata"),
        ("empty", "expected one non-empty batch, got [0]"),
        ("nothing", "HTTP 404"),
        ("slow", "timed out after 0.5 s"),
    ],
)
def test_broken_agents_give_failed_scrapes(bad_agent_url: str, case: str, error: str) -> None:
    # Only the slow case is about the timeout; the others may take what a busy machine needs.
    res = scrape(AgentCollector(f"{bad_agent_url}/{case}", timeout=0.5 if case == "slow" else 60))
    assert not res.ok and res.batches == () and res.samples == 0
    assert res.error is not None and error in res.error
    assert res.duration_s > 0


@pytest.fixture(scope="module")
def bad_agent_url():
    with serve(bad_agent()) as url:
        yield url


def test_good_reply_from_the_same_fake_is_accepted(
    bad_agent_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = scrape(AgentCollector(f"{bad_agent_url}/good", timeout=60))
    assert res.ok and res.batches[0].column("port").to_pylist() == ["h1/mlx5_0"]
    assert json.loads(res.batches[0].schema.metadata[COUNTER_BITS_KEY]) == {"link_downed": 8}
    monkeypatch.setattr(agent_client, "MAX_BODY_BYTES", 100)
    big = scrape(AgentCollector(f"{bad_agent_url}/good", timeout=60))
    assert not big.ok and big.error == "ValueError: response larger than 100 bytes"


def test_unreachable_agent() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = scrape(AgentCollector(f"http://127.0.0.1:{port}", timeout=2))
    assert not res.ok and res.error is not None and res.error.startswith("ConnectError")


# -- configuration ------------------------------------------------------------------------------


def test_source_config_and_build_collectors() -> None:
    fabric = build_fabric(TopologySpec(hosts=2, gpus=2, hosts_per_leaf=2))
    cfg = AgentSourceConfig.model_validate(
        {
            "type": "agent",
            "urls": ["http://gpu-0000:9470/", "https://x:1"],
            "url_template": "http://{host}:9470",
            "timeout": 3,
        }
    )
    collectors = build_collectors(cfg, fabric)
    assert [c.target for c in collectors] == ["http://gpu-0000:9470", "https://x:1", "http://gpu-0001:9470"]
    assert all(isinstance(c, AgentCollector) and c.timeout == 3 and c.source == "agent" for c in collectors)
    with pytest.raises(ValueError, match="needs an inventory"):
        build_collectors(AgentSourceConfig(url_template="http://{host}:1"), None)
    for bad in (
        {"urls": []},
        {"urls": ["gpu-0000:9470"]},
        {"url_template": "http://x:1"},
        {"urls": ["http://x"], "timeout": 0},
    ):
        with pytest.raises(ValidationError):
            AgentSourceConfig.model_validate(bad)


# -- end to end: a silent 800G -> 400G downgrade -----------------------------------------------------


def test_speed_downgrade_end_to_end(tmp_path: Path) -> None:
    bad = "gpu-0002/mlx5_5"
    sim = FabricSim(
        SimConfig(
            topology=TopologySpec(hosts=4),
            interval_s=10.0,
            duration_s=60.0,
            seed=5,
            job_hosts=4,
            faults=f"speed_downgrade@20s+300s:{bad}",
        )
    )
    writer = HostTreeWriter(tmp_path / "hosts", sim.fabric)
    hosts = [
        n for n, role in zip(sim.fabric.node_names, sim.fabric.node_roles, strict=True) if role == "host"
    ]
    now = [EPOCH]
    url = f"sqlite:///{tmp_path / 'graywire.db'}"
    upgrade(url)
    engine = make_engine(url)
    store = IncidentStore(engine)
    pipeline = Pipeline(sim.fabric)
    apps = [
        create_agent_app(
            AgentConfig(sysfs_root=writer.host_root(h), hostname=h, ethtool_dir=writer.ethtool_dir(h)),
            clock=lambda: now[0],
        )
        for h in hosts
    ]
    findings = []
    with serve(apps[0]) as u0, serve(apps[1]) as u1, serve(apps[2]) as u2, serve(apps[3]) as u3:
        collectors = [AgentCollector(u, timeout=60) for u in (u0, u1, u2, u3)]

        async def poll() -> list[ScrapeResult]:
            return await asyncio.gather(*(c.scrape() for c in collectors))

        for step in sim.run():
            writer.write(step.port_sample)
            now[0] = step.time
            results = asyncio.run(poll())
            assert all(r.ok for r in results), [r.error for r in results]
            assert [r.samples for r in results] == [8, 8, 8, 8]
            for r in results:
                found = pipeline.process(r.batches[0])
                store.apply(found)
                findings += found
    engine_incidents = store.list_incidents(status="open")
    engine.dispose()
    assert [(f.kind, f.status, f.port) for f in findings] == [("speed_downgrade", "firing", bad)]
    assert len(engine_incidents) == 1
    inc = engine_incidents[0]
    assert (inc["kind"], inc["node"], inc["port"], inc["severity"]) == (
        "speed_downgrade",
        "gpu-0002",
        bad,
        "critical",
    )
    assert inc["entity"] == inc["link"] == f"{bad}<->leaf-r5-000/p3"
    assert inc["summary"].startswith(f"{bad} negotiated 400G, expected 800G since 00:00:20")
    assert inc["evidence"]["actual"][bad] == {"speed_bps": 400 * G, "width": 4}
    # Two polls confirm it: the first bad poll is at 20 s, the incident opens on the second.
    assert datetime.fromisoformat(inc["opened_at"]) == EPOCH + timedelta(seconds=30)
