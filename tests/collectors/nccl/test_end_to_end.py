"""fabricsim -> Inspector JSON lines + NCCL_DEBUG logs on disk -> NcclFileCollector -> Pipeline -> incidents.

The simulated job writes its files step by step, as a real one does, and each poll the
collector scrapes what was appended: the slowness fabricsim injects has to survive the real
file formats, the tailer, the GPU lookup through the debug log and the detector.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from graywire.collectors.nccl import NcclFileCollector
from graywire.collectors.schemas import record_kind
from graywire.detectors.pipeline import Pipeline
from graywire.fabricsim.nccl_writer import InspectorWriter
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.service.models.engine import make_engine, upgrade
from graywire.service.store import IncidentStore


def run(
    faults: str, tmp_path: Path, duration_s: float = 150.0
) -> tuple[list, IncidentStore, NcclFileCollector]:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=duration_s, seed=3, faults=faults))
    writer = InspectorWriter(tmp_path / "inspector", debug_log=True)
    collector = NcclFileCollector(tmp_path / "inspector" / "job-000", debug_pattern="nccl.*")
    pipe = Pipeline(sim.fabric)
    url = f"sqlite:///{tmp_path / 'graywire.db'}"
    upgrade(url)
    engine = make_engine(url)
    store = IncidentStore(engine)
    findings = []
    for step in sim.run():
        if step.nccl_timing is None:
            continue
        writer.write(step.nccl_timing)
        result = asyncio.run(collector.scrape())
        assert result.ok, result.error
        assert result.error is None
        kinds = [record_kind(b.schema) for b in result.batches]
        # The debug lines' init views (nccl_init) and probed layouts (nccl_layout) come with the
        # wiring when they changed.
        assert kinds[0] == "nccl_timing" and set(kinds[1:]) <= {"nccl_transport", "nccl_init", "nccl_layout"}
        found = pipe.process_poll(list(result.batches)).findings
        store.apply(found)
        findings += found
    return findings, store, collector


def test_slow_channel_through_inspector_files_opens_one_incident(tmp_path: Path) -> None:
    findings, store, collector = run("slow_channel@30s+300s=0.3:gpu-0003/mlx5_2:1", tmp_path)
    firing = [f for f in findings if f.status == "firing"]
    assert [(f.kind, f.node, f.port) for f in firing] == [
        ("nccl_channel_slow", "gpu-0003", "gpu-0003/mlx5_2")
    ]
    assert firing[0].evidence["rank"] == 26 and firing[0].evidence["channel"] == 1
    # The files sit at the top of the directory: the job is the one its debug lines' communicators make.
    assert firing[0].evidence["job"].startswith("job-000/0x")
    assert 0.2 < firing[0].evidence["windowed_slowdown"] < 0.4
    incidents = store.list_incidents(status="open")
    assert len(incidents) == 1
    inc = incidents[0]
    assert (inc["kind"], inc["node"], inc["port"]) == ("nccl_channel_slow", "gpu-0003", "gpu-0003/mlx5_2")
    assert collector.skipped_lines == 0
    assert collector.rows_total == 15 * 64 * 5  # 15 polls x 64 ranks x (whole + 4 channels)


def test_speed_downgrade_slows_every_channel_of_its_rank(tmp_path: Path) -> None:
    _, store, _ = run("speed_downgrade@30s+300s:gpu-0003/mlx5_2", tmp_path)
    incidents = store.list_incidents(status="open", kind="nccl_channel_slow")
    assert [(i["node"], i["port"]) for i in incidents] == [("gpu-0003", "gpu-0003/mlx5_2")]  # one per rank
    assert incidents[0]["evidence"]["channels"] == [0, 1, 2, 3]
    assert incidents[0]["evidence"]["rank"] == 26


def test_healthy_job_opens_nothing(tmp_path: Path) -> None:
    findings, store, collector = run("none", tmp_path, duration_s=100.0)
    assert findings == []
    assert store.list_incidents() == []
    assert collector.rows_total == 10 * 64 * 5


def test_socket_fallback_in_debug_logs_is_a_host_finding(tmp_path: Path) -> None:
    """A host whose ranks came up on NET/Socket: the NCCL_DEBUG lines the job writes say so."""
    findings, store, _ = run("nccl_transport_fallback@0s+600s=0.5:gpu-0003", tmp_path, duration_s=100.0)
    fallback = [f for f in findings if f.kind == "nccl_transport_fallback"]
    assert [(f.status, f.node) for f in fallback] == [("firing", "gpu-0003")]
    ev = fallback[0].evidence
    # The debug lines name the communicator by its commId, the same on every rank; the files sit at
    # the top of the directory, so the job is the one their communicators make.
    assert fallback[0].entity == f"{ev['communicator']}|gpu-0003"
    assert ev["job"] == f"job-000/{ev['communicator']}"
    assert ev["ranks"] == list(range(24, 32)) and set(ev["actual"]) == {"NET/Socket"}
    assert ev["expected"] == "NET/IB" and ev["peer_share"]["NET/IB"] == 56 / 64
    assert [i["node"] for i in store.list_incidents(kind="nccl_transport_fallback")] == ["gpu-0003"]
    # Its ranks are also 50% slower than their peers: the timings agree, on the same host.
    slow = {f.node for f in findings if f.kind == "nccl_channel_slow" and f.status == "firing"}
    assert slow == {"gpu-0003"}
