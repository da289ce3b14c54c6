"""Holding pages back: a failing switch pages once, not once per host link; an effect not at all.

The drain engine opens one ``switch_failure`` incident per switch that fails as a whole,
while each host link behind it keeps its own incident. Alertmanager users inhibit those in
Alertmanager; for webhook, PagerDuty and Slack receivers the sync step leaves them untriggered
while the switch incident is active. Everything is read from the incident rows themselves:
link labels ``a<->b`` with port keys ``node/port``, ports, and the switch incident's evidence.

Effects are held back from direct receivers too: an incident the drain engine found to be
caused by another active one (``caused_by``) folds under its cause, which is the one page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, aliased

from graywire.collectors.keys import link_ends, node_of_key
from graywire.detectors.findings import Kind
from graywire.service.models import ACTIVE_STATUSES, Incident


@dataclass(frozen=True, slots=True)
class IncidentPlace:
    """Where an active incident sits in the fabric, as its row says."""

    id: int
    kind: str
    entity: str
    node: str | None
    port: str | None
    link: str | None


def inhibited_ids(
    places: Iterable[IncidentPlace], switch_evidence: Mapping[str, Mapping[str, Any]]
) -> set[int]:
    """Ids of active incidents that sit behind a switch with an active switch incident.

    ``switch_evidence`` maps each such switch to its incident's evidence. An incident is behind
    switch S when the drain policy counted it (``incident_ids``), when its link has an end on S,
    when its port or node is on S, or when its port is the far end of a link that another active
    incident names with an end on S (an NCCL channel on a host port carries no link label).
    """
    if not switch_evidence:
        return set()
    places = list(places)
    peer: dict[str, str] = {}
    for p in places:
        ends = link_ends(p.link)
        if len(ends) == 2:
            peer[ends[0]], peer[ends[1]] = ends[1], ends[0]
    counted: set[int] = set()
    for evidence in switch_evidence.values():
        counted.update(int(i) for i in evidence.get("incident_ids") or [] if isinstance(i, int))
    out: set[int] = set()
    for p in places:
        if p.kind == Kind.SWITCH_FAILURE:
            continue
        nodes = {node_of_key(end) for end in link_ends(p.link)}
        if p.port:
            nodes.add(node_of_key(p.port))
            if p.port in peer:
                nodes.add(node_of_key(peer[p.port]))
        if p.node:
            nodes.add(p.node)
        if p.id in counted or nodes & switch_evidence.keys():
            out.add(p.id)
    return out


def load_inhibited(session: Session) -> set[int]:
    """Inhibited incident ids as of the committed state the current transaction reads."""
    switches = {
        entity: evidence or {}
        for entity, evidence in session.execute(
            sa.select(Incident.entity, Incident.evidence).where(
                Incident.kind == Kind.SWITCH_FAILURE, Incident.status.in_(ACTIVE_STATUSES)
            )
        )
    }
    if not switches:
        return set()
    rows = session.execute(
        sa.select(
            Incident.id, Incident.kind, Incident.entity, Incident.node, Incident.port, Incident.link
        ).where(Incident.status.in_(ACTIVE_STATUSES))
    )
    return inhibited_ids((IncidentPlace(*row) for row in rows), switches)


def load_effects(session: Session) -> set[int]:
    """Ids of active incidents whose root cause (``caused_by``) is an active incident."""
    cause = aliased(Incident)
    return set(
        session.scalars(
            sa.select(Incident.id)
            .join(cause, cause.id == Incident.caused_by)
            .where(Incident.status.in_(ACTIVE_STATUSES), cause.status.in_(ACTIVE_STATUSES))
        )
    )


#: Effects listed by name on their cause's page; the rest are counted.
MAX_EFFECTS_SHOWN = 10


def load_effect_lines(session: Session) -> dict[int, list[str]]:
    """Active cause id -> its active effects as ``#id kind entity``, for the cause's page."""
    cause = aliased(Incident)
    out: dict[int, list[str]] = {}
    rows = session.execute(
        sa.select(Incident.caused_by, Incident.id, Incident.kind, Incident.entity)
        .join(cause, cause.id == Incident.caused_by)
        .where(Incident.status.in_(ACTIVE_STATUSES), cause.status.in_(ACTIVE_STATUSES))
        .order_by(Incident.caused_by, Incident.id)
    )
    for cid, eid, kind, entity in rows:
        out.setdefault(int(cid), []).append(f"#{eid} {kind} {entity}")
    for cid, lines in out.items():
        if len(lines) > MAX_EFFECTS_SHOWN:
            out[cid] = [*lines[:MAX_EFFECTS_SHOWN], f"and {len(lines) - MAX_EFFECTS_SHOWN} more"]
    return out
