"""How real NCCL sources show fabricsim's timings: the evaluation's NCCL representation variants.

fabricsim's ``nccl_timing`` batch is the richest view there is: a row per (rank, channel)
with kernel start times on every host's clock. Real jobs give less. Each view renders the
poll in a real source's wire format and reads it back with graywire's own collector, so the
detectors are scored on what that source would carry:

- ``rich``: the simulator's batch as it is;
- ``inspector_verbose``: NCCL Inspector JSON with ``NCCL_INSPECTOR_DUMP_VERBOSE=1`` (whole
  and per-channel kernel rows, ``coll_start_ts``), through :class:`NcclFileCollector`;
- ``inspector_default``: the Inspector's default record: ``coll_exec_time_us`` per rank and
  collective, no channels, no start times. Faults seen only per channel are invisible here.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from graywire.collectors.nccl.tail import NcclFileCollector
from graywire.fabricsim.nccl_writer import InspectorWriter

#: Fault kinds whose only trace is per-channel timing: a view without channel rows cannot show them.
PER_CHANNEL_FAULTS = frozenset({"slow_channel", "slow_nic", "nccl_slow_path"})


class NcclView:
    """The identity view; subclasses render and re-read."""

    name = "rich"
    #: Fault kinds this source cannot show at all (reported as not observable, not as misses).
    blind_to: frozenset[str] = frozenset()

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        return batch

    def close(self) -> None:
        """Release what the view holds (files)."""


@dataclass
class InspectorView(NcclView):
    """Inspector JSON files written by :class:`InspectorWriter`, read by the file collector."""

    verbose: bool = True
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="graywire-nccl-view-")))

    def __post_init__(self) -> None:
        self.name = "inspector_verbose" if self.verbose else "inspector_default"
        self.blind_to = frozenset() if self.verbose else PER_CHANNEL_FAULTS
        self.writer = InspectorWriter(self.root, verbose=self.verbose)
        # Each host runs 8 GPUs; without NCCL_DEBUG logs the collector takes rank % 8 as the GPU.
        self.collector = NcclFileCollector(self.root, pattern="*/*.log", gpus_per_host=8)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        self.writer.write(batch)
        out = self.collector.collect()
        return out if out is not None and out.num_rows else None

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


NCCL_VIEWS: dict[str, Callable[[], NcclView]] = {
    "rich": NcclView,
    "inspector_verbose": lambda: InspectorView(verbose=True),
    "inspector_default": lambda: InspectorView(verbose=False),
}
