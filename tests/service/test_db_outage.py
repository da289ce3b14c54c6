"""PostgreSQL goes away under a running service, then comes back.

A real PostgreSQL behind a TCP relay the test can cut: while it is cut the API answers 503
JSON (not a bare 500), the poll loop keeps polling and keeps its findings, and once the
database is back everything recovers without a restart.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from service.app import create_app
from service.config import load_settings
from tests.conftest import postgres_url, reset_postgres

OPERATOR = "operator-token-0123456789"
# gpu-0001's NIC on rail 3 drops to 400G at 15 s; a second fault while the database is away.
FAULTS = "speed_downgrade@15s+1h:gpu-0001/mlx5_3,speed_downgrade@45s+1h:gpu-0002/mlx5_1"


class Relay:
    """A TCP relay to ``upstream`` that can be cut (every connection closed, new ones refused)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        assert self._listener is not None
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
        self._listener.close()
        with self._lock:
            for s in self._conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._conns.clear()


@pytest.fixture
def relay() -> Iterator[tuple[Relay, str]]:
    url = make_url(postgres_url())
    reset_postgres(url.render_as_string(hide_password=False))
    r = Relay((url.host or "127.0.0.1", url.port or 5432))
    r.start()
    yield r, url.set(host="127.0.0.1", port=r.port).render_as_string(hide_password=False)
    r.cut()
    reset_postgres(url.render_as_string(hide_password=False))


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
        polls = runner.metrics.polls
        for _ in range(3):  # the second fault fires while the database is away
            runner.tick()
        assert runner.metrics.polls == polls + 3
        assert runner.metrics.poll_errors >= 3

        proxy.start()  # same port: the service's URL is unchanged
        runner.tick()
        assert c.get("/healthz").status_code == 200
        items = c.get("/api/v1/incidents").json()["items"]
        assert {i["node"] for i in items} == {"gpu-0001", "gpu-0002"}  # nothing found meanwhile is lost
        assert [d["node"] for d in c.get("/api/v1/drain").json()] == ["gpu-0001", "gpu-0002"]
        assert c.post(f"/api/v1/incidents/{incident}/ack", headers={"authorization": f"Bearer {OPERATOR}"}
                      ).status_code == 200  # fmt: skip
