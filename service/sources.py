"""Building the service's collectors from configuration."""

from __future__ import annotations

from pathlib import Path

from graywire.collectors import nccl, prometheus, snmp, ufm
from graywire.collectors.base import Collector
from graywire.collectors.host import config as agent
from graywire.collectors.host.config import AgentSourceConfig
from graywire.collectors.model import Fabric, load_inventory
from graywire.collectors.nccl import NcclSourceConfig
from graywire.collectors.nccl.config import NcclRasSourceConfig, build_ras_collectors
from graywire.collectors.prometheus import PrometheusSourceConfig
from graywire.collectors.snmp import SnmpSourceConfig
from graywire.collectors.ufm import UfmSourceConfig
from graywire.service.config import Settings
from graywire.service.discovery import compare_with_discovery, discovered_fabric, lldp_on
from graywire.service.simulated import FabricSimCollector, FabricSimSource


def build_sources(settings: Settings) -> tuple[Fabric, list[Collector]]:
    """The fabric model and one collector per configured target.

    The model comes from the inventory file when one is set, from the sources themselves with
    ``inventory: discover``, else from the synthetic fabric; real sources without a model have
    nothing to judge expected speeds against.
    """
    if not settings.sources:
        raise ValueError(
            "no sources configured: list what to collect under `sources:` (ufm, snmp, agent, "
            "prometheus, nccl, nccl_ras; README, Configuration), or `- type: fabricsim` for the "
            "built-in synthetic fabric"
        )
    collectors: list[Collector] = []
    fabric: Fabric | None = None
    sources = (
        lldp_on(settings.sources)
        if settings.inventory == "discover" or settings.discover
        else settings.sources
    )
    if settings.inventory == "discover":
        fabric = discovered_fabric(settings)
    elif settings.inventory is not None:
        fabric = load_inventory(Path(settings.inventory))
        if settings.discover:
            compare_with_discovery(settings, fabric)
    for cfg in sources:
        if isinstance(cfg, FabricSimSource):
            sim = FabricSimCollector(cfg, settings.poll_seconds)
            fabric = fabric or sim.fabric
            collectors.append(sim)
    if fabric is None:
        raise ValueError(
            "no fabric model: set `inventory:` to an inventory file, or to `discover` to build it "
            "from the ufm or snmp sources (docs/inventory.md)"
        )
    for cfg in sources:
        if isinstance(cfg, NcclSourceConfig):
            collectors.extend(nccl.build_collectors(cfg, fabric))
        elif isinstance(cfg, AgentSourceConfig):
            collectors.extend(agent.build_collectors(cfg, fabric))
        elif isinstance(cfg, SnmpSourceConfig):
            collectors.extend(snmp.build_collectors(cfg, fabric))
        elif isinstance(cfg, UfmSourceConfig):
            collectors.extend(ufm.build_collectors(cfg, fabric))
        elif isinstance(cfg, PrometheusSourceConfig):
            collectors.extend(prometheus.build_collectors(cfg, fabric))
        elif isinstance(cfg, NcclRasSourceConfig):
            collectors.extend(build_ras_collectors(cfg))  # RAS names hosts; no fabric needed
    return fabric, collectors
