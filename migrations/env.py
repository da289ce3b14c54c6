"""Alembic environment for graywire.

The URL comes from the Alembic config (``graywire.service.models.engine.upgrade`` sets it) or else from the
service's settings (``GRAYWIRE_DATABASE_URL``, else ``graywire.db`` under ``GRAYWIRE_DATA_DIR``),
so the same scripts serve the service, the CLI and tests. A caller may also hand over an open
connection in ``config.attributes["connection"]`` to migrate inside its own transaction.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from graywire.service.config import load_settings
from graywire.service.models import metadata
from graywire.service.models.engine import make_engine

config = context.config
if config.config_file_name is not None:
    # Only when run from the CLI with an ini; never reconfigure logging of a host process.
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def database_url() -> str:
    return config.get_main_option("sqlalchemy.url") or load_settings().db_url


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_migrations_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade head --sql``) instead of running it."""
    url = database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(database_url())
    try:
        with engine.connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
