"""The host agent: what runs on each GPU host and serves its RDMA ports over HTTP.

On every ``GET /v1/port_sample`` it reads the host's ports from sysfs and ethtool
(:mod:`~graywire.collectors.host.sysfs`, :mod:`~graywire.collectors.host.ethtool`, optionally
perfquery) and answers with one ``port_sample`` batch in the format of
:mod:`~graywire.collectors.host.agent_wire`. It keeps no state between requests, but one:
``GET /v1/gpu_nic_path`` (where each GPU sits relative to each NIC,
:mod:`~graywire.collectors.host.gpu_topo`) is kept for ``topo_ttl`` seconds, since the PCIe
layout changes only at a reboot and ``nvidia-smi topo -m`` takes a good fraction of a second.

With ``ncclras`` set (``host:port`` of NCCL's RAS client socket, ``127.0.0.1:28028`` unless the
job sets ``NCCL_RAS_ADDR``), ``GET /v1/nccl_rank_state`` asks the local RAS for its ``STATUS``
(:mod:`~graywire.collectors.nccl.ras`) and answers with the ``nccl_rank_state`` rows of this
host's ranks: RAS reports the whole job from every host, and one agent speaks for one host, so
rows of other nodes are left to their own agents (a row is this host's when RAS's bootstrap
address for it is one of ``ncclras_addresses``, by default the addresses the host name resolves
to). No job running (the socket refuses) or a timeout is a 503 naming why: no rows, never
"healthy". Without ``ncclras`` the endpoint does not exist (404), and the service stops asking.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from graywire.collectors.base import MALFORMED_LINE, Skips
from graywire.collectors.host.agent_wire import ARROW_STREAM, DEFAULT_AGENT_PORT, SKIPPED_KEY, SOURCE, to_ipc
from graywire.collectors.host.ethtool import EthtoolCommand, EthtoolDirectory, EthtoolSource, apply_all
from graywire.collectors.host.gpu_topo import TopoCommand, paths_to_batch, read_gpu_nic_paths
from graywire.collectors.host.sysfs import PortReading, SysfsConfig, read_ports, read_text, readings_to_batch
from graywire.collectors.ib.perfquery import PerfqueryCommand, apply_perfquery
from graywire.collectors.keys import normalize_mac, port_key
from graywire.collectors.nccl.ras import RankStateRows, parse_status, query_status

log = logging.getLogger("graywire.agent")


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
    #: ``nvidia-smi`` for ``topo -m`` (run only if present); None: the sysfs tree only.
    nvidia_smi: str | None = "nvidia-smi"
    #: A saved ``nvidia-smi topo -m`` (fabricsim's hosts, tests) instead of running it.
    topo_file: Path | None = None
    topo_timeout: float = 10.0
    topo_ttl: float = 300.0
    #: ``host:port`` of the local NCCL RAS client socket; None: no ``/v1/nccl_rank_state``.
    ncclras: str | None = None
    ncclras_timeout: float = 5.0
    #: The job name of the RAS rows (RAS does not know the scheduler's job id).
    ncclras_job: str = "ncclras"
    #: RAS's bootstrap addresses of this host; empty: what the host name resolves to.
    ncclras_addresses: tuple[str, ...] = ()


def _own_addresses(hostname: str) -> frozenset[str]:
    """The addresses ``hostname`` resolves to (empty when it does not resolve)."""
    try:
        return frozenset(str(a[4][0]) for a in socket.getaddrinfo(hostname, None))
    except OSError:
        return frozenset()


def _split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"ncclras address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


class RasReader:
    """This host's ranks in the local NCCL RAS ``STATUS``, one query per call."""

    def __init__(self, cfg: AgentConfig, clock: Callable[[], datetime]) -> None:
        assert cfg.ncclras is not None
        self.host, self.port = _split_addr(cfg.ncclras)
        self.cfg, self.clock = cfg, clock
        self.addresses = frozenset(cfg.ncclras_addresses) or _own_addresses(cfg.hostname)

    async def batch(self) -> pa.RecordBatch:
        """The rows of this host's ranks (``TimeoutError``, ``OSError`` or ``ValueError`` else)."""
        async with asyncio.timeout(self.cfg.ncclras_timeout):
            text = await query_status(self.host, self.port, self.cfg.ncclras_timeout)
        got = RankStateRows()
        parse_status(text, self.cfg.ncclras_job, got)
        mine = RankStateRows(skipped=got.skipped, problems=got.problems)
        name = self.cfg.hostname
        mine.rows = [(*r[:4], name, *r[5:]) for r in got.rows if r[4] in self.addresses or r[4] == name]
        batch = mine.to_batch(self.clock())
        if mine.skipped:
            meta = {
                **(batch.schema.metadata or {}),
                SKIPPED_KEY: json.dumps({MALFORMED_LINE: mine.skipped}).encode(),
            }
            batch = batch.replace_schema_metadata(meta)
        return batch


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
        self.topo = TopoCommand(cfg.nvidia_smi, cfg.topo_timeout) if cfg.nvidia_smi else None
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self.last_errors: list[str] = []
        self._paths: tuple[float, pa.RecordBatch] | None = None
        self._paths_lock = threading.Lock()

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

    def gpu_paths(self) -> pa.RecordBatch:
        """The host's ``gpu_nic_path`` view (zero rows without a GPU), at most ``topo_ttl`` old."""
        with self._paths_lock:
            if self._paths is not None and time.monotonic() - self._paths[0] < self.cfg.topo_ttl:
                return self._paths[1]
            text = None
            if self.cfg.topo_file is not None:
                try:
                    text = Path(self.cfg.topo_file).read_text(errors="replace")
                except OSError as e:
                    log.warning("topo file %s: %s", self.cfg.topo_file, e)
            reading = read_gpu_nic_paths(Path(self.cfg.sysfs_root), text, self.topo)
            for e in reading.errors:
                log.warning("%s", e)
            batch = paths_to_batch(reading, self.cfg.hostname, self.clock())
            self._paths = (time.monotonic(), batch)
            return batch

    def ports(self) -> list[dict[str, Any]]:
        """Each port's names: its key, RDMA device and port, netdev and that netdev's MAC.

        What LLDP on the switches cannot say: a NIC's LLDP agent names its port by netdev or MAC,
        graywire (and NCCL) by RDMA device; discovery maps the one to the other with this.
        """
        root = Path(self.cfg.sysfs_root) / "sys" / "class" / "net"
        out = []
        for r in read_ports(self.sysfs):
            mac = read_text(root / r.netdev / "address") if r.netdev else None
            out.append({
                "port": port_key(self.cfg.hostname, r.label), "label": r.label, "device": r.device,
                "port_num": r.port_num, "netdev": r.netdev, "mac": normalize_mac(mac),
                "link_layer": r.link_layer,
            })  # fmt: skip
        return out

    def extra(self) -> dict[str, dict[str, int | None]]:
        _, readings = self.read()
        return {port_key(self.cfg.hostname, r.label): dict(sorted(r.extra.items())) for r in readings}


def create_agent_app(cfg: AgentConfig, clock: Callable[[], datetime] | None = None) -> FastAPI:
    """The agent's HTTP API. Handlers are sync: FastAPI runs them on its thread pool, so a slow
    ethtool never blocks ``/healthz``."""
    reader = HostReader(cfg, clock)
    app = FastAPI(title="graywire agent", docs_url=None, redoc_url=None)
    app.state.reader = reader
    ras = RasReader(cfg, reader.clock) if cfg.ncclras else None

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

    @app.get("/v1/gpu_nic_path")
    def gpu_nic_path() -> Response:
        """Where each GPU sits relative to each RDMA NIC (an empty batch on a host without GPUs)."""
        try:
            batch = reader.gpu_paths()
        except Exception as e:  # the port samples must not go down with it
            log.exception("reading the GPU-NIC paths failed")
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=500)
        return Response(content=to_ipc(batch), media_type=ARROW_STREAM)

    if ras is not None:

        @app.get("/v1/nccl_rank_state")
        async def nccl_rank_state() -> Response:
            """This host's ranks as the local NCCL RAS sees them (503 when no RAS answers)."""
            try:
                batch = await ras.batch()
            except TimeoutError:
                return JSONResponse(
                    {"error": f"NCCL RAS at {cfg.ncclras}: timed out after {cfg.ncclras_timeout:g} s"},
                    status_code=503,
                )
            except (OSError, ValueError) as e:  # no job running here refuses the connection
                return JSONResponse({"error": f"NCCL RAS at {cfg.ncclras}: {e}"}, status_code=503)
            except Exception as e:
                log.exception("querying NCCL RAS at %s failed", cfg.ncclras)
                return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=500)
            return Response(content=to_ipc(batch), media_type=ARROW_STREAM)

    @app.get("/v1/ports")
    def ports() -> list[dict[str, Any]]:
        """Each port's names (key, RDMA device, netdev, MAC), for discovery over LLDP."""
        return reader.ports()

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
            "ncclras": cfg.ncclras or "off",
            "errors": reader.last_errors[:20],
        }

    return app


def serve_agent(
    cfg: AgentConfig, listen: str = "0.0.0.0", port: int = DEFAULT_AGENT_PORT, log_level: str = "info"
) -> None:
    """Serve the agent until interrupted."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_agent_app(cfg), host=listen, port=port, log_level=log_level)
