"""The poll's archive: the fabric model beside the data, and a failed write costs only itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from graywire.collectors.dataset import iter_polls
from graywire.collectors.model import INVENTORY, load_inventory
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from graywire.service.archive import Archive
from graywire.service.config import load_settings


def _polls(n: int) -> tuple[FabricSim, list[pa.RecordBatch]]:
    """A small fabric and ``n`` polls of its port samples."""
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=8), duration_s=10.0 * (n - 1), seed=3, faults="none")
    )
    return sim, [step.port_sample for step in sim.run()]


def test_the_archive_keeps_the_fabric_model_and_counts_a_write_that_fails(tmp_path: Path) -> None:
    settings = load_settings(None, data_dir=tmp_path)
    sim, batches = _polls(3)
    errors: list[int] = []
    archive = Archive(settings, sim.fabric, lambda: errors.append(1))
    assert load_inventory(settings.archive_dir / INVENTORY).keys == sim.fabric.keys
    port_batches = batches
    archive.write(port_batches[:1])
    # A full disk (which this machine cannot be made into): that batch is left out, counted.
    writer = archive._writer
    assert writer is not None
    kept = writer.write

    def full(batch: pa.RecordBatch) -> None:
        raise OSError(28, "No space left on device")

    writer.write = full  # type: ignore[method-assign]
    archive.write(port_batches[1:2])
    assert errors == [1]
    writer.write = kept  # type: ignore[method-assign]
    archive.write(port_batches[2:3])  # the disk has room again: written
    archive.close()
    archive.write(port_batches[1:2])  # after close: ignored, no error
    assert errors == [1]
    assert sum(b.num_rows for b in iter_polls(settings.archive_dir, "port_sample")) == 2 * sim.fabric.n_ports


def test_retention_removes_hours_older_than_it(tmp_path: Path) -> None:
    settings = load_settings(None, data_dir=tmp_path, archive={"retention": "2h"})
    sim, _ = _polls(1)
    archive = Archive(settings, sim.fabric, lambda: None)
    old = (
        settings.archive_dir / "port_sample" / f"hour={(datetime.now(UTC) - timedelta(hours=5)):%Y-%m-%dT%H}"
    )
    new = settings.archive_dir / "port_sample" / f"hour={datetime.now(UTC):%Y-%m-%dT%H}"
    for d in (old, new):
        d.mkdir(parents=True)
    archive._last_prune = -1e18  # due now, whatever this machine's uptime
    archive.prune_if_due()
    assert not old.exists() and new.exists()
    assert list(iter_polls(settings.archive_dir, "port_sample")) == []
