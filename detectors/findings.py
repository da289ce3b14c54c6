"""What a detector says: a finding opens (``firing``) or closes (``cleared``) on one entity."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

Severity = Literal["info", "warning", "critical"]
#: Every severity, least to most: a severity's index is its rank.
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")
SEVERITY_RANK: dict[str, int] = {name: rank for rank, name in enumerate(SEVERITIES)}
Status = Literal["firing", "cleared"]

#: A port's health from the worst open incident on it: 0 ok, 1 warning, 2 critical. Any open
#: incident marks its port, an ``info`` one too (something is open there). The one rule that
#: ``/metrics``, ``/api/v1/ports`` and the status page all use.
PORT_HEALTH: dict[str, int] = {"info": 1, "warning": 1, "critical": 2}


@dataclass(frozen=True, slots=True)
class Finding:
    """One decision of one detector about one entity at one time.

    ``entity`` is the deduplication key (with ``kind``): the same gray failure seen on later
    polls keeps the same entity, so it rolls up into one incident. ``node`` and ``port`` say
    where to look (the host to drain, the NIC to reseat); ``evidence`` holds the numbers a
    person needs to believe it: raw values, expected vs actual, peer baseline, score.
    """

    kind: str
    entity: str
    status: Status
    time: datetime
    severity: Severity
    summary: str
    detector: str
    node: str | None = None
    port: str | None = None
    link: str | None = None
    score: float = 0.0
    confidence: float = 1.0
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["time"] = self.time.isoformat()
        return d
