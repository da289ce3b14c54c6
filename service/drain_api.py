"""``/api/v1`` routes of the drain policy and of operator actions.

``GET /drain`` is what a scheduler (or Grafana's Infinity datasource) reads: a flat JSON
array, ISO 8601 UTC times. Every route that changes state needs an operator token and writes
an audit row naming the token's owner.
"""

# No `from __future__ import annotations`: the routes annotate with `operator`, a local alias
# FastAPI must be able to evaluate.

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from graywire.collectors.units import parse_duration
from graywire.service.api import MAX_ID, ErrorOut, IncidentOut
from graywire.service.auth import Auth, Principal
from graywire.service.drain_engine import DrainEngine
from graywire.service.operations import Conflict, NotFound, Operations
from graywire.service.read_cache import ReadCache

MAX_DURATION = timedelta(days=365)
NodeName = Annotated[str, Path(min_length=1, max_length=200, description="node name as in the fabric model")]
IncidentId = Annotated[int, Path(ge=1, le=MAX_ID)]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "no or unknown bearer token"},
    403: {"model": ErrorOut, "description": "the token's role may not do this"},
    404: {"model": ErrorOut, "description": "no such incident or node"},
    409: {"model": ErrorOut, "description": "the action does not apply to the current state"},
}


def _utc(name: str, t: datetime | None) -> datetime | None:
    """``t`` in UTC; a time that leaves datetime's range on the way (9999-12-31T23:59-14:00)
    is bad input, not a 500 from deep in the database layer."""
    if t is None:
        return None
    try:
        return t.astimezone(UTC)
    except OverflowError:
        raise HTTPException(422, f"{name} is out of range once converted to UTC") from None


def _duration(v: str) -> timedelta:
    try:
        seconds = parse_duration(v)
    except ValueError as e:
        raise ValueError(str(e)) from None
    if not 0 < seconds <= MAX_DURATION.total_seconds():
        raise ValueError(f"duration must be positive and at most {MAX_DURATION.days} days, not {v!r}")
    return timedelta(seconds=seconds)


class DrainItem(BaseModel):
    """One node the scheduler should drain (``drain``) or keep an eye on (``watch``)."""

    node: str
    action: Literal["drain", "watch"]
    reason: str = Field(description="Why, in words: what failed, since when, what agrees.")
    since: AwareDatetime = Field(description="When the failure behind it began (UTC).")
    incident_ids: list[int]
    evidence_url: str = Field(description="Where the verdict, ports and incidents are: /api/v1/nodes/<node>.")
    shadow: bool = Field(description="Shadow mode: recommended only; tools must not act on it.")


class BreakerOut(BaseModel):
    tripped: bool
    max_fraction: float
    window_seconds: int
    recent_drains: int = Field(description="Drains made inside the trailing window.")
    cap: int = Field(description="Most drains allowed inside the window.")
    since: AwareDatetime | None
    message: str


class DrainStateOut(BaseModel):
    shadow: bool
    circuit_breaker: BreakerOut


NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL: refuse it here with a 422, not a 500


class CommentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    comment: str = Field("", max_length=2000, pattern=NO_NUL)


class ReasonIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000, pattern=NO_NUL, description="Why; for the audit log.")


class SilenceIn(ReasonIn):
    duration: str = Field(description="How long, e.g. 30m, 4h, 2d (at most 365 days).")

    @field_validator("duration")
    @classmethod
    def _check(cls, v: str) -> str:
        _duration(v)
        return v


class ExcludeIn(ReasonIn):
    duration: str | None = Field(None, description="How long (e.g. 24h); null keeps it until removed.")

    @field_validator("duration")
    @classmethod
    def _check(cls, v: str | None) -> str | None:
        if v is not None:
            _duration(v)
        return v


class SilenceOut(BaseModel):
    id: int
    kind: str
    entity: str
    reason: str
    created_by: str
    created_at: AwareDatetime
    expires_at: AwareDatetime


class ExcludeOut(BaseModel):
    node: str
    reason: str
    created_by: str
    created_at: AwareDatetime
    expires_at: AwareDatetime | None


class UndrainOut(BaseModel):
    node: str
    action: Literal["none"]
    previous_action: Literal["drain", "watch"]
    released_at: AwareDatetime


class AuditOut(BaseModel):
    id: int
    time: AwareDatetime
    actor: str = Field(description="'policy' or the name of the operator's token.")
    action: str
    node: str | None
    incident_id: int | None
    message: str
    evidence: dict[str, Any]


class AuditPage(BaseModel):
    items: list[AuditOut]
    count: int
    limit: int
    offset: int


def make_drain_router(
    drain: DrainEngine, ops: Operations, auth: Auth, nodes: set[str], cache: ReadCache | None = None
) -> APIRouter:
    router = APIRouter(prefix="/api/v1")
    cache = cache or ReadCache(drain.engine)
    drain_items = TypeAdapter(list[DrainItem])
    operator = Annotated[Principal, Depends(auth.require("operator"))]

    def known(name: str) -> None:
        if name not in nodes:
            raise HTTPException(404, f"node {name} is not in the fabric model")

    def run(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except NotFound as e:
            raise HTTPException(404, str(e)) from None
        except Conflict as e:
            raise HTTPException(409, str(e)) from None

    # -- drain ----------------------------------------------------------------------------------
    @router.get("/drain", response_model=list[DrainItem], tags=["drain"], summary="Nodes to drain or watch")
    async def drain_list(
        action: Annotated[Literal["drain", "watch"] | None, Query(description="Only this action.")] = None,
    ) -> Response:
        """Flat array for schedulers and Grafana Infinity. Excluded nodes are never ``drain``."""

        def render() -> bytes:
            return drain_items.dump_json(drain_items.validate_python(drain.list_drain(action)))

        return await cache.json(("drain", action), render)

    @router.get("/drain/state", response_model=DrainStateOut, tags=["drain"])
    def drain_state() -> DrainStateOut:
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

    @router.post("/drain/breaker/reset", status_code=204, responses=ERRORS, tags=["drain"])
    def reset_breaker(body: ReasonIn, who: operator) -> None:
        """Close a tripped circuit breaker: drains resume at the next poll (operator)."""
        run(ops.reset_breaker, who.name, body.reason)

    # -- incidents ------------------------------------------------------------------------------
    @router.post(
        "/incidents/{incident_id}/ack", response_model=IncidentOut, responses=ERRORS, tags=["incidents"]
    )
    def acknowledge(incident_id: IncidentId, who: operator, body: CommentIn | None = None) -> dict[str, Any]:
        """Open -> acknowledged (idempotent); a resolved incident cannot be acknowledged (409)."""
        return run(ops.acknowledge, incident_id, who.name, body.comment if body else "")

    @router.post(
        "/incidents/{incident_id}/resolve", response_model=IncidentOut, responses=ERRORS, tags=["incidents"]
    )
    def resolve(incident_id: IncidentId, who: operator, body: CommentIn | None = None) -> dict[str, Any]:
        """Resolve by hand; it reopens (same id) if the failure is seen again."""
        return run(ops.resolve, incident_id, who.name, body.comment if body else "")

    @router.post(
        "/incidents/{incident_id}/silence",
        response_model=SilenceOut,
        status_code=201,
        responses=ERRORS,
        tags=["incidents"],
    )
    def silence(incident_id: IncidentId, body: SilenceIn, who: operator) -> dict[str, Any]:
        """Silence this incident's kind + entity for a while: no drain comes from it."""
        return run(ops.silence, incident_id, _duration(body.duration), who.name, body.reason)

    @router.get("/silences", response_model=list[SilenceOut], tags=["incidents"])
    def silences(
        include_expired: Annotated[bool, Query(description="Also list expired silences.")] = False,
    ) -> list[dict[str, Any]]:
        return ops.list_silences(active_only=not include_expired)

    # -- nodes ----------------------------------------------------------------------------------
    @router.post(
        "/nodes/{name}/exclude", response_model=ExcludeOut, status_code=201, responses=ERRORS, tags=["nodes"]
    )
    def exclude(name: NodeName, body: ExcludeIn, who: operator) -> dict[str, Any]:
        """Never drain this node (until the duration ends); an existing drain is lifted."""
        known(name)
        duration = _duration(body.duration) if body.duration else None
        return run(ops.exclude, name, duration, who.name, body.reason)

    @router.delete("/nodes/{name}/exclude", status_code=204, responses=ERRORS, tags=["nodes"])
    def unexclude(name: NodeName, who: operator) -> None:
        known(name)
        run(ops.unexclude, name, who.name)

    @router.get("/excludes", response_model=list[ExcludeOut], tags=["nodes"])
    def excludes() -> list[dict[str, Any]]:
        """The exclude list (expired entries are gone)."""
        return ops.list_excludes()

    @router.post("/nodes/{name}/undrain", response_model=UndrainOut, responses=ERRORS, tags=["nodes"])
    def undrain(name: NodeName, body: ReasonIn, who: operator) -> dict[str, Any]:
        """Return a drained (or watched) node to service; the cooldown then applies."""
        known(name)
        return run(ops.undrain, name, who.name, body.reason)

    # -- audit ----------------------------------------------------------------------------------
    @router.get("/audit", response_model=AuditPage, tags=["audit"])
    def audit(
        node: Annotated[str | None, Query(max_length=200)] = None,
        action: Annotated[str | None, Query(max_length=64, description="e.g. drain, hold, undrain")] = None,
        actor: Annotated[str | None, Query(max_length=200)] = None,
        incident_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        since: Annotated[AwareDatetime | None, Query(description="From this time (inclusive).")] = None,
        until: Annotated[AwareDatetime | None, Query(description="Before this time.")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    ) -> dict[str, Any]:
        """Every decision, newest first, with the evidence it was taken on."""
        since, until = _utc("since", since), _utc("until", until)
        items = ops.audit(node=node, action=action, actor=actor, incident_id=incident_id, since=since,
                          until=until, limit=limit, offset=offset)  # fmt: skip
        return {"items": items, "count": len(items), "limit": limit, "offset": offset}

    return router
