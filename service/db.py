"""Database models and engine setup for incidents and the findings behind them.

SQLite is the embedded default and PostgreSQL the production database, so everything here sticks
to portable types (``sqlalchemy.JSON``, plain strings with CHECK constraints instead of native
enums). The schema itself is owned by Alembic (``migrations/``); ``upgrade()`` applies it.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import URL, Dialect, Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from graywire.detectors.findings import SEVERITIES, Severity

IncidentStatus = Literal["open", "acknowledged", "resolved"]
FindingStatus = Literal["firing", "cleared"]

INCIDENT_STATUSES: tuple[IncidentStatus, ...] = ("open", "acknowledged", "resolved")
ACTIVE_STATUSES: tuple[IncidentStatus, ...] = ("open", "acknowledged")
FINDING_STATUSES: tuple[FindingStatus, ...] = ("firing", "cleared")

# Deterministic constraint names: Alembic batch mode on SQLite and later migrations can only
# drop or alter a constraint they can name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL keeps the offset (``timestamptz``) but returns it in the session time zone;
    SQLite drops it altogether. Values are normalized to UTC on the way in and tagged (or
    converted) to UTC on the way out, so callers always compare aware datetimes. Naive values
    are rejected: guessing their zone would silently shift incident times by hours.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()} given; use a timezone-aware UTC time")
        value = value.astimezone(UTC)
        # SQLite stores the text as given; drop the offset so stored values sort and compare.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# Findings are appended on every poll, so their ids may outgrow 32 bits; SQLite only
# autoincrements an ``INTEGER PRIMARY KEY``, hence the variant.
FindingId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base for every graywire table; its metadata is Alembic's target."""

    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: sa.JSON(),
    }


def in_check(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Incident(Base):
    """A gray failure on one entity, deduplicated by ``(kind, entity)`` across polls.

    The incident outlives the findings that feed it: it is updated while its detector keeps
    firing, resolved when the detector clears, and reopened (not duplicated) if it comes back.
    """

    __tablename__ = "incidents"
    __table_args__ = (
        sa.Index("ix_incidents_kind_entity", "kind", "entity"),
        sa.CheckConstraint(in_check("status", INCIDENT_STATUSES), name="status"),
        sa.CheckConstraint(in_check("severity", SEVERITIES), name="severity"),
    )

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String)
    entity: Mapped[str] = mapped_column(sa.String)
    status: Mapped[IncidentStatus] = mapped_column(sa.String(16), index=True)
    severity: Mapped[Severity] = mapped_column(sa.String(16))
    node: Mapped[str | None] = mapped_column(sa.String, index=True)
    port: Mapped[str | None] = mapped_column(sa.String)
    link: Mapped[str | None] = mapped_column(sa.String)
    summary: Mapped[str] = mapped_column(sa.Text)
    detector: Mapped[str] = mapped_column(sa.String)
    score: Mapped[float] = mapped_column(sa.Float)
    confidence: Mapped[float] = mapped_column(sa.Float)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    opened_at: Mapped[datetime] = mapped_column(index=True)
    last_seen_at: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    finding_count: Mapped[int] = mapped_column(sa.Integer, default=0, server_default=sa.text("0"))
    reopen_count: Mapped[int] = mapped_column(sa.Integer, default=0, server_default=sa.text("0"))

    def __repr__(self) -> str:
        return f"Incident(id={self.id!r}, kind={self.kind!r}, entity={self.entity!r}, status={self.status!r})"


class FindingRecord(Base):
    """One finding as a detector emitted it; append-only, the audit trail behind an incident.

    ``incident_id`` is null for a ``cleared`` finding that had no open incident to close.
    """

    __tablename__ = "findings"
    __table_args__ = (
        sa.Index("ix_findings_incident_id_time", "incident_id", "time"),
        sa.CheckConstraint(in_check("status", FINDING_STATUSES), name="status"),
        sa.CheckConstraint(in_check("severity", SEVERITIES), name="severity"),
    )

    id: Mapped[int] = mapped_column(FindingId, primary_key=True)
    incident_id: Mapped[int | None] = mapped_column(sa.ForeignKey("incidents.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(sa.String)
    entity: Mapped[str] = mapped_column(sa.String)
    status: Mapped[FindingStatus] = mapped_column(sa.String(16))
    time: Mapped[datetime] = mapped_column(index=True)
    severity: Mapped[Severity] = mapped_column(sa.String(16))
    summary: Mapped[str] = mapped_column(sa.Text)
    detector: Mapped[str] = mapped_column(sa.String)
    node: Mapped[str | None] = mapped_column(sa.String)
    port: Mapped[str | None] = mapped_column(sa.String)
    link: Mapped[str | None] = mapped_column(sa.String)
    score: Mapped[float] = mapped_column(sa.Float)
    confidence: Mapped[float] = mapped_column(sa.Float)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)

    def __repr__(self) -> str:
        return (
            f"FindingRecord(id={self.id!r}, kind={self.kind!r}, entity={self.entity!r}, "
            f"status={self.status!r})"
        )


class LateEpisode(Base):
    """An incident episode (opened, then resolved) that reached the database only once it was over.

    Its findings waited outside while the database was unavailable, so nobody could be told
    of it while it lasted, and it is stored already resolved. The alert sync follows incidents
    that are active or that some receiver believes firing; this row is how it learns of an
    episode that was neither, and pages it late. ``incident`` is the incident as it stood when
    the episode ended (a later reopening in the same batch changes the incident itself).
    """

    __tablename__ = "late_episodes"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(sa.ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    #: The incident's ``reopen_count`` during the episode.
    episode: Mapped[int] = mapped_column(sa.Integer)
    fired_at: Mapped[datetime]
    cleared_at: Mapped[datetime]
    #: When storing findings first failed, and when they were stored at last.
    unstored_since: Mapped[datetime]
    stored_at: Mapped[datetime] = mapped_column(index=True)
    incident: Mapped[dict[str, Any]] = mapped_column(default=dict)


DrainAction = Literal["drain", "watch", "none"]
VerdictSide = Literal["host", "link", "network"]
DRAIN_ACTIONS: tuple[DrainAction, ...] = ("drain", "watch", "none")
VERDICT_SIDES: tuple[VerdictSide, ...] = ("host", "link", "network")


class InventoryNode(Base):
    """A node of the fabric model (host, leaf, spine), refreshed from it at start-up.

    Kept in the database so decisions can be read back (and joined) without the model file,
    and so a node that left the model is still known by name in old audit rows.
    """

    __tablename__ = "inventory_nodes"

    name: Mapped[str] = mapped_column(sa.String, primary_key=True)
    role: Mapped[str] = mapped_column(sa.String(32))
    ports: Mapped[int] = mapped_column(sa.Integer)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class NodeVerdictRecord(Base):
    """The latest verdict on one node (host, link or network side), rewritten every poll."""

    __tablename__ = "node_verdicts"
    __table_args__ = (sa.CheckConstraint(in_check("side", VERDICT_SIDES), name="side"),)

    node: Mapped[str] = mapped_column(sa.String, primary_key=True)
    role: Mapped[str] = mapped_column(sa.String(32))
    side: Mapped[VerdictSide] = mapped_column(sa.String(16))
    severity: Mapped[Severity] = mapped_column(sa.String(16))
    reasons: Mapped[list[str]] = mapped_column(sa.JSON)
    incident_ids: Mapped[list[int]] = mapped_column(sa.JSON)
    blamed_switch: Mapped[str | None] = mapped_column(sa.String)
    updated_at: Mapped[datetime]


class DrainRecommendation(Base):
    """What the drain policy says about one node now; one row per node, never two.

    The node is the primary key, so a restarted service finds the drains it already made and
    cannot recommend the same node twice. ``action`` ``none`` keeps the row (and
    ``released_at``) after a return to service, for the cooldown.
    """

    __tablename__ = "drain_recommendations"
    __table_args__ = (sa.CheckConstraint(in_check("action", DRAIN_ACTIONS), name="action"),)

    node: Mapped[str] = mapped_column(sa.String, primary_key=True)
    action: Mapped[DrainAction] = mapped_column(sa.String(16), index=True)
    reason: Mapped[str] = mapped_column(sa.Text)
    since: Mapped[datetime]
    incident_ids: Mapped[list[int]] = mapped_column(sa.JSON)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    shadow: Mapped[bool] = mapped_column(sa.Boolean)
    decided_at: Mapped[datetime]
    #: When the node stopped failing while drained; it returns after a clean window from here.
    clean_since: Mapped[datetime | None]
    #: When it last returned to service (by policy or by an operator); starts the cooldown.
    released_at: Mapped[datetime | None]


class Silence(Base):
    """Operator silence of one incident's ``(kind, entity)`` until ``expires_at``.

    A silenced incident counts toward no drain (and is for notifiers to mute); it keeps being
    tracked and updated like any other.
    """

    __tablename__ = "silences"
    __table_args__ = (sa.Index("ix_silences_kind_entity", "kind", "entity"),)

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String)
    entity: Mapped[str] = mapped_column(sa.String)
    reason: Mapped[str] = mapped_column(sa.Text)
    created_by: Mapped[str] = mapped_column(sa.String)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)


class Exclusion(Base):
    """A node the drain policy must never drain (until ``expires_at``, if set)."""

    __tablename__ = "drain_excludes"

    node: Mapped[str] = mapped_column(sa.String, primary_key=True)
    reason: Mapped[str] = mapped_column(sa.Text)
    created_by: Mapped[str] = mapped_column(sa.String)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]


class AuditEntry(Base):
    """One decision (the policy's or an operator's) with the evidence it was taken on.

    Append-only: the migration installs triggers that refuse UPDATE and DELETE, so history
    cannot be rewritten through the database either.
    """

    __tablename__ = "audit_log"
    __table_args__ = (sa.Index("ix_audit_log_action_time", "action", "time"),)

    id: Mapped[int] = mapped_column(FindingId, primary_key=True)
    time: Mapped[datetime] = mapped_column(index=True)
    actor: Mapped[str] = mapped_column(sa.String)
    action: Mapped[str] = mapped_column(sa.String(64))
    node: Mapped[str | None] = mapped_column(sa.String, index=True)
    incident_id: Mapped[int | None] = mapped_column(sa.Integer)
    message: Mapped[str] = mapped_column(sa.Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)


class DrainState(Base):
    """Fleet-wide drain state: one row (id 1), locked by every policy run.

    The lock serializes decisions across replicas sharing PostgreSQL, and the row carries
    the circuit breaker across restarts.
    """

    __tablename__ = "drain_state"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    breaker_tripped: Mapped[bool] = mapped_column(sa.Boolean)
    breaker_since: Mapped[datetime | None]
    breaker_message: Mapped[str] = mapped_column(sa.Text)
    updated_at: Mapped[datetime]


def to_jsonable(value: Any) -> Any:
    """Turn detector evidence into strict JSON values.

    Evidence is built from numpy and pyarrow results: numpy scalars and arrays are not JSON
    serializable, and NaN/inf are not JSON at all (PostgreSQL rejects them). Non-finite floats
    become null, array-likes lists, datetimes ISO 8601 strings.
    """
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if hasattr(value, "tolist"):  # numpy arrays and scalars, without importing numpy here
        return to_jsonable(value.tolist())
    if hasattr(value, "to_pylist"):  # pyarrow arrays
        return to_jsonable(value.to_pylist())
    if hasattr(value, "as_py"):  # pyarrow scalars
        return to_jsonable(value.as_py())
    return str(value)


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


def make_engine(url: str | URL) -> Engine:
    """Create an engine with graywire's connection settings.

    SQLite: create the file's directory (a fresh install has none), and turn on WAL (readers
    such as the API do not block the poll loop's writes) and foreign keys (off by default in
    SQLite). Transactions are begun by SQLAlchemy rather than the driver, so that
    ``SQLITE_BEGIN_IMMEDIATE`` can take the write lock up front. Other backends:
    ``pool_pre_ping`` so a restarted PostgreSQL does not fail the first request after it.
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
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, revision)
    finally:
        engine.dispose()
