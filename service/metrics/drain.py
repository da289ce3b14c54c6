"""Prometheus gauges of the drain policy, read from the database at scrape time.

A custom collector (not gauges set by the poll loop) so every replica sharing a database
reports the same fleet-wide numbers, and a restarted process reports them at once.

The drain list itself is exported too, one series per listed node, so a dashboard can show
which nodes are out: its length is capped by the circuit breaker (drains) and by the fabric's
hosts (watches), and the free-text reason stays in the API, out of the labels.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from graywire.service.drain_engine import DrainEngine

log = logging.getLogger("graywire.drain")


class DrainExporter(Collector):
    """``graywire_drain_*`` for ``/metrics`` (a prometheus_client ``Collector``, not a source)."""

    def __init__(self, drain: DrainEngine) -> None:
        self.drain = drain

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            counts = self.drain.counts()
            tripped = self.drain.breaker().tripped
            listed = self.drain.list_drain()
        except Exception as e:  # a database hiccup must not fail the whole scrape
            log.warning("drain metrics unavailable: %s", e)
            return
        nodes = GaugeMetricFamily(
            "graywire_drain_nodes", "Nodes the drain policy recommends, by action.", labels=["action"]
        )
        for action in ("drain", "watch"):
            nodes.add_metric([action], counts.get(action, 0))
        yield nodes
        yield GaugeMetricFamily(
            "graywire_drain_circuit_breaker_tripped",
            "1 while the drain circuit breaker is tripped (no new drains), else 0.",
            value=1 if tripped else 0,
        )
        since = GaugeMetricFamily(
            "graywire_drain_node_since_timestamp_seconds",
            "Unix time each node on the drain list got its current action (shadow: recommended only).",
            labels=["node", "action", "shadow"],
        )
        for item in listed:
            t = datetime.fromisoformat(item["since"])
            t = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
            since.add_metric([item["node"], item["action"], str(item["shadow"]).lower()], t.timestamp())
        yield since
