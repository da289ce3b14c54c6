"""Rendered answers of the hot read routes, kept until the database changes.

The drain list and the incident list are what schedulers, dashboards and status pages poll,
hundreds of times a second on a big cluster, while they change only when a poll or an operator
writes. Reading them from the database and validating them on every request cost about a
millisecond of the one core that also serves everything else. So the JSON bytes are kept per
route and query, and dropped when *any* write commits on this process's engine: a pool
``checkin`` after a write statement bumps :attr:`ReadCache.generation`, so no write path has
to remember to. ``ttl`` bounds how long an answer lives anyway, for writes made by another
process on the same database (a second replica, ``graywire db`` commands).

Concurrent misses of one key share one computation, and at most ``max_entries`` answers are
kept (the least recently used go first), so odd query strings cannot grow memory.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import sqlalchemy as sa
from anyio import to_thread
from starlette.responses import Response

_WROTE = "graywire_wrote"
_READS = ("SELECT", "PRAGMA", "SHOW", "BEGIN", "SAVEPOINT", "RELEASE", "ROLLBACK", "SET")


class ReadCache:
    def __init__(self, engine: sa.Engine | None = None, ttl_s: float = 1.0, max_entries: int = 256) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.generation = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, tuple[int, float, bytes]] = OrderedDict()
        self._inflight: dict[Hashable, tuple[int, asyncio.Future[bytes]]] = {}
        if engine is not None:
            self.watch(engine)

    def watch(self, engine: sa.Engine) -> None:
        """Invalidate on every write committed (or rolled back) through ``engine``."""

        @sa.event.listens_for(engine, "before_cursor_execute")
        def _mark(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if not statement.lstrip()[:9].upper().startswith(_READS):
                conn.info[_WROTE] = True

        @sa.event.listens_for(engine.pool, "checkin")
        def _released(dbapi_connection: Any, record: Any) -> None:
            # After the transaction ended: a reader that starts now sees the write, and one
            # that started before keeps an older generation, so its answer is not served.
            if record is not None and record.info.pop(_WROTE, False):
                self.invalidate()

    def invalidate(self) -> None:
        self.generation += 1

    async def json(self, key: Hashable, compute: Callable[[], bytes]) -> Response:
        """The cached JSON answer for ``key``, else ``compute()`` (blocking: run in a worker thread)."""
        return Response(await self.get(key, compute), media_type="application/json")

    async def get(self, key: Hashable, compute: Callable[[], bytes]) -> bytes:
        gen = self.generation
        hit = self._entries.get(key)
        if hit is not None and hit[0] == gen and time.monotonic() - hit[1] < self.ttl_s:
            self._entries.move_to_end(key)
            self.hits += 1
            return hit[2]
        pending = self._inflight.get(key)
        if pending is None or pending[0] != gen:
            self.misses += 1
            # A task of its own: a caller that goes away does not cancel the others' answer.
            started = time.monotonic()
            task = asyncio.ensure_future(to_thread.run_sync(compute))
            task.add_done_callback(lambda t: self._done(key, gen, started, t))
            pending = self._inflight[key] = (gen, task)
        return await asyncio.shield(pending[1])

    def _done(self, key: Hashable, gen: int, started: float, task: asyncio.Future[bytes]) -> None:
        if self._inflight.get(key, (None, None))[1] is task:
            del self._inflight[key]
        if task.cancelled() or task.exception() is not None:
            return  # each waiter gets the error; nothing is kept
        kept = self._entries.get(key)
        if kept is not None and kept[0] > gen:
            return  # a render of a later generation finished first: keep it
        self._entries[key] = (gen, started, task.result())
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
