"""How a user configures the NCCL sources, and the collectors each becomes: a directory of
NCCL output files (``type: nccl``) and a job's RAS socket (``type: nccl_ras``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from graywire.collectors.base import Collector
from graywire.collectors.model import Fabric
from graywire.collectors.nccl.ras import RAS_PORT, NcclRasCollector
from graywire.collectors.nccl.tail import Format, NcclFileCollector


class NcclSourceConfig(BaseModel):
    """A directory of NCCL output files, as the service's YAML configures it.

    ```yaml
    sources:
      - type: nccl
        directory: /shared/nccl-inspector        # NCCL_INSPECTOR_DUMP_DIR of the job(s)
        pattern: "*/*-pid*.log"                   # one subdirectory per job
        debug_pattern: "*/nccl.*"                 # NCCL_DEBUG_FILE=nccl.%h.%p, for GPU and NIC
    ```
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["nccl"] = "nccl"
    directory: Path
    format: Format = "inspector"
    #: Glob under ``directory``; default by format: ``*-pid*.log``, ``*.log``, ``*.json``.
    pattern: str | None = None
    #: Job id for every row; default: ``job_regex``, else the file's directory name
    #: (``nccl-inspector-<id>`` -> ``<id>``), else, for debug files at the top of a shared
    #: directory, ``<directory>/<commId>`` of each process's first communicator.
    job: str | None = None
    #: Regex with a ``job`` group, matched against a file's path under ``directory``:
    #: ``nccl\.(?P<job>\d+)\.`` for ``NCCL_DEBUG_FILE=nccl.${SLURM_JOB_ID}.%h.%p``.
    job_regex: str | None = None
    #: Glob of NCCL_DEBUG=INFO files: GPU index per process and transport per channel.
    debug_pattern: str | None = None
    #: Fallback GPU index = rank % gpus_per_host, for communicators that span whole hosts.
    gpus_per_host: int | None = Field(None, ge=1, le=64)
    #: Drop the domain from Inspector host names (``gpu-0003.cluster`` -> ``gpu-0003``).
    short_hostnames: bool = False
    #: nccl-tests: the collective, when neither the output nor the file name says it.
    collective: str | None = None
    #: nccl-tests: which of the two result groups becomes timing rows.
    placement: Literal["out_of_place", "in_place"] = "out_of_place"
    #: ``end`` skips what the files already hold when the service starts.
    start_at: Literal["beginning", "end"] = "beginning"
    max_bytes_per_scrape: int = Field(256 * 2**20, ge=4096)
    #: Glob of PyTorch Flight Recorder dumps (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` prefix + rank),
    #: e.g. ``*/*/nccl_trace_rank_*`` for ``<job>/<host>/``; each is read once per mtime and size.
    flight_recorder_pattern: str | None = None
    #: Glob of the job's stderr/log files, tailed for ProcessGroupNCCL watchdog timeout lines.
    watchdog_pattern: str | None = None
    #: Regex with a ``host`` group, matched against a dump's or log's path under ``directory``
    #: (neither names its host): ``^[^/]+/(?P<host>[^/]+)/`` for ``<job>/<host>/``.
    host_regex: str | None = None

    @field_validator("host_regex", "job_regex")
    @classmethod
    def _named_group(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        group = "host" if info.field_name == "host_regex" else "job"
        try:
            rx = re.compile(v)
        except re.error as e:
            raise ValueError(f"{info.field_name} is not a regular expression: {e}") from None
        if group not in rx.groupindex:
            raise ValueError(f"{info.field_name} needs a (?P<{group}>...) group")
        return v


def build_collectors(cfg: NcclSourceConfig, fabric: Fabric | None = None) -> list[Collector]:
    """One collector per configured directory. The fabric is not needed here: rows name hosts
    and GPUs, and the detectors map them to NIC ports against the inventory."""
    del fabric
    return [
        NcclFileCollector(
            cfg.directory,
            cfg.pattern,
            cfg.format,
            job=cfg.job,
            debug_pattern=cfg.debug_pattern,
            gpus_per_host=cfg.gpus_per_host,
            short_hostnames=cfg.short_hostnames,
            collective=cfg.collective,
            placement=cfg.placement,
            start_at=cfg.start_at,
            max_bytes_per_scrape=cfg.max_bytes_per_scrape,
            flight_recorder_pattern=cfg.flight_recorder_pattern,
            watchdog_pattern=cfg.watchdog_pattern,
            host_regex=cfg.host_regex,
            job_regex=cfg.job_regex,
        )
    ]


class NcclRasSourceConfig(BaseModel):
    """The RAS client socket of one NCCL job, as the service's YAML configures it.

    ```yaml
    sources:
      - type: nccl_ras
        job: "1234567"                 # the scheduler's job id
        host: localhost                # NCCL_RAS_ADDR of the job (default localhost:28028)
        host_names: {172.16.64.213: gpu-0042}
    ```
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["nccl_ras"] = "nccl_ras"
    job: str = Field(min_length=1)
    host: str = "localhost"
    port: int = Field(RAS_PORT, ge=1, le=65535)
    #: RAS names nodes by their bootstrap address: address -> inventory host name.
    host_names: dict[str, str] = Field(default_factory=dict)
    #: The whole report's deadline; RAS is told one second less to wait for the other processes
    #: (its own leg timeout is 5 s). Keep it under the service's scrape timeout.
    timeout_s: float = Field(6.0, gt=1, le=120)
    format: Literal["json", "text"] = "json"


def build_ras_collectors(cfg: NcclRasSourceConfig) -> list[NcclRasCollector]:
    return [
        NcclRasCollector(
            cfg.job, cfg.host, cfg.port, host_names=cfg.host_names, timeout_s=cfg.timeout_s, format=cfg.format
        )
    ]


__all__ = ["NcclRasSourceConfig", "NcclSourceConfig", "build_collectors", "build_ras_collectors"]
