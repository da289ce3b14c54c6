"""End to end: graywire finds a downgrade, its drain list drains the node in a real slurmctld,
and the node is resumed once the fault has cleared and the clean window has passed."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graywire.fabricsim.live import serve_app
from graywire.service.app import create_app
from graywire.service.cli import main
from graywire.service.config import load_settings
from tests.service.schedsync.slurm_cluster import SlurmCluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def drained(fields: dict[str, str]) -> bool:
    return "DRAIN" in fields.get("State", "")


def test_a_downgrade_drains_the_node_in_slurm_and_it_returns_when_clean(
    slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    port = f"{slurm.node}/mlx5_2"
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path / 'g.db'}",
        poll_interval="10s",
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 3, "faults": f"speed_downgrade@0s+40s:{port}"}],
        drain={"clean_window": "1s", "max_fraction": 0.5, "shadow": False},
    )
    app = create_app(settings, run_loop=False)
    with TestClient(app), serve_app(app, free_port()) as url:
        runner = app.state.runner
        for _ in range(3):
            runner.tick()
        drain = TestClient(app).get("/api/v1/drain", params={"action": "drain"}).json()
        assert [d["node"] for d in drain] == [slurm.node], drain

        assert main(["slurm-sync", "--url", url, "--once"]) == 0
        fields = slurm.wait_for_state(drained)
        assert fields["Reason"].startswith(f"graywire: {port} negotiated 400G, expected 800G")

        # The fault ends at 40 s of fabric time; the incidents close, then the clean window passes.
        for _ in range(30):
            runner.tick()
            if not TestClient(app).get("/api/v1/incidents", params={"status": "open"}).json()["items"]:
                break
        else:
            pytest.fail("the incidents never closed after the fault ended")
        time.sleep(1.5)
        runner.tick()
        assert TestClient(app).get("/api/v1/drain", params={"action": "drain"}).json() == []
        assert main(["slurm-sync", "--url", url, "--once"]) == 0
        fields = slurm.wait_for_state(lambda f: not drained(f))
        assert "Reason" not in fields
