"""The fencing token every deciding write of the leader carries.

While this process holds the lease, each transaction of its engine starts by setting
``graywire.fence`` to the token (transaction-local). Migration 0006's trigger on every deciding
table compares it with the lease's token and refuses the statement when they differ, so a
leader that was paused past its lease (SIGSTOP, a long GC, a partition) and wakes up after
another member took over cannot write: the database refuses it, whatever this process still
believes. A process that holds no token writes nothing there at all while a lease exists.

A refusal is counted and reported to the node (``on_refused``), which steps down at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from graywire.service.models.engine import FENCE_SETTING, is_fence_refusal

log = logging.getLogger("graywire.cluster")

#: The tables migration 0006 fences: every table whose rows are decisions.
FENCED_TABLES = (
    "incidents", "findings", "late_episodes", "node_verdicts", "drain_recommendations",
    "drain_state", "drain_excludes", "silences", "audit_log", "alert_state", "alert_outbox",
)  # fmt: skip


class Fence:
    """The token this process writes decisions under, or None while it does not lead.

    ``valid_until`` is this process's own, conservative view of its lease (monotonic seconds):
    the lease as the database granted it, less the time the renewal took. Past it the leader
    renews before it writes again; the database's check stays the guarantee.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.token: int | None = None
        self.valid_until = 0.0
        #: Writes the database refused (a stale token, or none while a leader held the lease).
        self.refusals = 0
        self.last_refusal: str | None = None
        self._on_refused: list[Callable[[str], object]] = []

    def hold(self, token: int, valid_until: float) -> None:
        with self._lock:
            self.token, self.valid_until = token, valid_until

    def extend(self, token: int, valid_until: float) -> None:
        """A renewal of ``token`` succeeded; ignored if the token was dropped meanwhile."""
        with self._lock:
            if self.token == token:
                self.valid_until = valid_until

    def drop(self) -> int | None:
        with self._lock:
            token, self.token, self.valid_until = self.token, None, 0.0
            return token

    @property
    def locally_valid(self) -> bool:
        return self.token is not None and time.monotonic() < self.valid_until

    def on_refused(self, callback: Callable[[str], object]) -> None:
        """Call ``callback(message)`` (from the refused writer's thread) on every refusal."""
        self._on_refused.append(callback)

    def install(self, engine: Engine) -> None:
        """Make every transaction of ``engine`` carry the token held when it begins, and
        count refusals (PostgreSQL only: SQLite has no replicas)."""
        if engine.dialect.name != "postgresql":
            raise ValueError("the fence needs PostgreSQL: replicas share their decisions through it")

        @event.listens_for(engine, "begin")
        def _carry_token(conn: sa.Connection) -> None:
            token = self.token
            if token is not None:
                conn.exec_driver_sql("SELECT set_config(%s, %s, true)", (FENCE_SETTING, str(token)))

        @event.listens_for(engine, "handle_error")
        def _count_refusal(context: Any) -> None:
            error = context.original_exception
            if is_fence_refusal(error):
                self.refused(str(error).splitlines()[0])

    def refused(self, message: str) -> None:
        """The database refused a write of this process's for its token (the trigger's
        refusal, or a renewal of a lease that moved): count it and tell the listeners."""
        with self._lock:
            self.refusals += 1
            self.last_refusal = message
        log.error("%s", message)
        for callback in self._on_refused:
            try:
                callback(message)
            except Exception:  # a listener's bug must not mask the refusal itself
                log.exception("fence refusal listener failed")
