"""Every ``/api/v1`` router in one, and the app's answers to the operations' own errors."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from graywire.service.api import audit, cluster, drain, incidents, ingest, jobs, links, nodes, ports, sources
from graywire.service.api.contract import contract_openapi, method_not_allowed
from graywire.service.api.deps import Services
from graywire.service.operations import Conflict, NotFound

# Each router carries the /api/v1 prefix itself, so a route's own path is the full path the
# read guard (Auth.read_guard) checks.
api_router = APIRouter()
for _module in (incidents, nodes, ports, links, drain, audit, sources, ingest, jobs, cluster):
    api_router.include_router(_module.router)


def _not_found(request: Request, e: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(e)}, status_code=404)


def _conflict(request: Request, e: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(e)}, status_code=409)


def install_api(app: FastAPI, services: Services) -> None:
    """Mount the API on ``app`` over ``services``: what the service does, and what a test does
    with the parts it wants."""
    services.install(app)
    app.include_router(api_router)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(Conflict, _conflict)
    app.add_exception_handler(StarletteHTTPException, method_not_allowed(app))
    read_open = services.auth.read_open if services.auth is not None else True
    app.openapi = contract_openapi(app, read_open)  # type: ignore[method-assign]
