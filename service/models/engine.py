"""Engine setup and migrations for the database (SQLite embedded, PostgreSQL in production).

The tables are in :mod:`graywire.service.models`; the schema itself is owned by Alembic
(``migrations/``), and ``upgrade()`` applies it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

from graywire.service.models.base import to_jsonable


def _json_dumps(value: Any) -> str:
    return json.dumps(to_jsonable(value), allow_nan=False, separators=(",", ":"))


def _is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def _sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL, or None for in-memory and URI-style databases."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


# Execution option: start this connection's SQLite transaction with BEGIN IMMEDIATE. A writer
# that reads before it writes must hold the write lock from the start, or a concurrent writer
# makes its upgrade fail at once with "database is locked" (WAL cannot wait that conflict out).
SQLITE_BEGIN_IMMEDIATE = "graywire_sqlite_begin_immediate"
#: Seconds to wait for PostgreSQL to accept a connection (unless the URL sets connect_timeout).
PG_CONNECT_TIMEOUT_S = 10
#: Serializes migrations of replicas sharing one PostgreSQL database (any fixed 64-bit number).
MIGRATION_LOCK_ID = 0x67727977_6D696772
#: The transaction setting that carries a writer's fencing token (migration 0006's trigger reads
#: it), and the value a migration writes under.
FENCE_SETTING = "graywire.fence"
MIGRATION_FENCE = "migration"
#: SQLSTATE of the trigger's refusal (migration 0006).
FENCE_SQLSTATE = "GW001"


def is_fence_refusal(error: BaseException) -> bool:
    """Whether ``error`` (a SQLAlchemy or driver error) is the fence refusing a write: this
    replica wrote under a lease it no longer holds (``service/cluster/fence.py``)."""
    orig = getattr(error, "orig", error)
    return getattr(orig, "sqlstate", None) == FENCE_SQLSTATE


def make_engine(
    url: str | URL, pg_settings: dict[str, str] | None = None, libpq: dict[str, Any] | None = None
) -> Engine:
    """Create an engine with graywire's connection settings.

    SQLite: create the file's directory (a fresh install has none), and turn on WAL (readers
    such as the API do not block the poll loop's writes) and foreign keys (off by default in
    SQLite). Transactions are begun by SQLAlchemy rather than the driver, so that
    ``SQLITE_BEGIN_IMMEDIATE`` can take the write lock up front. Other backends:
    ``pool_pre_ping`` so a restarted PostgreSQL does not fail the first request after it, and
    ``pg_settings`` (PostgreSQL settings such as ``idle_in_transaction_session_timeout``) set on
    every connection, and ``libpq`` connection parameters (``keepalives_idle``, ...).
    """
    parsed = make_url(url)
    if _is_sqlite(parsed):
        path = _sqlite_file(parsed)
        if path is not None:
            path.expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(parsed, json_serializer=_json_dumps)

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
            # pysqlite's own implicit BEGIN is unreliable; SQLAlchemy emits BEGIN itself (below).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute("PRAGMA foreign_keys=ON")
            finally:
                cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(connection: sa.Connection) -> None:
            immediate = connection.get_execution_options().get(SQLITE_BEGIN_IMMEDIATE, False)
            connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    connect_args: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        # libpq waits forever for a server that accepts TCP but never answers (a host gone
        # dark behind a load balancer): every API worker thread and the poll loop would hang.
        connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
    if pg_settings:
        connect_args["options"] = " ".join(f"-c {k}={v}" for k, v in pg_settings.items())
    connect_args |= libpq or {}
    return sa.create_engine(
        parsed, pool_pre_ping=True, json_serializer=_json_dumps, connect_args=connect_args
    )


def alembic_config(url: str | URL) -> Config:
    """An Alembic ``Config`` built in code, so migrations run from any directory without an ini."""
    import graywire.migrations as migrations  # the installed package, wherever the process was started

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # ConfigParser interpolates '%': escape it, or URL-encoded passwords break.
    rendered = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return cfg


def upgrade(url: str | URL, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision`` (default: the newest schema).

    Runs over an engine from ``make_engine`` so migrations see the same connection settings
    (SQLite foreign keys, WAL, directory creation) as the service does.
    """
    cfg = alembic_config(url)
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                # Replicas starting together migrate one at a time (the others then find the
                # schema at head), and a migration's own writes pass the decision fence.
                connection.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK_ID)))
                connection.execute(sa.select(sa.func.set_config(FENCE_SETTING, MIGRATION_FENCE, True)))
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, revision)
    finally:
        engine.dispose()
