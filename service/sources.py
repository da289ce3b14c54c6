"""Building the service's collectors from configuration, and fabricsim as a live source."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from graywire.collectors import nccl, snmp, ufm
from graywire.collectors.base import Collector, ScrapeResult
from graywire.collectors.host import agent_client
from graywire.collectors.host.agent_client import AgentSourceConfig
from graywire.collectors.model import Fabric, load_inventory
from graywire.collectors.nccl import NcclSourceConfig
from graywire.collectors.snmp import SnmpSourceConfig
from graywire.collectors.ufm import UfmSourceConfig
from graywire.fabricsim.faults import Fault
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.service.config import FabricSimSource, Settings


class FabricSimCollector:
    """fabricsim stepped once per scrape, simulated time starting now (wall-clock pace)."""

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

    @property
    def faults(self) -> list[Fault]:
        return self.sim.faults

    async def aclose(self) -> None:
        """The simulator holds nothing open."""

    async def scrape(self) -> ScrapeResult:
        # A step of a large fabric is tens of milliseconds of CPU: off the event loop, so the
        # API goes on answering meanwhile.
        step = await asyncio.to_thread(self.sim.step)
        batches = tuple(b for b in (step.port_sample, step.nccl_timing, step.nccl_transport) if b is not None)
        return ScrapeResult(self.source, self.target, ok=True, batches=batches)


def build_sources(settings: Settings) -> tuple[Fabric, list[Collector]]:
    """The fabric model and one collector per configured target.

    The model comes from the inventory file when one is set, else from the synthetic fabric;
    real sources without an inventory have nothing to judge expected speeds against.
    """
    collectors: list[Collector] = []
    fabric: Fabric | None = None
    if settings.inventory is not None:
        fabric = load_inventory(Path(settings.inventory))
    for cfg in settings.sources:
        if isinstance(cfg, FabricSimSource):
            sim = FabricSimCollector(cfg, settings.poll_seconds)
            fabric = fabric or sim.fabric
            collectors.append(sim)
    if fabric is None:
        raise ValueError("no fabric model: set `inventory:` to an inventory file (docs/inventory.md)")
    for cfg in settings.sources:
        if isinstance(cfg, NcclSourceConfig):
            collectors.extend(nccl.build_collectors(cfg, fabric))
        elif isinstance(cfg, AgentSourceConfig):
            collectors.extend(agent_client.build_collectors(cfg, fabric))
        elif isinstance(cfg, SnmpSourceConfig):
            collectors.extend(snmp.build_collectors(cfg, fabric))
        elif isinstance(cfg, UfmSourceConfig):
            collectors.extend(ufm.build_collectors(cfg, fabric))
    return fabric, collectors
