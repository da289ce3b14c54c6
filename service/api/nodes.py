"""``/api/v1/nodes`` and ``/api/v1/excludes``: node verdicts, and what operators do to nodes.

A verdict says on which side a node's open incidents put the fault (host, link or network);
the detail adds the drain policy's word on it. Exclude, unexclude and undrain need an operator
token and write an audit row.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query

from graywire.detectors.correlate import node_verdicts
from graywire.service.api.deps import FabricDep, Operator, OpsDep, ServicesDep, StoreDep, known_node
from graywire.service.api.schemas import (
    ACTION_ERRORS,
    MAX_ID,
    DrainOut,
    ExcludeIn,
    ExcludeOut,
    NodeOut,
    NodesOut,
    ReasonIn,
    UndrainOut,
    VerdictOut,
    parse_api_duration,
)
from graywire.service.drain_engine import OWN_KINDS
from graywire.service.store import IncidentStore

router = APIRouter(prefix="/api/v1", tags=["nodes"])
NodeName = Annotated[str, Path(min_length=1, max_length=200, description="node name as in the fabric model")]


def _drain_out(rec: dict[str, Any] | None) -> DrainOut | None:
    if rec is None:
        return None
    return DrainOut(**{k: rec[k] for k in ("action", "reason", "since", "incident_ids", "shadow")})


def _evidence(incidents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Incidents that are evidence about nodes: not the ones the drain policy raised itself."""
    return [i for i in incidents if i["kind"] not in OWN_KINDS]


def _open(store: IncidentStore) -> list[dict[str, Any]]:
    return [
        *store.list_incidents(status="open", limit=100_000),
        *store.list_incidents(status="acknowledged", limit=100_000),
    ]


@router.get("/nodes", response_model=NodesOut)
def nodes(
    store: StoreDep,
    fabric: FabricDep,
    side: Annotated[Literal["host", "link", "network"] | None, Query(description="Only this side.")] = None,
    role: Annotated[
        str | None, Query(min_length=1, max_length=32, description="Only this role (host, leaf...).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> NodesOut:
    """Every node with an open incident and whose side it is on; switches first."""
    verdicts = [
        v
        for v in node_verdicts(_evidence(_open(store)), fabric)
        if (side is None or v.side == side) and (role is None or v.role == role)
    ]
    items = [VerdictOut(**v.as_dict()) for v in verdicts[offset : offset + limit]]
    return NodesOut(items=items, count=len(items), total=len(verdicts), limit=limit, offset=offset)


@router.get("/nodes/{name}", response_model=NodeOut, responses={404: {"description": "unknown node"}})
def node(s: ServicesDep, name: Annotated[str, Path(max_length=200)]) -> NodeOut:
    fabric, layout = s.fabric, s.layout
    assert fabric is not None and layout is not None, "the nodes routes need the fabric model"
    j = layout.node_index.get(name)
    if j is None:
        raise HTTPException(404, f"node {name} is not in the fabric model")
    incidents = _open(s.store)
    verdict = next((v for v in node_verdicts(_evidence(incidents), fabric) if v.node == name), None)
    ports = [k for k in fabric.keys if k.startswith(f"{name}/")]
    ids = set(verdict.incident_ids) if verdict else set()
    mine = [i for i in incidents if i.get("node") == name or i["id"] in ids]
    return NodeOut(
        node=name,
        role=str(fabric.node_roles[j]),
        verdict=VerdictOut(**verdict.as_dict()) if verdict else None,
        drain=_drain_out(s.drain.recommendation(name)) if s.drain else None,
        ports=ports,
        incidents=mine,
    )


@router.post("/nodes/{name}/exclude", response_model=ExcludeOut, status_code=201, responses=ACTION_ERRORS)
def exclude(s: ServicesDep, ops: OpsDep, name: NodeName, body: ExcludeIn, who: Operator) -> dict[str, Any]:
    """Never drain this node (until the duration ends); an existing drain is lifted."""
    known_node(s, name)
    duration = parse_api_duration(body.duration) if body.duration else None
    return ops.exclude(name, duration, who.name, body.reason)


@router.delete("/nodes/{name}/exclude", status_code=204, responses=ACTION_ERRORS)
def unexclude(s: ServicesDep, ops: OpsDep, name: NodeName, who: Operator) -> None:
    known_node(s, name)
    ops.unexclude(name, who.name)


@router.get("/excludes", response_model=list[ExcludeOut])
def excludes(ops: OpsDep) -> list[dict[str, Any]]:
    """The exclude list (expired entries are gone)."""
    return ops.list_excludes()


@router.post("/nodes/{name}/undrain", response_model=UndrainOut, responses=ACTION_ERRORS)
def undrain(s: ServicesDep, ops: OpsDep, name: NodeName, body: ReasonIn, who: Operator) -> dict[str, Any]:
    """Return a drained (or watched) node to service; the cooldown then applies."""
    known_node(s, name)
    return ops.undrain(name, who.name, body.reason)
