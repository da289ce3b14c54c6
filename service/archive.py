"""The poll's Parquet archive: every judged batch, the fabric model beside it, and retention.

The archive is what ``graywire replay <archive>`` reads, so the inventory is written next to
the data once. A write that fails (a full disk) costs the archive that batch, never the poll's
findings: it is logged and counted (``graywire_archive_errors``). Retention runs at most once
an hour, from the poll's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import pyarrow as pa

from graywire.collectors.dataset import DatasetWriter, prune
from graywire.collectors.model import INVENTORY, Fabric
from graywire.collectors.schemas import record_kind
from graywire.service.config import Settings

log = logging.getLogger("graywire.archive")

#: Seconds between two retention passes.
PRUNE_EVERY_S = 3600.0


class Archive:
    """Writes a poll's batches under ``archive_dir``; ``on_error`` counts a failed write."""

    def __init__(self, settings: Settings, fabric: Fabric, on_error: Callable[[], None]) -> None:
        self.dir = settings.archive_dir
        self.retention = settings.archive.retention
        self.on_error = on_error
        self._writer: DatasetWriter | None = DatasetWriter(
            settings.archive_dir,
            row_group_rows=250_000,
            roll_seconds=settings.archive.roll.total_seconds(),
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        fabric.write_inventory(self.dir / INVENTORY)
        self._last_prune = 0.0

    def write(self, batches: Iterable[pa.RecordBatch]) -> None:
        """Append each batch; one that cannot be written is left out, logged and counted."""
        if self._writer is None:
            return
        for batch in batches:
            try:
                self._writer.write(batch)
            except (OSError, ValueError) as e:  # a full disk must not cost the findings
                kind = record_kind(batch.schema)
                log.error("archive write failed (%s batch kept out of the archive): %s", kind, e)
                self.on_error()

    def prune_if_due(self) -> None:
        """Remove what is older than ``archive.retention``, at most once per ``PRUNE_EVERY_S``."""
        if self._writer is None or time.monotonic() - self._last_prune < PRUNE_EVERY_S:
            return
        self._last_prune = time.monotonic()
        for d in prune(self.dir, self.retention):
            log.info("archive retention: removed %s", d)

    def close(self) -> None:
        """Flush and close the open files; later writes are ignored (the service is stopping)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
