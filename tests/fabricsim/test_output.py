"""write_simulation: the dataset layout, inventory, links and truth.json."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from graywire.collectors.dataset import iter_polls, iter_replay
from graywire.collectors.model import INVENTORY, load_inventory
from graywire.collectors.schemas import LINK, NCCL_TIMING, PORT_SAMPLE, record_kind
from graywire.fabricsim.output import TRUTH, write_simulation
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec


def test_write_simulation(tmp_path: Path) -> None:
    cfg = SimConfig(
        topology=TopologySpec(hosts=8),
        interval_s=10.0,
        duration_s=60.0,
        seed=2,
        job_hosts=8,
        faults="collector_outage@20+20:leaf-r0-000,slow_channel@10+30:gpu-0001/mlx5_1:2",
    )
    sim = FabricSim(cfg)
    progress: list[tuple[int, int]] = []
    rows = write_simulation(sim, tmp_path, lambda done, total: progress.append((done, total)))

    assert progress == [(k, 7) for k in range(1, 8)]
    # One wiring view (the first NCCL poll): 64 ranks; a send and a receive row per rank and channel.
    assert rows == {"port_sample": 7 * 256 - 2 * 16, "nccl_timing": 6 * 64 * 4, "nccl_transport": 64,
                    "nccl_proxy": 6 * 64 * 4 * 2}  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "inventory.json",
        "link",
        "nccl_proxy",
        "nccl_timing",
        "nccl_transport",
        "port_sample",
        "truth.json",
    ]
    assert [p.name for p in (tmp_path / "port_sample").iterdir()] == ["hour=2026-01-05T00"]

    truth = json.loads((tmp_path / TRUTH).read_text())
    assert {k: v for k, v in truth.items() if k != "faults"} == {
        "version": 1,
        "seed": 2,
        "hosts": 8,
        "ports": 256,
        "interval_s": 10.0,
        "duration_s": 60.0,
        "start": "2026-01-05T00:00:00+00:00",
        "polls": 7,
    }
    assert truth["faults"] == [
        {
            "id": "f000",
            "kind": "collector_outage",
            "start_s": 20.0,
            "end_s": 40.0,
            "magnitude": 0.0,
            "node": "leaf-r0-000",
            "benign": True,
        },
        {
            "id": "f001",
            "kind": "slow_channel",
            "start_s": 10.0,
            "end_s": 40.0,
            "magnitude": 0.3,
            "port": "gpu-0001/mlx5_1",
            "node": "gpu-0001",
            "job": "job-000",
            "rank": 9,
            "channel": 2,
            "benign": False,
        },
    ]

    inv = load_inventory(tmp_path / INVENTORY)
    assert inv.keys == sim.fabric.keys
    assert inv.expected_speed_bps.tolist() == sim.fabric.expected_speed_bps.tolist()
    assert inv.peer.tolist() == sim.fabric.peer.tolist()
    assert inv.guids == sim.fabric.guids

    links = pq.read_table(tmp_path / "link" / "links.parquet")
    assert links.schema.equals(LINK)
    assert links.num_rows == 128
    assert set(links.column("source").to_pylist()) == {"fabricsim"}
    assert links.slice(0, 1).to_pylist() == [
        {"a_port": "gpu-0000/mlx5_0", "b_port": "leaf-r0-000/p1", "source": "fabricsim"}
    ]

    polls = list(iter_polls(tmp_path, "port_sample"))
    assert [b.num_rows for b in polls] == [256, 256, 240, 240, 256, 256, 256]
    for b in polls:
        assert b.schema.names == PORT_SAMPLE.names
        assert [f.type for f in b.schema] == [f.type for f in PORT_SAMPLE]
    nccl = list(iter_polls(tmp_path, "nccl_timing"))
    assert len(nccl) == 6
    assert nccl[0].schema.names == NCCL_TIMING.names
    assert [f.type for f in nccl[0].schema] == [f.type for f in NCCL_TIMING]
    kinds = [record_kind(b.schema) for b in iter_replay(tmp_path)]
    # At equal times: port samples, timings, the wiring view (sent at the first NCCL poll), proxy steps.
    assert kinds == ["port_sample", "port_sample", "nccl_timing", "nccl_transport", "nccl_proxy"] + [
        "port_sample", "nccl_timing", "nccl_proxy",
    ] * 5  # fmt: skip

    # What was written is what the simulator produced.
    again = list(FabricSim(cfg).run())
    assert polls[3].column("rx_bytes").to_pylist() == again[3].port_sample.column("rx_bytes").to_pylist()
    assert (
        nccl[2].column("duration_seconds").to_pylist()
        == again[3].nccl_timing.column("duration_seconds").to_pylist()
    )
