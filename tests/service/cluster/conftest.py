"""The real servers the cluster tests need: the PostgreSQL named by GRAYWIRE_TEST_PG_URL and
the NATS with JetStream named by GRAYWIRE_TEST_NATS_URL (default nats://127.0.0.1:4222).

Both are skipped only locally; under CI a missing server fails the run.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from graywire.service.models.engine import make_engine, upgrade
from tests.conftest import _in_ci, postgres_url, reset_postgres

NATS_URL_ENV = "GRAYWIRE_TEST_NATS_URL"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


def nats_url() -> str:
    """The test NATS server's URL, once it answers with JetStream on; skip (locally) or fail (CI)."""
    url = os.environ.get(NATS_URL_ENV, "").strip() or DEFAULT_NATS_URL

    async def probe() -> None:
        import nats

        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=0, allow_reconnect=False)
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        asyncio.run(probe())
    except Exception as e:
        reason = f"no NATS server with JetStream at {url} ({type(e).__name__}: {e}); set {NATS_URL_ENV}"
        if _in_ci():
            pytest.fail(f"CI is set but {reason}", pytrace=False)
        pytest.skip(reason)
    return url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The PostgreSQL test database, migrated to head, wiped before and after."""
    url = postgres_url()
    reset_postgres(url)
    upgrade(url)
    try:
        yield url
    finally:
        reset_postgres(url)


@pytest.fixture
def pg(pg_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def nats_server() -> str:
    return nats_url()


@pytest.fixture
def stream_name() -> Iterator[str]:
    """A stream name of this test's own (deleted afterwards), so tests share the server safely."""
    name = f"GWTEST_{uuid.uuid4().hex[:12].upper()}"
    yield name

    async def delete() -> None:
        import nats

        url = os.environ.get(NATS_URL_ENV, "").strip() or DEFAULT_NATS_URL
        try:
            nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=0, allow_reconnect=False)
        except Exception:
            return
        try:
            await nc.jetstream().delete_stream(name)
        except Exception:
            pass
        finally:
            await nc.close()

    asyncio.run(delete())


def rows(engine: Engine, sql: str) -> list[sa.Row]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql)))


class PrivateNats:
    """A nats-server of this test's own (JetStream on a store directory of its own), so it can
    be stopped and started again without touching the server other tests share."""

    def __init__(self, store: Path, port: int) -> None:
        self.store = store
        self.port = port
        self.url = f"nats://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = store.parent / "nats-server.log"

    def start(self) -> None:
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        cmd = [
            binary,
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.store),
            "-l",
            str(self.log),
        ]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError(
            f"nats-server did not listen on {self.port}: {self.log.read_text() if self.log.exists() else ''}"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[PrivateNats]:
    """nats-server (Debian's nats-server package) on a free port; fails under CI if missing."""
    binary = shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if Path("/usr/sbin/nats-server").exists() else None
    )
    if binary is None:
        reason = "nats-server not found (Debian: apt install nats-server)"
        if _in_ci():
            pytest.fail(f"CI is set but {reason}", pytrace=False)
        pytest.skip(reason)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = PrivateNats(tmp_path / "nats-store", port)
    server.start()
    try:
        yield server
    finally:
        server.stop()
