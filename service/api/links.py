"""``/api/v1/links``: every cable, both ends and the worst open incident on either."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, HTTPException, Query

from graywire.service.api.deps import FabricDep, LayoutDep, PortViewDep
from graywire.service.api.ports import (
    NOT_FOUND,
    HealthFilter,
    KindFilter,
    Limit,
    Offset,
    node_index,
)
from graywire.service.api.schemas import LinkDetailOut, LinkPage

router = APIRouter(prefix="/api/v1", tags=["ports"])


@router.get(
    "/links", response_model=LinkPage, responses=NOT_FOUND, summary="List links (cables), filtered and paged"
)
def list_links(
    fabric: FabricDep,
    layout: LayoutDep,
    v: PortViewDep,
    node: Annotated[
        str | None, Query(min_length=1, description="Only links with an end on this node.")
    ] = None,
    switch: Annotated[
        str | None, Query(min_length=1, description="Only links with an end on this switch.")
    ] = None,
    health: HealthFilter = None,
    kind: KindFilter = None,
    limit: Limit = 500,
    offset: Offset = 0,
) -> dict[str, Any]:
    a, b = fabric.link_a, fabric.link_b
    na, nb = fabric.node_of_port[a], fabric.node_of_port[b]
    mask = np.ones(a.size, dtype=bool)
    if node is not None:
        j = node_index(layout, node)
        mask &= (na == j) | (nb == j)
    if switch is not None:
        j = node_index(layout, switch, "switch")
        mask &= (na == j) | (nb == j)
    if health:
        mask &= v.link_health_mask(health)
    if kind is not None:
        with_kind = v.with_kind(kind)
        mask &= with_kind[a] | with_kind[b]
    hits = np.flatnonzero(mask)
    items = [v.link(int(n)) for n in hits[offset : offset + limit]]
    return {"items": items, "count": len(items), "total": int(hits.size), "limit": limit, "offset": offset}


@router.get(
    "/links/{name:path}",
    response_model=LinkDetailOut,
    responses=NOT_FOUND,
    summary="One link, by its label (a<->b) or the key of a port on it",
)
def get_link(layout: LayoutDep, v: PortViewDep, name: str) -> dict[str, Any]:
    n = layout.link_of(name)
    if n is None:
        raise HTTPException(404, f"no link {name!r} in the fabric model")
    out = v.link(n)
    out["incidents"] = [v.incidents[k] for k in out["incident_ids"]]
    return out
