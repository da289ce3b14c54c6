"""``/api/v1/incidents`` and ``/api/v1/silences``: read incidents, and act on them.

Reads are open to readers (or anyone, with ``auth.read_open``); acknowledge, resolve and
silence need an operator token and write an audit row naming its owner. Handlers that touch
the database are plain ``def``: FastAPI runs them in its thread pool instead of stalling the
event loop. The list, polled far more often than it changes, is served from the read cache.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response
from pydantic import TypeAdapter

from graywire.service.api.deps import CacheDep, Operator, OpsDep, StoreDep
from graywire.service.api.schemas import (
    ACTION_ERRORS,
    MAX_ID,
    CommentIn,
    ErrorOut,
    IncidentDetailOut,
    IncidentOut,
    IncidentPage,
    IncidentStatusParam,
    SilenceIn,
    SilenceOut,
    parse_api_duration,
)

router = APIRouter(prefix="/api/v1", tags=["incidents"])
IncidentId = Annotated[int, Path(ge=1, le=MAX_ID)]
_page = TypeAdapter(IncidentPage)


@router.get("/incidents", response_model=IncidentPage, summary="List incidents")
async def list_incidents(
    store: StoreDep,
    cache: CacheDep,
    status: Annotated[IncidentStatusParam | None, Query(description="Only this status.")] = None,
    kind: Annotated[str | None, Query(min_length=1, description="Only this kind.")] = None,
    node: Annotated[str | None, Query(min_length=1, description="Only incidents on this node.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> Response:
    def render() -> bytes:
        items = store.list_incidents(status=status, kind=kind, node=node, limit=limit, offset=offset)
        out = {"items": items, "count": len(items), "limit": limit, "offset": offset}
        return _page.dump_json(_page.validate_python(out))

    return await cache.json(("incidents", status, kind, node, limit, offset), render)


@router.get(
    "/incidents/{incident_id}",
    response_model=IncidentDetailOut,
    responses={404: {"model": ErrorOut, "description": "No incident with this id"}},
    summary="One incident with its recent findings",
)
def get_incident(store: StoreDep, incident_id: IncidentId) -> dict[str, Any]:
    incident = store.get_incident(incident_id)
    if incident is None:
        raise HTTPException(status_code=404, detail=f"incident {incident_id} not found")
    return incident


@router.post("/incidents/{incident_id}/ack", response_model=IncidentOut, responses=ACTION_ERRORS)
def acknowledge(
    ops: OpsDep, incident_id: IncidentId, who: Operator, body: CommentIn | None = None
) -> dict[str, Any]:
    """Open -> acknowledged (idempotent); a resolved incident cannot be acknowledged (409)."""
    return ops.acknowledge(incident_id, who.name, body.comment if body else "")


@router.post("/incidents/{incident_id}/resolve", response_model=IncidentOut, responses=ACTION_ERRORS)
def resolve(
    ops: OpsDep, incident_id: IncidentId, who: Operator, body: CommentIn | None = None
) -> dict[str, Any]:
    """Resolve by hand; it reopens (same id) if the failure is seen again."""
    return ops.resolve(incident_id, who.name, body.comment if body else "")


@router.post(
    "/incidents/{incident_id}/silence", response_model=SilenceOut, status_code=201, responses=ACTION_ERRORS
)
def silence(ops: OpsDep, incident_id: IncidentId, body: SilenceIn, who: Operator) -> dict[str, Any]:
    """Silence this incident's kind + entity for a while: no drain comes from it."""
    return ops.silence(incident_id, parse_api_duration(body.duration), who.name, body.reason)


@router.get("/silences", response_model=list[SilenceOut])
def silences(
    ops: OpsDep,
    include_expired: Annotated[bool, Query(description="Also list expired silences.")] = False,
) -> list[dict[str, Any]]:
    return ops.list_silences(active_only=not include_expired)
