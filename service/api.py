"""Read-only HTTP API for incidents (``/api/v1``), used by the scheduler helpers and the UI.

Handlers are plain ``def``: the store does blocking SQL, and FastAPI runs sync handlers in its
thread pool instead of stalling the event loop. The list, polled far more often than it
changes, is served from :class:`graywire.service.read_cache.ReadCache` (computed in a worker thread).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response
from pydantic import AwareDatetime, BaseModel, Field, TypeAdapter

from graywire.detectors.findings import Severity
from graywire.service.read_cache import ReadCache
from graywire.service.store import IncidentStore

IncidentStatusParam = Literal["open", "acknowledged", "resolved"]
SeverityOut = Severity
MAX_ID = 2**63 - 1  # larger ids cannot exist, and SQLite cannot even bind them


class IncidentOut(BaseModel):
    """An incident: one gray failure on one entity, deduplicated across polls."""

    id: int
    kind: str = Field(description="What failed, e.g. speed_downgrade; with entity, the dedup key.")
    entity: str = Field(description="Which port, link or node; with kind, the dedup key.")
    status: IncidentStatusParam
    severity: SeverityOut
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


class FindingOut(BaseModel):
    """One stored detector finding."""

    id: int
    incident_id: int | None
    kind: str
    entity: str
    status: Literal["firing", "cleared"]
    time: AwareDatetime
    severity: SeverityOut
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
    413: {"model": ErrorOut, "description": "request body over its limit"},
    422: {"model": ValidationErrorOut, "description": "invalid input"},
    431: {"model": ErrorOut, "description": "request headers over http.max_header_bytes"},
    503: {"model": ErrorOut, "description": "database unavailable; retry after Retry-After seconds"},
}


def make_router(store: IncidentStore, cache: ReadCache | None = None) -> APIRouter:
    """Routes over ``store``; the caller mounts them (``app.include_router``) next to its own."""
    router = APIRouter(prefix="/api/v1", tags=["incidents"])
    cache = cache or ReadCache(store.engine)
    page = TypeAdapter(IncidentPage)

    @router.get("/incidents", response_model=IncidentPage, summary="List incidents")
    async def list_incidents(
        status: Annotated[IncidentStatusParam | None, Query(description="Only this status.")] = None,
        kind: Annotated[str | None, Query(description="Only this kind.")] = None,
        node: Annotated[str | None, Query(description="Only incidents on this node.")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    ) -> Response:
        def render() -> bytes:
            items = store.list_incidents(status=status, kind=kind, node=node, limit=limit, offset=offset)
            out = {"items": items, "count": len(items), "limit": limit, "offset": offset}
            return page.dump_json(page.validate_python(out))

        return await cache.json(("incidents", status, kind, node, limit, offset), render)

    @router.get(
        "/incidents/{incident_id}",
        response_model=IncidentDetailOut,
        responses={404: {"model": ErrorOut, "description": "No incident with this id"}},
        summary="One incident with its recent findings",
    )
    def get_incident(incident_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> dict[str, Any]:
        incident = store.get_incident(incident_id)
        if incident is None:
            raise HTTPException(status_code=404, detail=f"incident {incident_id} not found")
        return incident

    return router
