"""``/api/v1/ports``, ``/api/v1/links`` and ``/api/v1/fabric/grid``: every port and cable at a glance.

Each answer joins the fabric model (expected speed and width, rail, peer), the latest reading
the runner kept (speed, width, state, when) and the open incidents (health). Lists page with
``limit``/``offset`` and say how many matched in ``total``. An unknown node or switch in a
filter is a 422 naming it, so a typo is never mistaken for a healthy, empty answer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BaseModel, Field

from graywire.collectors.model import Fabric
from graywire.service.api import ErrorOut, IncidentOut
from graywire.service.metrics import MetricsState
from graywire.service.port_view import HEALTH, STATES, FabricLayout, PortView, active_incidents, build_view
from graywire.service.store import IncidentStore

Health = Literal["ok", "warning", "critical"]
State = Literal["up", "init", "down", "unknown"]
Role = Literal["host", "leaf", "spine", "core"]
MAX_PAGE = 5000


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
    health: Health = Field(description="Worst open incident on the port or its cable.")
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
    health: Health
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


Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Page size, at most {MAX_PAGE}.")]
Offset = Annotated[int, Query(ge=0, le=2**63 - 1)]
HealthFilter = Annotated[list[Health] | None, Query(description="Only these health values (repeatable).")]
KindFilter = Annotated[str | None, Query(description="Only ports with an open incident of this kind.")]


def make_ports_router(store: IncidentStore, fabric: Fabric, metrics: MetricsState) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["ports"])
    layout = FabricLayout(fabric)
    not_found = {404: {"model": ErrorOut}}

    def view() -> PortView:
        return build_view(layout, metrics, active_incidents(store))

    def node_index(name: str, what: str = "node") -> int:
        j = layout.node_index.get(name)
        if j is None:
            raise HTTPException(422, f"{what} {name!r} is not in the fabric model")
        if what == "switch" and not layout.node_is_switch[j]:
            raise HTTPException(422, f"{name!r} is a host, not a switch")
        return j

    def health_mask(health: list[Health] | None, values: np.ndarray) -> np.ndarray:
        if not health:
            return np.ones(values.size, dtype=bool)
        return np.isin(values, [HEALTH.index(h) for h in health])

    @router.get("/ports", response_model=PortPage, summary="List ports, filtered and paged")
    def list_ports(
        node: Annotated[str | None, Query(description="Only ports on this node.")] = None,
        switch: Annotated[
            str | None, Query(description="Only ports on this switch or at the other end of its cables.")
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
    ) -> dict[str, Any]:
        mask = np.ones(fabric.n_ports, dtype=bool)
        if node is not None:
            mask &= fabric.node_of_port == node_index(node)
        if switch is not None:
            j = node_index(switch, "switch")
            mask &= (fabric.node_of_port == j) | (layout.peer_node == j)
        if role is not None:
            mask &= layout.port_role == role
        if rail is not None:
            mask &= fabric.rail == rail
        v = view()
        mask &= health_mask(health, v.health)
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
        return {
            "items": items,
            "count": len(items),
            "total": int(hits.size),
            "limit": limit,
            "offset": offset,
        }

    @router.get("/ports/{key:path}", response_model=PortDetailOut, responses=not_found, summary="One port")
    def get_port(key: str) -> dict[str, Any]:
        i = layout.key_index.get(key)
        if i is None:
            raise HTTPException(404, f"port {key!r} is not in the fabric model")
        v = view()
        out = v.port(i)
        out["incidents"] = [v.incidents[k] for k in out["incident_ids"]]
        return out

    @router.get("/links", response_model=LinkPage, summary="List links (cables), filtered and paged")
    def list_links(
        node: Annotated[str | None, Query(description="Only links with an end on this node.")] = None,
        switch: Annotated[str | None, Query(description="Only links with an end on this switch.")] = None,
        health: HealthFilter = None,
        kind: KindFilter = None,
        limit: Limit = 500,
        offset: Offset = 0,
    ) -> dict[str, Any]:
        a, b = fabric.link_a, fabric.link_b
        na, nb = fabric.node_of_port[a], fabric.node_of_port[b]
        mask = np.ones(a.size, dtype=bool)
        if node is not None:
            j = node_index(node)
            mask &= (na == j) | (nb == j)
        if switch is not None:
            j = node_index(switch, "switch")
            mask &= (na == j) | (nb == j)
        v = view()
        mask &= health_mask(health, np.maximum(v.health[a], v.health[b]))
        if kind is not None:
            with_kind = v.with_kind(kind)
            mask &= with_kind[a] | with_kind[b]
        hits = np.flatnonzero(mask)
        items = [v.link(int(n)) for n in hits[offset : offset + limit]]
        return {
            "items": items,
            "count": len(items),
            "total": int(hits.size),
            "limit": limit,
            "offset": offset,
        }

    @router.get(
        "/links/{name:path}",
        response_model=LinkDetailOut,
        responses=not_found,
        summary="One link, by its label (a<->b) or the key of a port on it",
    )
    def get_link(name: str) -> dict[str, Any]:
        n = layout.link_of(name)
        if n is None:
            raise HTTPException(404, f"no link {name!r} in the fabric model")
        v = view()
        out = v.link(n)
        out["incidents"] = [v.incidents[k] for k in out["incident_ids"]]
        return out

    @router.get("/fabric/grid", response_model=GridOut, summary="Every switch's ports, coloured by health")
    def grid() -> JSONResponse:
        # Built from plain lists and ints already: skipping re-validation keeps a 30,000-port
        # fabric's grid at tens of milliseconds (the page asks every few seconds).
        return JSONResponse(view().grid())

    return router
