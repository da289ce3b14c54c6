"""Fixtures: graywire's drain API as its documented JSON (the real Slurm is in tests/service)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def drain_entry(node: str, reason: str = "link downgraded to 400G", **kw: Any) -> dict[str, Any]:
    """One item of ``GET /api/v1/drain`` as the API documents it."""
    return {
        "node": node,
        "action": kw.get("action", "drain"),
        "reason": reason,
        "since": kw.get("since", "2026-11-29T20:00:00+00:00"),
        "incident_ids": kw.get("incident_ids", [7]),
        "evidence_url": kw.get("evidence_url", "/api/v1/incidents/7"),
        "shadow": kw.get("shadow", False),
    }


@dataclass
class DrainApi:
    """What the fake API serves; tests change it between passes."""

    url: str = ""
    entries: list[dict[str, Any]] = field(default_factory=list)
    shadow: bool = False
    tripped: bool = False
    token: str | None = None
    status: int = 200
    requests: list[tuple[str, str | None]] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        return {
            "shadow": self.shadow,
            "circuit_breaker": {"tripped": self.tripped, "max_fraction": 0.05, "window": "1h"},
        }


@pytest.fixture
def drain_api() -> Iterator[DrainApi]:
    api = DrainApi()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization")
            api.requests.append((self.path, auth))
            if api.token and auth != f"Bearer {api.token}":
                return self._send(401, {"detail": "missing or invalid bearer token"})
            if api.status != 200:
                return self._send(api.status, {"detail": "unavailable"})
            if self.path == "/api/v1/drain":
                return self._send(200, api.entries)
            if self.path == "/api/v1/drain/state":
                return self._send(200, api.state())
            return self._send(404, {"detail": "Not Found"})

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
