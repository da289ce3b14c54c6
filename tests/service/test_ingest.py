"""NCCL records pushed over HTTP reach the detectors; bad bodies are refused with a reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fabricsim.nccl_writer import InspectorWriter
from fabricsim.sim import FabricSim, SimConfig
from fabricsim.topology import TopologySpec
from service.app import create_app
from service.config import load_settings

INGEST_TOKEN = "ingest-token-0123456789"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        poll_interval="10s",
        max_push_bytes=4 * 2**20,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 1}],
        auth={"tokens": [{"name": "trainer", "role": "ingest", "token": INGEST_TOKEN}]},
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        c.headers["authorization"] = f"Bearer {INGEST_TOKEN}"
        yield c


def test_pushed_slow_channel_becomes_an_incident(client: TestClient, tmp_path: Path) -> None:
    job_sim = FabricSim(
        SimConfig(
            topology=TopologySpec(hosts=8),
            duration_s=120,
            seed=2,
            faults="slow_channel@20s+300s=0.3:gpu-0005/mlx5_6:2",
        )
    )
    writer = InspectorWriter(tmp_path / "insp")
    offsets: dict[Path, int] = {}
    runner = client.app.state.runner  # type: ignore[attr-defined]
    accepted = 0
    for step in job_sim.run():
        if step.nccl_timing is None:
            continue
        writer.write(step.nccl_timing)
        body = b""
        for f in sorted((tmp_path / "insp").rglob("*.log")):
            data = f.read_bytes()
            body += data[offsets.get(f, 0) :]
            offsets[f] = len(data)
        r = client.post(
            "/api/v1/ingest/nccl",
            params={"job": "job-000", "gpus_per_host": 8},
            content=body,
            headers={"content-type": "application/x-ndjson"},
        )
        assert r.status_code == 202, r.text
        accepted += r.json()["accepted_rows"]
        runner.tick()
    assert accepted == 12 * 64 * 5  # 12 pushes x 64 ranks x (whole collective + 4 channels)
    items = client.get("/api/v1/incidents", params={"kind": "nccl_channel_slow"}).json()["items"]
    assert [(i["node"], i["port"], i["evidence"]["channel"]) for i in items] == [
        ("gpu-0005", "gpu-0005/mlx5_6", 2)
    ]


@pytest.mark.parametrize(
    ("body", "params", "status", "message"),
    [
        (b'{"header": {"id": 1}\n', {"job": "j"}, 422, "line 1"),
        (b"not json at all\n", {"job": "j"}, 422, "line 1"),
        (b"{}\n", {}, 422, "job"),
        (b"x" * (4 * 2**20 + 1), {"job": "j"}, 413, "limit"),
        (b"[" * 100_000, {"job": "j"}, 422, "nested"),  # small, but deeper than any parser recurses
    ],
)
def test_bad_pushes_are_refused_with_a_reason(
    client: TestClient, body: bytes, params: dict, status: int, message: str
) -> None:
    r = client.post("/api/v1/ingest/nccl", params=params, content=body,
                    headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert r.status_code == status
    assert message in str(r.json()["detail"])
    assert client.get("/api/v1/incidents").json()["count"] == 0


def test_push_needs_an_ingest_token(client: TestClient) -> None:
    anonymous = TestClient(client.app)
    body = b'{"header": {"id": 1}}\n'
    for headers in ({}, {"authorization": "Bearer not-a-known-token-at-all"}):
        r = anonymous.post("/api/v1/ingest/nccl", params={"job": "j"}, content=body, headers=headers)
        assert r.status_code == 401
        assert "token" in r.json()["detail"]


def test_nccl_directory_source_is_built_from_config(tmp_path: Path) -> None:
    from service.sources import build_sources

    settings = load_settings(
        None,
        sources=[
            {"type": "fabricsim", "hosts": 8},
            {"type": "nccl", "directory": str(tmp_path), "gpus_per_host": 8},
        ],
    )
    fabric, collectors = build_sources(settings)
    assert [c.source for c in collectors] == ["fabricsim", "nccl"]
    assert collectors[1].target.endswith(str(tmp_path)) or str(tmp_path) in collectors[1].target
    assert fabric.n_ports == 256
