"""The receiver-independent alert event, and the labels every receiver type shares.

An event is a snapshot of an incident taken when the sync step enqueued it, so a message
delivered an hour late still says what was true when it was decided. Besides the incident row
it carries what the deployment adds (``alerts.labels``, the ``instance`` label, the runbook
link) and where the incident sits in the fabric (the ``switch`` and ``rail`` labels), which an
:class:`AlertContext` supplies, and the job of a job-scoped incident (the ``job`` label).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from graywire.detectors.findings import job_of
from graywire.service.alert_settings import RUNBOOK_DIR
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
    #: Where it sits in the fabric: the switch it is on or behind, and its rail (see
    #: ``places.FabricPlaces``); the job of a job-scoped kind.
    switch: str | None = None
    rail: str | None = None
    job: str | None = None
    #: The deployment: the ``instance`` label and ``alerts.labels``.
    instance: str | None = None
    static_labels: dict[str, str] = field(default_factory=dict)
    runbook_url: str | None = None
    #: An operator acknowledged the incident (``POST /api/v1/incidents/{id}/ack``).
    acknowledged: bool = False
    #: Root causes: the incident this one folds under, and why; the effects folded under this
    #: one (``#id kind entity``), at most ``MAX_EFFECTS_SHOWN`` of them, then how many more.
    caused_by: int | None = None
    cause_reason: str | None = None
    effects: list[str] = field(default_factory=list)

    @classmethod
    def from_incident(
        cls,
        inc: Incident,
        status: EventStatus,
        started_at: datetime,
        context: AlertContext | None = None,
    ) -> AlertEvent:
        late = (inc.evidence or {}).get("stored_late")
        event = cls(
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
            acknowledged=inc.status == "acknowledged",
            caused_by=inc.caused_by,
            cause_reason=inc.cause_reason,
        )
        return (context or NO_CONTEXT).describe(event, inc.evidence)

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
        these never change over an incident's life (severity only rises within an episode).

        The deployment's static labels come first; graywire's own ones cannot be overridden
        (``alerts.labels`` refuses them). ``switch``, ``rail`` and ``job`` let Alertmanager route,
        group and inhibit by place (``deploy/alertmanager/alertmanager.yml``).
        """
        labels = {
            **self.static_labels,
            "alertname": self.alertname,
            "severity": self.severity,
            "kind": self.kind,
            "entity": self.entity,
            "incident_id": str(self.incident_id),
            "node": self.node or "",
            "port": self.port or "",
            "link": self.link or "",
            "switch": self.switch or "",
            "rail": self.rail or "",
            "job": self.job or "",
            "instance": self.instance or "",
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
        if self.runbook_url:
            out["runbook_url"] = self.runbook_url
        if self.caused_by is not None:
            why = f": {self.cause_reason}" if self.cause_reason else ""
            out["caused_by"] = f"incident {self.caused_by}{why}"
        if self.effects:
            out["effects"] = "; ".join(self.effects)
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


@dataclass(frozen=True, slots=True)
class Place:
    """Where an incident sits in the fabric, as routing labels: the switch it is on or behind,
    and its rail (as text, as labels are)."""

    switch: str | None = None
    rail: str | None = None


class Placer(Protocol):
    """Finds an incident's :class:`Place` from its row (``places.FabricPlaces`` does, from the
    fabric model). It must answer the same for the same row: labels must not change."""

    def place(
        self, kind: str, entity: str, node: str | None, port: str | None, link: str | None
    ) -> Place: ...


@dataclass(frozen=True, slots=True)
class AlertContext:
    """What every event says besides its incident: the deployment's static labels and
    ``instance``, the runbook base, and where incidents sit in the fabric."""

    labels: Mapping[str, str] = field(default_factory=dict)
    instance: str | None = None
    #: ``runbook_url`` = ``<base>/<kind>.md``; None: no runbook annotation.
    runbook_base_url: str | None = RUNBOOK_DIR
    places: Placer | None = None

    def runbook_url(self, kind: str) -> str | None:
        return None if self.runbook_base_url is None else f"{self.runbook_base_url}/{kind}.md"

    def describe(self, event: AlertEvent, evidence: Mapping[str, Any] | None) -> AlertEvent:
        """``event`` with the context's labels and links, and its place and job filled in."""
        place = (
            self.places.place(event.kind, event.entity, event.node, event.port, event.link)
            if self.places is not None
            else Place()
        )
        return replace(
            event,
            switch=place.switch,
            rail=place.rail,
            job=job_of(event.kind, event.entity, evidence),
            instance=self.instance,
            static_labels=dict(self.labels),
            runbook_url=self.runbook_url(event.kind),
        )


#: No static labels, no instance, no fabric: the job and the default runbook link only.
NO_CONTEXT = AlertContext()


def absolute_url(url: str | None) -> str | None:
    """``url`` if it is an absolute http(s) URL (one a pager can open), else None."""
    return url if url and url.startswith(("http://", "https://")) else None


def generator_url(external_url: str | None, incident_id: int) -> str:
    """Where on-call reads the incident and its evidence."""
    base = external_url or "http://127.0.0.1:8000"
    return f"{base}/api/v1/incidents/{incident_id}"
