"""The HTTP server's own limits, on a real ``graywire serve``: oversized headers, idle connections."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.service.test_drain_durability import Service, free_port

pytestmark = pytest.mark.alone  # real processes against wall-clock deadlines


def serve(tmp_path: Path, **http: object) -> Iterator[Service]:
    port = free_port()
    config = tmp_path / "graywire.yaml"
    config.write_text(yaml.safe_dump({
        "port": port, "data_dir": str(tmp_path / "data"), "archive": {"enabled": False},
        "sources": [{"type": "fabricsim", "hosts": 8}], "http": http,
    }))  # fmt: skip
    svc = Service(config, port, tmp_path / "serve.log")
    try:
        svc.start()
        yield svc
    finally:
        if svc.proc is not None and svc.proc.poll() is None:
            svc.kill9()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    yield from serve(tmp_path, max_header_bytes=4096, keep_alive="1s", header_timeout="1s")


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Service]:
    yield from serve(tmp_path, max_connections=50, max_connections_per_client=8, header_timeout="30s")


def test_one_client_holds_at_most_its_share_of_the_connections(capped: Service) -> None:
    """A client reconnecting as fast as it is cut off (a slowloris that comes back) fills its
    own share, not the server: others are served, and it is told why it is not."""
    host, port = capped.base.removeprefix("http://").split(":")
    held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(8)]
    try:
        for s in held:  # each said nothing yet: the server holds its slot for the head timeout
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        extra = [socket.create_connection((host, int(port)), timeout=5) for _ in range(60)]
        answers = []
        for s in extra:
            s.settimeout(5)
            answers.append(s.recv(65536))
            s.close()
        assert all(a.startswith(b"HTTP/1.1 503") for a in answers), answers[:3]
        assert b"max_connections_per_client" in answers[0]
        # Another address is another client (all of 127/8 is this host): it is served.
        other = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(transport=other, base_url=capped.base, timeout=5) as client:
            assert [client.get("/healthz").status_code for _ in range(5)] == [200] * 5
    finally:
        for s in held:
            s.close()
    # Its connections closed, the first client is served again.
    capped.wait_for(lambda: capped.get("/healthz").status_code == 200, "a slot to free up", timeout=10)


def test_headers_past_the_limit_are_refused_and_idle_connections_closed(service: Service) -> None:
    assert service.get("/healthz").status_code == 200
    r = httpx.get(service.base + "/healthz", headers={"x-pad": "a" * 8000}, timeout=5)
    assert r.status_code == 431 and "over the 4096-byte limit" in r.json()["detail"]
    assert service.get("/healthz").status_code == 200  # the service is unharmed
    host, port = service.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got:  # the whole answer: headers, then Content-Length bytes
            got += s.recv(65536)
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(
            next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
        )
        while len(body) < length:
            body += s.recv(65536)
        time.sleep(2.5)  # idle past keep_alive: the server closes the connection
        s.settimeout(3)
        assert s.recv(1) == b""


def closed_within(s: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``s`` within ``seconds`` (reading, and discarding, any answer)."""
    s.settimeout(seconds)
    try:
        while s.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_slow_request_heads_are_cut_off(service: Service) -> None:
    """Slowloris: connections that say nothing, or send their head a few bytes at a time, are
    closed at ``http.header_timeout`` (1 s here) and cannot starve everyone else's."""
    host, port = service.base.removeprefix("http://").split(":")
    silent = [socket.create_connection((host, int(port)), timeout=5) for _ in range(20)]
    slow = []
    for _ in range(20):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        slow.append(s)
    kept = socket.create_connection((host, int(port)), timeout=5)
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert kept.recv(65536).startswith(b"HTTP/1.1 200")
    kept.sendall(b"GET /healthz HTTP/1.1\r\n")  # the next request's head, started and stalled
    t0 = time.monotonic()
    try:
        # Trickling a header byte every 0.3 s keeps data coming, but not the head: cut off too.
        trickle = slow[0]
        for _ in range(10):
            time.sleep(0.3)
            try:
                trickle.sendall(b"X")
            except OSError:
                break
        for s in [*silent, *slow, kept]:
            assert closed_within(s, 5.0)
        assert time.monotonic() - t0 < 6.0
        assert service.get("/healthz").status_code == 200  # and a normal client is served
    finally:
        for s in [*silent, *slow, kept]:
            s.close()


def test_no_line_per_request_unless_asked(service: Service, tmp_path: Path) -> None:
    """The access log is off by default (about half of a request's CPU at a high rate)."""
    for _ in range(3):
        assert service.get("/api/v1/drain").status_code == 200
    assert '"GET /api/v1/drain HTTP/1.1" 200' not in service.log.read_text()

    port = free_port()
    config = tmp_path / "access.yaml"
    config.write_text(yaml.safe_dump({
        "port": port, "data_dir": str(tmp_path / "data2"), "archive": {"enabled": False},
        "sources": [{"type": "fabricsim", "hosts": 8}], "http": {"access_log": True},
    }))  # fmt: skip
    svc = Service(config, port, tmp_path / "access.log")
    try:
        svc.start()
        assert svc.get("/api/v1/drain").status_code == 200
        svc.wait_for(lambda: '"GET /api/v1/drain HTTP/1.1" 200' in svc.log.read_text(), "an access line")
    finally:
        if svc.proc is not None and svc.proc.poll() is None:
            svc.kill9()
