"""The receiver-independent alert event, and the labels every receiver type shares.

An event is a snapshot of an incident taken when the sync step enqueued it, so a message
delivered an hour late still says what was true when it was decided.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from graywire.service.models import Incident

EventStatus = Literal["firing", "resolved"]
#: Alertmanager's "no end time" (Go's zero time), as its own webhooks carry it.
ZERO_TIME = "0001-01-01T00:00:00Z"


def rfc3339(t: datetime) -> str:
    """UTC RFC 3339 with a ``Z`` and millisecond precision, as Alertmanager writes times."""
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class AlertEvent:
    incident_id: int
    status: EventStatus
    kind: str
    entity: str
    severity: str
    summary: str
    detector: str
    score: float
    confidence: float
    node: str | None
    port: str | None
    link: str | None
    started_at: str  # ISO 8601: start of this episode (a reopened incident starts again)
    opened_at: str
    last_seen_at: str
    resolved_at: str | None
    reopen_count: int
    finding_count: int
    #: The incident's ``evidence.stored_late``: its findings reached the database late (it
    #: was unavailable), with ``fired_at`` and ``cleared_at`` for an episode over by then.
    stored_late: dict[str, str] | None = None

    @classmethod
    def from_incident(cls, inc: Incident, status: EventStatus, started_at: datetime) -> AlertEvent:
        late = (inc.evidence or {}).get("stored_late")
        return cls(
            incident_id=inc.id,
            status=status,
            kind=inc.kind,
            entity=inc.entity,
            severity=inc.severity,
            summary=inc.summary,
            detector=inc.detector,
            score=float(inc.score),
            confidence=float(inc.confidence),
            node=inc.node,
            port=inc.port,
            link=inc.link,
            started_at=started_at.isoformat(),
            opened_at=inc.opened_at.isoformat(),
            last_seen_at=inc.last_seen_at.isoformat(),
            resolved_at=inc.resolved_at.isoformat() if inc.resolved_at else None,
            reopen_count=inc.reopen_count,
            finding_count=inc.finding_count,
            stored_late=late if isinstance(late, dict) else None,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AlertEvent:
        """Fields added later default when absent: messages enqueued by older versions still load."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def dedup_key(self) -> str:
        """Stable per incident across retries, restarts and reopenings: receivers dedupe on it."""
        return self.dedup_key_with("graywire")

    def dedup_key_with(self, prefix: str) -> str:
        return f"{prefix}-incident-{self.incident_id}"

    @property
    def alertname(self) -> str:
        return "Graywire" + "".join(part.capitalize() for part in self.kind.split("_"))

    def labels(self) -> dict[str, str]:
        """Identity and routing labels. Alertmanager identifies an alert by its label set, so
        these never change over an incident's life (severity only rises within an episode)."""
        labels = {
            "alertname": self.alertname,
            "severity": self.severity,
            "kind": self.kind,
            "entity": self.entity,
            "incident_id": str(self.incident_id),
            "node": self.node or "",
            "port": self.port or "",
            "link": self.link or "",
        }
        return {k: v for k, v in labels.items() if v}  # empty label values mean "absent"

    def annotations(self) -> dict[str, str]:
        description = (
            f"{self.summary} (detector {self.detector}, score {self.score:.3g}, "
            f"confidence {self.confidence:.2f}; first seen {self.opened_at}, last seen {self.last_seen_at}"
            + (f", reopened {self.reopen_count}×" if self.reopen_count else "")
            + ")"
        )
        out = {"summary": self.summary, "description": description}
        note = self.late_note()
        if note:
            out["description"] += f"; {note}"
            out["stored_late"] = note
        return out

    def late_note(self) -> str | None:
        """One line on why this arrives late, for every receiver's text; None when it did not."""
        late = self.stored_late
        if not late:
            return None
        since = late.get("unstored_since")
        held = f"stored late at {late.get('stored_at')}, the database being unavailable from {since}"
        if late.get("cleared_at"):
            return f"fired {late.get('fired_at')} and cleared {late.get('cleared_at')}; {held}"
        return held

    def time(self, field: Literal["started_at", "resolved_at", "last_seen_at"]) -> datetime | None:
        value = getattr(self, field)
        return None if value is None else datetime.fromisoformat(value)


def generator_url(external_url: str | None, incident_id: int) -> str:
    """Where on-call reads the incident and its evidence."""
    base = external_url or "http://127.0.0.1:8000"
    return f"{base}/api/v1/incidents/{incident_id}"
