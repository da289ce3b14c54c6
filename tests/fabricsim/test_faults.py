"""The --faults spec language and fault placement."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from graywire.fabricsim.faults import (
    BENIGN_KINDS,
    CABLING_KINDS,
    DATAPATH_KINDS,
    DEFAULT_MAGNITUDE,
    FAULT_KINDS,
    FAULT_PATH_BENIGN_KINDS,
    FAULT_PATH_KINDS,
    NAMED_ONLY_BENIGN_KINDS,
    NAMED_ONLY_KINDS,
    PHASE_KINDS,
    STARTUP_BENIGN_KINDS,
    STARTUP_KINDS,
    Fault,
    FaultRequest,
    default_requests,
    parse_spec,
    resolve_faults,
)
from graywire.fabricsim.topology import TopologySpec, build_fabric

FABRIC = build_fabric(TopologySpec(hosts=8))
JOBS = {"job-000": list(range(8))}


def resolve(spec: str, duration: float = 600.0, seed: int = 0, channels: int = 4) -> list[Fault]:
    return resolve_faults(
        parse_spec(spec), FABRIC, duration, 10.0, JOBS, 8, channels, np.random.default_rng(seed)
    )


def test_parse_spec_items() -> None:
    assert parse_spec("speed_downgrade@10m+20m:gpu-0003/mlx5_2,slow_channel@5m+30m=0.3") == [
        FaultRequest("speed_downgrade", 600.0, 1200.0, None, "gpu-0003/mlx5_2"),
        FaultRequest("slow_channel", 300.0, 1800.0, 0.3, None),
    ]
    assert parse_spec(" ber_ramp=1e1 , pfc_storm@1h ") == [
        FaultRequest("ber_ramp", None, None, 10.0, None),
        FaultRequest("pfc_storm", 3600.0, None, None, None),
    ]
    assert parse_spec("counter_reset+30s:gpu-0001") == [
        FaultRequest("counter_reset", None, 30.0, None, "gpu-0001")
    ]
    assert parse_spec("slow_channel:gpu-0002/mlx5_3:1") == [
        FaultRequest("slow_channel", None, None, None, "gpu-0002/mlx5_3:1")
    ]


def test_parse_spec_default_and_none() -> None:
    assert parse_spec("none") == []
    assert parse_spec("  ") == []
    assert parse_spec("default") == [FaultRequest("default", None, None, None, None)]
    assert parse_spec("default,link_flap") == [
        FaultRequest("default", None, None, None, None),
        FaultRequest("link_flap", None, None, None, None),
    ]


def test_parse_spec_unknown_kind() -> None:
    with pytest.raises(ValueError, match=r"unknown fault kind 'cable_cut'; known: speed_downgrade, "):
        parse_spec("speed_downgrade,cable_cut@5m")


@pytest.mark.parametrize(
    "item",
    [
        "speed_downgrade@",
        "speed_downgrade@10x",
        "Speed_Downgrade",
        "pfc_storm=abc",
        "ber_ramp+",
        "link flap",
        "",
    ],
)
def test_parse_spec_malformed(item: str) -> None:
    with pytest.raises(ValueError, match=r"bad fault spec item .*: use KIND\[@START\]\[\+DURATION\]"):
        parse_spec(f"pfc_storm,{item}")


def test_parse_spec_bad_duration_value() -> None:
    with pytest.raises(ValueError, match=r"not a duration: '1\.2\.3m'"):
        parse_spec("pfc_storm@1.2.3m")


def test_kind_tables_are_consistent() -> None:
    benign = set(BENIGN_KINDS) | set(STARTUP_BENIGN_KINDS) | set(FAULT_PATH_BENIGN_KINDS)
    assert set(DEFAULT_MAGNITUDE) == set(FAULT_KINDS) | benign
    assert not set(FAULT_KINDS) & benign
    assert set(STARTUP_KINDS) <= set(FAULT_KINDS)
    assert set(FAULT_PATH_KINDS) <= set(FAULT_KINDS)


def test_default_requests_cover_every_kind_without_overlap() -> None:
    reqs = default_requests(1300.0)
    # The cabling and start-up faults are asked for by name: the cabling ones rewire the fabric for
    # the rest of a run, the start-up ones turn on their own simulation (fabricsim/startup.py).
    # So are the checkpoint and multipath faults (scenarios of their own) and data-path layouts.
    named = NAMED_ONLY_KINDS
    assert named == set(CABLING_KINDS) | set(DATAPATH_KINDS) | set(PHASE_KINDS) | set(STARTUP_KINDS) | set(
        FAULT_PATH_KINDS
    )
    assert {r.kind for r in reqs} == (set(FAULT_KINDS) - named) | (
        set(BENIGN_KINDS) - NAMED_ONLY_BENIGN_KINDS
    )
    assert len(reqs) == 22
    slot = 1300.0 / 22
    durations = {r.kind: r.duration_s for r in reqs}
    assert durations == pytest.approx(
        {
            **{k: 0.7 * slot for k in FAULT_KINDS if k not in named},
            "counter_reset": 0.5 * slot,
            "driver_reload": 0.5 * slot,
            "counter_wrap": 0.8 * slot,
            "short_retrain": 20.0,
            "collector_outage": 0.5 * slot,
            "checkpoint_burst": 0.5 * slot,
            "slow_step": 1.0,
            "job_slowdown": 600.0,  # a step-time shift is judged over minutes
        }
    )
    starts = [r.start_s for r in reqs if r.kind != "job_slowdown"]
    assert starts == pytest.approx([0.1 * slot + slot * i for i in range(22) if i != 19])
    job = next(r for r in reqs if r.kind == "job_slowdown")
    assert job.start_s + job.duration_s <= 1300.0
    # Every fault has its own stretch of the timeline, but the job-wide slowdown (a job, not a port).
    spans = sorted((r.start_s, r.start_s + r.duration_s) for r in reqs if r.kind != "job_slowdown")
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_resolve_explicit_targets() -> None:
    faults = resolve(
        "speed_downgrade@60+120:gpu-0003/mlx5_2,counter_reset@30:gpu-0001,collector_outage@90+30:leaf-r2-000,"
        "slow_channel@50+100=0.25:gpu-0002/mlx5_3:1,slow_nic@200:gpu-0005/mlx5_7,checkpoint_burst@300+60"
    )
    sd, cr, co, sc, sr, ck = faults
    assert sd.to_json() == {
        "id": "f000",
        "kind": "speed_downgrade",
        "start_s": 60.0,
        "end_s": 180.0,
        "magnitude": 0.5,
        "port": "gpu-0003/mlx5_2",
        "peer": "leaf-r2-000/p4",
        "node": "gpu-0003",
        "benign": False,
    }
    assert (cr.kind, cr.node, cr.benign, cr.port, cr.start_s) == (
        "counter_reset",
        "gpu-0001",
        True,
        None,
        30.0,
    )
    assert cr.end_s == 30.0 + 180.0  # default duration: max(10 polls, 30% of the run)
    assert (co.node, co.start_s, co.end_s) == ("leaf-r2-000", 90.0, 120.0)
    assert (sc.node, sc.port, sc.job, sc.rank, sc.channel, sc.magnitude) == (
        "gpu-0002",
        "gpu-0002/mlx5_3",
        "job-000",
        19,
        1,
        0.25,
    )
    assert (sr.node, sr.rank, sr.channel, sr.magnitude) == ("gpu-0005", 47, None, 0.2)
    assert (ck.node, ck.benign, ck.start_s, ck.end_s) == ("*", True, 300.0, 360.0)
    assert sc.active(50.0) and sc.active(149.9) and not sc.active(150.0) and not sc.active(49.9)


def test_short_retrain_window_is_its_magnitude() -> None:
    (f,) = resolve("short_retrain@100:gpu-0000/mlx5_0")
    assert (f.start_s, f.end_s, f.magnitude, f.benign) == (100.0, 120.0, 20.0, True)
    assert f.peer == "leaf-r0-000/p1"
    (g,) = resolve("short_retrain@100+25:gpu-0000/mlx5_0")
    assert (g.start_s, g.end_s, g.magnitude) == (100.0, 125.0, 25.0)
    with pytest.raises(ValueError, match="under 30 s"):
        resolve("short_retrain@100+300:gpu-0000/mlx5_0")


def test_resolve_default_targets_do_not_overlap() -> None:
    faults = resolve("default", duration=1300.0, seed=3)
    assert [f.id for f in faults] == [f"f{i:03d}" for i in range(22)]
    ports = [f.port for f in faults if f.port is not None]
    assert len(ports) == 13  # link/port faults, the three rank faults and the slow hop's sender
    peers = {f.peer for f in faults if f.peer}
    assert len(set(ports)) == len(ports)
    assert not set(ports) & peers
    for f in faults:
        if f.kind == "collector_outage":
            assert f.node.startswith("leaf-")
        elif f.kind in ("counter_reset", "driver_reload"):
            assert f.node.startswith("gpu-")
        elif f.kind in ("slow_channel", "slow_nic", "straggler"):
            assert f.port == f"{f.node}/mlx5_{f.rank % 8}"
            assert f.rank // 8 == int(f.node.removeprefix("gpu-"))
        elif f.kind == "nccl_slow_path":
            assert f.node.startswith("leaf-") and f.job and f.channel is not None
            rail = int(f.node.split("-")[1].removeprefix("r"))
            behind = {f"{h}/mlx5_{rail}" for h in f.extra["hosts"]}
            assert len(behind) >= 3 and not behind & set(ports)  # no other fault on its NICs
        elif f.kind in ("nccl_transport_fallback", "nccl_gdrdma_missing"):
            assert f.node.startswith("gpu-") and f.port is None and f.job
        elif f.kind in ("job_slowdown", "slow_step"):
            assert f.job and f.node is None
        elif f.kind == "slow_hop":
            assert f.node is None and f.job
            assert f.extra["hosts"] == [p.split("/")[0] for p in (f.port, f.peer)]
        assert f.benign == (f.kind in BENIGN_KINDS)


def test_resolve_is_seeded() -> None:
    assert resolve("default", seed=5) == resolve("default", seed=5)
    assert resolve("default", seed=5) != resolve("default", seed=6)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("speed_downgrade:gpu-0099/mlx5_0", "speed_downgrade: unknown port 'gpu-0099/mlx5_0'"),
        ("counter_reset:gpu-0099", "counter_reset: unknown node 'gpu-0099'"),
        ("collector_outage:leaf-x", "collector_outage: unknown node 'leaf-x'"),
        ("slow_channel:gpu-0099/mlx5_0:1", "slow_channel: host 'gpu-0099' runs no job"),
    ],
)
def test_resolve_unknown_targets(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(spec)


def test_resolve_rejects_gpu_outside_the_host() -> None:
    # gpus=8: mlx5_9 does not exist; rank 9 would be gpu-0001's second GPU, not gpu-0000's.
    with pytest.raises(ValueError):
        resolve("slow_channel:gpu-0000/mlx5_9:0")


def test_resolve_rejects_channel_outside_the_communicator() -> None:
    with pytest.raises(ValueError):
        resolve("slow_channel:gpu-0000/mlx5_1:7", channels=4)


def test_fabric_too_small_for_that_many_faults() -> None:
    tiny = build_fabric(TopologySpec(hosts=1, gpus=1))
    with pytest.raises(ValueError, match="fabric too small"):
        resolve_faults(
            parse_spec("pfc_storm,ecn_hotspot"), tiny, 600.0, 10.0, {"j": [0]}, 1, 4, np.random.default_rng(0)
        )


def test_docs_fault_spec_examples_parse() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "fabricsim.md").read_text()
    block = text.split("Examples:\n\n```\n", 1)[1].split("```", 1)[0]
    specs = [line.strip() for line in block.splitlines() if line.strip()]
    assert len(specs) == 4
    parsed = [parse_spec(s) for s in specs]
    assert parsed[0] == [FaultRequest("speed_downgrade", 600.0, 1200.0, None, "gpu-0003/mlx5_2")]
    assert [r.kind for r in parsed[3]] == ["default", "link_flap"]
    # The documented default order is the order default_requests uses.
    order = re.search(r"in this order: (.*?)\. Each starts", text, re.S).group(1)
    assert re.findall(r"`(\w+)`", order) == [r.kind for r in default_requests(1300.0)]
