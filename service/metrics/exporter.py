"""Prometheus exposition built from a snapshot, so a scrape never waits on the pipeline.

The runner updates :class:`MetricsState` after every poll; the collector turns the snapshot
into metric families at scrape time. Names are ``graywire_`` prefixed, in base units, with
``_total`` on counters. Labels are bounded: port and node (the fabric model), rank and channel
(the GPUs of the cluster), leaf and rail, detector kinds and severities; never a job id.

``metrics.per_port: false`` drops every per-port and per-rank series (the cardinality switch
for very large fabrics); the leaf, rail and channel aggregates stay.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import record_kind
from graywire.detectors.base import PortIndexer
from graywire.detectors.findings import PORT_HEALTH
from graywire.detectors.pipeline import StageStats
from graywire.service.metrics.exposition import ArrayGauge, render_labels
from graywire.service.metrics.nccl import NcclSnapshot, nccl_snapshot, per_channel_max
from graywire.service.metrics.ports import (
    FIGURES,
    HEALTH_STATES,
    PORT_SERIES,
    GroupFigures,
    group_figures,
    leaf_of_ports,
    port_figures,
)


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
    """What the last polls left for ``/metrics``; every field is read and written under ``lock``."""

    fabric: Fabric
    per_port: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    rows_ingested: Counter[str] = field(default_factory=Counter)
    rows_dropped: Counter[str] = field(default_factory=Counter)
    #: Rows refused before detection, by (record, reason): unknown hosts, clocks far ahead.
    rows_rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Lines, records and values parsers left out of good scrapes, by (source, reason).
    parse_skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    targets: list[TargetStatus] = field(default_factory=list)
    findings: Counter[tuple[str, str]] = field(default_factory=Counter)
    polls: int = 0
    poll_errors: int = 0
    archive_errors: int = 0
    last_poll_seconds: float = 0.0
    last_poll_timestamp: float = 0.0
    last_data_timestamp: float = 0.0
    #: rows and batches the last poll brought, by record
    poll_rows: dict[str, int] = field(default_factory=dict)
    poll_batches: dict[str, int] = field(default_factory=dict)
    stages: dict[str, StageStats] = field(default_factory=dict)
    open_incidents: list[tuple[str, str, int]] = field(default_factory=list)
    figures: dict[str, np.ndarray] = field(default_factory=dict)  # by fabric port, NaN unknown
    port_reported: np.ndarray | None = None  # ports any source has reported since start
    port_stale: np.ndarray | None = None  # by fabric port index
    port_severity: np.ndarray | None = None  # worst open incident on the port: 0 ok, 1 warning, 2 critical
    nccl: NcclSnapshot | None = None
    #: The latest raw reading of each port, for the ports API, by fabric port index (0 / NaN = none).
    port_speed_bps: np.ndarray | None = None
    port_width: np.ndarray | None = None
    port_phys_state: np.ndarray | None = None
    port_logical_state: np.ndarray | None = None
    port_updated: np.ndarray | None = None  # unix seconds of the sample

    @cached_property
    def leaf_of_port(self) -> np.ndarray:
        return leaf_of_ports(self.fabric)

    @cached_property
    def _indexer(self) -> PortIndexer:
        return PortIndexer(self.fabric)

    def snapshot(self) -> MetricsSnapshot:
        """Copy every field ``/metrics`` reads, under the lock; arrays the poll updates in place too."""

        def arr(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a.copy()

        leaf_of_port = self.leaf_of_port  # immutable per fabric: computed once, outside the lock
        with self.lock:
            return MetricsSnapshot(
                fabric=self.fabric,
                per_port=self.per_port,
                rows_ingested=dict(self.rows_ingested),
                rows_dropped=dict(self.rows_dropped),
                rows_rejected=dict(self.rows_rejected),
                parse_skipped=dict(self.parse_skipped),
                targets=[replace(t, stale_ports=list(t.stale_ports)) for t in self.targets],
                findings=dict(self.findings),
                polls=self.polls,
                poll_errors=self.poll_errors,
                archive_errors=self.archive_errors,
                last_poll_seconds=self.last_poll_seconds,
                last_poll_timestamp=self.last_poll_timestamp,
                last_data_timestamp=self.last_data_timestamp,
                poll_rows=dict(self.poll_rows),
                poll_batches=dict(self.poll_batches),
                stages={k: copy.copy(v) for k, v in self.stages.items()},
                open_incidents=list(self.open_incidents),
                figures={k: v.copy() for k, v in self.figures.items()},
                port_reported=arr(self.port_reported),
                port_stale=arr(self.port_stale),
                port_severity=arr(self.port_severity),
                nccl=self.nccl,  # frozen, replaced whole by every poll
                leaf_of_port=leaf_of_port,
            )

    def observe_poll(self, batches: Iterable[pa.RecordBatch], port_rates: pa.RecordBatch | None) -> None:
        """Take one poll: batch sizes, the ports' figures from its rates, its NCCL channel latency.

        The arithmetic runs before the lock is taken, so a scrape waits only for the swap.
        """
        rows: Counter[str] = Counter()
        count: Counter[str] = Counter()
        nccl_batches = []
        for b in batches:
            kind = record_kind(b.schema)
            rows[kind] += b.num_rows
            count[kind] += 1
            if kind == "nccl_timing":
                nccl_batches.append(b)
        snap = nccl_snapshot(nccl_batches)
        idx = figures = None
        if port_rates is not None and port_rates.num_rows:
            idx = self._indexer(port_rates.column("port"))
            keep = idx >= 0
            idx = idx[keep]
            figures = {k: v[keep] for k, v in port_figures(port_rates).items()}
        with self.lock:
            self.poll_rows, self.poll_batches = dict(rows), dict(count)
            self.nccl = snap
            if idx is None or figures is None:
                return
            if not self.figures:
                self.figures = {k: np.full(self.fabric.n_ports, np.nan) for k in FIGURES}
                self.port_reported = np.zeros(self.fabric.n_ports, dtype=bool)
            for k, v in figures.items():
                self.figures[k][idx] = v
            assert self.port_reported is not None
            self.port_reported[idx] = True

    def set_incidents(
        self, counts: list[tuple[str, str, int]], on_ports: Iterable[tuple[str | None, str | None, str]]
    ) -> None:
        """Open incidents by (kind, severity), and the worst severity on each port.

        ``on_ports`` holds (port, link, severity) of every open incident; a link incident
        marks both of its ends.
        """
        by_key: dict[str, int] = {}
        for port, link, severity in on_ports:
            code = PORT_HEALTH.get(severity, 1)
            ends = link.split("<->") if link else []
            for key in {port, *ends} - {None, ""}:
                assert key is not None
                by_key[key] = max(by_key.get(key, 0), code)
        sev = np.zeros(self.fabric.n_ports, dtype=np.int8)
        if by_key:
            keys = list(by_key)
            idx = self.fabric.lookup(pa.array(keys, type=pa.string()))
            codes = np.array([by_key[k] for k in keys], dtype=np.int8)
            ok = idx >= 0
            np.maximum.at(sev, idx[ok], codes[ok])
        with self.lock:
            self.open_incidents = counts
            self.port_severity = sev

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


@dataclass(frozen=True)
class MetricsSnapshot:
    """A copy of what ``/metrics`` shows, taken under the lock and rendered outside it.

    Rendering per-port series takes seconds on a large fabric; holding the lock that long would
    stall the poll loop (it takes the lock to publish every poll). The copy is a few memcpys of
    the per-port arrays, and the poll may change the state while a scrape still renders this.
    """

    fabric: Fabric
    per_port: bool
    rows_ingested: dict[str, int]
    rows_dropped: dict[str, int]
    rows_rejected: dict[tuple[str, str], int]
    parse_skipped: dict[tuple[str, str], int]
    targets: list[TargetStatus]
    findings: dict[tuple[str, str], int]
    polls: int
    poll_errors: int
    archive_errors: int
    last_poll_seconds: float
    last_poll_timestamp: float
    last_data_timestamp: float
    poll_rows: dict[str, int]
    poll_batches: dict[str, int]
    stages: dict[str, StageStats]
    open_incidents: list[tuple[str, str, int]]
    figures: dict[str, np.ndarray]
    port_reported: np.ndarray | None
    port_stale: np.ndarray | None
    port_severity: np.ndarray | None
    nccl: NcclSnapshot | None
    leaf_of_port: np.ndarray


def _counter(name: str, doc: str, values: Iterable[tuple[list[str], float]], labels: list[str]) -> Metric:
    c = CounterMetricFamily(name, doc, labels=labels)
    for lv, v in values:
        c.add_metric(lv, v)
    return c


def _gauge(name: str, doc: str, value: float) -> Metric:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


class GraywireExporter(Collector):
    """The service's own series for ``/metrics`` (a prometheus_client ``Collector``; not a source
    collector: those live in ``collectors/``), read from a :class:`MetricsSnapshot`."""

    def __init__(self, state: MetricsState) -> None:
        self.state = state
        self._port_labels: dict[tuple[tuple[str, str], ...], tuple[list[str], list[dict[str, str]]]] = {}

    def collect(self) -> Iterator[Metric]:
        """Families of one snapshot: the lock is held for the copy, never while families render."""
        s = self.state.snapshot()
        yield from self._service(s)
        yield from self._targets(s)
        yield from self._groups(s)
        yield from self._nccl(s)
        if s.per_port:
            yield from self._ports(s)

    def _service(self, s: MetricsSnapshot) -> Iterator[Metric]:
        yield _gauge("graywire_ports", "Ports in the fabric model", s.fabric.n_ports)
        yield _counter(
            "graywire_ingested_rows",
            "Rows ingested, by record",
            (([rec], n) for rec, n in sorted(s.rows_ingested.items())),
            ["record"],
        )
        yield _counter(
            "graywire_dropped_rows",
            "Rows of malformed batches dropped before detection",
            (([rec], n) for rec, n in sorted(s.rows_dropped.items())),
            ["record"],
        )
        yield _counter(
            "graywire_rejected_rows",
            "Rows refused before detection, by record and reason (unknown_host, out_of_scope, clock_ahead, "
            "too_old, communicator_cap, rate_limited, scheduler_unavailable)",
            (([rec, why], n) for (rec, why), n in sorted(s.rows_rejected.items())),
            ["record", "reason"],
        )
        yield _counter(
            "graywire_parse_skipped",
            "Lines, records and values parsers skipped in scrapes that succeeded, by source and reason "
            "(malformed_line, out_of_range, not_a_number, bad_port, too_deep)",
            (([src, why], n) for (src, why), n in sorted(s.parse_skipped.items())),
            ["source", "reason"],
        )
        g = GaugeMetricFamily(
            "graywire_poll_batch_rows", "Rows the last poll brought, by record", labels=["record"]
        )
        for rec, n in sorted(s.poll_rows.items()):
            g.add_metric([rec], n)
        yield g
        g = GaugeMetricFamily(
            "graywire_poll_batches", "Batches the last poll brought, by record", labels=["record"]
        )
        for rec, n in sorted(s.poll_batches.items()):
            g.add_metric([rec], n)
        yield g
        yield _counter("graywire_polls", "Polls completed", [([], s.polls)], [])
        yield _counter("graywire_poll_errors", "Polls that failed", [([], s.poll_errors)], [])
        yield _counter(
            "graywire_archive_errors",
            "Batches the Parquet archive could not write",
            [([], s.archive_errors)],
            [],
        )
        yield _gauge(
            "graywire_poll_duration_seconds",
            "Wall time of the last poll (fetch to store)",
            s.last_poll_seconds,
        )
        yield _gauge(
            "graywire_last_poll_timestamp_seconds", "Unix time the last poll finished", s.last_poll_timestamp
        )
        lag = max(0.0, s.last_poll_timestamp - s.last_data_timestamp) if s.polls else 0.0
        yield _gauge(
            "graywire_pipeline_lag_seconds",
            "Seconds between the newest data's timestamp and its processing",
            lag,
        )
        yield _counter(
            "graywire_findings",
            "Findings emitted by detectors",
            (([kind, status], n) for (kind, status), n in sorted(s.findings.items())),
            ["kind", "status"],
        )
        stages = sorted(s.stages.items())
        yield _counter(
            "graywire_pipeline_stage_seconds",
            "CPU time spent per pipeline stage",
            (([name], st.seconds) for name, st in stages),
            ["stage"],
        )
        yield _counter(
            "graywire_pipeline_stage_rows",
            "Rows processed per pipeline stage",
            (([name], st.rows) for name, st in stages),
            ["stage"],
        )
        yield _counter(
            "graywire_pipeline_stage_batches",
            "Batches processed per pipeline stage",
            (([name], st.batches) for name, st in stages),
            ["stage"],
        )
        yield _counter(
            "graywire_detector_rows_over_capacity",
            "Rows a detector left out because its state was at its bound (e.g. nccl_step_time's "
            "max_groups live groups): counted, never judged on half a history",
            (([name], st.over_capacity) for name, st in stages if st.over_capacity is not None),
            ["stage"],
        )
        g = GaugeMetricFamily(
            "graywire_incidents_open", "Open or acknowledged incidents", labels=["kind", "severity"]
        )
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for kind, sev, n in s.open_incidents:
            counts[(kind, sev)] += n
        for (kind, sev), n in sorted(counts.items()):
            g.add_metric([kind, sev], n)
        yield g

    def _targets(self, s: MetricsSnapshot) -> Iterator[Metric]:
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
        age = GaugeMetricFamily(
            "graywire_scrape_staleness_seconds",
            "Seconds since the last good scrape (absent until one succeeds)",
            labels=labels,
        )
        stale = GaugeMetricFamily(
            "graywire_stale_ports", "Ports whose data is missing or too old (target failing)", labels=labels
        )
        now = time.time()
        for t in s.targets:
            lv = [t.source, t.target]
            if t.ok is not None:
                dur.add_metric(lv, t.duration_s)
                ok.add_metric(lv, 1.0 if t.ok else 0.0)
                samples.add_metric(lv, t.samples)
            fails.add_metric(lv, t.failures)
            if t.last_success is not None:
                last.add_metric(lv, t.last_success)
                age.add_metric(lv, max(0.0, now - t.last_success))
            stale.add_metric(lv, t.stale_port_count)
        yield from (dur, ok, samples, fails, last, age, stale)

    # -- ports ---------------------------------------------------------------------------------
    def _health(self, s: MetricsSnapshot) -> np.ndarray:
        """Index into HEALTH_STATES per port (critical > warning > stale > ok)."""
        n = s.fabric.n_ports
        health = np.zeros(n, dtype=np.int64)
        if s.port_stale is not None:
            health[s.port_stale] = HEALTH_STATES.index("stale")
        if s.port_severity is not None:
            health[s.port_severity == 1] = HEALTH_STATES.index("warning")
            health[s.port_severity == 2] = HEALTH_STATES.index("critical")
        return health

    def _groups(self, s: MetricsSnapshot) -> Iterator[Metric]:
        """Health, speed, BER and PFC by leaf and by rail: on whatever the per-port switch says."""
        if s.port_reported is None:
            return
        f = s.fabric
        fig = s.figures
        health = self._health(s)
        expected = f.expected_speed_bps / 8
        below = ((expected > 0) & (fig["speed"] < expected)).astype(np.float64)
        pause = np.fmax(fig["pause_ratio_rx"], fig["pause_ratio_tx"])
        rails = sorted({int(r) for r in f.rail.tolist() if r >= 0})
        rail_pos = np.full(int(f.rail.max()) + 1 if f.n_ports else 0, -1, dtype=np.int64)
        rail_pos[rails] = np.arange(len(rails))
        rail_group = np.where(f.rail >= 0, rail_pos[np.maximum(f.rail, 0)] if rail_pos.size else -1, -1)
        groupings = (
            (
                "leaf",
                group_figures(
                    s.leaf_of_port.astype(np.int64),
                    f.node_names,
                    health,
                    s.port_reported,
                    below,
                    fig["pre_fec_ber"],
                    pause,
                ),
            ),
            (
                "rail",
                group_figures(
                    rail_group.astype(np.int64),
                    [str(r) for r in rails],
                    health,
                    s.port_reported,
                    below,
                    fig["pre_fec_ber"],
                    pause,
                ),
            ),
        )
        for label, g in groupings:
            yield from self._group_families(label, g)

    @staticmethod
    def _group_families(label: str, g: GroupFigures) -> Iterator[Metric]:
        ports = GaugeMetricFamily(
            f"graywire_{label}_ports", f"Reported ports by {label} and health state", labels=[label, "health"]
        )
        below = GaugeMetricFamily(
            f"graywire_{label}_ports_below_expected_speed",
            f"Ports running slower than the inventory expects, by {label}",
            labels=[label],
        )
        ber = GaugeMetricFamily(
            f"graywire_{label}_pre_fec_bit_error_ratio_max",
            f"Worst port pre-FEC BER, by {label}",
            labels=[label],
        )
        pause = GaugeMetricFamily(
            f"graywire_{label}_pfc_pause_ratio_max",
            f"Most-paused port's PFC pause share, by {label}",
            labels=[label],
        )
        totals = g.ports_by_health.sum(axis=1)
        for i in np.flatnonzero(totals).tolist():
            name = g.names[i]
            for h, state in enumerate(HEALTH_STATES):
                ports.add_metric([name, state], float(g.ports_by_health[i, h]))
            below.add_metric([name], float(g.below_expected_speed[i]))
            if not np.isnan(g.pre_fec_ber_max[i]):
                ber.add_metric([name], float(g.pre_fec_ber_max[i]))
            if not np.isnan(g.pfc_pause_ratio_max[i]):
                pause.add_metric([name], float(g.pfc_pause_ratio_max[i]))
        yield from (ports, below, ber, pause)

    def _labels(
        self, s: MetricsSnapshot, extra: tuple[tuple[str, str], ...]
    ) -> tuple[list[str], list[dict[str, str]]]:
        """Label strings and dicts per port, built once and shared by every scrape (never mutated)."""
        cached = self._port_labels.get(extra)
        if cached is None:
            f = s.fabric
            names = ["port", "node", *(k for k, _ in extra)]
            rows = [
                (k, f.node_names[n], *(v for _, v in extra))
                for k, n in zip(f.keys, f.node_of_port.tolist(), strict=True)
            ]
            cached = (render_labels(names, rows), [dict(zip(names, r, strict=True)) for r in rows])
            self._port_labels[extra] = cached
        return cached

    def _port_family(
        self,
        s: MetricsSnapshot,
        name: str,
        doc: str,
        parts: Iterable[tuple[tuple[tuple[str, str], ...], np.ndarray]],
    ) -> Metric:
        m = ArrayGauge(name, doc)
        for extra, values in parts:
            m.add(*self._labels(s, extra), values)
        return m

    def _ports(self, s: MetricsSnapshot) -> Iterator[Metric]:
        if s.port_reported is None:
            return
        f = s.fabric
        reported = s.port_reported
        fig = s.figures
        by_metric: dict[str, tuple[str, list[tuple[tuple[tuple[str, str], ...], np.ndarray]]]] = {}
        for ps in PORT_SERIES:
            by_metric.setdefault(ps.metric, (ps.help, []))[1].append((ps.extra, fig[ps.figure]))
        for name, (doc, parts) in by_metric.items():
            yield self._port_family(s, name, doc, parts)
        expected = np.where(reported & (f.expected_speed_bps > 0), f.expected_speed_bps / 8, np.nan)
        yield self._port_family(
            s,
            "graywire_port_expected_speed_bytes_per_second",
            "Port speed the inventory expects",
            [((), expected)],
        )
        stale = s.port_stale if s.port_stale is not None else np.zeros(f.n_ports, dtype=bool)
        yield self._port_family(
            s,
            "graywire_port_stale",
            "1 while the port's source is failing or its data too old",
            [((), np.where(reported, stale.astype(np.float64), np.nan))],
        )
        sev = s.port_severity if s.port_severity is not None else np.zeros(f.n_ports, dtype=np.int8)
        yield self._port_family(
            s,
            "graywire_port_health",
            "Worst open incident on the port: 0 none, 1 warning, 2 critical",
            [((), np.where(reported, sev.astype(np.float64), np.nan))],
        )

    # -- NCCL ----------------------------------------------------------------------------------
    def _nccl(self, s: MetricsSnapshot) -> Iterator[Metric]:
        snap = s.nccl
        worst = GaugeMetricFamily(
            "graywire_nccl_channel_slowdown_ratio_max",
            "Slowest rank's channel latency over its peers' median, by channel (last poll)",
            labels=["channel"],
        )
        ranks = GaugeMetricFamily(
            "graywire_nccl_ranks", "Ranks that reported channel timings in the last poll"
        )
        if snap is None:
            ranks.add_metric([], 0)
            yield from (worst, ranks)
            return
        ranks.add_metric([], len(set(zip(snap.host, snap.rank.tolist(), strict=True))))
        for ch, r in zip(*per_channel_max(snap), strict=True):
            if not np.isnan(r):
                worst.add_metric([str(int(ch))], float(r))
        yield from (worst, ranks)
        if not s.per_port:
            return
        labels = ["host", "rank", "channel"]
        dur = GaugeMetricFamily(
            "graywire_nccl_channel_duration_seconds",
            "Mean duration of a rank's channel operations in the last poll",
            labels=labels,
        )
        ratio = GaugeMetricFamily(
            "graywire_nccl_channel_slowdown_ratio",
            "A rank's channel latency over the median of its peers on that channel (1 = typical)",
            labels=labels,
        )
        for i, host in enumerate(snap.host):
            lv = [host, str(int(snap.rank[i])), str(int(snap.channel[i]))]
            dur.add_metric(lv, float(snap.duration_seconds[i]))
            if not np.isnan(snap.slowdown_ratio[i]):
                ratio.add_metric(lv, float(snap.slowdown_ratio[i]))
        yield from (dur, ratio)


def make_registry(state: MetricsState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GraywireExporter(state))
    return registry
