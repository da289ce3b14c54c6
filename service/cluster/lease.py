"""The decision leader's lease: one row with a holder, an expiry and a fencing token.

- A member takes the lease only once it has expired (or was never taken), and every change of
  holder adds one to the token, in the same transaction as the ``leader_takeover`` audit row
  that records the handover.
- The holder renews it well before it expires; a renewal that finds another holder or another
  token is refused, and the member steps down.
- A graceful stop releases it (expires it now), so another member takes over at once.

Expiry is judged by the database's clock. The takeover waits for the old leader's writes in
flight (their fence check holds ``FOR KEY SHARE`` on the row), within ``lock_timeout``, so it
commits only after the last of them; a paused old leader's open transaction is ended by
``idle_in_transaction_session_timeout`` on the leader's connections (``node.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from graywire.service.audit import record
from graywire.service.models import LEADER_ROW, ClusterLeader
from graywire.service.models.engine import FENCE_SETTING

#: Actor name of the audit rows the cluster writes itself.
CLUSTER_ACTOR = "cluster"
TAKEOVER_ACTION = "leader_takeover"


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The lease as the database has it now."""

    holder: str | None
    token: int | None
    expires_at: datetime | None
    live: bool


@dataclass(frozen=True, slots=True)
class Takeover:
    """A lease this member just took."""

    token: int
    #: Monotonic seconds until which this process may consider it held.
    valid_until: float
    previous_holder: str | None
    previous_token: int | None
    previous_expired_at: datetime | None


class Lease:
    """One member's view of, and claim on, the lease."""

    def __init__(self, engine: Engine, member_id: str, url: str, ttl_s: float, lock_timeout_s: float) -> None:
        self.engine = engine
        self.member_id = member_id
        self.url = url
        self.ttl = timedelta(seconds=ttl_s)
        self.lock_timeout_ms = max(1, round(lock_timeout_s * 1000))

    def read(self) -> LeaseView:
        c = ClusterLeader.__table__.c
        query = sa.select(c.holder, c.token, c.expires_at, c.expires_at > sa.func.clock_timestamp()).where(
            c.id == LEADER_ROW
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None:
            return LeaseView(None, None, None, False)
        return LeaseView(row[0], int(row[1]), row[2], bool(row[3]))

    def acquire(self) -> Takeover | None:
        """Take the lease if it has expired or was never taken; None if another member holds
        it, or if the old leader's last write is still in flight (tried again later)."""
        started = time.monotonic()
        c = ClusterLeader.__table__.c
        now = sa.func.clock_timestamp()
        try:
            with Session(self.engine) as session, session.begin():
                session.execute(sa.text(f"SET LOCAL lock_timeout = {self.lock_timeout_ms}"))
                row = session.execute(
                    sa.select(c.holder, c.token, c.expires_at, c.expires_at > now)
                    .where(c.id == LEADER_ROW)
                    .with_for_update()
                ).first()
                if row is not None and row[3]:
                    return None  # another member renewed it meanwhile
                token = 1 if row is None else int(row[1]) + 1
                values = {
                    "holder": self.member_id,
                    "token": token,
                    "acquired_at": now,
                    "expires_at": now + self.ttl,
                }
                if row is None:
                    session.execute(sa.insert(ClusterLeader).values(id=LEADER_ROW, **values))
                else:
                    session.execute(sa.update(ClusterLeader).where(c.id == LEADER_ROW).values(**values))
                session.execute(sa.select(sa.func.set_config(FENCE_SETTING, str(token), True)))
                taken_at = session.execute(sa.select(now)).scalar_one()
                previous = None if row is None else (row[0], int(row[1]), row[2])
                gap = None if previous is None else round((taken_at - previous[2]).total_seconds(), 3)
                record(
                    session,
                    time=taken_at,
                    actor=CLUSTER_ACTOR,
                    action=TAKEOVER_ACTION,
                    message=(
                        f"{self.member_id} took the decision lease (fencing token {token})"
                        + (
                            ""
                            if previous is None
                            else f" from {previous[0]}, whose lease expired {gap} s before"
                        )
                    ),
                    evidence={
                        "member": self.member_id,
                        "url": self.url,
                        "token": token,
                        "previous_holder": None if previous is None else previous[0],
                        "previous_token": None if previous is None else previous[1],
                        "previous_expired_at": None if previous is None else previous[2],
                        "expired_for_seconds": gap,
                    },
                )
        except sa_exc.OperationalError as e:
            if getattr(getattr(e, "orig", None), "sqlstate", None) == "55P03":  # lock_not_available
                return None
            raise
        return Takeover(
            token,
            started + self.ttl.total_seconds(),
            None if previous is None else previous[0],
            None if previous is None else previous[1],
            None if previous is None else previous[2],
        )

    def renew(self, token: int) -> float | None:
        """Extend the lease held under ``token``; the new local validity (monotonic), or None
        when the database says this member no longer holds it."""
        started = time.monotonic()
        c = ClusterLeader.__table__.c
        query = (
            sa.update(ClusterLeader)
            .where(c.id == LEADER_ROW, c.holder == self.member_id, c.token == token)
            .values(expires_at=sa.func.clock_timestamp() + self.ttl)
            .returning(c.token)
        )
        with self.engine.begin() as conn:
            held = conn.execute(query).first() is not None
        return started + self.ttl.total_seconds() if held else None

    def release(self, token: int) -> bool:
        """Expire the lease now (a graceful stop), if still held under ``token``."""
        c = ClusterLeader.__table__.c
        query = (
            sa.update(ClusterLeader)
            .where(c.id == LEADER_ROW, c.holder == self.member_id, c.token == token)
            .values(expires_at=sa.func.clock_timestamp())
        )
        with self.engine.begin() as conn:
            return bool(conn.execute(query).rowcount)
