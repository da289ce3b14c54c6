"""The real servers the cluster tests need: the PostgreSQL named by GRAYWIRE_TEST_PG_URL and
the NATS with JetStream named by GRAYWIRE_TEST_NATS_URL (default nats://127.0.0.1:4222).

Both are skipped only locally; under CI a missing server fails the run.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from graywire.service.db import make_engine, upgrade
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
