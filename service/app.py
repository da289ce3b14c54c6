"""The FastAPI application: health, Prometheus metrics and the incidents API over one runner."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from graywire.collectors.base import Collector
from graywire.collectors.model import Fabric
from graywire.detectors.ber_thresholds import ThresholdTable
from graywire.detectors.pipeline import Pipeline, default_detectors
from graywire.service.alerts.dispatcher import Dispatcher
from graywire.service.api.deps import Services
from graywire.service.api.main import install_api
from graywire.service.api.schemas import COMMON_ERRORS
from graywire.service.auth import Auth
from graywire.service.cluster.fence import Fence
from graywire.service.cluster.forward import ForwardToLeader, LeaderRelay
from graywire.service.cluster.node import ClusterNode
from graywire.service.config import Settings
from graywire.service.drain_engine import DrainEngine, policy_from_settings
from graywire.service.http_guard import BodyLimit, SecurityHeaders, reject_nul, validation_error
from graywire.service.ingest.admission import Admission
from graywire.service.metrics.alerts import AlertsExporter
from graywire.service.metrics.cluster import ClusterExporter
from graywire.service.metrics.drain import DrainExporter
from graywire.service.metrics.exporter import make_registry
from graywire.service.metrics.exposition import CONTENT_TYPE, aiter_render, render_executor
from graywire.service.models.engine import make_engine, upgrade
from graywire.service.operations import Operations
from graywire.service.runner import Runner
from graywire.service.sources import build_sources
from graywire.service.state.fabric import StateBoard, ports_without_data
from graywire.service.state.read_cache import ReadCache
from graywire.service.status_page import install_status_page
from graywire.service.store import IncidentStore

log = logging.getLogger("graywire.app")

#: The database is away (down, restarting, unreachable, pool exhausted, SQLite locked): a
#: condition to retry, not a bug. Integrity and programming errors stay 500s.
DATABASE_UNAVAILABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)


def database_unavailable(request: Request, e: Exception) -> JSONResponse:
    """503 JSON, so schedulers and the status page back off and retry instead of seeing a 500."""
    log.warning("%s %s: database unavailable: %s", request.method, request.url.path, type(e).__name__)
    return JSONResponse(
        {"detail": "database unavailable; retry shortly"}, status_code=503, headers={"Retry-After": "5"}
    )


def create_app(
    settings: Settings,
    sources: tuple[Fabric, list[Collector]] | None = None,
    run_loop: bool = True,
) -> FastAPI:
    """Build the app; the poll loop starts with the server and stops with it."""
    settings.check_extras()  # a configured feature without its optional extra: one line, now
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    fabric, collectors = sources or build_sources(settings)
    upgrade(settings.db_url)
    clustered = settings.cluster is not None
    fence = Fence() if clustered else None
    if clustered:
        # A leader paused inside a transaction (SIGSTOP, a VM freeze) holds the lease row's
        # lock its fence check took: the server ends such a transaction, so the takeover waits
        # no longer than this.
        idle_s = max(10.0, 2 * settings.cluster_timing.lease_ttl)
        engine = make_engine(settings.db_url, {"idle_in_transaction_session_timeout": f"{idle_s:.0f}s"})
        assert fence is not None
        fence.install(engine)
    else:
        engine = make_engine(settings.db_url)
    store = IncidentStore(engine)
    cache = ReadCache(engine, ttl_s=settings.http.read_cache_ttl.total_seconds())
    state = StateBoard(fabric, settings.metrics.per_port, settings.metrics.raw_counters)
    registry = make_registry(state)
    drain = DrainEngine(engine, store, fabric, policy_from_settings(settings.drain))
    if not clustered:
        drain.sync_inventory()  # in a cluster, each leader does as it takes over
    registry.register(DrainExporter(drain))
    auth = Auth(settings.auth)
    table = ThresholdTable.load(settings.ber_thresholds) if settings.ber_thresholds else None

    def pipelines() -> Pipeline:
        return Pipeline(
            fabric, default_detectors(fabric, table, settings.multivariate_outliers, settings.detectors)
        )

    runner = Runner(
        settings,
        fabric,
        collectors,
        store,
        state,
        None if clustered else pipelines(),
        drain,
        cache,
        lead=not clustered,
    )
    admission = Admission(settings, fabric, state, runner)
    registry.register(admission.refused)

    own_url = f"http://{settings.host}:{settings.port}"
    may_send = (lambda: fence.locally_valid) if fence is not None else None
    dispatcher = (
        Dispatcher(engine, settings.alerts, default_external_url=own_url, fabric=fabric, may_send=may_send)
        if settings.alerts.enabled
        else None
    )
    if dispatcher is not None:
        registry.register(AlertsExporter(dispatcher))
    node: ClusterNode | None = None
    relay: LeaderRelay | None = None
    if clustered:
        assert fence is not None
        node = ClusterNode(settings, runner, fence, pipelines, drain.sync_inventory, dispatcher)
        relay = LeaderRelay(node)
        registry.register(ClusterExporter(node, relay))

    # While the app runs, one thread renders every scrape, a batch at a time: scrapes share it
    # among themselves and take neither a poll's threads nor the API's, nor more than one core,
    # and it yields the core to a poll (see render_executor).
    render_pool: ThreadPoolExecutor | None = None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal render_pool
        render_pool = pool = render_executor()
        task = asyncio.create_task(runner.run()) if run_loop and node is None else None
        alerts = asyncio.create_task(dispatcher.run()) if run_loop and dispatcher and node is None else None
        if run_loop and node is not None:
            await node.start()  # it runs the leader's loop and the dispatcher while it leads
        try:
            yield
        finally:
            if run_loop and node is not None:
                await node.stop()
            if relay is not None:
                await relay.aclose()
            if alerts is not None:
                alerts.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await alerts
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await runner.aclose()
            render_pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            admission.placement.close()
            engine.dispose()

    app = FastAPI(
        title="graywire",
        version="0.1.0",
        summary="Fabric telemetry and gray-failure detection for GPU training clusters",
        lifespan=lifespan,
        dependencies=[Depends(reject_nul), Depends(auth.read_guard())],
        responses=COMMON_ERRORS,
    )
    if relay is not None:
        # Innermost: what the leader alone answers is relayed after the body limit applied.
        app.add_middleware(ForwardToLeader, relay=relay)
    # Outside every route: FastAPI buffers a JSON body before it checks the token.
    app.add_middleware(
        BodyLimit,
        limits={"/api/v1/ingest/nccl": settings.max_push_bytes},
        max_header_bytes=settings.http.max_header_bytes,
    )
    app.add_middleware(SecurityHeaders)
    app.add_exception_handler(RequestValidationError, validation_error)
    for error in DATABASE_UNAVAILABLE:
        app.add_exception_handler(error, database_unavailable)
    app.state.runner = runner
    app.state.store = store
    app.state.fabric_state = state
    app.state.drain = drain
    app.state.auth = auth
    app.state.ingest = admission
    app.state.cluster = node

    @app.get("/healthz", tags=["ops"])
    def healthz() -> JSONResponse:
        """Liveness plus the facts on-call asks first: is data flowing, is the database up."""
        db_ok = True
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as e:  # the reason goes into the response, not a 500
            log.warning("health check: database unreachable: %s", e)
            db_ok = False
        now = state.current
        last = now.last_poll_timestamp
        blind = int(ports_without_data(now).sum())
        # Polls ran and not one modelled port has data: the sources match nothing (their keys
        # are not the inventory's) or say nothing. That is not ok, though the process is alive.
        no_data = now.polls > 0 and blind == fabric.n_ports
        failing = sorted(f"{t.source} {t.target}" for t in now.targets if t.ok is False)
        unmatched = sum(t.unmatched_rows for t in now.targets)
        unreadable = sorted(
            f"{t.source} {t.target}" for t in now.targets if t.ok and t.skipped and not t.samples
        )
        problems = []
        if failing:
            problems.append(f"{len(failing)} of {len(now.targets)} targets failing: {', '.join(failing[:5])}")
        if now.polls and blind:
            problems.append(f"{blind} of {fabric.n_ports} ports without data")
        if unmatched:
            problems.append(f"{unmatched} rows of the last scrapes match no modelled port")
        if unreadable:
            shown = ", ".join(unreadable[:5])
            problems.append(f"{len(unreadable)} targets read nothing but lines they could not parse: {shown}")
        # Some of the fabric unseen (a source failing, ports without data) is not ok either: said
        # as "partial", still 200, since restarting this process would not bring a source back.
        partial = bool(failing or unreadable) or (now.polls > 0 and blind > 0)
        body = {
            "status": "degraded" if not db_ok else "no_data" if no_data else "partial" if partial else "ok",
            "problems": problems if db_ok else ["database unreachable", *problems],
            "database": "ok" if db_ok else "unreachable",
            "role": "single" if node is None else node.role,
            "polls": now.polls,
            "poll_errors": now.poll_errors,
            "last_poll": datetime.fromtimestamp(last, UTC).isoformat() if last else None,
            "last_poll_seconds": round(now.last_poll_seconds, 4) if now.polls else None,
            "ports": fabric.n_ports,
            "ports_without_data": blind,
            "unmatched_rows": unmatched,
            "targets": len(now.targets),
            "targets_failing": len(failing),
        }
        if node is not None:
            view = node.view
            body["cluster"] = {
                "member_id": node.member_id,
                "leader": view.leader if view.lease_live else None,
                "members": len(view.members),
                "targets_owned": len(node.share()),
                "nats": "connected" if node.bus.connected else "disconnected",
            }
        return JSONResponse(body, status_code=200 if db_ok else 503)

    # HEAD too (uptime checks and load balancers probe with it), kept out of the schema.
    app.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)

    @app.get("/metrics", tags=["ops"], response_class=Response)
    async def prometheus_metrics() -> StreamingResponse:
        # Streamed as it renders: per-port series on a large fabric are hundreds of MB.
        return StreamingResponse(aiter_render(registry, render_pool), media_type=CONTENT_TYPE)

    services = Services(store, cache, fabric, auth, state, drain, Operations(drain), runner, admission, node)
    install_api(app, services)
    install_status_page(app, settings.status_page.grafana_url)
    return app
