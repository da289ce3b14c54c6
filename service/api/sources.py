"""``/api/v1/sources``: is every scrape target healthy, and which ports are stale because of it."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from graywire.service.api.deps import StateDep
from graywire.service.api.schemas import SourcesOut, TargetOut

router = APIRouter(prefix="/api/v1", tags=["sources"])


def _ts(v: float | None) -> datetime | None:
    return datetime.fromtimestamp(v, UTC) if v is not None else None


@router.get("/sources", response_model=SourcesOut)
async def sources(state: StateDep) -> SourcesOut:
    """Every target with its last scrape; a failing one lists the ports it leaves stale, and any
    one whose port rows name no modelled port says how many and which."""
    items = [
        TargetOut(
            source=t.source,
            target=t.target,
            ok=t.ok,
            scrapes=t.scrapes,
            failures=t.failures,
            consecutive_failures=t.consecutive_failures,
            last_attempt=_ts(t.last_attempt),
            last_success=_ts(t.last_success),
            duration_seconds=t.duration_s,
            samples=t.samples,
            error=t.error,
            stale_port_count=t.stale_port_count,
            stale_ports=list(t.stale_ports[:100]),
            unmatched_rows=t.unmatched_rows,
            unmatched_examples=list(t.unmatched_examples),
            note=t.note,
            skipped=t.skipped,
        )
        for t in state.targets
    ]
    stale = int(state.port_stale.sum()) if state.port_stale is not None else 0
    return SourcesOut(items=items, stale_ports=stale, unmatched_rows=sum(t.unmatched_rows for t in items))
