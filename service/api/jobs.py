"""``/api/v1/jobs``: a training job's findings together, by phase of its life.

The grouping is :mod:`graywire.service.state.jobs` (pure); this reads the active incidents and
the fabric model's node roles and serves it. The list is served from the read cache, like the
incident list it is built from.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Response
from pydantic import TypeAdapter

from graywire.collectors.model import Fabric
from graywire.service.api.deps import CacheDep, FabricDep, ServicesDep, StoreDep
from graywire.service.api.schemas import ErrorOut, JobDetailOut, JobsOut
from graywire.service.state.fabric import FabricState
from graywire.service.state.jobs import JobView, job_views
from graywire.service.store import IncidentStore

router = APIRouter(prefix="/api/v1", tags=["jobs"])
JobName = Annotated[str, Path(min_length=1, max_length=200, description="job id as its NCCL sources name it")]
_jobs = TypeAdapter(JobsOut)


def _views(store: IncidentStore, fabric: Fabric, state: FabricState | None) -> list[JobView]:
    active = [
        *store.list_incidents(status="open", limit=100_000),
        *store.list_incidents(status="acknowledged", limit=100_000),
    ]
    roles = dict(zip(fabric.node_names, fabric.node_roles, strict=True))
    return job_views(active, roles, state.job_hosts if state is not None else None)


@router.get("/jobs", response_model=JobsOut, summary="Jobs with active incidents")
async def list_jobs(store: StoreDep, cache: CacheDep, fabric: FabricDep, services: ServicesDep) -> Response:
    def render() -> bytes:  # the state current when it runs: the cache renders it again
        state = services.state.current if services.state is not None else None
        items = [v.summary() for v in _views(store, fabric, state)]
        return _jobs.dump_json(_jobs.validate_python({"items": items, "count": len(items)}))

    return await cache.json(("jobs",), render)


@router.get(
    "/jobs/{job}",
    response_model=JobDetailOut,
    responses={404: {"model": ErrorOut, "description": "No active incident names this job"}},
    summary="One job's incidents by phase, and the fabric under it",
)
def get_job(store: StoreDep, fabric: FabricDep, services: ServicesDep, job: JobName) -> dict[str, Any]:
    state = services.state.current if services.state is not None else None
    view = next((v for v in _views(store, fabric, state) if v.job == job), None)
    if view is None:
        raise HTTPException(status_code=404, detail=f"no active incident names job {job!r}")
    return view.detail()
