"""Alembic migrations: they build the schema the models describe, on every backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

import graywire.migrations as migrations
from graywire.service.models import metadata
from graywire.service.models.engine import alembic_config, make_engine, upgrade

TABLES = {
    "incidents", "findings", "alembic_version", "inventory_nodes", "node_verdicts",
    "drain_recommendations", "silences", "drain_excludes", "audit_log", "drain_state",
    "alert_state", "alert_outbox", "late_episodes", "cluster_members", "cluster_leader",
}  # fmt: skip


def head_revision() -> str:
    """The newest revision, read from the scripts: tests keep passing as migrations are added."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def tables_and_version(url: str) -> tuple[set[str], list[str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            versions = (
                list(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())
                if "alembic_version" in tables
                else []
            )
        return tables, versions
    finally:
        engine.dispose()


def test_upgrade_creates_schema_and_is_idempotent(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no alembic.ini here: upgrade() must not need one
    assert tables_and_version(db_url) == (set(), [])

    upgrade(db_url)
    tables, versions = tables_and_version(db_url)
    assert tables >= TABLES
    assert versions == [head_revision()]

    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO incidents (kind, entity, status, severity, summary, detector, score,"
                    " confidence, evidence, opened_at, last_seen_at)"
                    " VALUES ('k', 'e', 'open', 'info', 's', 'd', 0, 1, '{}', :t, :t)"
                ),
                {"t": "2025-03-01 12:00:00+00:00"},
            )
        upgrade(db_url)  # already at head: nothing to do, nothing lost
        assert tables_and_version(db_url)[1] == [head_revision()]
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM incidents")).scalar_one() == 1
    finally:
        engine.dispose()


def test_models_match_migrations(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
    finally:
        engine.dispose()


def test_downgrade_to_base_removes_tables(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config(db_url)
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "base")
    finally:
        engine.dispose()
    tables, versions = tables_and_version(db_url)
    assert not tables & (TABLES - {"alembic_version"})
    assert versions == []


def test_sqlite_engine_settings(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "there.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()
    assert path.exists()


def test_alembic_cli_with_shipped_ini(tmp_path: Path) -> None:
    ini = Path(migrations.__file__).parent / "alembic.ini"
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {**os.environ, "GRAYWIRE_DATABASE_URL": url}
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(ini), "upgrade", "head"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert tables_and_version(url) == (TABLES, [head_revision()])


def test_upgrade_from_0001_keeps_incidents_and_findings(db_url: str) -> None:
    """A database holding data at the first revision is upgraded in place, nothing lost."""
    upgrade(db_url, "0001")
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO incidents (kind, entity, status, severity, summary, detector, score,"
                    " confidence, evidence, opened_at, last_seen_at, finding_count)"
                    " VALUES ('speed_downgrade', 'gpu-0001/mlx5_2', 'acknowledged', 'critical',"
                    " 'negotiated 400G', 'link_state/1', 1, 1, '{\"since\": \"x\"}', :t, :t, 3)"
                ),
                {"t": "2025-03-01 12:00:00+00:00"},
            )
            incident_id = conn.execute(sa.text("SELECT id FROM incidents")).scalar_one()
            conn.execute(
                sa.text(
                    "INSERT INTO findings (incident_id, kind, entity, status, time, severity, summary,"
                    " detector, score, confidence, evidence)"
                    " VALUES (:i, 'speed_downgrade', 'gpu-0001/mlx5_2', 'firing', :t, 'critical', 's',"
                    " 'link_state/1', 1, 1, '{}')"
                ),
                {"i": incident_id, "t": "2025-03-01 12:00:00+00:00"},
            )
        upgrade(db_url)
        assert tables_and_version(db_url) == (TABLES, [head_revision()])
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT kind, status, finding_count FROM incidents")).one()
            assert tuple(row) == ("speed_downgrade", "acknowledged", 3)
            assert conn.execute(sa.text("SELECT incident_id FROM findings")).scalar_one() == incident_id
            # The fleet-wide drain state row every policy run locks is there from the start.
            state = conn.execute(sa.text("SELECT id, breaker_tripped FROM drain_state")).one()
            assert (state[0], bool(state[1])) == (1, False)
        from graywire.service.store import IncidentStore

        assert IncidentStore(engine).get_incident(incident_id)["evidence"] == {"since": "x"}
    finally:
        engine.dispose()


def test_audit_log_is_append_only(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO audit_log (time, actor, action, message, evidence)"
                    " VALUES (:t, 'policy', 'drain', 'm', '{}')"
                ),
                {"t": "2025-03-01 12:00:00"},
            )
        for statement in ("UPDATE audit_log SET message = 'rewritten'", "DELETE FROM audit_log"):
            with pytest.raises(sa.exc.DatabaseError, match="append-only"), engine.begin() as conn:
                conn.execute(sa.text(statement))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT message FROM audit_log")).scalar_one() == "m"
    finally:
        engine.dispose()
