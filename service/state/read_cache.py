"""Rendered answers of the hot read routes, kept until the database changes.

The drain list and the incident list are what schedulers, dashboards and status pages poll,
hundreds of times a second on a big cluster, while they change only when a poll or an operator
writes. Reading them from the database and validating them on every request cost about a
millisecond of the one core that also serves everything else. So the JSON bytes are kept per
route and query, and dropped when *any* write commits on this process's engine: a pool
``checkin`` after a write statement bumps :attr:`ReadCache.generation`, so no write path has
to remember to. ``ttl`` bounds how long an answer lives anyway, for writes made by another
process on the same database (a second replica, ``graywire db`` commands): past it an answer is
served while a fresh one renders, and past twice it never.

A poll is different from a client's write: no client can time its request against it, so the
answers from before the poll stay right until the poll's own are ready. Its writes, and the
fabric state it publishes (:meth:`ReadCache.touch`), are *background* changes made inside
:meth:`ReadCache.background`. While the block runs, requests keep the answers from before it, a
consistent view instead of one half-written by the poll. When it ends, the most used answers are
rendered again in the poll's thread and published all at once; an answer not rendered again is
served once more while a new one renders beside it (stale-while-revalidate, RFC 5861). So no
request waits on a render because a poll ran, and the first request after a poll sees it.
An operator's write, made by a request, still drops every answer at once: read-your-writes.

Concurrent misses of one key share one computation, and at most ``max_entries`` answers are
kept (the least recently used go first), so odd query strings cannot grow memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from anyio import to_thread
from starlette.responses import Response

log = logging.getLogger(__name__)

_WROTE = "graywire_wrote"
_READS = ("SELECT", "PRAGMA", "SHOW", "BEGIN", "SAVEPOINT", "RELEASE", "ROLLBACK", "SET")


@dataclass(frozen=True, slots=True)
class _Entry:
    generation: int  # of writes a request could have made: a mismatch is never served
    background: int  # of background changes: a mismatch is served while a new answer renders
    at: float  # monotonic start of the render that made it
    body: bytes
    compute: Callable[[], bytes]  # how to render it again (reads the latest state itself)


class ReadCache:
    def __init__(self, engine: sa.Engine | None = None, ttl_s: float = 1.0, max_entries: int = 256) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.generation = 0
        #: Background changes so far: a poll's writes and published states.
        self.background_changes = 0
        self.hits = 0
        self.stale_hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._inflight: dict[Hashable, tuple[tuple[int, int], asyncio.Future[bytes]]] = {}
        self._lock = threading.Lock()  # the entries, between the event loop and a poll's thread
        self._local = threading.local()
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
                if getattr(self._local, "background", False):
                    self._local.changed = True  # published when the poll's block ends
                else:
                    self.invalidate()

    def invalidate(self) -> None:
        """Drop every answer: a write a client may read back at once."""
        self.generation += 1

    def touch(self) -> None:
        """A background change: answers from before it are served until new ones are rendered.
        Inside :meth:`background` it takes effect when the block ends."""
        if getattr(self._local, "background", False):
            self._local.changed = True
        else:
            self.background_changes += 1

    @contextlib.contextmanager
    def background(self, rerender: int = 8) -> Iterator[None]:
        """A poll: writes committed by this thread inside the block, and :meth:`touch`, are
        background changes. At its end the ``rerender`` most recently used answers are rendered
        again here, then every change is published at once."""
        self._local.background, self._local.changed = True, False
        try:
            yield
        finally:
            self._local.background = False
            if self._local.changed:
                self._publish(rerender)

    def _publish(self, most: int) -> int:
        """Render the ``most`` most recently used current answers again, then make them and
        the background changes behind them current together; how many were rendered."""
        gen, before = self.generation, self.background_changes
        with self._lock:
            current = [
                (k, e) for k, e in reversed(self._entries.items())
                if e.generation == gen and e.background == before
            ][:most]  # fmt: skip
        rendered, failed = [], []
        for key, entry in current:
            started = time.monotonic()
            try:
                rendered.append((key, _Entry(gen, before + 1, started, entry.compute(), entry.compute)))
            except Exception as e:  # served stale, and the next request renders it (and errs) itself
                failed.append(e)
        if failed:  # one line a poll, not one an answer: the database being away says it already
            log.warning("read cache: %d of %d answers not rendered again after the poll: %s",
                        len(failed), len(current), failed[0])  # fmt: skip
        with self._lock:  # one step: no request sees the change without the answers rendered for it
            self.background_changes += 1
            for key, e in rendered:
                self._store(key, e)
        return len(current)

    async def json(self, key: Hashable, compute: Callable[[], bytes]) -> Response:
        """The cached JSON answer for ``key``, else ``compute()`` (blocking: run in a worker thread)."""
        return Response(await self.get(key, compute), media_type="application/json")

    async def get(self, key: Hashable, compute: Callable[[], bytes]) -> bytes:
        """``compute`` must read the latest state when it runs: a poll renders it again."""
        version = (self.generation, self.background_changes)
        with self._lock:
            hit = self._entries.get(key)
            age = time.monotonic() - hit.at if hit is not None else 0.0
            if hit is not None and (hit.generation != version[0] or age >= 2 * self.ttl_s):
                hit = None  # a client's own write, or twice the TTL for one from elsewhere: never served
            if hit is not None:
                self._entries.move_to_end(key)
        if hit is not None:
            if hit.background == version[1] and age < self.ttl_s:
                self.hits += 1
            else:
                self.stale_hits += 1
                self._render(key, version, compute)
            return hit.body
        pending = self._inflight.get(key)
        if pending is None or pending[0] != version:
            self.misses += 1  # renders started for want of an answer
        return await asyncio.shield(self._render(key, version, compute))

    def _render(
        self, key: Hashable, version: tuple[int, int], compute: Callable[[], bytes]
    ) -> asyncio.Future[bytes]:
        """The render of ``key`` at ``version`` in flight, else a new one (in a worker thread)."""
        pending = self._inflight.get(key)
        if pending is None or pending[0] != version:
            # A task of its own: a caller that goes away does not cancel the others' answer.
            started = time.monotonic()
            task = asyncio.ensure_future(to_thread.run_sync(compute))
            task.add_done_callback(lambda t: self._done(key, version, started, compute, t))
            pending = self._inflight[key] = (version, task)
        return pending[1]

    def _done(
        self,
        key: Hashable,
        version: tuple[int, int],
        started: float,
        compute: Callable[[], bytes],
        task: asyncio.Future[bytes],
    ) -> None:
        if self._inflight.get(key, (None, None))[1] is task:
            del self._inflight[key]
        if task.cancelled() or task.exception() is not None:
            return  # each waiter gets the error; nothing is kept
        self._keep(key, _Entry(*version, started, task.result(), compute))

    def _keep(self, key: Hashable, entry: _Entry) -> None:
        with self._lock:
            self._store(key, entry)

    def _store(self, key: Hashable, entry: _Entry) -> None:  # under the lock
        kept = self._entries.get(key)
        if kept is not None and (kept.generation, kept.background) > (entry.generation, entry.background):
            return  # a render of a later version finished first: keep it
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
