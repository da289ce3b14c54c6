"""The API's records: what every route takes and returns, in one place.

Routes name these as their ``response_model``; an ``*Out`` is served, an ``*In`` is a request
body. Incident and finding fields are the columns of their tables (``service/models/``), and a
test keeps the two in step. Enum-like values come from their one home (severity from
:mod:`graywire.detectors.findings`, port health from the port-health rule).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from graywire.collectors.units import parse_duration
from graywire.detectors.findings import Severity
from graywire.service.state.figures import PortHealth

IncidentStatusParam = Literal["open", "acknowledged", "resolved"]
MAX_ID = 2**63 - 1  # larger ids cannot exist, and SQLite cannot even bind them
State = Literal["up", "init", "down", "unknown"]
Role = Literal["host", "leaf", "spine", "core"]
NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL: refuse it here with a 422, not a 500


# -- errors -------------------------------------------------------------------------------------
class ErrorOut(BaseModel):
    detail: str


class ValidationErrorOut(BaseModel):
    """A 422: FastAPI's list of field errors, or one sentence naming what is wrong (a push's bad
    line, an unknown host, a date off graywire's clock)."""

    detail: str | list[dict[str, Any]]


#: Answers any route may give, documented once for the whole API.
COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "malformed request: an unparseable body or Content-Length"},
    401: {"model": ErrorOut, "description": "no or unknown bearer token, where one is needed"},
    403: {
        "model": ErrorOut,
        "description": "the token's role may not do this (an ingest token reading)",
    },
    413: {"model": ErrorOut, "description": "request body over its limit"},
    422: {"model": ValidationErrorOut, "description": "invalid input"},
    431: {"model": ErrorOut, "description": "request headers over http.max_header_bytes"},
    503: {"model": ErrorOut, "description": "database unavailable; retry after Retry-After seconds"},
}

#: Answers of the routes that change state, besides the common ones.
ACTION_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "no or unknown bearer token"},
    403: {"model": ErrorOut, "description": "the token's role may not do this"},
    404: {"model": ErrorOut, "description": "no such incident or node"},
    409: {"model": ErrorOut, "description": "the action does not apply to the current state"},
}


# -- incidents ----------------------------------------------------------------------------------
class IncidentOut(BaseModel):
    """An incident: one gray failure on one entity, deduplicated across polls."""

    id: int
    kind: str = Field(description="What failed, e.g. speed_downgrade; with entity, the dedup key.")
    entity: str = Field(description="Which port, link or node; with kind, the dedup key.")
    status: IncidentStatusParam
    severity: Severity
    node: str | None = Field(description="Host to look at or drain, when known.")
    port: str | None
    link: str | None
    summary: str
    detector: str = Field(description="Detector (and version) that produced the latest finding.")
    score: float
    confidence: float
    opened_at: AwareDatetime = Field(description="First time it opened; kept when it reopens.")
    last_seen_at: AwareDatetime
    resolved_at: AwareDatetime | None
    finding_count: int = Field(description="Firing findings rolled into this incident.")
    reopen_count: int
    evidence: dict[str, Any] = Field(description="Numbers behind the latest finding.")
    caused_by: int | None = Field(
        default=None,
        description="The active incident that is its root cause (paged in its stead); null: none.",
    )
    cause_reason: str | None = Field(default=None, description="Why caused_by explains this incident.")
    effects: list[int] = Field(
        default_factory=list, description="Active incidents this one is the root cause of (not paged apart)."
    )


class FindingOut(BaseModel):
    """One stored detector finding."""

    id: int
    incident_id: int | None
    kind: str
    entity: str
    status: Literal["firing", "cleared"]
    time: AwareDatetime
    severity: Severity
    summary: str
    detector: str
    node: str | None
    port: str | None
    link: str | None
    score: float
    confidence: float
    evidence: dict[str, Any]


class IncidentDetailOut(IncidentOut):
    """An incident with its latest findings, newest first."""

    findings: list[FindingOut] = Field(description="Up to the 50 most recent findings.")


class IncidentPage(BaseModel):
    """One page of incidents, newest first."""

    items: list[IncidentOut]
    count: int = Field(description="Number of items in this page.")
    limit: int
    offset: int


def _iso_only(v: object) -> object:
    """A time in a query is ISO 8601, as the schema's ``date-time`` says: a bare number (which
    pydantic would take for Unix seconds) is refused."""
    if isinstance(v, str) and re.fullmatch(r"\s*[-+]?\d+(?:\.\d*)?\s*", v):
        raise ValueError(f"not a time: {v!r} (ISO 8601 with its zone, e.g. 2026-12-06T01:00:00Z)")
    return v


#: A time a client gives in a query: ISO 8601 with its zone.
IsoTime = Annotated[AwareDatetime, BeforeValidator(_iso_only)]


_AMOUNT = r"\d{1,3}(?:\.\d{1,3})?"
#: A silence's or exclusion's length, as the schema states it and the server applies it:
#: Prometheus's grammar (units largest first, each at most once: ``30m``, ``4h``, ``1h30m``,
#: ``2d``, ``1w``, or plain seconds), amounts of at most three digits and three decimals, not
#: zero. The longest, ``999w999d...``, ends well inside any date a database holds.
API_DURATION = (
    rf"^(?=[^1-9]*[1-9])(?:{_AMOUNT}|(?:{_AMOUNT}w)?(?:{_AMOUNT}d)?(?:{_AMOUNT}h)?(?:{_AMOUNT}m)?"
    rf"(?:{_AMOUNT}s)?(?:{_AMOUNT}ms)?)$"
)
_API_DURATION = re.compile(API_DURATION)


def parse_api_duration(v: str) -> timedelta:
    """A silence's or exclusion's length (:data:`API_DURATION`)."""
    if not _API_DURATION.match(v):
        raise ValueError(f"not a duration: {v!r} (use e.g. 30m, 4h, 1h30m, 2d; amounts of at most 3 digits)")
    return timedelta(seconds=parse_duration(v))


class CommentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    comment: str = Field("", max_length=2000, pattern=NO_NUL)


class ReasonIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000, pattern=NO_NUL, description="Why; for the audit log.")


class SilenceIn(ReasonIn):
    model_config = ConfigDict(extra="forbid", regex_engine="python-re")  # the pattern looks ahead
    duration: str = Field(pattern=API_DURATION, description="How long, e.g. 30m, 4h, 2d.")

    @field_validator("duration")
    @classmethod
    def _check(cls, v: str) -> str:
        parse_api_duration(v)
        return v


class SilenceOut(BaseModel):
    id: int
    kind: str
    entity: str
    reason: str
    created_by: str
    created_at: AwareDatetime
    expires_at: AwareDatetime


# -- drain --------------------------------------------------------------------------------------
class DrainItem(BaseModel):
    """One node the scheduler should drain (``drain``) or keep an eye on (``watch``)."""

    node: str
    action: Literal["drain", "watch"]
    reason: str = Field(description="Why, in words: what failed, since when, what agrees.")
    since: AwareDatetime = Field(description="When the failure behind it began (UTC).")
    incident_ids: list[int]
    evidence_url: str = Field(description="Where the verdict, ports and incidents are: /api/v1/nodes/<node>.")
    shadow: bool = Field(description="Shadow mode: recommended only; tools must not act on it.")


class BreakerOut(BaseModel):
    tripped: bool
    max_fraction: float
    window_seconds: int
    recent_drains: int = Field(description="Drains made inside the trailing window.")
    cap: int = Field(description="Most drains allowed inside the window.")
    since: AwareDatetime | None
    message: str


class DrainStateOut(BaseModel):
    shadow: bool
    circuit_breaker: BreakerOut


# -- nodes --------------------------------------------------------------------------------------
class VerdictOut(BaseModel):
    node: str
    role: str
    side: Literal["host", "link", "network"]
    severity: Severity
    reasons: list[str]
    incident_ids: list[int]
    blamed_switch: str | None
    ports: list[str]


class NodesOut(BaseModel):
    items: list[VerdictOut]
    count: int = Field(description="Items in this page.")
    total: int = Field(description="Nodes with a verdict, before paging.")
    limit: int
    offset: int


class DrainOut(BaseModel):
    """The drain policy's current word on this node."""

    action: Literal["drain", "watch", "none"]
    reason: str
    since: AwareDatetime = Field(description="UTC, spelled as in /api/v1/drain.")
    incident_ids: list[int]
    shadow: bool


class NodeOut(BaseModel):
    node: str
    role: str
    verdict: VerdictOut | None
    drain: DrainOut | None = None
    ports: list[str]
    incidents: list[dict[str, Any]]


class ExcludeIn(ReasonIn):
    model_config = ConfigDict(extra="forbid", regex_engine="python-re")  # the pattern looks ahead
    duration: str | None = Field(
        None, pattern=API_DURATION, description="How long (e.g. 24h); null keeps it until removed."
    )

    @field_validator("duration")
    @classmethod
    def _check(cls, v: str | None) -> str | None:
        if v is not None:
            parse_api_duration(v)
        return v


class ExcludeOut(BaseModel):
    node: str
    reason: str
    created_by: str
    created_at: AwareDatetime
    expires_at: AwareDatetime | None


class UndrainOut(BaseModel):
    node: str
    action: Literal["none"]
    previous_action: Literal["drain", "watch"]
    released_at: AwareDatetime


# -- audit --------------------------------------------------------------------------------------
class AuditOut(BaseModel):
    id: int
    time: AwareDatetime
    actor: str = Field(description="'policy' or the name of the operator's token.")
    action: str
    node: str | None
    incident_id: int | None
    message: str
    evidence: dict[str, Any]


class AuditPage(BaseModel):
    items: list[AuditOut]
    count: int
    limit: int
    offset: int


# -- ports, links and the grid ------------------------------------------------------------------
class PortOut(BaseModel):
    """One port: where it is, what it reads against what it should, and what is open on it."""

    key: str
    node: str
    role: Role
    switch: str | None = Field(description="The switch the port sits on or is cabled to.")
    peer: str | None = Field(description="Port at the other end of its cable.")
    link: str | None
    rail: int | None
    speed_bps: int | None = Field(description="Latest negotiated speed; null before the first reading.")
    expected_speed_bps: int | None
    width: int | None
    expected_width: int | None
    degraded: bool = Field(description="Speed or width below what the inventory expects.")
    state: State
    phys_state: int | None
    logical_state: int | None
    stale: bool = Field(description="Its source is failing: the reading is old.")
    health: PortHealth = Field(
        description="Worst open incident on the port or its cable; no_data when it has none and no "
        "source reported the port lately (unknown is not ok)"
    )
    last_update: AwareDatetime | None = Field(description="Time of the latest sample.")
    incident_ids: list[int]


class PortDetailOut(PortOut):
    incidents: list[IncidentOut] = Field(description="Open and acknowledged incidents on it.")


class PortPage(BaseModel):
    items: list[PortOut]
    count: int = Field(description="Items in this page.")
    total: int = Field(description="Ports matching the filters.")
    limit: int
    offset: int


class LinkOut(BaseModel):
    """One cable: both ends and the worst open incident on either."""

    link: str
    a: PortOut
    b: PortOut
    health: PortHealth
    incident_ids: list[int]
    kinds: list[str]


class LinkDetailOut(LinkOut):
    incidents: list[IncidentOut]


class LinkPage(BaseModel):
    items: list[LinkOut]
    count: int
    total: int
    limit: int
    offset: int


class GridRowOut(BaseModel):
    node: str
    role: Role
    cells: list[tuple[str, str | None, int, int]] = Field(
        description="Per cell: port key, the port cabled to it, health and flags of the two."
    )


class GridOut(BaseModel):
    """The whole fabric in one compact answer, for the status page."""

    generated_at: AwareDatetime
    last_poll: AwareDatetime | None
    polls: int
    ports: int
    links: int
    health: dict[str, int] = Field(description="Ports per health.")
    stale: int
    down: int
    degraded: int
    flags: dict[str, int] = Field(description="Bit of each flag in a cell's flags.")
    rows: list[GridRowOut]


# -- sources and ingest -------------------------------------------------------------------------
class TargetOut(BaseModel):
    source: str
    target: str
    ok: bool | None
    scrapes: int
    failures: int
    consecutive_failures: int
    last_attempt: datetime | None
    last_success: datetime | None
    duration_seconds: float
    samples: int
    error: str | None
    stale_port_count: int
    stale_ports: list[str]
    unmatched_rows: int = Field(
        description="Port rows of the last good scrape whose key matches no port of the fabric model"
    )
    unmatched_examples: list[str] = Field(description="Up to five of those keys")
    note: str | None = Field(
        description="What the last good scrape read although its source got it wrong (a known upstream "
        "bug), or what it left out (`read nothing: ...` when everything it found was unreadable)"
    )
    skipped: int = Field(0, description="Lines, records and values the last scrape that read any left out")


class SourcesOut(BaseModel):
    items: list[TargetOut]
    stale_ports: int
    unmatched_rows: int = Field(description="Unmatched port rows of every target's last good scrape")


class IngestOut(BaseModel):
    accepted_rows: int
    job: str


# -- jobs ---------------------------------------------------------------------------------------
JobPhaseName = Literal["start_up", "data_path", "steady_state", "fault_path"]


class JobIncidentOut(BaseModel):
    """An incident as a job's view lists it; ``/api/v1/incidents/{id}`` has its evidence."""

    id: int
    kind: str
    entity: str
    status: IncidentStatusParam
    severity: Severity
    summary: str
    node: str | None
    port: str | None
    link: str | None
    opened_at: AwareDatetime
    last_seen_at: AwareDatetime
    caused_by: int | None = Field(default=None, description="The active incident that is its root cause.")
    cause_reason: str | None = None
    effects: list[int] = Field(default_factory=list, description="Active incidents it is the root cause of.")


class JobCountsOut(BaseModel):
    """Active incidents of a job in each phase of its life, and on the fabric under it."""

    start_up: int
    data_path: int
    steady_state: int
    fault_path: int
    fabric: int


class JobOut(BaseModel):
    """A job with active incidents."""

    job: str
    hosts: list[str] = Field(description="Hosts its incidents name (the service keeps no other map of them).")
    counts: JobCountsOut
    incident_count: int = Field(description="Its incidents in every phase and on the fabric under it.")
    worst_severity: Severity


class JobsOut(BaseModel):
    items: list[JobOut] = Field(description="Worst first, then by job.")
    count: int


class JobPhaseOut(BaseModel):
    phase: JobPhaseName
    label: str
    incidents: list[JobIncidentOut] = Field(description="Worst first, then the oldest.")


class JobDetailOut(JobOut):
    """A job's incidents by phase, in the order of its life, and the fabric under its hosts."""

    phases: list[JobPhaseOut] = Field(description="start-up, data path, steady state, fault path: each one.")
    fabric: list[JobIncidentOut] = Field(description="Link and port incidents on the job's hosts.")


# -- cluster ------------------------------------------------------------------------------------
class ClusterMemberOut(BaseModel):
    member_id: str
    url: str
    lead: bool
    collect: bool
    #: Targets it scrapes now (every member computes the same assignment).
    targets: int
    leader: bool


class ClusterOut(BaseModel):
    """The replicas as this one sees them (README, Deploy: replicas)."""

    enabled: bool
    #: This replica: its member id and role (leader or follower); None without ``cluster:``.
    member_id: str | None = None
    role: Literal["leader", "follower", "single"] = "single"
    leader: str | None = None
    leader_url: str | None = None
    #: The lease's fencing token: one more at every change of leader.
    fencing_token: int | None = None
    members: list[ClusterMemberOut] = []
    #: Targets this replica scrapes, and of those every target in the configuration.
    targets_owned: int = 0
    targets: int = 0
    #: Writes the database refused this replica (a stale token after it lost the lead).
    fence_refusals: int = 0
    takeovers: int = 0
    nats_connected: bool = False
