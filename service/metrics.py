"""Prometheus exposition built from a snapshot, so a scrape never waits on the pipeline.

The runner updates :class:`MetricsState` after every poll; the collector turns the snapshot
into metric families at scrape time. Names are ``graywire_`` prefixed, in base units.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collectors.model import Fabric
from detectors.pipeline import StageStats


@dataclass
class TargetStatus:
    """Health of one scrape target, as the API and metrics report it."""

    source: str
    target: str
    ok: bool | None = None  # None until the first scrape
    scrapes: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    last_attempt: float | None = None  # unix seconds
    last_success: float | None = None
    duration_s: float = 0.0
    samples: int = 0
    error: str | None = None
    stale_port_count: int = 0
    stale_ports: list[str] = field(default_factory=list)


@dataclass
class MetricsState:
    fabric: Fabric
    per_port: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    rows_ingested: Counter[str] = field(default_factory=Counter)
    rows_dropped: Counter[str] = field(default_factory=Counter)
    targets: list[TargetStatus] = field(default_factory=list)
    findings: Counter[tuple[str, str]] = field(default_factory=Counter)
    polls: int = 0
    poll_errors: int = 0
    archive_errors: int = 0
    last_poll_seconds: float = 0.0
    last_poll_timestamp: float = 0.0
    last_data_timestamp: float = 0.0
    stages: dict[str, StageStats] = field(default_factory=dict)
    open_incidents: list[tuple[str, str, int]] = field(default_factory=list)
    port_speed_bps: np.ndarray | None = None  # by fabric port index, NaN where unknown
    port_stale: np.ndarray | None = None  # by fabric port index
    # The latest reading of each port (the ports API), by fabric port index; 0 / NaN = none yet.
    port_width: np.ndarray | None = None
    port_phys_state: np.ndarray | None = None
    port_logical_state: np.ndarray | None = None
    port_updated: np.ndarray | None = None  # unix seconds of the sample

    def record_ports(
        self,
        idx: np.ndarray,
        speed_bps: np.ndarray,
        width: np.ndarray | None = None,
        phys_state: np.ndarray | None = None,
        logical_state: np.ndarray | None = None,
        updated: np.ndarray | None = None,
    ) -> None:
        """Keep the latest reading per port; rows whose port the model does not know are ignored."""
        n = self.fabric.n_ports
        ok = idx >= 0
        at = idx[ok]
        with self.lock:
            if self.port_speed_bps is None:
                self.port_speed_bps = np.full(n, np.nan)
            self.port_speed_bps[at] = speed_bps[ok]
            for name, values, empty in (
                ("port_width", width, np.zeros(n, dtype=np.int16)),
                ("port_phys_state", phys_state, np.zeros(n, dtype=np.uint8)),
                ("port_logical_state", logical_state, np.zeros(n, dtype=np.uint8)),
                ("port_updated", updated, np.full(n, np.nan)),
            ):
                if values is None:
                    continue
                current = getattr(self, name)
                if current is None:
                    current = empty
                    setattr(self, name, current)
                current[at] = values[ok]


class GraywireCollector(Collector):
    def __init__(self, state: MetricsState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        s = self.state
        with s.lock:
            yield from self._service(s)
            if s.per_port and s.port_speed_bps is not None:
                yield from self._ports(s)

    def _service(self, s: MetricsState) -> Iterator[Metric]:
        g = GaugeMetricFamily("graywire_ports", "Ports in the fabric model")
        g.add_metric([], s.fabric.n_ports)
        yield g
        c = CounterMetricFamily("graywire_ingested_rows", "Rows ingested, by record", labels=["record"])
        for rec, n in sorted(s.rows_ingested.items()):
            c.add_metric([rec], n)
        yield c
        c = CounterMetricFamily(
            "graywire_dropped_rows", "Rows of malformed batches dropped before detection", labels=["record"]
        )
        for rec, n in sorted(s.rows_dropped.items()):
            c.add_metric([rec], n)
        yield c
        yield from self._targets(s)
        c = CounterMetricFamily("graywire_polls", "Polls completed")
        c.add_metric([], s.polls)
        yield c
        c = CounterMetricFamily("graywire_poll_errors", "Polls that failed")
        c.add_metric([], s.poll_errors)
        yield c
        c = CounterMetricFamily("graywire_archive_errors", "Batches the Parquet archive could not write")
        c.add_metric([], s.archive_errors)
        yield c
        g = GaugeMetricFamily("graywire_poll_duration_seconds", "Wall time of the last poll (fetch to store)")
        g.add_metric([], s.last_poll_seconds)
        yield g
        g = GaugeMetricFamily("graywire_last_poll_timestamp_seconds", "Unix time the last poll finished")
        g.add_metric([], s.last_poll_timestamp)
        yield g
        g = GaugeMetricFamily(
            "graywire_pipeline_lag_seconds", "Seconds between the newest data's timestamp and its processing"
        )
        g.add_metric([], max(0.0, s.last_poll_timestamp - s.last_data_timestamp) if s.polls else 0.0)
        yield g
        c = CounterMetricFamily(
            "graywire_findings", "Findings emitted by detectors", labels=["kind", "status"]
        )
        for (kind, status), n in sorted(s.findings.items()):
            c.add_metric([kind, status], n)
        yield c
        t = CounterMetricFamily(
            "graywire_pipeline_stage_seconds", "CPU time spent per pipeline stage", labels=["stage"]
        )
        r = CounterMetricFamily(
            "graywire_pipeline_stage_rows", "Rows processed per pipeline stage", labels=["stage"]
        )
        for name, st in sorted(s.stages.items()):
            t.add_metric([name], st.seconds)
            r.add_metric([name], st.rows)
        yield t
        yield r
        g = GaugeMetricFamily(
            "graywire_incidents_open", "Open or acknowledged incidents", labels=["kind", "severity"]
        )
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for kind, sev, n in s.open_incidents:
            counts[(kind, sev)] += n
        for (kind, sev), n in sorted(counts.items()):
            g.add_metric([kind, sev], n)
        yield g

    def _targets(self, s: MetricsState) -> Iterator[Metric]:
        labels = ["source", "target"]
        dur = GaugeMetricFamily(
            "graywire_scrape_duration_seconds", "Duration of the last scrape", labels=labels
        )
        ok = GaugeMetricFamily(
            "graywire_scrape_success", "1 if the last scrape succeeded, else 0", labels=labels
        )
        samples = GaugeMetricFamily(
            "graywire_scrape_samples", "Rows returned by the last scrape", labels=labels
        )
        fails = CounterMetricFamily("graywire_scrape_failures", "Failed scrapes", labels=labels)
        last = GaugeMetricFamily(
            "graywire_scrape_last_success_timestamp_seconds",
            "Unix time of the last good scrape",
            labels=labels,
        )
        stale = GaugeMetricFamily(
            "graywire_stale_ports", "Ports whose data is missing or too old (target failing)", labels=labels
        )
        for t in s.targets:
            lv = [t.source, t.target]
            if t.ok is not None:
                dur.add_metric(lv, t.duration_s)
                ok.add_metric(lv, 1.0 if t.ok else 0.0)
                samples.add_metric(lv, t.samples)
            fails.add_metric(lv, t.failures)
            if t.last_success is not None:
                last.add_metric(lv, t.last_success)
            stale.add_metric(lv, t.stale_port_count)
        yield from (dur, ok, samples, fails, last, stale)

    def _ports(self, s: MetricsState) -> Iterator[Metric]:
        f = s.fabric
        assert s.port_speed_bps is not None
        speed = GaugeMetricFamily(
            "graywire_port_speed_bytes_per_second", "Negotiated port speed", labels=["port", "node"]
        )
        exp = GaugeMetricFamily(
            "graywire_port_expected_speed_bytes_per_second", "Port speed the inventory expects",
            labels=["port", "node"],
        )  # fmt: skip
        stale = GaugeMetricFamily(
            "graywire_port_stale",
            "1 while the port's source is failing or its data too old",
            labels=["port", "node"],
        )
        names = f.node_names
        flags = s.port_stale if s.port_stale is not None else np.zeros(f.n_ports, dtype=bool)
        for i in np.flatnonzero(~np.isnan(s.port_speed_bps)).tolist():
            labels = [f.keys[i], names[f.node_of_port[i]]]
            speed.add_metric(labels, s.port_speed_bps[i] / 8)
            if f.expected_speed_bps[i]:
                exp.add_metric(labels, f.expected_speed_bps[i] / 8)
            stale.add_metric(labels, float(flags[i]))
        yield speed
        yield exp
        yield stale


def make_registry(state: MetricsState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GraywireCollector(state))
    return registry
