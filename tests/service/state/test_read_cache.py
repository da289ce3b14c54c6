"""The rendered-list cache: any committed write drops it at once, the TTL bounds the rest.

On the full app over SQLite and PostgreSQL: a poll, an operator's action and a write by another
process on the same database must each show in the next answer (the last within the TTL).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings
from graywire.service.models.engine import make_engine
from graywire.service.state.read_cache import ReadCache

OPERATOR = "operator-token-0123456789"
FAULTS = "speed_downgrade@15s+1h:gpu-0001/mlx5_3"


def make_client(tmp_path: Path, db_url: str, ttl: str) -> TestClient:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        database_url=db_url,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 16, "seed": 3, "faults": FAULTS}],
        auth={"tokens": [{"name": "alice", "role": "operator", "token": OPERATOR}]},
        http={"read_cache_ttl": ttl},
    )
    return TestClient(create_app(settings, run_loop=False))


def test_a_poll_and_an_operator_action_show_at_once(tmp_path: Path, db_url: str) -> None:
    with make_client(tmp_path, db_url, ttl="1h") as c:
        assert c.get("/api/v1/drain").json() == []
        assert c.get("/api/v1/incidents").json()["count"] == 0
        for _ in range(4):
            c.app.state.runner.tick()  # type: ignore[attr-defined]
        drains = c.get("/api/v1/drain").json()
        assert [d["node"] for d in drains] == ["gpu-0001"]
        incident = c.get("/api/v1/incidents").json()["items"][0]
        assert incident["status"] == "open"

        auth = {"authorization": f"Bearer {OPERATOR}"}
        r = c.post(f"/api/v1/incidents/{incident['id']}/ack", headers=auth, json={"comment": "looking"})
        assert r.status_code == 200, r.text
        assert c.get("/api/v1/incidents").json()["items"][0]["status"] == "acknowledged"
        r = c.post("/api/v1/nodes/gpu-0001/undrain", headers=auth, json={"reason": "reseated"})
        assert r.status_code == 200, r.text
        assert c.get("/api/v1/drain").json() == []


def test_another_process_write_shows_within_the_ttl(tmp_path: Path, db_url: str) -> None:
    with make_client(tmp_path, db_url, ttl="0s") as c:
        assert c.get("/api/v1/incidents").json()["count"] == 0
        for _ in range(4):
            c.app.state.runner.tick()  # type: ignore[attr-defined]
        first = c.get("/api/v1/incidents").json()["items"][0]
        # A second engine stands for a second replica or `graywire db`: its commit is not seen
        # by this process's listener, only the TTL (here 0 s) brings it in.
        other = make_engine(db_url)
        try:
            with other.begin() as conn:
                conn.execute(sa.text("UPDATE incidents SET summary = 'edited elsewhere' WHERE id = :i"),
                             {"i": first["id"]})  # fmt: skip
        finally:
            other.dispose()
        assert c.get("/api/v1/incidents").json()["items"][0]["summary"] == "edited elsewhere"


def test_served_again_until_a_write_and_bounded(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    cache = ReadCache(engine, ttl_s=3600, max_entries=3)
    calls: list[str] = []

    def render(name: str) -> bytes:
        calls.append(name)
        return name.encode()

    async def run() -> None:
        for _ in range(3):
            assert await cache.get("a", lambda: render("a")) == b"a"
        assert calls == ["a"]
        with engine.connect() as conn:  # a read commits nothing to drop
            conn.execute(sa.text("SELECT 1"))
        await cache.get("a", lambda: render("a"))
        assert calls == ["a"]
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        await cache.get("a", lambda: render("a"))
        assert calls == ["a", "a"]
        for key in "bcde":
            await cache.get(key, lambda k=key: render(k))
        assert len(cache._entries) == 3  # the oldest went first
        await cache.get("a", lambda: render("a"))
        assert calls[-1] == "a"

    asyncio.run(run())
    engine.dispose()


def test_concurrent_misses_share_one_render_and_errors_are_not_kept() -> None:
    cache = ReadCache(ttl_s=3600)
    started = threading.Event()
    release = threading.Event()
    calls = 0

    def slow() -> bytes:
        nonlocal calls
        calls += 1
        started.set()
        release.wait(10)
        return b"[]"

    def broken() -> bytes:
        raise sa.exc.OperationalError("SELECT", {}, Exception("database is away"))

    async def run() -> None:
        waiters = [asyncio.create_task(cache.get("k", slow)) for _ in range(20)]
        await asyncio.to_thread(started.wait, 10)
        waiters[0].cancel()  # one caller going away cancels nobody else's answer
        release.set()
        results = await asyncio.gather(*waiters[1:])
        assert results == [b"[]"] * 19 and calls == 1
        for _ in range(2):
            with pytest.raises(sa.exc.OperationalError):
                await cache.get("e", broken)
        assert "e" not in cache._entries and cache.misses == 3

    asyncio.run(run())


def test_a_poll_keeps_the_answers_from_before_it_until_its_own_are_rendered(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    cache = ReadCache(engine, ttl_s=3600)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    renders: list[str] = []

    def count(name: str) -> Callable[[], bytes]:
        def render() -> bytes:
            renders.append(name)
            with engine.connect() as conn:
                return str(conn.execute(sa.text("SELECT count(*) FROM t")).scalar()).encode()

        return render

    def insert() -> None:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))

    async def run() -> None:
        assert await cache.get("a", count("a")) == b"0"
        assert await cache.get("b", count("b")) == b"0"
        renders.clear()
        with cache.background(rerender=1):  # a poll's writes
            insert()
            insert()
            # Mid-poll, requests keep the answer from before it: no render, no half-written view.
            assert await cache.get("a", count("a")) == b"0" and renders == []
        # The most recently used answer was rendered again in the poll's thread, before its end.
        assert renders == ["a"]
        hits = cache.hits
        assert await cache.get("a", count("a")) == b"2" and cache.hits == hits + 1
        # The other was left behind: served at once, once more, while a new one renders.
        assert await asyncio.wait_for(cache.get("b", count("b")), 1) == b"0"
        assert cache.stale_hits == 1
        while cache._inflight:
            await asyncio.sleep(0.01)
        assert await cache.get("b", count("b")) == b"2" and renders == ["a", "b"]

        with cache.background():  # the flag is the thread's: another thread's write is a client's
            await asyncio.to_thread(insert)
            assert await cache.get("a", count("a")) == b"3"
        insert()  # a client's write: never served stale
        assert await cache.get("a", count("a")) == b"4"

    asyncio.run(run())
    engine.dispose()


def test_a_failed_render_at_the_end_of_a_poll_keeps_the_last_answer(caplog: pytest.LogCaptureFixture) -> None:
    cache = ReadCache(ttl_s=3600)
    fail = False

    def render() -> bytes:
        if fail:
            raise sa.exc.OperationalError("SELECT", {}, Exception("database is away"))
        return b"ok"

    async def run() -> None:
        nonlocal fail
        await cache.get("a", render)
        await cache.get("b", render)
        fail = True
        with caplog.at_level("WARNING", logger="graywire.service.state.read_cache"), cache.background():
            cache.touch()  # the poll published a state; rendering its answers fails, and says so once
        assert [r.getMessage()[:58] for r in caplog.records] == [
            "read cache: 2 of 2 answers not rendered again after the po"
        ]
        assert await cache.get("a", render) == b"ok" and cache.stale_hits == 1
        while cache._inflight:  # the stale hit's own render fails too: nothing is kept
            await asyncio.sleep(0.01)
        with pytest.raises(sa.exc.OperationalError):  # after a client's write the error is the answer
            cache.invalidate()
            await cache.get("a", render)

    asyncio.run(run())


def test_past_the_ttl_an_answer_is_served_while_a_fresh_one_renders_and_past_twice_never() -> None:
    cache = ReadCache(ttl_s=0.2)
    value = b"old"

    async def run() -> None:
        nonlocal value
        assert await cache.get("k", lambda: value) == b"old"
        value = b"new"  # written by another process: only the TTL brings it in
        await asyncio.sleep(0.25)
        assert await cache.get("k", lambda: value) == b"old"  # at once, a render behind it
        assert cache.stale_hits == 1
        while cache._inflight:
            await asyncio.sleep(0.01)
        assert await cache.get("k", lambda: value) == b"new"
        value = b"newer"
        await asyncio.sleep(0.45)  # past twice the TTL: the request waits for its answer
        misses = cache.misses
        assert await cache.get("k", lambda: value) == b"newer" and cache.misses == misses + 1

    asyncio.run(run())
