"""Prometheus exposition from the published fabric state, so a scrape never waits on the pipeline.

The runner publishes a :class:`~graywire.service.state.fabric.FabricState` after every poll; the
exporter turns the current one into metric families at scrape time. Names are ``graywire_``
prefixed, in base units, with ``_total`` on counters. Labels are bounded: port and node (the
fabric model), rank and channel (the GPUs of the cluster), leaf and rail, detector kinds and
severities; never a job id.

``metrics.per_port: false`` drops every per-port and per-rank series (the cardinality switch
for very large fabrics); the leaf, rail and channel aggregates stay. ``metrics.raw_counters:
false`` drops only the sources' cumulative counters (``graywire_port_*_total``).
"""

from __future__ import annotations

import platform
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from graywire.collectors.model import Fabric
from graywire.service.metrics.exposition import ArrayFamily, Extra, PortLabels, RowLabels
from graywire.service.metrics.ports import PORT_SERIES, RAW_COUNTERS
from graywire.service.state.fabric import FabricState, StateBoard, port_health, ports_without_data
from graywire.service.state.figures import HEALTH_STATES, GroupFigures, group_figures
from graywire.service.state.nccl import NcclSnapshot, per_channel_max


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
    collector: those live in ``collectors/``), read from a :class:`FabricState`."""

    def __init__(self, board: StateBoard) -> None:
        self.board = board
        self._port_labels: PortLabels | None = None
        self._info_labels: PortLabels | None = None
        self._group_labels: tuple[Fabric | None, dict[str, tuple[np.ndarray, RowLabels]]] = (None, {})
        self._rank_labels: tuple[NcclSnapshot | None, RowLabels | None] = (None, None)
        self._target_labels: tuple[tuple[tuple[str, str], ...], RowLabels | None] = ((), None)

    def collect(self) -> Iterator[Metric]:
        """Families of one published state: immutable, so rendering takes no lock at all."""
        if not self.board.exported:
            return
        s = self.board.current
        yield from self._service(s)
        yield from self._targets(s)
        yield from self._groups(s)
        yield from self._nccl(s)
        if s.per_port:
            yield from self._ports(s)
            yield from self._raw_counters(s)

    def _service(self, s: FabricState) -> Iterator[Metric]:
        yield _gauge("graywire_ports", "Ports in the fabric model", s.fabric.n_ports)
        yield _gauge(
            "graywire_ports_without_data",
            "Ports of the model no source reported within the data window (unknown, not ok)",
            int(ports_without_data(s).sum()),
        )
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
        # Every configured source from 0, so `rate()` and absence alerts see a series at once.
        unmatched = {t.source: 0 for t in s.targets} | dict(s.unmatched_rows)
        yield _counter(
            "graywire_unmatched_rows",
            "Port rows of good scrapes whose key matches no port of the fabric model, by source: "
            "data graywire cannot judge (the inventory names those ports otherwise)",
            (([src], n) for src, n in sorted(unmatched.items())),
            ["source"],
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

    def _targets(self, s: FabricState) -> Iterator[Metric]:
        """Each scrape target's health: thousands of series with a host agent on every host."""
        names = tuple((t.source, t.target) for t in s.targets)
        seen, labels = self._target_labels
        if labels is None or seen != names:
            sources, targets = zip(*names, strict=True) if names else ((), ())
            columns = {"source": pa.array(sources, pa.string()), "target": pa.array(targets, pa.string())}
            labels = RowLabels(columns)
            self._target_labels = (names, labels)
        now = time.time()

        def when(present: bool, value: float) -> float:
            return value if present else np.nan

        def family(name: str, doc: str, values: Iterable[float], typ: str = "gauge") -> ArrayFamily:
            return ArrayFamily(name, doc, typ, labels, [((), np.fromiter(values, np.float64, len(names)))])

        ts = s.targets
        yield family(
            "graywire_scrape_duration_seconds",
            "Duration of the last scrape",
            (when(t.ok is not None, t.duration_s) for t in ts),
        )
        yield family(
            "graywire_scrape_success",
            "1 if the last scrape succeeded, else 0",
            (when(t.ok is not None, 1.0 if t.ok else 0.0) for t in ts),
        )
        yield family(
            "graywire_scrape_samples",
            "Rows returned by the last scrape",
            (when(t.ok is not None, t.samples) for t in ts),
        )
        yield family("graywire_scrape_failures", "Failed scrapes", (t.failures for t in ts), "counter")
        yield family(
            "graywire_scrape_last_success_timestamp_seconds",
            "Unix time of the last good scrape",
            (when(t.last_success is not None, t.last_success or 0.0) for t in ts),
        )
        yield family(
            "graywire_scrape_staleness_seconds",
            "Seconds since the last good scrape (absent until one succeeds)",
            (when(t.last_success is not None, max(0.0, now - (t.last_success or 0.0))) for t in ts),
        )
        yield family(
            "graywire_stale_ports",
            "Ports whose data is missing or too old (target failing)",
            (t.stale_port_count for t in ts),
        )
        yield family(
            "graywire_scrape_unmatched_rows",
            "Port rows of the last good scrape whose key matches no port of the fabric model",
            (t.unmatched_rows for t in ts),
        )

    # -- ports ---------------------------------------------------------------------------------
    def _groups(self, s: FabricState) -> Iterator[Metric]:
        """Health, speed, BER and PFC by leaf and by rail: on whatever the per-port switch says."""
        if s.port_reported is None:
            return
        f = s.fabric
        fig = s.figures
        health = port_health(s)
        expected = f.expected_speed_bps / 8
        below = ((expected > 0) & (fig["speed"] < expected)).astype(np.float64)
        pause = np.fmax(fig["pause_ratio_rx"], fig["pause_ratio_tx"])
        for label, (group, labels) in self._groupings(s).items():
            g = group_figures(group, len(labels), health, s.port_reported, below, fig["pre_fec_ber"], pause)
            yield from self._group_families(label, labels, g)

    def _groupings(self, s: FabricState) -> dict[str, tuple[np.ndarray, RowLabels]]:
        """Each port's group and the groups' labels, by grouping, built once per fabric: a
        leaf's group is its node index (``leaf="…"`` for every node), a rail's its position
        among the fabric's rails."""
        f = s.fabric
        fabric, groupings = self._group_labels
        if fabric is not f:
            on_rail = f.rail >= 0
            present = np.zeros(int(f.rail.max()) + 1 if on_rail.any() else 0, dtype=bool)
            present[f.rail[on_rail]] = True
            position = np.cumsum(present) - 1
            rail_group = np.where(on_rail, position[np.maximum(f.rail, 0)] if present.size else -1, -1)
            leaves = RowLabels({"leaf": pa.array(f.node_names, pa.string())})
            rails = RowLabels({"rail": pa.array(np.flatnonzero(present))})
            groupings = {
                "leaf": (s.leaf_of_port.astype(np.int64), leaves),
                "rail": (rail_group.astype(np.int64), rails),
            }
            self._group_labels = (f, groupings)
        return groupings

    @staticmethod
    def _group_families(label: str, labels: RowLabels, g: GroupFigures) -> Iterator[Metric]:
        """A group's series once any of its ports has reported (an empty leaf has none)."""
        seen = g.ports_by_health.sum(axis=1) > 0

        def family(name: str, doc: str, parts: Iterable[tuple[Extra, np.ndarray]]) -> ArrayFamily:
            return ArrayFamily(name, doc, "gauge", labels, ((e, np.where(seen, v, np.nan)) for e, v in parts))

        yield family(
            f"graywire_{label}_ports",
            f"Reported ports by {label} and health state",
            [((("health", state),), g.ports_by_health[:, h]) for h, state in enumerate(HEALTH_STATES)],
        )
        yield family(
            f"graywire_{label}_ports_below_expected_speed",
            f"Ports running slower than the inventory expects, by {label}",
            [((), g.below_expected_speed)],
        )
        yield family(
            f"graywire_{label}_pre_fec_bit_error_ratio_max",
            f"Worst port pre-FEC BER, by {label}",
            [((), g.pre_fec_ber_max)],
        )
        yield family(
            f"graywire_{label}_pfc_pause_ratio_max",
            f"Most-paused port's PFC pause share, by {label}",
            [((), g.pfc_pause_ratio_max)],
        )

    def _labels(self, s: FabricState) -> PortLabels:
        """Every port's label string, built once and shared by every family and scrape."""
        if self._port_labels is None or self._port_labels.fabric is not s.fabric:
            self._port_labels = PortLabels(s.fabric)
        return self._port_labels

    def _port_info(self, s: FabricState) -> Metric:
        """``graywire_port_info{node, port, leaf, rail, role} 1`` for every port of the fabric
        model: what dashboards join on (``and on (node)``) to narrow any per-port or per-rank
        series to a leaf or a rail, without those labels on every series."""
        f = s.fabric
        if self._info_labels is None or self._info_labels.fabric is not f:
            leaf, rail = s.leaf_of_port, f.rail
            names = pa.array([*f.node_names, ""], type=pa.string())  # index -1: no leaf, no label
            columns = {
                "leaf": names.take(pa.array(np.where(leaf >= 0, leaf, len(names) - 1))),
                "rail": pc.if_else(pa.array(rail >= 0), pc.cast(pa.array(rail), pa.string()), ""),
                "role": pa.array(f.node_roles, type=pa.string()).take(pa.array(f.node_of_port)),
            }
            self._info_labels = PortLabels(f, columns)
        return ArrayFamily(
            "graywire_port_info",
            "Always 1 per port of the fabric model; leaf: the leaf it is on or cabled to, rail: its rail, "
            "role: its node's",
            "gauge",
            self._info_labels,
            [((), np.ones(f.n_ports))],
        )

    def _port_family(
        self,
        s: FabricState,
        name: str,
        doc: str,
        parts: Iterable[tuple[Extra, np.ndarray]],
        typ: str = "gauge",
    ) -> Metric:
        return ArrayFamily(name, doc, typ, self._labels(s), parts)

    def _ports(self, s: FabricState) -> Iterator[Metric]:
        yield self._port_info(s)
        if s.port_reported is None:
            return
        f = s.fabric
        reported = s.port_reported
        fig = s.figures
        by_metric: dict[str, tuple[str, list[tuple[Extra, np.ndarray]]]] = {}
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

    def _raw_counters(self, s: FabricState) -> Iterator[Metric]:
        """The sources' cumulative counters, one series per (port, source). A stale port's are
        left out: its last value standing still would read as an idle link to ``rate()``."""
        if not s.raw_counters:
            return
        stale = s.port_stale if s.port_stale is not None and s.port_stale.any() else None
        families: dict[str, tuple[str, list[tuple[Extra, np.ndarray]]]] = {}
        for rc in RAW_COUNTERS:
            for source in sorted(s.raw_counters):
                values = s.raw_counters[source].get(rc.column)
                if values is None:
                    continue
                if stale is not None:
                    values = np.where(stale, np.nan, values)
                parts = families.setdefault(rc.metric, (rc.help, []))[1]
                parts.append(((*rc.extra, ("source", source)), values))
        for name, (doc, parts) in families.items():
            yield self._port_family(s, name, doc, parts, "counter")

    # -- NCCL ----------------------------------------------------------------------------------
    def _nccl(self, s: FabricState) -> Iterator[Metric]:
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
        ranks.add_metric([], snap.ranks)
        for ch, r in zip(*per_channel_max(snap), strict=True):
            if not np.isnan(r):
                worst.add_metric([str(int(ch))], float(r))
        yield from (worst, ranks)
        if not s.per_port:
            return
        labels = self._labels_of_ranks(snap)
        yield ArrayFamily(
            "graywire_nccl_channel_duration_seconds",
            "Mean duration of a rank's channel operations in the last poll",
            "gauge",
            labels,
            [((), snap.duration_seconds)],
        )
        yield ArrayFamily(
            "graywire_nccl_channel_slowdown_ratio",
            "A rank's channel latency over the median of its peers on that channel (1 = typical)",
            "gauge",
            labels,
            [((), snap.slowdown_ratio)],
        )

    def _labels_of_ranks(self, snap: NcclSnapshot) -> RowLabels:
        """``node="…",rank="…",channel="…"`` per row of the poll's snapshot (the rank's host under
        the one label every series uses), built once per poll however many scrapes read it."""
        seen, labels = self._rank_labels
        if seen is not snap or labels is None:
            columns = {"node": snap.host, "rank": pa.array(snap.rank), "channel": pa.array(snap.channel)}
            labels = RowLabels(columns)
            self._rank_labels = (snap, labels)
        return labels


def graywire_version() -> str:
    """The installed distribution's version ("unknown" when run from an uninstalled tree)."""
    try:
        return version("graywire")
    except PackageNotFoundError:
        return "unknown"


class BuildInfo(Collector):
    """``graywire_build_info{version, python} 1``: join on it to tell replicas' versions apart."""

    def __init__(self) -> None:
        self.labels = [graywire_version(), platform.python_version()]

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(
            "graywire_build_info",
            "Always 1; the labels say which graywire and Python this process runs",
            labels=["version", "python"],
        )
        g.add_metric(self.labels, 1)
        yield g


def make_registry(board: StateBoard) -> CollectorRegistry:
    """graywire's series, its build, and the process's own (CPU, memory, file descriptors, start
    time: ``process_*``; ``python_info``; ``python_gc_*``), as every Prometheus client exports."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BuildInfo())
    registry.register(GraywireExporter(board))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
