"""Prometheus exporters as a source: node_exporter's infiniband and ethtool collectors and
treydock/infiniband_exporter, read over HTTP for sites that already run them instead of
graywire's host agent.

``parse`` turns one exporter's text into canonical records (pure); ``collector`` fetches it;
``config`` holds the source's configuration (``type: prometheus``).
"""

from __future__ import annotations

from graywire.collectors.prometheus.collector import PrometheusCollector
from graywire.collectors.prometheus.config import PrometheusSourceConfig, PrometheusTarget, build_collectors
from graywire.collectors.prometheus.parse import SOURCE, parse_exposition

__all__ = [
    "SOURCE",
    "PrometheusCollector",
    "PrometheusSourceConfig",
    "PrometheusTarget",
    "build_collectors",
    "parse_exposition",
]
