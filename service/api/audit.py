"""``/api/v1/audit``: every decision, the policy's and the operators', with its evidence."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from graywire.service.api.deps import OpsDep
from graywire.service.api.schemas import MAX_ID, AuditPage, IsoTime

router = APIRouter(prefix="/api/v1", tags=["audit"])


def _utc(name: str, t: datetime | None) -> datetime | None:
    """``t`` in UTC; a time that leaves datetime's range on the way (9999-12-31T23:59-14:00)
    is bad input, not a 500 from deep in the database layer."""
    if t is None:
        return None
    try:
        return t.astimezone(UTC)
    except OverflowError:
        raise HTTPException(422, f"{name} is out of range once converted to UTC") from None


@router.get("/audit", response_model=AuditPage)
def audit(
    ops: OpsDep,
    node: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    action: Annotated[
        str | None, Query(min_length=1, max_length=64, description="e.g. drain, hold, undrain")
    ] = None,
    actor: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    incident_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    since: Annotated[IsoTime | None, Query(description="From this time (inclusive).")] = None,
    until: Annotated[IsoTime | None, Query(description="Before this time.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> dict[str, Any]:
    """Every decision, newest first, with the evidence it was taken on."""
    since, until = _utc("since", since), _utc("until", until)
    items = ops.audit(node=node, action=action, actor=actor, incident_id=incident_id, since=since,
                      until=until, limit=limit, offset=offset)  # fmt: skip
    return {"items": items, "count": len(items), "limit": limit, "offset": offset}
