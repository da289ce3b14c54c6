"""Engine settings that matter when the database misbehaves."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import sqlalchemy as sa

from graywire.service.models import engine as db


def test_a_postgresql_server_that_never_answers_fails_the_connection_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Accepts TCP (the kernel completes the handshake) but never says a word: a host gone dark.
    tarpit = socket.socket()
    tarpit.bind(("127.0.0.1", 0))
    tarpit.listen(8)
    port = tarpit.getsockname()[1]
    monkeypatch.setattr(db, "PG_CONNECT_TIMEOUT_S", 2)  # libpq's minimum
    engine = db.make_engine(f"postgresql+psycopg://graywire@127.0.0.1:{port}/graywire")
    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            with engine.connect():
                outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    t0 = time.monotonic()
    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout=15)
    elapsed = time.monotonic() - t0
    tarpit.close()  # releases a worker still stuck without a timeout
    worker.join(timeout=5)
    engine.dispose()
    assert elapsed < 10, f"the connection attempt hung for {elapsed:.0f} s"
    assert len(outcome) == 1 and isinstance(outcome[0], sa.exc.OperationalError)


def test_a_connect_timeout_in_the_url_is_kept() -> None:
    engine = db.make_engine("postgresql+psycopg://graywire@127.0.0.1:1/graywire?connect_timeout=3")
    try:
        _, params = engine.dialect.create_connect_args(engine.url)
        assert str(params["connect_timeout"]) == "3"
    finally:
        engine.dispose()
