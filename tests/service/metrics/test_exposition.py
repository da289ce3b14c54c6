"""The array-backed families: what Arrow writes is what prometheus_client would have written."""

from __future__ import annotations

import math

import numpy as np
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from graywire.collectors.model import Fabric, PortSpec
from graywire.service.metrics.exposition import PortFamily, PortLabels, render
from tests.scrape import run_promtool


class _Registry:
    def __init__(self, *metrics: PortFamily) -> None:
        self.metrics = metrics

    def collect(self) -> tuple[PortFamily, ...]:
        return self.metrics


def _fabric() -> Fabric:
    odd = 'sw"1\\x'  # a quote and a backslash in a node name: escaped in the labels
    ports = [PortSpec("h", f"p{i}") for i in range(4)] + [PortSpec(odd, "p1"), PortSpec(odd, "p2")]
    return Fabric.from_specs({"h": "host", odd: "leaf"}, ports, [])


def _parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_values_labels_and_types_round_trip_through_the_text_format() -> None:
    fabric = _fabric()
    labels = PortLabels(fabric, {"rail": ["0", "1", "", "3", "", ""]})
    values = np.array([1.0, np.nan, np.inf, -np.inf, 1.5e-7, float(2**63 + 4096)])
    gauge = PortFamily("x_ratio", "A gauge\nwith a newline", "gauge", labels)
    gauge.add((), values)
    gauge.add((("direction", "tx"),), np.where(np.isnan(values), 7.0, np.nan))
    counter = PortFamily("x_bytes", "A counter", "counter", labels)
    counter.add((("source", "ufm"),), np.array([12.0, 3e12, np.nan, 0.0, 9.0, 1.0]))
    registry = _Registry(gauge, counter)
    ours = render(registry).decode()
    theirs = generate_latest(registry).decode()  # from the families' samples, formatted by the client
    assert _parsed(ours) == _parsed(theirs)
    got = _parsed(ours)
    assert got[("x_ratio", (("node", "h"), ("port", "h/p0"), ("rail", "0")))] == 1.0
    assert got[("x_ratio", (("node", "h"), ("port", "h/p2")))] == math.inf  # empty rail: no label
    assert got[("x_ratio", (("node", "h"), ("port", "h/p3"), ("rail", "3")))] == -math.inf
    assert got[("x_ratio", (("direction", "tx"), ("node", "h"), ("port", "h/p1"), ("rail", "1")))] == 7.0
    assert got[("x_bytes_total", (("node", 'sw"1\\x'), ("port", 'sw"1\\x/p2'), ("source", "ufm")))] == 1.0
    assert len([k for k in got if k[0] == "x_ratio"]) == 6  # NaN is no sample
    assert "+Inf" in ours and "-Inf" in ours and "# TYPE x_bytes_total counter\n" in ours
    r = run_promtool("check", "metrics", stdin=ours)
    assert r.returncode == 0, r.stdout + r.stderr
