"""Membership: each replica heartbeats its row; a member is alive while its heartbeat is young.

Times are the database's (``clock_timestamp()``), so members agree on who is alive however
their clocks drift. A member that stops gracefully deletes its row, and its share of the
targets moves at the next poll instead of after ``member_ttl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Engine

from graywire.service.models import ClusterMember

#: Rows of members dead this long are deleted (a replaced pod, a renamed member).
FORGET_AFTER = timedelta(days=1)


class MemberIdInUse(RuntimeError):
    """Another live process heartbeats under this member id."""


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A member as the others see it."""

    member_id: str
    url: str
    lead: bool = True
    collect: bool = True


class Members:
    """This member's heartbeat, and the live members (itself included)."""

    def __init__(self, engine: Engine, me: MemberInfo, incarnation: str, ttl_s: float, version: str) -> None:
        self.engine = engine
        self.me = me
        self.incarnation = incarnation
        self.ttl = timedelta(seconds=ttl_s)
        self.version = version

    def heartbeat(self) -> None:
        """Insert or refresh this member's row; refuse to take over a live row of another process."""
        m = ClusterMember.__table__.c
        now = sa.func.clock_timestamp()
        row = insert(ClusterMember).values(
            member_id=self.me.member_id,
            incarnation=self.incarnation,
            url=self.me.url,
            lead=self.me.lead,
            collect=self.me.collect,
            started_at=now,
            heartbeat_at=now,
            version=self.version,
        )
        ours = m.incarnation == row.excluded.incarnation
        upsert = row.on_conflict_do_update(
            index_elements=[m.member_id],
            set_={
                "incarnation": row.excluded.incarnation,
                "url": row.excluded.url,
                "lead": row.excluded.lead,
                "collect": row.excluded.collect,
                "version": row.excluded.version,
                "heartbeat_at": now,
                "started_at": sa.case((ours, m.started_at), else_=row.excluded.started_at),
            },
            where=ours | (m.heartbeat_at < now - self.ttl),
        ).returning(m.member_id)
        with self.engine.begin() as conn:
            if conn.execute(upsert).first() is None:
                holder = conn.execute(
                    sa.select(m.incarnation, m.url).where(m.member_id == self.me.member_id)
                ).first()
                where = f" ({holder.url})" if holder is not None else ""
                raise MemberIdInUse(
                    f"member id {self.me.member_id!r} is in use by another live process{where}: give each "
                    "replica its own cluster.member_id"
                )

    def live(self) -> list[MemberInfo]:
        """Members whose heartbeat is younger than the TTL, by id."""
        m = ClusterMember.__table__.c
        query = (
            sa.select(m.member_id, m.url, m.lead, m.collect)
            .where(m.heartbeat_at > sa.func.clock_timestamp() - self.ttl)
            .order_by(m.member_id)
        )
        with self.engine.connect() as conn:
            return [MemberInfo(r.member_id, r.url, r.lead, r.collect) for r in conn.execute(query)]

    def forget_dead(self) -> int:
        """Delete rows of members gone for a day; returns how many."""
        m = ClusterMember.__table__.c
        with self.engine.begin() as conn:
            gone = conn.execute(
                sa.delete(ClusterMember).where(m.heartbeat_at < sa.func.clock_timestamp() - FORGET_AFTER)
            )
        return int(gone.rowcount or 0)

    def leave(self) -> None:
        """Delete this member's row (a graceful stop): its targets move at once."""
        m = ClusterMember.__table__.c
        with self.engine.begin() as conn:
            conn.execute(
                sa.delete(ClusterMember).where(
                    m.member_id == self.me.member_id, m.incarnation == self.incarnation
                )
            )
