"""Shared fixtures: a database URL per backend, migrated engines and stores.

``db_url`` runs each test on SQLite and on PostgreSQL. PostgreSQL is real: the server named by
GRAYWIRE_TEST_PG_URL, else the local one on 127.0.0.1:5432. When it does not answer, the
PostgreSQL half is skipped locally with the reason but fails under CI, so a misconfigured
pipeline cannot pass by testing nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from graywire.service.models.engine import make_engine, upgrade
from graywire.service.store import IncidentStore

PG_URL_ENV = "GRAYWIRE_TEST_PG_URL"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def postgres_url() -> str:
    """The test server's URL (GRAYWIRE_TEST_PG_URL, else the local server on 127.0.0.1:5432),
    or skip (locally) / fail (in CI) with why, when it does not answer."""
    url = os.environ.get(PG_URL_ENV, "").strip() or DEFAULT_PG_URL
    if (problem := _unreachable(url)) is not None:
        reason = f"PostgreSQL at {make_url(url).render_as_string()} does not answer ({problem}); " \
            f"start it or set {PG_URL_ENV} to run the PostgreSQL tests"  # fmt: skip
        if _in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return _worker_database(url, worker) if worker else url


#: Where the suite looks for PostgreSQL when GRAYWIRE_TEST_PG_URL is unset: the local server.
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@functools.cache
def _unreachable(url: str) -> str | None:
    """Why ``url`` cannot be used, once per process, or None when it answers."""
    engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.scalar(sa.text("SELECT 1"))
    except Exception as e:  # the reason goes into the skip or failure as it is
        return str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    finally:
        engine.dispose()
    return None


@functools.cache
def _worker_database(url: str, worker: str) -> str:
    """A database of this pytest-xdist worker's own beside the named one (created on first
    use): tests wipe their database, so workers running at once must not share one."""
    base = make_url(url)
    name = f"{base.database}_{worker}"
    engine = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            exists = conn.scalar(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
            if not exists:
                conn.execute(sa.text(f"CREATE DATABASE {conn.dialect.identifier_preparer.quote(name)}"))
    finally:
        engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


def reset_postgres(url: str) -> None:
    """Drop every table in the default schema (alembic_version too): each test starts empty."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            quote = conn.dialect.identifier_preparer.quote
            for table in sa.inspect(conn).get_table_names():
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {quote(table)} CASCADE"))
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a fresh SQLite file, or the PostgreSQL test database wiped clean."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'graywire.db'}"
        return
    url = postgres_url()
    reset_postgres(url)
    try:
        yield url
    finally:
        reset_postgres(url)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on a database migrated to head."""
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def store(engine: Engine) -> IncidentStore:
    return IncidentStore(engine)


REAL_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"


@pytest.fixture(scope="session")
def real_fixtures() -> Path:
    """../shared/fixtures/real beside the repository (real outputs written by others).

    Absent on a bare clone: those tests skip with the reason, except under CI, which always
    has it beside the clone, where a missing copy fails the run.
    """
    if REAL_FIXTURES.is_dir():
        return REAL_FIXTURES
    reason = f"real fixtures not found at {REAL_FIXTURES} (../shared/fixtures/real beside the repository)"
    if _in_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


TTAR = "host/procfs_sysfs_fixtures.ttar"
NETDEV_DOWN = "sys/devices/pci0000:a2/0000:a2:00.0/net/enp162s0f0np0"


@pytest.fixture(scope="session")
def real_sysfs(real_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sysfs root holding the archive's sys/class/{infiniband,net} and one real down netdev."""
    dest = tmp_path_factory.mktemp("procfs")
    keep = ["fixtures/sys/class/infiniband", "fixtures/sys/class/net", f"fixtures/{NETDEV_DOWN}"]
    from tests.collectors.host.ttar import extract

    assert extract(real_fixtures / TTAR, dest, only=keep) > 200
    return dest / "fixtures"
