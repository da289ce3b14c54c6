"""``graywire serve`` configured for UFM, SNMP, host agents and NCCL, against fabricsim's fakes."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from graywire.fabricsim.live import FakesConfig, recording_mtime, run_fakes, snmpsim_binary
from graywire.service.app import create_app
from graywire.service.config import load_settings


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_run(n: int) -> int:
    """The first of ``n`` consecutive free TCP ports."""
    for _ in range(50):
        base = free_port()
        try:
            socks = []
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


@pytest.mark.slow
@pytest.mark.alone  # snmpsim, the agents and the fake UFM answer the poll within its timeouts
@pytest.mark.parametrize("discover", [False, True], ids=["inventory-file", "inventory-discover"])
def test_serve_reads_every_fake_source_and_finds_the_downgrade(tmp_path: Path, discover: bool) -> None:
    """With the fakes' inventory file, or with none (``inventory: discover``: the model and its
    expected speeds come from the fake UFM), the same sources answer and the same fault is found."""
    try:
        snmpsim_binary()
    except RuntimeError as e:
        pytest.fail(str(e))  # a dev install has it; missing means a broken environment
    cfg = FakesConfig(
        out=tmp_path / "fakes",
        hosts=8,
        faults="speed_downgrade@25s+1h:gpu-0003/mlx5_2",
        interval_s=10.0,
        ufm_port=free_port(),
        snmp_port=free_port(socket.SOCK_DGRAM),
        agent_port=free_run(4),
        agent_hosts=4,
        discover=discover,
    )
    state: dict[str, Any] = {}

    def on_step(k: int, config_path: Path) -> None:
        if k == 0:
            # The test drives the polls itself: a scrape may take as long as a loaded machine needs.
            settings = load_settings(
                config_path, database_url=f"sqlite:///{tmp_path / 'g.db'}", scrape_timeout="120s"
            )
            client = TestClient(create_app(settings, run_loop=False))
            state["client"] = client.__enter__()
        state["client"].app.state.runner.tick()

    try:
        run_fakes(cfg, steps=5, say=lambda line: None, on_step=on_step)
        client: TestClient = state["client"]
        targets = client.get("/api/v1/sources").json()["items"]
        by_source: dict[str, list[dict]] = {}
        for t in targets:
            by_source.setdefault(t["source"], []).append(t)
        assert set(by_source) == {"ufm", "snmp", "agent", "nccl"}
        assert len(by_source["snmp"]) == 9 and len(by_source["agent"]) == 4 and len(by_source["ufm"]) == 2
        for t in targets:
            assert t["ok"], (t.get("error"), t)
            assert t["samples"] > 0, t
        items = client.get("/api/v1/incidents", params={"kind": "speed_downgrade"}).json()["items"]
        assert [(i["node"], i["port"], i["status"]) for i in items] == [
            ("gpu-0003", "gpu-0003/mlx5_2", "open")
        ]
        text = client.get("/metrics").text
        assert 'graywire_scrape_success{source="snmp",target="leaf-r2-000@127.0.0.1:' in text
        everything = client.get("/api/v1/incidents").json()["items"]
        assert {i["kind"] for i in everything} <= {"speed_downgrade", "nccl_channel_slow", "nccl_path_slow"}
        discovered = cfg.out / "graywire-data" / "inventory.discovered.yaml"
        assert discovered.exists() == discover
        # The ground truth beside the config, as `graywire sim` writes it, to score against.
        (fault,) = json.loads((cfg.out / "truth.json").read_text())["faults"]
        assert (fault["kind"], fault["port"], fault["start_s"]) == ("speed_downgrade", "gpu-0003/mlx5_2", 25)
    finally:
        if "client" in state:
            state["client"].__exit__(None, None, None)


def test_each_switch_recording_is_stamped_newer_than_any_index_snmpsim_built_before() -> None:
    # snmpsim keeps an index whose mtime is newer than the recording (rebuild skipped): so a
    # stamp must pass the present, move every step, and never go back.
    now = 1_800_000_000.4
    first = recording_mtime(now - 30.0, 0.0, now)  # simulated time behind the wall clock
    assert first == 1_800_000_002.0 and first > now + 1
    assert recording_mtime(now - 25.0, first, now + 0.1) == first + 1  # a step within the second
    assert recording_mtime(now + 60.0, first, now) == 1_800_000_060.0  # simulated time ahead
