"""The status page at ``/``: static HTML, CSS and JavaScript over the JSON API, no build step.

Everything the page shows comes from the same ``/api/v1`` routes any client uses; the files
ship inside the package, so the page works with no internet access and no Grafana.
``/api/v1/capabilities`` tells the page which optional APIs this service has (the drain API),
so it can say "unavailable" instead of requesting a route that is not there, and
``/api/v1/status-page`` what the page needs beyond the API: the Grafana link's base and the
rail of each switch, by which the grid groups its rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from graywire.collectors.model import Fabric

STATIC_DIR = Path(__file__).resolve().parent / "static"
DRAIN_ROUTES = ("/api/v1/drain", "/api/v1/drain/state")
JOBS_ROUTE = "/api/v1/jobs"
#: The Port detail dashboard (deploy/grafana), its variables ``node`` and ``port``.
GRAFANA_PORT_DASHBOARD = "/d/graywire-port-detail/"


class CapabilitiesOut(BaseModel):
    drain: bool = Field(description="The drain API (/api/v1/drain and /api/v1/drain/state) is served.")
    jobs: bool = Field(default=False, description="The jobs view (/api/v1/jobs) is served.")


class StatusPageOut(BaseModel):
    grafana_port_url: str | None = Field(
        description="Grafana's Port detail dashboard (status_page.grafana_url + its path); "
        "the page adds ?var-node=…&var-port=…. Null: no Grafana configured."
    )
    switch_rails: dict[str, int] = Field(
        description="Rail of each switch whose ports all sit on one rail (a rail-optimized leaf)."
    )


def _serves(app: FastAPI, path: str) -> bool:
    # The OpenAPI document, not app.routes: included routers are not flattened into the latter.
    return "get" in app.openapi().get("paths", {}).get(path, {})


def switch_rails(fabric: Fabric) -> dict[str, int]:
    """Switch -> rail, for switches whose railed ports agree on one (spines have none)."""
    rails = np.asarray(fabric.rail, dtype=np.int64)
    nodes = np.asarray(fabric.node_of_port, dtype=np.int64)
    n = len(fabric.node_names)
    on = rails >= 0
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, -1)
    np.minimum.at(lo, nodes[on], rails[on])
    np.maximum.at(hi, nodes[on], rails[on])
    return {
        fabric.node_names[j]: int(lo[j])
        for j in np.flatnonzero((hi >= 0) & (lo == hi)).tolist()
        if fabric.node_roles[j] != "host"
    }


def install_status_page(app: FastAPI, grafana_url: str | None = None) -> None:
    """Serve the page at ``/``, its files under ``/static``, ``/api/v1/capabilities`` and
    ``/api/v1/status-page``."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    rails: dict[str, int] | None = None  # the fabric model does not change: computed once

    # HEAD too: uptime checks and load balancers probe with it.
    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def status_page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/api/v1/capabilities", response_model=CapabilitiesOut, tags=["ops"])
    def capabilities(request: Request) -> CapabilitiesOut:
        """Optional APIs this service has, looked up in its routes (what the status page asks first)."""
        return CapabilitiesOut(
            drain=all(_serves(request.app, p) for p in DRAIN_ROUTES), jobs=_serves(request.app, JOBS_ROUTE)
        )

    @app.get("/api/v1/status-page", response_model=StatusPageOut, tags=["ops"])
    def status_page_settings(request: Request) -> StatusPageOut:
        """What the status page needs besides the API: the Grafana link, the switches' rails."""
        nonlocal rails
        if rails is None:
            fabric = getattr(getattr(request.app.state, "services", None), "fabric", None)
            rails = switch_rails(fabric) if fabric is not None else {}
        return StatusPageOut(
            grafana_port_url=grafana_url + GRAFANA_PORT_DASHBOARD if grafana_url else None,
            switch_rails=rails,
        )
