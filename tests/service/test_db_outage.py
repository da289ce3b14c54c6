"""PostgreSQL goes away under a running service, then comes back.

A real PostgreSQL behind a TCP relay the test can cut: while it is cut the API answers 503
JSON (not a bare 500), the poll loop keeps polling and keeps its findings, and once the
database is back everything recovers without a restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings
from tests.relay import Relay

OPERATOR = "operator-token-0123456789"
# gpu-0001's NIC on rail 3 drops to 400G at 15 s; a second fault while the database is away.
FAULTS = "speed_downgrade@15s+1h:gpu-0001/mlx5_3,speed_downgrade@45s+1h:gpu-0002/mlx5_1"


@pytest.mark.postgres
def test_database_outage_is_503_json_and_the_poll_loop_recovers(
    tmp_path: Path, relay: tuple[Relay, str]
) -> None:
    proxy, url = relay
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=url,
        archive={"enabled": False},
        drain={"max_fraction": 0.5},
        sources=[{"type": "fabricsim", "hosts": 16, "seed": 3, "faults": FAULTS}],
        auth={"tokens": [{"name": "alice", "role": "operator", "token": OPERATOR}]},
        # No rendered list served again: every read below must reach the (cut) database.
        http={"read_cache_ttl": "0s"},
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        runner = c.app.state.runner  # type: ignore[attr-defined]
        for _ in range(4):
            runner.tick()
        incident = c.get("/api/v1/incidents").json()["items"][0]["id"]
        assert [d["node"] for d in c.get("/api/v1/drain").json()] == ["gpu-0001"]

        proxy.cut()
        for method, path in [
            ("GET", "/api/v1/incidents"),
            ("GET", f"/api/v1/incidents/{incident}"),
            ("GET", "/api/v1/drain"),
            ("GET", "/api/v1/drain/state"),
            ("GET", "/api/v1/nodes/gpu-0001"),
            ("GET", "/api/v1/ports?node=gpu-0001"),
            ("GET", "/api/v1/audit"),
            ("POST", f"/api/v1/incidents/{incident}/ack"),
        ]:
            r = c.request(method, path, headers={"authorization": f"Bearer {OPERATOR}"})
            assert r.status_code == 503, (method, path, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/json")
            assert "database" in r.json()["detail"]
            assert r.headers.get("retry-after")
        assert c.get("/healthz").status_code == 503
        assert c.get("/metrics").status_code == 200
        polls = runner.state.current.polls
        for _ in range(3):  # the second fault fires while the database is away
            runner.tick()
        assert runner.state.current.polls == polls + 3
        assert runner.state.current.poll_errors >= 3

        proxy.start()  # same port: the service's URL is unchanged
        runner.tick()
        assert c.get("/healthz").status_code == 200
        items = c.get("/api/v1/incidents").json()["items"]
        assert {i["node"] for i in items} == {"gpu-0001", "gpu-0002"}  # nothing found meanwhile is lost
        assert [d["node"] for d in c.get("/api/v1/drain").json()] == ["gpu-0001", "gpu-0002"]
        assert c.post(f"/api/v1/incidents/{incident}/ack", headers={"authorization": f"Bearer {OPERATOR}"}
                      ).status_code == 200  # fmt: skip
