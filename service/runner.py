"""The service loop: poll the source, run the pipeline, archive, persist, update metrics.

One poll is CPU work (Arrow + numpy) and runs in a worker thread so the API stays
responsive. A failing poll is logged and counted, never fatal: the next poll runs on time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from collectors.dataset import DatasetWriter, prune
from collectors.schemas import record_kind
from detectors.findings import Finding
from detectors.pipeline import Pipeline
from fabricsim.faults import parse_duration
from fabricsim.output import INVENTORY
from service.config import Settings
from service.metrics import MetricsState
from service.sources import LiveFabricSim
from service.store import IncidentStore

log = logging.getLogger("graywire.runner")


class Runner:
    def __init__(
        self,
        settings: Settings,
        source: LiveFabricSim,
        store: IncidentStore,
        metrics: MetricsState,
        pipeline: Pipeline | None = None,
    ) -> None:
        self.settings = settings
        self.source = source
        self.store = store
        self.metrics = metrics
        self.pipeline = pipeline or Pipeline(source.fabric)
        self.archive: DatasetWriter | None = None
        if settings.archive.enabled:
            self.archive = DatasetWriter(
                settings.archive_dir,
                row_group_rows=250_000,
                roll_seconds=parse_duration(settings.archive.roll),
            )
            # The fabric model beside the data, so `graywire replay <archive>` needs nothing else.
            settings.archive_dir.mkdir(parents=True, exist_ok=True)
            source.fabric.write_inventory(settings.archive_dir / INVENTORY)
        self._last_prune = 0.0

    def tick(self) -> list[Finding]:
        """One poll, start to finish."""
        t0 = time.perf_counter()
        batches = self.source.poll()
        findings: list[Finding] = []
        newest = 0.0
        for batch in batches:
            findings.extend(self.pipeline.process(batch))
            kind = record_kind(batch.schema)
            if kind == "port_sample":
                self._record_ports(batch)
            if self.archive is not None:
                self.archive.write(batch)
            with self.metrics.lock:
                self.metrics.rows_ingested[kind] += batch.num_rows
            if batch.num_rows:
                newest = max(newest, batch.column("time")[0].as_py().timestamp())
        if findings:
            self.store.apply(findings)
            for f in findings:
                log.info("%s %s %s: %s", f.status, f.kind, f.node or f.entity, f.summary)
        open_counts = self.store.open_counts()
        self._maybe_prune()
        with self.metrics.lock:
            m = self.metrics
            m.polls += 1
            m.last_poll_seconds = time.perf_counter() - t0
            m.last_poll_timestamp = time.time()
            m.last_data_timestamp = newest or m.last_data_timestamp
            for f in findings:
                m.findings[(f.kind, f.status)] += 1
            m.stages = dict(self.pipeline.stats)
            m.open_incidents = open_counts
        return findings

    def _record_ports(self, batch: pa.RecordBatch) -> None:
        if not self.settings.metrics.per_port:
            return
        idx = self.source.fabric.lookup(batch.column("port"))
        speed = batch.column("speed_bps").to_numpy(zero_copy_only=False).astype(np.float64)
        self.metrics.record_ports(idx, np.nan_to_num(speed, nan=0.0))

    def _maybe_prune(self) -> None:
        if self.archive is None or time.monotonic() - self._last_prune < 3600:
            return
        self._last_prune = time.monotonic()
        keep = timedelta(seconds=parse_duration(self.settings.archive.retention))
        for d in prune(self.settings.archive_dir, keep):
            log.info("archive retention: removed %s", d)

    async def run(self) -> None:
        """Poll on the source's schedule until cancelled."""
        try:
            while True:
                due = self.source.next_time()
                delay = (due - datetime.now(UTC)).total_seconds()
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    await asyncio.to_thread(self.tick)
                except Exception:
                    log.exception("poll failed; continuing with the next one")
                    with self.metrics.lock:
                        self.metrics.poll_errors += 1
        finally:
            self.close()

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()
            self.archive = None
