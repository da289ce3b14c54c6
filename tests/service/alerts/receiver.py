"""A real HTTP server that records what it receives, for webhook delivery tests.

It can answer with scripted status codes and hold each request for a while (a slow receiver),
so tests can exercise retries, ordering and a sender killed mid-delivery.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the server answered
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Behaviour:
    """Per path prefix: the next statuses to answer (then 2xx) and a delay before answering."""

    statuses: list[int] = field(default_factory=list)
    delay_s: float = 0.0
    ok_status: int = 200
    ok_body: bytes = b"{}"


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[Received] = []
        self.started: list[str] = []  # paths of requests accepted, before any delay
        self.behaviour: dict[str, Behaviour] = {}
        self.url = ""

    def on(self, prefix: str, **kwargs: Any) -> Behaviour:
        b = Behaviour(**kwargs)
        with self.lock:
            self.behaviour[prefix] = b
        return b

    def _behaviour(self, path: str) -> Behaviour:
        for prefix, b in self.behaviour.items():
            if path.startswith(prefix):
                return b
        return Behaviour()

    def delivered(self, prefix: str) -> list[Received]:
        """Requests under ``prefix`` that were answered with 2xx, in arrival order."""
        with self.lock:
            return [r for r in self.received if r.path.startswith(prefix) and 200 <= r.status < 300]

    def all(self, prefix: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path.startswith(prefix)]

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s; received {len(self.received)} requests")


@contextmanager
def serve_recorder() -> Iterator[Recorder]:
    rec = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with rec.lock:
                b = rec._behaviour(self.path)
                status = b.statuses.pop(0) if b.statuses else b.ok_status
                delay = b.delay_s
                rec.started.append(self.path)
            if delay:
                time.sleep(delay)
            reply = b.ok_body if status < 300 else b'{"status":"error"}'
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
            except OSError:
                status = 599  # the client hung up before the answer: not delivered
            with rec.lock:
                rec.received.append(
                    Received(self.path, dict(self.headers.items()), body, status, time.monotonic())
                )

        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
