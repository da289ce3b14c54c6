"""The status page at ``/``: static HTML, CSS and JavaScript over the JSON API, no build step.

Everything the page shows comes from the same ``/api/v1`` routes any client uses; the files
ship inside the package, so the page works with no internet access and no Grafana.
``/api/v1/capabilities`` tells the page which optional APIs this service has (the drain API),
so it can say "unavailable" instead of requesting a route that is not there.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

STATIC_DIR = Path(__file__).resolve().parent / "static"
DRAIN_ROUTES = ("/api/v1/drain", "/api/v1/drain/state")


class CapabilitiesOut(BaseModel):
    drain: bool = Field(description="The drain API (/api/v1/drain and /api/v1/drain/state) is served.")


def _serves(app: FastAPI, path: str) -> bool:
    # The OpenAPI document, not app.routes: included routers are not flattened into the latter.
    return "get" in app.openapi().get("paths", {}).get(path, {})


def install_status_page(app: FastAPI) -> None:
    """Serve the page at ``/``, its files under ``/static`` and ``/api/v1/capabilities``."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    # HEAD too: uptime checks and load balancers probe with it.
    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def status_page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/api/v1/capabilities", response_model=CapabilitiesOut, tags=["ops"])
    def capabilities(request: Request) -> CapabilitiesOut:
        """Optional APIs this service has, looked up in its routes (what the status page asks first)."""
        return CapabilitiesOut(drain=all(_serves(request.app, p) for p in DRAIN_ROUTES))
