"""Tables of the replicas' membership and of the decision leader's lease (docs/architecture.md,
Replicas).

Both are read and written with the database's clock (``clock_timestamp()``), never a
replica's, so members whose clocks disagree still agree on who is alive and who leads.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from graywire.service.models.base import Base

#: The lease's one row.
LEADER_ROW = 1


class ClusterMember(Base):
    """One replica, alive while its heartbeat is younger than ``cluster.member_ttl``.

    ``incarnation`` tells two processes under one ``member_id`` apart: a restarted pod keeps
    its name (and so its share of the targets), but a second live process under the same
    name is refused instead of silently sharing the row.
    """

    __tablename__ = "cluster_members"

    member_id: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    incarnation: Mapped[str] = mapped_column(sa.String(64))
    #: Where the other replicas reach its API (mutating requests are forwarded to the leader).
    url: Mapped[str] = mapped_column(sa.String(500))
    #: May hold the decision lease.
    lead: Mapped[bool] = mapped_column(sa.Boolean)
    #: Scrapes a share of the targets.
    collect: Mapped[bool] = mapped_column(sa.Boolean)
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime] = mapped_column(index=True)
    version: Mapped[str] = mapped_column(sa.String(64))


class ClusterLeader(Base):
    """The decision lease: one row (id 1), whoever holds it decides until ``expires_at``.

    ``token`` is the fencing token: it grows by one at every change of holder, never
    otherwise. Every write that decides runs with the writer's token set, and a trigger on
    the deciding tables refuses a token that is not this one (migration 0006), so a paused
    leader that wakes up after its lease moved cannot write. The token's unique constraint is
    what makes that check cheap: the trigger takes ``FOR KEY SHARE`` on this row, which
    renewals (``expires_at`` only) pass by and a takeover (a new token: a key change) waits
    for, so a takeover commits only after the old leader's last write has.
    """

    __tablename__ = "cluster_leader"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    holder: Mapped[str] = mapped_column(sa.String(200))
    token: Mapped[int] = mapped_column(sa.BigInteger, unique=True)
    acquired_at: Mapped[datetime]
    expires_at: Mapped[datetime]
