"""``/api/v1/nodes``: node verdicts (host, link or network side) from the open incidents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import AwareDatetime, BaseModel, Field

from graywire.collectors.model import Fabric
from graywire.detectors.correlate import node_verdicts
from graywire.service.drain_engine import OWN_KINDS
from graywire.service.store import IncidentStore


class VerdictOut(BaseModel):
    node: str
    role: str
    side: Literal["host", "link", "network"]
    severity: str
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


def make_nodes_router(
    store: IncidentStore,
    fabric: Fabric,
    drain: Callable[[str], dict[str, Any] | None] | None = None,
) -> APIRouter:
    """``drain`` looks up a node's drain recommendation (the drain engine's), if there is one."""
    router = APIRouter(prefix="/api/v1", tags=["nodes"])
    roles = dict(zip(fabric.node_names, fabric.node_roles, strict=True))

    @router.get("/nodes", response_model=NodesOut)
    def nodes(
        side: Annotated[
            Literal["host", "link", "network"] | None, Query(description="Only this side.")
        ] = None,
        role: Annotated[
            str | None, Query(max_length=32, description="Only this role (host, leaf...).")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
        offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
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
    def node(name: Annotated[str, Path(max_length=200)]) -> NodeOut:
        if name not in roles:
            raise HTTPException(404, f"node {name} is not in the fabric model")
        incidents = _open(store)
        verdict = next((v for v in node_verdicts(_evidence(incidents), fabric) if v.node == name), None)
        ports = [k for k in fabric.keys if k.startswith(f"{name}/")]
        ids = set(verdict.incident_ids) if verdict else set()
        mine = [i for i in incidents if i.get("node") == name or i["id"] in ids]
        return NodeOut(
            node=name,
            role=roles[name],
            verdict=VerdictOut(**verdict.as_dict()) if verdict else None,
            drain=_drain_out(drain(name)) if drain else None,
            ports=ports,
            incidents=mine,
        )

    return router
