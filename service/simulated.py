"""The built-in synthetic source: fabricsim as a live collector, its settings and the check of
its fault spec.

The only service module besides the CLI that imports fabricsim, so the simulator reaches the
running service through this one seam (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from graywire.collectors.base import ScrapeResult
from graywire.fabricsim.faults import Fault, parse_spec
from graywire.fabricsim.ras import read_back
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec


def check_fault_spec(spec: str) -> None:
    """Raise ``ValueError`` with a readable message when ``spec`` is not a fault spec."""
    parse_spec(spec)


class FabricSimSource(BaseModel):
    """The synthetic fabric as a live telemetry source (sim time runs at wall-clock pace)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["fabricsim"] = "fabricsim"
    hosts: int = Field(64, ge=1, le=65_536)
    gpus: int = Field(8, ge=1, le=16)
    seed: int = 0
    faults: str = "none"
    job_hosts: int = Field(32, ge=1)
    channels: int = Field(4, ge=1, le=64)

    @field_validator("faults")
    @classmethod
    def _faults_parse(cls, v: str) -> str:
        check_fault_spec(v)  # raises ValueError with a readable message
        return v


class FabricSimCollector:
    """fabricsim stepped once per scrape, simulated time starting at the first scrape
    (wall-clock pace). A replica that takes the simulation over from another (its share moved)
    starts its own then: a fresh fabric's counters, as after a reboot, never data from the past."""

    source = "fabricsim"

    def __init__(self, cfg: FabricSimSource, interval_s: float, start: datetime | None = None) -> None:
        start = (start or datetime.now(UTC)).replace(microsecond=0)
        self.sim = FabricSim(
            SimConfig(
                topology=TopologySpec(hosts=cfg.hosts, gpus=cfg.gpus),
                interval_s=interval_s,
                duration_s=10 * 365 * 86400.0,
                seed=cfg.seed,
                start=start,
                job_hosts=cfg.job_hosts,
                channels=cfg.channels,
                faults=cfg.faults,
            )
        )
        self.fabric = self.sim.fabric
        self.target = f"fabricsim:{cfg.hosts}-hosts"
        self._scraped = False

    @property
    def faults(self) -> list[Fault]:
        return self.sim.faults

    async def aclose(self) -> None:
        """The simulator holds nothing open."""

    async def scrape(self) -> ScrapeResult:
        if not self._scraped:
            self._scraped = True
            now = datetime.now(UTC).replace(microsecond=0)
            if now - self.sim.cfg.start > timedelta(seconds=self.sim.cfg.interval_s):
                self.sim.cfg = replace(self.sim.cfg, start=now)
        # A step of a large fabric is tens of milliseconds of CPU: off the event loop, so the
        # API goes on answering meanwhile.
        step = await asyncio.to_thread(self.sim.step)
        batches = tuple(b for b in (step.port_sample, step.nccl_timing, step.nccl_transport) if b is not None)
        if step.ras_status is not None:
            # The fault path: each job's RAS report read back as a nccl_ras source would, and the
            # subnet manager's links (a failed link is not discovered: its cable goes missing).
            ras = read_back(step.ras_status, self.sim.ras_names, step.time)
            batches += tuple(b for b in (step.links, ras) if b is not None)
        return ScrapeResult(self.source, self.target, ok=True, batches=batches)
