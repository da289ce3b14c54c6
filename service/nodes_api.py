"""``/api/v1/nodes``: node verdicts (host, link or network side) from the open incidents."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from collectors.model import Fabric
from detectors.correlate import node_verdicts
from service.store import IncidentStore


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
    count: int


class NodeOut(BaseModel):
    node: str
    role: str
    verdict: VerdictOut | None
    ports: list[str]
    incidents: list[dict[str, Any]]


def _open(store: IncidentStore) -> list[dict[str, Any]]:
    return [
        *store.list_incidents(status="open", limit=100_000),
        *store.list_incidents(status="acknowledged", limit=100_000),
    ]


def make_nodes_router(store: IncidentStore, fabric: Fabric) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["nodes"])
    roles = dict(zip(fabric.node_names, fabric.node_roles, strict=True))

    @router.get("/nodes", response_model=NodesOut)
    def nodes() -> NodesOut:
        """Every node with an open incident and whose side it is on; switches first."""
        items = [VerdictOut(**v.as_dict()) for v in node_verdicts(_open(store), fabric)]
        return NodesOut(items=items, count=len(items))

    @router.get("/nodes/{name}", response_model=NodeOut, responses={404: {"description": "unknown node"}})
    def node(name: str) -> NodeOut:
        if name not in roles:
            raise HTTPException(404, f"node {name} is not in the fabric model")
        incidents = _open(store)
        verdict = next((v for v in node_verdicts(incidents, fabric) if v.node == name), None)
        ports = [k for k in fabric.keys if k.startswith(f"{name}/")]
        ids = set(verdict.incident_ids) if verdict else set()
        mine = [i for i in incidents if i.get("node") == name or i["id"] in ids]
        return NodeOut(
            node=name,
            role=roles[name],
            verdict=VerdictOut(**verdict.as_dict()) if verdict else None,
            ports=ports,
            incidents=mine,
        )

    return router
