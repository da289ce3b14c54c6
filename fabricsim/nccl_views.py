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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from graywire.collectors.nccl.tail import NcclFileCollector
from graywire.fabricsim.nccl_writer import InitLogWriter, InspectorWriter

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


@dataclass
class InitLogView:
    """fabricsim's start-up events written as NCCL_DEBUG files and read back by the file
    collector (``debug_pattern``), on the simulation's clock: the ``nccl_init`` rows a real
    deployment would get. A launch's directory is removed once it has been quiet for
    ``keep_s`` (old logs cleaned up), so the directory listing stays small."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="graywire-init-view-")))
    keep_s: float = 600.0

    def __post_init__(self) -> None:
        self.writer = InitLogWriter(self.root)
        self.now: datetime | None = None
        self.collector = NcclFileCollector(
            self.root,
            pattern="*-pid*.log",
            debug_pattern="nccl.*",
            clock=lambda: self.now or datetime.now(UTC),
            job_regex=r"^nccl\.(?P<job>[^.]+)\.",  # the file name carries the job (one shared directory)
        )
        self._last: dict[str, tuple[float, Any]] = {}  # launch -> (last event time, launch)

    def apply(self, events: Sequence[Any], now: datetime, t_s: float) -> pa.RecordBatch | None:
        self.now = now
        self.writer.write(events)
        for ev in events:
            self._last[ev.launch.name] = (ev.time_s, ev.launch)
        for name, (t, launch) in list(self._last.items()):
            if t_s - t > self.keep_s:
                for r in range(launch.nranks):
                    self.writer.path(launch, r).unlink(missing_ok=True)
                del self._last[name]
        self.collector.collect()
        return self.collector.collect_init()

    def layout(self) -> pa.RecordBatch | None:
        """The hosts' topology probes (``nccl_layout``) read by the last :meth:`apply`, when changed."""
        return self.collector.collect_layout(self.now)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


NCCL_VIEWS: dict[str, Callable[[], NcclView]] = {
    "rich": NcclView,
    "inspector_verbose": lambda: InspectorView(verbose=True),
    "inspector_default": lambda: InspectorView(verbose=False),
}
