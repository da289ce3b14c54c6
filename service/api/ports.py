"""``/api/v1/ports`` and ``/api/v1/fabric/grid``: every port at a glance.

Each answer joins the fabric model (expected speed and width, rail, peer), the latest reading
the runner kept (speed, width, state, when) and the open incidents (health). Lists page with
``limit``/``offset`` and say how many matched in ``total``. An unknown node or switch in a
filter is a 422 naming it, so a typo is never mistaken for a healthy, empty answer.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, HTTPException, Query, Response
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter

from graywire.service.api.deps import (
    CacheDep,
    FabricDep,
    LayoutDep,
    PortViewDep,
    ServicesDep,
    port_view,
)
from graywire.service.api.schemas import ErrorOut, GridOut, PortDetailOut, PortHealth, PortPage, Role, State
from graywire.service.state.ports import STATES, FabricLayout

router = APIRouter(prefix="/api/v1", tags=["ports"])
MAX_PAGE = 5000
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "no such node, switch or port in the fabric model"}
}
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Page size, at most {MAX_PAGE}.")]
Offset = Annotated[int, Query(ge=0, le=2**63 - 1)]
HealthFilter = Annotated[list[PortHealth] | None, Query(description="Only these health values (repeatable).")]
KindFilter = Annotated[
    str | None, Query(min_length=1, description="Only ports with an open incident of this kind.")
]
_page = TypeAdapter(PortPage)


def node_index(layout: FabricLayout, name: str, what: str = "node") -> int:
    """The node a filter names; a 404 for one the model does not have (the schema cannot list
    the model's names, so it is no malformed request: there is no such node)."""
    j = layout.node_index.get(name)
    if j is None:
        raise HTTPException(404, f"{what} {name!r} is not in the fabric model")
    if what == "switch" and not layout.node_is_switch[j]:
        raise HTTPException(404, f"no switch {name!r} in the fabric model: it is a host")
    return j


@router.get("/ports", response_model=PortPage, responses=NOT_FOUND, summary="List ports, filtered and paged")
async def list_ports(
    fabric: FabricDep,
    layout: LayoutDep,
    services: ServicesDep,
    cache: CacheDep,
    node: Annotated[str | None, Query(min_length=1, description="Only ports on this node.")] = None,
    switch: Annotated[
        str | None,
        Query(min_length=1, description="Only ports on this switch or at the other end of its cables."),
    ] = None,
    role: Annotated[Role | None, Query(description="Only ports on nodes of this role.")] = None,
    rail: Annotated[int | None, Query(ge=0, le=32767)] = None,
    health: HealthFilter = None,
    kind: KindFilter = None,
    state: Annotated[State | None, Query()] = None,
    stale: Annotated[bool | None, Query()] = None,
    degraded: Annotated[bool | None, Query(description="Speed or width below expected.")] = None,
    limit: Limit = 500,
    offset: Offset = 0,
) -> Response:
    """Served from the read cache: a page is computed once per published state and database
    generation (the port view is tens of milliseconds at 500,000 ports, the page's validation
    more), however many clients ask; the render reads the state current when it runs."""
    on_node = node_index(layout, node) if node is not None else None
    on_switch = node_index(layout, switch, "switch") if switch is not None else None

    def render() -> bytes:
        v = port_view(services)
        mask = np.ones(fabric.n_ports, dtype=bool)
        if on_node is not None:
            mask &= fabric.node_of_port == on_node
        if on_switch is not None:
            mask &= (fabric.node_of_port == on_switch) | (layout.peer_node == on_switch)
        if role is not None:
            mask &= layout.port_role == role
        if rail is not None:
            mask &= fabric.rail == rail
        if health:
            mask &= v.health_mask(health)
        if kind is not None:
            mask &= v.with_kind(kind)
        if state is not None:
            mask &= v.state == STATES.index(state)
        if stale is not None:
            mask &= v.stale == stale
        if degraded is not None:
            mask &= v.degraded == degraded
        hits = np.flatnonzero(mask)
        items = [v.port(int(i)) for i in hits[offset : offset + limit]]
        out = {"items": items, "count": len(items), "total": int(hits.size), "limit": limit, "offset": offset}
        return _page.dump_json(_page.validate_python(out))

    filters = (node, switch, role, rail, tuple(health or ()), kind, state, stale, degraded, limit, offset)
    return await cache.json(("ports", *filters), render)


@router.get("/ports/{key:path}", response_model=PortDetailOut, responses=NOT_FOUND, summary="One port")
def get_port(layout: LayoutDep, v: PortViewDep, key: str) -> dict[str, Any]:
    i = layout.key_index.get(key)
    if i is None:
        raise HTTPException(404, f"port {key!r} is not in the fabric model")
    out = v.port(i)
    out["incidents"] = [v.incidents[k] for k in out["incident_ids"]]
    return out


@router.get("/fabric/grid", response_model=GridOut, summary="Every switch's ports, coloured by health")
def grid(v: PortViewDep) -> JSONResponse:
    # Built from plain lists and ints already: skipping re-validation keeps a 30,000-port
    # fabric's grid at tens of milliseconds (the page asks every few seconds).
    return JSONResponse(v.grid())
