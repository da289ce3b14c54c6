"""``/api/v1/drain``: the drain list a scheduler reads, the policy's state, the breaker reset.

``GET /drain`` is what a scheduler (or Grafana's Infinity datasource) reads: a flat JSON
array, ISO 8601 UTC times, served from the read cache.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from pydantic import TypeAdapter

from graywire.service.api.deps import CacheDep, DrainDep, Operator, OpsDep
from graywire.service.api.schemas import ACTION_ERRORS, BreakerOut, DrainItem, DrainStateOut, ReasonIn

router = APIRouter(prefix="/api/v1", tags=["drain"])
_items = TypeAdapter(list[DrainItem])


@router.get("/drain", response_model=list[DrainItem], summary="Nodes to drain or watch")
async def drain_list(
    drain: DrainDep,
    cache: CacheDep,
    action: Annotated[Literal["drain", "watch"] | None, Query(description="Only this action.")] = None,
) -> Response:
    """Flat array for schedulers and Grafana Infinity. Excluded nodes are never ``drain``."""

    def render() -> bytes:
        return _items.dump_json(_items.validate_python(drain.list_drain(action)))

    return await cache.json(("drain", action), render)


@router.get("/drain/state", response_model=DrainStateOut)
def drain_state(drain: DrainDep) -> DrainStateOut:
    """Shadow mode and the circuit breaker: tripped or not, and how close to its cap."""
    b = drain.breaker()
    p = drain.policy
    return DrainStateOut(
        shadow=p.shadow,
        circuit_breaker=BreakerOut(
            tripped=b.tripped,
            max_fraction=p.max_fraction,
            window_seconds=int(p.window.total_seconds()),
            recent_drains=b.recent_drains,
            cap=b.cap,
            since=b.since,
            message=b.message
            or f"closed: {b.recent_drains} of at most {b.cap} drains in the last {p.window}",
        ),
    )


@router.post("/drain/breaker/reset", status_code=204, responses=ACTION_ERRORS)
def reset_breaker(ops: OpsDep, body: ReasonIn, who: Operator) -> None:
    """Close a tripped circuit breaker: drains resume at the next poll (operator)."""
    ops.reset_breaker(who.name, body.reason)
