"""Telemetry sources the service polls. Each returns canonical batches for one poll."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

import pyarrow as pa

from collectors.model import Fabric
from fabricsim.faults import Fault
from fabricsim.sim import FabricSim, SimConfig
from fabricsim.topology import TopologySpec
from service.config import FabricSimSource


class Source(Protocol):
    name: str
    fabric: Fabric

    def poll(self) -> list[pa.RecordBatch]: ...


class LiveFabricSim:
    """fabricsim stepped once per poll, with simulated time starting now (wall-clock pace)."""

    name = "fabricsim"

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

    @property
    def faults(self) -> list[Fault]:
        return self.sim.faults

    def next_time(self) -> datetime:
        return self.sim.time_of(self.sim.k)

    def poll(self) -> list[pa.RecordBatch]:
        step = self.sim.step()
        return [b for b in (step.port_sample, step.nccl_timing) if b is not None]
