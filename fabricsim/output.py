"""Write a simulation to disk in the dataset layout, with its inventory and ground truth."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from graywire.collectors.dataset import DatasetWriter, write_links
from graywire.collectors.model import INVENTORY
from graywire.fabricsim.sim import FabricSim, truth_document

TRUTH = "truth.json"


def write_simulation(
    sim: FabricSim, out: str | Path, progress: Callable[[int, int], None] | None = None
) -> dict[str, int]:
    """Run ``sim`` to the end and write everything under ``out``; returns row counts."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sim.fabric.write_inventory(out / INVENTORY)
    write_links(out, sim.fabric.links_table("fabricsim"))
    rows = {"port_sample": 0, "nccl_timing": 0, "nccl_transport": 0, "nccl_proxy": 0}
    total = sim.n_steps
    with DatasetWriter(out) as writer:
        for step in sim.run():
            writer.write(step.port_sample)
            rows["port_sample"] += step.port_sample.num_rows
            if step.nccl_timing is not None:
                writer.write(step.nccl_timing)
                rows["nccl_timing"] += step.nccl_timing.num_rows
            if step.nccl_transport is not None:
                writer.write(step.nccl_transport)
                rows["nccl_transport"] += step.nccl_transport.num_rows
            if step.nccl_proxy is not None:
                writer.write(step.nccl_proxy)
                rows["nccl_proxy"] += step.nccl_proxy.num_rows
            if progress:
                progress(step.index + 1, total)
    (out / TRUTH).write_text(json.dumps(truth_document(sim), indent=1))
    return rows
