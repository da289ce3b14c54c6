"""Incident store: rolls detector findings up into incidents and reads them back for the API.

Findings arrive in batches, one batch per poll. A batch is applied in one transaction with a
fixed number of queries (load the affected incidents, write them, append the findings), so a
poll of a large fabric costs the same handful of round trips whether it carries 5 findings or 500.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from graywire.detectors.findings import SEVERITY_RANK, Finding
from graywire.service.models import (
    ACTIVE_STATUSES,
    FINDING_STATUSES,
    INCIDENT_STATUSES,
    FindingRecord,
    Incident,
    LateEpisode,
    row_to_dict,
    to_jsonable,
)
from graywire.service.models.engine import SQLITE_BEGIN_IMMEDIATE

INCIDENT_FINDINGS_LIMIT = 50
# Pairs per lookup query; keeps bound parameters (two per pair) under SQLite's historic limit of 999.
_KEY_CHUNK = 400

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What one ``apply`` did, one count per finding that changed an incident.

    ``updated`` counts firing findings merged into an open or acknowledged incident, so two
    findings for one incident in a batch count twice. Findings are always appended as well.
    """

    opened: int = 0
    updated: int = 0
    resolved: int = 0
    reopened: int = 0
    #: Episodes that opened and resolved within a batch stored late (``late_episodes`` rows).
    late_episodes: int = 0


def _validate(finding: Finding) -> None:
    """Reject a bad finding before anything is written, naming it (a CHECK failure would not)."""
    if finding.status not in FINDING_STATUSES:
        raise ValueError(f"finding {finding.kind}/{finding.entity}: unknown status {finding.status!r}")
    if finding.severity not in SEVERITY_RANK:
        raise ValueError(f"finding {finding.kind}/{finding.entity}: unknown severity {finding.severity!r}")
    if finding.time.tzinfo is None or finding.time.utcoffset() is None:
        raise ValueError(f"finding {finding.kind}/{finding.entity}: time {finding.time} has no time zone")


class IncidentStore:
    """Incidents and findings in one SQL database (SQLite or PostgreSQL).

    The schema must already exist (``graywire.service.models.engine.upgrade``); the store never
    creates tables, so a service started against an unmigrated database fails at once instead of
    drifting.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    # -- writes -----------------------------------------------------------------------------

    def apply(
        self,
        findings: Sequence[Finding],
        *,
        stored_late_since: datetime | None = None,
        link: Callable[[Session], object] | None = None,
    ) -> ApplyResult:
        """Roll a batch of findings into incidents, in one transaction.

        Findings are taken in time order (stable, so equal times keep batch order). For each
        ``(kind, entity)`` the latest incident decides: a ``firing`` finding updates an open or
        acknowledged one, reopens a resolved one, or opens a new one if there is none; a
        ``cleared`` finding resolves an open or acknowledged one. ``finding_count`` counts the
        ``firing`` findings rolled in (how often the failure was seen). A finding older than the
        incident's current state (a ``cleared`` before its last ``firing``, a ``firing`` before
        its resolution) arrived late and is recorded without changing the incident, so replays
        and out-of-order batches cannot flap incidents. Every finding is appended to
        ``findings``.

        ``stored_late_since`` says the findings waited outside since then (the database was
        unavailable). Their evidence, and so their incidents', then says ``stored_late``, and an
        episode that both opens and resolves in the batch, which nobody could be told of while it
        lasted, is recorded in ``late_episodes`` for the alert sync to page.

        ``link`` runs in the same transaction once the incidents are written: the drain engine's
        root causes (``caused_by``). A reader such as the alert sync, which runs on its own
        clock, then never sees a new effect without its cause, and pages it on its own.
        """
        if not findings:
            return ApplyResult()
        for finding in findings:
            _validate(finding)
        late: dict[str, str] | None = None
        if stored_late_since is not None:
            late = {
                "unstored_since": stored_late_since.isoformat(),
                "stored_at": datetime.now(UTC).isoformat(),
            }
            findings = [replace(f, evidence={**f.evidence, "stored_late": late}) for f in findings]
        ordered = sorted(findings, key=lambda f: f.time)
        counts = {"opened": 0, "updated": 0, "resolved": 0, "reopened": 0}
        began: dict[Key, datetime] = {}  # episodes that opened in this late batch: when
        episodes: list[tuple[Incident, dict[str, Any]]] = []

        with self._sessions.begin() as session:
            # Read-then-write: take SQLite's write lock before reading (PostgreSQL locks rows).
            session.connection(execution_options={SQLITE_BEGIN_IMMEDIATE: True})
            latest = self._load_latest(session, {(f.kind, f.entity) for f in ordered})
            targets: list[Incident | None] = []
            for finding in ordered:
                key = (finding.kind, finding.entity)
                incident = latest.get(key)
                if finding.status == "firing":
                    if incident is None:
                        incident = self._open(finding)
                        session.add(incident)
                        latest[key] = incident
                        counts["opened"] += 1
                        began[key] = finding.time
                    elif incident.status in ACTIVE_STATUSES:
                        if finding.time >= incident.last_seen_at:
                            self._refresh(incident, finding, keep_max_severity=True)
                        incident.finding_count += 1
                        counts["updated"] += 1
                    elif incident.resolved_at is not None and finding.time < incident.resolved_at:
                        incident.finding_count += 1  # late firing from before the resolution
                    else:
                        self._reopen(incident, finding)
                        counts["reopened"] += 1
                        began[key] = finding.time
                elif (
                    incident is not None
                    and incident.status in ACTIVE_STATUSES
                    and finding.time >= incident.last_seen_at
                ):
                    incident.status = "resolved"
                    incident.resolved_at = finding.time
                    counts["resolved"] += 1
                    if late is not None and key in began:
                        episodes.append((incident, self._late_episode(incident, late, began.pop(key))))
                # Any other cleared finding changes nothing: with no incident at all it is stored
                # as an orphan (incident_id null); a repeated or late clear stays with its incident.
                targets.append(incident)

            session.flush()  # assigns ids to new incidents, for the findings' foreign key
            rows = [
                self._record_row(f, inc.id if inc is not None else None)
                for f, inc in zip(ordered, targets, strict=True)
            ]
            session.execute(sa.insert(FindingRecord), rows)
            for incident, episode in episodes:
                episode["incident"]["id"] = incident.id
                session.add(LateEpisode(incident_id=incident.id, **episode))
            if link is not None:
                session.flush()
                link(session)
        return ApplyResult(**counts, late_episodes=len(episodes))

    @staticmethod
    def _late_episode(incident: Incident, late: dict[str, str], fired_at: datetime) -> dict[str, Any]:
        """Mark a just resolved incident's evidence as stored late, and snapshot the episode."""
        assert incident.resolved_at is not None
        incident.evidence = {
            **incident.evidence,
            "stored_late": {
                **late,
                "fired_at": fired_at.isoformat(),
                "cleared_at": incident.resolved_at.isoformat(),
            },
        }
        return {
            "episode": incident.reopen_count,
            "fired_at": fired_at,
            "cleared_at": incident.resolved_at,
            "unstored_since": datetime.fromisoformat(late["unstored_since"]),
            "stored_at": datetime.fromisoformat(late["stored_at"]),
            "incident": row_to_dict(incident),
        }

    @staticmethod
    def _load_latest(session: Session, keys: Iterable[Key]) -> dict[Key, Incident]:
        """The newest incident per ``(kind, entity)`` among ``keys``, locked for this transaction.

        One query per chunk of keys. ``FOR UPDATE`` (PostgreSQL) makes concurrent writers of the
        same incident queue up instead of losing each other's counts; on SQLite the transaction
        already holds the database's write lock (``BEGIN IMMEDIATE``).
        """
        latest: dict[Key, Incident] = {}
        key_list = sorted(keys)
        for start in range(0, len(key_list), _KEY_CHUNK):
            chunk = key_list[start : start + _KEY_CHUNK]
            newest = (
                sa.select(sa.func.max(Incident.id))
                .where(sa.tuple_(Incident.kind, Incident.entity).in_(chunk))
                .group_by(Incident.kind, Incident.entity)
            )
            rows = session.scalars(
                sa.select(Incident)
                .where(Incident.id.in_(newest.scalar_subquery()))
                .order_by(Incident.id)  # lock rows in one order everywhere: no deadlocks between writers
                .with_for_update()
            )
            latest.update(((inc.kind, inc.entity), inc) for inc in rows)
        return latest

    @staticmethod
    def _open(finding: Finding) -> Incident:
        return Incident(
            kind=finding.kind,
            entity=finding.entity,
            status="open",
            severity=finding.severity,
            node=finding.node,
            port=finding.port,
            link=finding.link,
            summary=finding.summary,
            detector=finding.detector,
            score=float(finding.score),
            confidence=float(finding.confidence),
            evidence=to_jsonable(finding.evidence),
            opened_at=finding.time,
            last_seen_at=finding.time,
            resolved_at=None,
            finding_count=1,
            reopen_count=0,
        )

    @staticmethod
    def _refresh(incident: Incident, finding: Finding, *, keep_max_severity: bool) -> None:
        """Carry the latest finding's view onto the incident.

        Within one episode severity only rises: a critical link that now scores merely
        ``warning`` has not been fixed. Where a finding omits node/port/link, the incident keeps
        what an earlier finding said.
        """
        if not keep_max_severity or SEVERITY_RANK[finding.severity] > SEVERITY_RANK[incident.severity]:
            incident.severity = finding.severity
        incident.last_seen_at = finding.time
        incident.summary = finding.summary
        incident.detector = finding.detector
        incident.score = float(finding.score)
        incident.confidence = float(finding.confidence)
        incident.evidence = to_jsonable(finding.evidence)
        incident.node = finding.node or incident.node
        incident.port = finding.port or incident.port
        incident.link = finding.link or incident.link

    def _reopen(self, incident: Incident, finding: Finding) -> None:
        """Bring a resolved incident back: same id and history, a new episode.

        Severity restarts from the new finding rather than the old episode's maximum, so a link
        that was once down and now only flaps is not paged as critical again. ``opened_at``
        keeps the first opening; ``reopen_count`` says it came back.
        """
        incident.status = "open"
        incident.resolved_at = None
        incident.reopen_count += 1
        incident.finding_count += 1
        self._refresh(incident, finding, keep_max_severity=False)

    @staticmethod
    def _record_row(finding: Finding, incident_id: int | None) -> dict[str, Any]:
        return {
            "incident_id": incident_id,
            "kind": finding.kind,
            "entity": finding.entity,
            "status": finding.status,
            "time": finding.time,
            "severity": finding.severity,
            "summary": finding.summary,
            "detector": finding.detector,
            "node": finding.node,
            "port": finding.port,
            "link": finding.link,
            "score": float(finding.score),
            "confidence": float(finding.confidence),
            "evidence": to_jsonable(finding.evidence),
        }

    # -- reads ------------------------------------------------------------------------------

    def list_incidents(
        self,
        status: str | None = None,
        kind: str | None = None,
        node: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Incidents newest first (``opened_at`` desc, then ``id`` desc for a stable page order)."""
        if status is not None and status not in INCIDENT_STATUSES:
            raise ValueError(f"unknown incident status {status!r}; expected one of {INCIDENT_STATUSES}")
        if limit < 1 or offset < 0:
            raise ValueError(f"need limit >= 1 and offset >= 0, got limit={limit} offset={offset}")
        query = sa.select(Incident)
        if status is not None:
            query = query.where(Incident.status == status)
        if kind is not None:
            query = query.where(Incident.kind == kind)
        if node is not None:
            query = query.where(Incident.node == node)
        query = query.order_by(Incident.opened_at.desc(), Incident.id.desc()).limit(limit).offset(offset)
        with self._sessions() as session:
            return self._with_effects(session, [row_to_dict(inc) for inc in session.scalars(query)])

    @staticmethod
    def _with_effects(session: Session, incidents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each incident's ``effects``: the active incidents it is the root cause of."""
        ids = [i["id"] for i in incidents]
        effects: dict[int, list[int]] = {i: [] for i in ids}
        if ids:
            for eid, cid in session.execute(
                sa.select(Incident.id, Incident.caused_by)
                .where(Incident.caused_by.in_(ids), Incident.status.in_(ACTIVE_STATUSES))
                .order_by(Incident.id)
            ):
                effects[cid].append(eid)
        for inc in incidents:
            inc["effects"] = effects[inc["id"]]
        return incidents

    def get_incident(self, incident_id: int) -> dict[str, Any] | None:
        """One incident with its latest findings (newest first), or None if there is no such id."""
        with self._sessions() as session:
            incident = session.get(Incident, incident_id)
            if incident is None:
                return None
            records = session.scalars(
                sa.select(FindingRecord)
                .where(FindingRecord.incident_id == incident_id)
                .order_by(FindingRecord.time.desc(), FindingRecord.id.desc())
                .limit(INCIDENT_FINDINGS_LIMIT)
            )
            out = self._with_effects(session, [row_to_dict(incident)])[0]
            out["findings"] = [row_to_dict(r) for r in records]
            return out

    def open_counts(self) -> list[tuple[str, str, int]]:
        """``(kind, severity, count)`` of open and acknowledged incidents, for Prometheus gauges."""
        query = (
            sa.select(Incident.kind, Incident.severity, sa.func.count())
            .where(Incident.status.in_(ACTIVE_STATUSES))
            .group_by(Incident.kind, Incident.severity)
            .order_by(Incident.kind, Incident.severity)
        )
        with self._sessions() as session:
            return [(kind, severity, int(count)) for kind, severity, count in session.execute(query)]

    def active_incidents(self) -> list[dict[str, Any]]:
        """Open and acknowledged incidents, whole: what port health is judged from."""
        return [i for status in ACTIVE_STATUSES for i in self.list_incidents(status=status, limit=100_000)]

    def note_unjudged(self, ids: Iterable[int], note: str) -> None:
        """Say on each incident (evidence ``unjudged``) that no detector judges it since a
        restart: it stays open, unknown rather than healthy, until it is seen again or resolved."""
        wanted = sorted(set(ids))
        if not wanted:
            return
        with self._sessions.begin() as session:
            for incident in session.scalars(sa.select(Incident).where(Incident.id.in_(wanted))):
                incident.evidence = {**(incident.evidence or {}), "unjudged": note}

    def active_on_ports(self) -> list[tuple[str | None, str | None, str]]:
        """``(port, link, severity)`` of open and acknowledged incidents, for per-port health."""
        query = sa.select(Incident.port, Incident.link, Incident.severity).where(
            Incident.status.in_(ACTIVE_STATUSES),
            sa.or_(Incident.port.is_not(None), Incident.link.is_not(None)),
        )
        with self._sessions() as session:
            return [(port, link, severity) for port, link, severity in session.execute(query)]
