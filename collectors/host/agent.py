"""The host agent, and the collector that scrapes it.

Each GPU host runs ``graywire agent``: on every ``GET /v1/port_sample`` it reads its RDMA ports
from sysfs and ethtool (:mod:`~graywire.collectors.host.sysfs`, :mod:`~graywire.collectors.host.ethtool`)
and answers with one canonical ``port_sample`` batch as an Arrow IPC stream
(``application/vnd.apache.arrow.stream``). The service scrapes every agent with
:class:`AgentCollector`.

Why pull over HTTP: the service already owns schedule, timeouts, retries, backoff and staleness
for every source, and a host that stops answering shows up as a failed, stale target instead of
silence; the agent stays stateless, needs no credentials and no address of the service, and an
operator can ``curl`` it. It is the node_exporter model, which fleet operators already run.

Why Arrow IPC: the agent ships the exact canonical record the detectors consume (schema,
dictionary-encoded port keys, counter widths in the schema metadata), so the service has no
second parser and no unit conversion to get wrong; a host's batch is a few kilobytes and
decodes without copying. The collector still checks the schema, the poll time and the port
keys, and rejects anything else as a failed scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from graywire.collectors.base import SKIP_REASONS, Collector, ScrapeResult, Skips, failed, redact_url
from graywire.collectors.host.ethtool import EthtoolCommand, EthtoolDirectory, EthtoolSource, apply_all
from graywire.collectors.host.sysfs import PortReading, SysfsConfig, read_ports, readings_to_batch
from graywire.collectors.keys import port_key
from graywire.collectors.model import Fabric
from graywire.collectors.perfquery import PerfqueryCommand, apply_perfquery
from graywire.collectors.schemas import (
    COUNTER_BITS_KEY,
    PORT_COUNTERS,
    PORT_SAMPLE,
    SATURATING_KEY,
    record_kind,
)

log = logging.getLogger("graywire.agent")

ARROW_STREAM = "application/vnd.apache.arrow.stream"
DEFAULT_AGENT_PORT = 9470
SOURCE = "agent"
MAX_BODY_BYTES = 16 * 2**20  # a host has tens of ports; a bigger body is not an agent's


# -- the agent ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """What the agent reads. ``ethtool_dir`` (pre-captured text) wins over running ``ethtool``;
    ``ethtool=None`` reads no ethtool at all."""

    sysfs_root: Path = Path("/")
    hostname: str = field(default_factory=socket.gethostname)
    ethtool_dir: Path | None = None
    ethtool: str | None = "ethtool"
    ethtool_timeout: float = 5.0
    include_plain_netdevs: bool = False
    exclude: str | None = None
    perfquery: str | None = None  # run ``perfquery -x`` per IB port for 64-bit error counters


def _utcnow() -> datetime:
    return datetime.now(UTC)


class HostReader:
    """Reads the host once per call: sysfs, then ethtool for the ports' netdevs."""

    def __init__(self, cfg: AgentConfig, clock: Callable[[], datetime] | None = None) -> None:
        port_key(cfg.hostname, "probe")  # a host name with '/' or blank fails here, at startup
        self.cfg = cfg
        self.clock = clock or _utcnow
        self.sysfs = SysfsConfig(Path(cfg.sysfs_root), cfg.include_plain_netdevs, cfg.exclude)
        self.ethtool: EthtoolSource | None = None
        if cfg.ethtool_dir is not None:
            self.ethtool = EthtoolDirectory(cfg.ethtool_dir)
        elif cfg.ethtool:
            if shutil.which(cfg.ethtool) is None:
                log.warning("%s not found: PFC, FEC and PHY counters will be null", cfg.ethtool)
            else:
                self.ethtool = EthtoolCommand(cfg.ethtool, cfg.ethtool_timeout)
        self.perfquery: PerfqueryCommand | None = None
        if cfg.perfquery:
            self.perfquery = PerfqueryCommand(cfg.perfquery, cfg.ethtool_timeout)
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self.last_errors: list[str] = []

    def read(self) -> tuple[datetime, list[PortReading]]:
        now = self.clock()
        readings = read_ports(self.sysfs)
        errors = apply_all(readings, self.ethtool) if self.ethtool is not None else []
        if self.perfquery is not None:
            errors += apply_perfquery(readings, self.perfquery)
        with self._lock:
            self.last_errors = errors
            for e in errors:
                if e not in self._logged:  # once per distinct message, not once per scrape
                    if len(self._logged) >= 1000:
                        self._logged.clear()
                    self._logged.add(e)
                    log.warning("%s", e)
        return now, readings

    def batch(self) -> pa.RecordBatch:
        """The host's ``port_sample`` batch; what reading it left out rides in its metadata."""
        now, readings = self.read()
        skipped: Skips = Counter()
        batch = readings_to_batch(readings, self.cfg.hostname, now, SOURCE, skipped)
        if skipped:
            meta = {**(batch.schema.metadata or {}), SKIPPED_KEY: json.dumps(dict(skipped)).encode()}
            batch = batch.replace_schema_metadata(meta)
        return batch

    def extra(self) -> dict[str, dict[str, int | None]]:
        _, readings = self.read()
        return {port_key(self.cfg.hostname, r.label): dict(sorted(r.extra.items())) for r in readings}


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """One batch as an Arrow IPC stream (schema metadata included)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def create_agent_app(cfg: AgentConfig, clock: Callable[[], datetime] | None = None) -> FastAPI:
    """The agent's HTTP API. Handlers are sync: FastAPI runs them on its thread pool, so a slow
    ethtool never blocks ``/healthz``."""
    reader = HostReader(cfg, clock)
    app = FastAPI(title="graywire agent", docs_url=None, redoc_url=None)
    app.state.reader = reader

    @app.get("/v1/port_sample")
    def port_sample() -> Response:
        try:
            batch = reader.batch()
        except Exception as e:  # an unexpected tree must answer 500 with a reason, not hang up
            log.exception("reading %s failed", cfg.sysfs_root)
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=500)
        if batch.num_rows == 0:
            where = Path(cfg.sysfs_root) / "sys/class/infiniband"
            return JSONResponse({"error": f"no RDMA ports found under {where}"}, status_code=503)
        return Response(content=to_ipc(batch), media_type=ARROW_STREAM)

    @app.get("/v1/port_extra")
    def port_extra() -> dict[str, dict[str, int | None]]:
        """Counters with no canonical column, per port (for people, not for the service)."""
        return reader.extra()

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "hostname": cfg.hostname,
            "sysfs_root": str(cfg.sysfs_root),
            "ethtool": "directory" if cfg.ethtool_dir else ("command" if reader.ethtool else "off"),
            "errors": reader.last_errors[:20],
        }

    return app


# -- the collector ------------------------------------------------------------------------------


#: Schema metadata of an agent's batch: JSON ``{reason: count}`` of what its parse left out.
SKIPPED_KEY = b"graywire.skipped"


def _skipped_metadata(meta: dict[bytes, bytes]) -> dict[str, int]:
    """An agent's skip counts, checked: only known reasons and counts (labels stay bounded)."""
    raw = meta.get(SKIPPED_KEY)
    if raw is None:
        return {}
    got = json.loads(raw)
    if not isinstance(got, dict) or not all(
        r in SKIP_REASONS and isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**32
        for r, n in got.items()
    ):
        raise ValueError(f"bad {SKIPPED_KEY.decode()} metadata")
    return got


def _width_metadata(meta: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The counter-width keys of an agent's schema, checked: they steer wrap/reset decisions."""
    out: dict[bytes, bytes] = {}
    if COUNTER_BITS_KEY in meta:
        bits = json.loads(meta[COUNTER_BITS_KEY])
        if not isinstance(bits, dict) or not all(
            c in PORT_COUNTERS and isinstance(b, int) and 1 <= b < 64 for c, b in bits.items()
        ):
            raise ValueError(f"bad {COUNTER_BITS_KEY.decode()} metadata")
        out[COUNTER_BITS_KEY] = meta[COUNTER_BITS_KEY]
    if SATURATING_KEY in meta:
        sat = json.loads(meta[SATURATING_KEY])
        if not isinstance(sat, list) or not all(c in PORT_COUNTERS for c in sat):
            raise ValueError(f"bad {SATURATING_KEY.decode()} metadata")
        out[SATURATING_KEY] = meta[SATURATING_KEY]
    return out


_SSL_CONTEXT: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """One verifying context for every scrape: building one loads the CA store (~50 ms of CPU)."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return _SSL_CONTEXT


class AgentCollector:
    """Scrapes one agent: ``GET <url>/v1/port_sample``, checked and re-keyed onto a stable dictionary.

    The port dictionary is kept across polls (new keys are appended), so downstream stages that
    cache lookups by dictionary see the same one every poll. Each scrape opens its own HTTP
    client (a client is bound to the event loop that made it); the TLS context is shared.
    """

    source = SOURCE

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.target = redact_url(self.url)
        self.timeout = timeout
        self._ports = pa.array([], type=pa.string())

    async def aclose(self) -> None:
        """Nothing to close: each scrape opens and closes its own client."""

    async def scrape(self) -> ScrapeResult:
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                status, ctype, body = await self._fetch()
        except TimeoutError:
            return failed(self.source, self.target, f"timed out after {self.timeout:g} s", self._since(t0))
        except (httpx.HTTPError, ValueError) as e:
            return failed(self.source, self.target, e, self._since(t0))
        if status != 200:
            text = body[:200].decode(errors="replace")
            return failed(self.source, self.target, f"HTTP {status}: {text}", self._since(t0))
        if ctype != ARROW_STREAM:
            msg = f"content type {ctype or 'none'!r}, not {ARROW_STREAM}"
            return failed(self.source, self.target, msg, self._since(t0))
        try:
            # Up to MAX_BODY_BYTES of Arrow to check and re-key: off the event loop.
            batch, skipped = await asyncio.to_thread(self._decode, body)
        except Exception as e:  # garbage can fail in many ways; all of them are a failed scrape
            return failed(self.source, self.target, e, self._since(t0))
        return ScrapeResult(self.source, self.target, True, (batch,), None, self._since(t0), skipped)

    async def _fetch(self) -> tuple[int, str, bytes]:
        """Status, content type and body, refusing a body larger than any host's batch."""
        async with (
            httpx.AsyncClient(timeout=self.timeout, verify=_ssl_context()) as client,
            client.stream("GET", f"{self.url}/v1/port_sample", headers={"Accept": ARROW_STREAM}) as resp,
        ):
            body = bytearray()
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise ValueError(f"response larger than {MAX_BODY_BYTES} bytes")
            ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
            return resp.status_code, ctype, bytes(body)

    @staticmethod
    def _since(t0: float) -> float:
        return time.perf_counter() - t0

    def _decode(self, body: bytes) -> tuple[pa.RecordBatch, dict[str, int]]:
        with pa.ipc.open_stream(body) as reader:
            batches = list(reader)
            schema = reader.schema
        if record_kind(schema) != "port_sample" or (schema.metadata or {}).get(b"graywire.version") != b"1":
            raise ValueError("not a port_sample v1 stream")
        if not schema.remove_metadata().equals(PORT_SAMPLE.remove_metadata()):
            raise ValueError("schema differs from port_sample v1")
        if len(batches) != 1 or batches[0].num_rows == 0:
            raise ValueError(f"expected one non-empty batch, got {[b.num_rows for b in batches]}")
        batch = batches[0]
        for name in ("time", "port", "source"):
            if batch.column(name).null_count:
                raise ValueError(f"null {name} values")
        if pc.count_distinct(batch.column("time")).as_py() != 1:
            raise ValueError("rows carry different poll times")
        ports = self._stable_ports(batch.column("port"))
        meta = {**(PORT_SAMPLE.metadata or {}), **_width_metadata(dict(schema.metadata or {}))}
        skipped = _skipped_metadata(dict(schema.metadata or {}))
        cols = [ports if f.name == "port" else batch.column(f.name) for f in PORT_SAMPLE]
        return pa.RecordBatch.from_arrays(cols, schema=PORT_SAMPLE.with_metadata(meta)), skipped

    def _stable_ports(self, ports: pa.DictionaryArray) -> pa.DictionaryArray:
        """The same keys as indices into this collector's own, growing dictionary."""
        d = ports.dictionary
        where = pc.index_in(d, value_set=self._ports)
        if where.null_count:
            new = pc.unique(pc.filter(d, pc.is_null(where)))
            self._ports = pa.concat_arrays([self._ports, new])
            where = pc.index_in(d, value_set=self._ports)
        codes = where.to_numpy(zero_copy_only=False).astype(np.int32)[
            ports.indices.to_numpy(zero_copy_only=False)
        ]
        if np.unique(codes).size != codes.size:
            raise ValueError("duplicate port keys in one poll")
        return pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int32()), self._ports)


class AgentSourceConfig(BaseModel):
    """Host agents to scrape: explicit ``urls``, and/or ``url_template`` expanded for every host
    of the inventory (``http://{host}:9470``)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["agent"] = "agent"
    urls: list[str] = Field(default_factory=list)
    url_template: str | None = None
    timeout: float = Field(5.0, gt=0, le=300)

    @field_validator("urls")
    @classmethod
    def _http(cls, v: list[str]) -> list[str]:
        bad = [u for u in v if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"agent URLs must start with http:// or https://: {bad[:3]}")
        return v

    @field_validator("url_template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is not None and ("{host}" not in v or not v.startswith(("http://", "https://"))):
            raise ValueError("url_template must be an http(s) URL containing {host}")
        return v

    @model_validator(mode="after")
    def _some_target(self) -> AgentSourceConfig:
        if not self.urls and self.url_template is None:
            raise ValueError("set urls, url_template, or both")
        return self


def build_collectors(cfg: AgentSourceConfig, fabric: Fabric | None) -> list[Collector]:
    """One collector per agent URL (explicit ones first, then the template per inventory host)."""
    urls = list(cfg.urls)
    if cfg.url_template is not None:
        if fabric is None:
            raise ValueError("agent url_template needs an inventory to list the hosts")
        urls += [
            cfg.url_template.format(host=name)
            for name, role in zip(fabric.node_names, fabric.node_roles, strict=True)
            if role == "host"
        ]
    return [AgentCollector(u, cfg.timeout) for u in dict.fromkeys(u.rstrip("/") for u in urls)]


# -- command line -------------------------------------------------------------------------------


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``graywire agent`` options."""
    parser.add_argument("--sysfs-root", type=Path, default=Path("/"), help="root holding sys/ (default /)")
    parser.add_argument("--hostname", default=None, help="node name in port keys (default: this host's name)")
    parser.add_argument("--listen", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=DEFAULT_AGENT_PORT, help=f"default {DEFAULT_AGENT_PORT}")
    parser.add_argument(
        "--ethtool-dir",
        type=Path,
        default=None,
        help="read pre-captured <dir>/<if>/{statistics,fec,settings}",
    )
    parser.add_argument("--ethtool", default="ethtool", help="ethtool binary (default: ethtool on PATH)")
    parser.add_argument("--no-ethtool", action="store_true", help="read sysfs only")
    parser.add_argument("--ethtool-timeout", type=float, default=5.0, help="seconds per ethtool call")
    parser.add_argument(
        "--include-plain-netdevs",
        action="store_true",
        help="also report physical NICs without an RDMA device",
    )
    parser.add_argument("--exclude", default=None, help="regex of device/interface names to skip")
    parser.add_argument(
        "--perfquery",
        default=None,
        help="perfquery binary: read each IB port's 64-bit error counters with perfquery -x (needs umad)",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def run_agent(
    sysfs_root: str | Path = "/",
    hostname: str | None = None,
    port: int = DEFAULT_AGENT_PORT,
    listen: str = "0.0.0.0",
    ethtool_dir: str | Path | None = None,
    ethtool: str | None = "ethtool",
    ethtool_timeout: float = 5.0,
    include_plain_netdevs: bool = False,
    exclude: str | None = None,
    log_level: str = "info",
    perfquery: str | None = None,
) -> None:
    """Serve the agent until interrupted."""
    import uvicorn

    cfg = AgentConfig(
        sysfs_root=Path(sysfs_root),
        hostname=hostname or socket.gethostname(),
        ethtool_dir=Path(ethtool_dir) if ethtool_dir is not None else None,
        ethtool=ethtool,
        ethtool_timeout=ethtool_timeout,
        include_plain_netdevs=include_plain_netdevs,
        exclude=exclude,
        perfquery=perfquery,
    )
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_agent_app(cfg), host=listen, port=port, log_level=log_level)


def run_agent_from_args(args: argparse.Namespace) -> None:
    """``run_agent`` with the options of :func:`add_agent_arguments`."""
    run_agent(
        sysfs_root=args.sysfs_root,
        hostname=args.hostname,
        port=args.port,
        listen=args.listen,
        ethtool_dir=args.ethtool_dir,
        ethtool=None if args.no_ethtool else args.ethtool,
        ethtool_timeout=args.ethtool_timeout,
        include_plain_netdevs=args.include_plain_netdevs,
        exclude=args.exclude,
        log_level=args.log_level,
        perfquery=args.perfquery,
    )
