"""What a route may ask for, as Annotated dependency aliases over the app's one ``Services``.

The app builds ``Services`` once and keeps it in ``app.state.services``; a route names what it
needs (``store: StoreDep``) instead of closing over objects, so every router is a plain module
and a test mounts it on a bare app with the parts it wants. The dependencies are ``async``:
attribute reads, run on the event loop rather than a trip to the thread pool per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials

from graywire.collectors.model import Fabric
from graywire.service.auth import Auth, Principal, Role, bearer
from graywire.service.cluster.node import ClusterNode
from graywire.service.drain_engine import DrainEngine
from graywire.service.ingest.admission import Admission
from graywire.service.operations import Operations
from graywire.service.runner import Runner
from graywire.service.state.fabric import FabricState, StateBoard
from graywire.service.state.ports import FabricLayout, PortView, build_view
from graywire.service.state.read_cache import ReadCache
from graywire.service.store import IncidentStore

T = TypeVar("T")


@dataclass
class Services:
    """The service's parts that routes use. Parts a test's app leaves out are None, and a
    route that needs one fails loudly rather than answering for a service that is not there."""

    store: IncidentStore
    cache: ReadCache
    fabric: Fabric | None = None
    auth: Auth | None = None
    state: StateBoard | None = None
    drain: DrainEngine | None = None
    ops: Operations | None = None
    runner: Runner | None = None
    admission: Admission | None = None
    #: This replica's part in a cluster; None without ``cluster:``.
    cluster: ClusterNode | None = None

    def __post_init__(self) -> None:
        self.layout = FabricLayout(self.fabric) if self.fabric is not None else None

    def install(self, app: FastAPI) -> None:
        app.state.services = self


def _part(part: T | None, name: str) -> T:
    if part is None:  # a wiring mistake, never a client's: say which part is missing
        raise RuntimeError(f"this app was built without its {name}")
    return part


async def services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(services)]


async def _store(s: ServicesDep) -> IncidentStore:
    return s.store


async def _cache(s: ServicesDep) -> ReadCache:
    return s.cache


async def _fabric(s: ServicesDep) -> Fabric:
    return _part(s.fabric, "fabric model")


async def _layout(s: ServicesDep) -> FabricLayout:
    return _part(s.layout, "fabric model")


async def _state(s: ServicesDep) -> FabricState:
    """The fabric state as the last poll published it: one consistent view for the request."""
    return _part(s.state, "fabric state").current


async def _drain(s: ServicesDep) -> DrainEngine:
    return _part(s.drain, "drain engine")


async def _ops(s: ServicesDep) -> Operations:
    return _part(s.ops, "operations")


async def _runner(s: ServicesDep) -> Runner:
    return _part(s.runner, "runner")


async def _admission(s: ServicesDep) -> Admission:
    return _part(s.admission, "push admission")


def port_view(s: Services, state: FabricState | None = None) -> PortView:
    """Per-port health in ``state`` (by default the current one) with the open incidents, read
    from the database: blocking, for a worker thread."""
    layout = _part(s.layout, "fabric model")
    state = state if state is not None else _part(s.state, "fabric state").current
    return build_view(layout, state, s.store.active_incidents())


def _port_view(s: ServicesDep) -> PortView:
    """Per-port health now: a plain ``def``, so its database read runs in the thread pool."""
    return port_view(s)


StoreDep = Annotated[IncidentStore, Depends(_store)]
CacheDep = Annotated[ReadCache, Depends(_cache)]
FabricDep = Annotated[Fabric, Depends(_fabric)]
LayoutDep = Annotated[FabricLayout, Depends(_layout)]
StateDep = Annotated[FabricState, Depends(_state)]
DrainDep = Annotated[DrainEngine, Depends(_drain)]
OpsDep = Annotated[Operations, Depends(_ops)]
RunnerDep = Annotated[Runner, Depends(_runner)]
AdmissionDep = Annotated[Admission, Depends(_admission)]
PortViewDep = Annotated[PortView, Depends(_port_view)]


def _role(role: Role):
    async def dependency(
        s: ServicesDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
    ) -> Principal:
        auth = _part(s.auth, "auth")
        return auth.check(credentials.credentials if credentials else None, role)

    return dependency


#: The caller holds the operator role (changes state; named in the audit log).
Operator = Annotated[Principal, Depends(_role("operator"))]
#: The caller holds the ingest role (pushes NCCL records).
Ingester = Annotated[Principal, Depends(_role("ingest"))]


def known_node(s: Services, name: str) -> None:
    if name not in _part(s.layout, "fabric model").node_index:
        raise HTTPException(404, f"node {name} is not in the fabric model")
