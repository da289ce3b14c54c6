"""The array-backed families: what Arrow writes is what prometheus_client would have written."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from graywire.collectors.ib.perfquery import parse_perfquery, perfquery_batch
from graywire.collectors.model import Fabric, PortSpec
from graywire.detectors.rates import CounterRates
from graywire.service.metrics.exporter import GraywireExporter
from graywire.service.metrics.exposition import ArrayFamily, PortLabels, RowLabels, render
from graywire.service.state.fabric import StateBoard
from tests.scrape import run_promtool
from tests.strategies import PROPERTY


class _Registry:
    def __init__(self, *metrics: ArrayFamily) -> None:
        self.metrics = metrics

    def collect(self) -> tuple[ArrayFamily, ...]:
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
    gauge = ArrayFamily("x_ratio", "A gauge\nwith a newline", "gauge", labels)
    gauge.add((), values)
    gauge.add((("direction", "tx"),), np.where(np.isnan(values), 7.0, np.nan))
    counter = ArrayFamily("x_bytes", "A counter", "counter", labels)
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


def _samples_agree(*families: ArrayFamily) -> str:
    """Render ``families`` both ways; their samples agree value for value (``==`` between the
    parser's ints and floats is exact). Returns ours."""
    registry = _Registry(*families)
    ours = render(registry).decode()
    assert _parsed(ours) == _parsed(generate_latest(registry).decode())
    return ours


#: Values that trip a formatter: counters past 2**53 and 2**63, the smallest subnormal, -0,
#: infinities, integers written as floats, and NaN (no sample).
AWKWARD = [
    0.0, -0.0, 1.0, -7.0, 0.1, 1e15, 2.0**53, 2.0**53 + 2, 2.0**63 - 1024, 2.0**63, 2.0**63 + 4096,
    1.8e19, 2.0**64, 1.5e300, 5e-324, 1e-7, -2.5, np.inf, -np.inf, np.nan,
]  # fmt: skip


def _ports(n: int) -> Fabric:
    return Fabric.from_specs({"h": "host"}, [PortSpec("h", f"p{i}") for i in range(n)], [])


@pytest.mark.parametrize(
    "values",
    [AWKWARD, [float(v) for v in range(20)], [2.0**63 - 1024, 3.0], [np.nan] * 19 + [4.0], [np.nan] * 20],
    ids=["awkward", "integers", "past-int64", "one-sample", "no-sample"],
)
def test_awkward_values_read_back_exactly_and_pass_promtool(values: list[float]) -> None:
    labels = PortLabels(_ports(len(values)))
    counter = ArrayFamily(
        "x_bytes", "A counter", "counter", labels, [((("source", "ufm"),), np.array(values))]
    )
    gauge = ArrayFamily("x_ratio", "A gauge", "gauge", labels, [((), np.array(values)[::-1].copy())])
    ours = _samples_agree(counter, gauge)
    r = run_promtool("check", "metrics", stdin=ours)
    assert r.returncode == 0, r.stdout + r.stderr


@PROPERTY
@given(
    st.lists(
        st.floats(allow_nan=True, allow_infinity=True)
        | st.integers(-(2**65), 2**65).map(float)
        | st.sampled_from([np.nan, 0.0, -0.0, 1.0]),
        max_size=12,
    ),
    st.lists(st.text(max_size=6), min_size=2, max_size=2),
)
def test_any_values_and_label_text_render_as_prometheus_client_does(
    values: list[float], extra: list[str]
) -> None:
    fabric = Fabric.from_specs(
        {'n"\\\nö': "host"}, [PortSpec('n"\\\nö', f"p{i}") for i in range(max(1, len(values)))], []
    )
    labels = PortLabels(fabric, {"rail": [extra[i % 2] for i in range(fabric.n_ports)]})
    arr = np.array(values or [np.nan])
    family = ArrayFamily("x", "doc", "gauge", labels, [((("k", extra[0]),), arr), ((), -arr)])
    _samples_agree(family)


def test_labels_of_any_rows_and_the_one_refused_layout() -> None:
    labels = RowLabels({"node": pa.array(["a", None, 'q"']), "rank": pa.array([0, 1, 2])})
    assert labels.strings.to_pylist() == [
        'node="a",rank="0"} ',
        'node="",rank="1"} ',
        'node="q\\"",rank="2"} ',
    ]
    assert labels.values(1) == {"node": "", "rank": "1"}  # written, as generate_latest does
    _samples_agree(ArrayFamily("y", "d", "gauge", labels, [((), np.array([1.0, 2.0, np.nan]))]))
    with pytest.raises(ValueError, match="first label column"):
        RowLabels({"leaf": pa.array(["x"])}, optional={"leaf"})
    empty = RowLabels({"node": pa.array([], pa.string())})
    assert render(_Registry(ArrayFamily("z", "d", "gauge", empty, [((), np.array([]))]))) == (
        b"# HELP z d\n# TYPE z gauge\n"
    )


def test_real_perfquery_counters_render_as_prometheus_client_does(real_fixtures: Path) -> None:
    """The switch's and the HCA's counters as infiniband-diags printed them, through the state
    the runner publishes, then the exporter: what Arrow writes is what the client would."""
    ib = real_fixtures / "infiniband"
    switch = parse_perfquery((ib / "perfquery_extended_switch_0x7cfe9003009ce5b0.out").read_text())
    hca = parse_perfquery((ib / "perfquery_extended_hca_0x7cfe9003003b4bde.out").read_text())
    fabric = Fabric.from_specs(
        {"leaf-0": "leaf", "gpu-0": "host"},
        [
            PortSpec("leaf-0", "p1"),
            PortSpec("leaf-0", "p2"),
            PortSpec("gpu-0", "mlx5_0"),
            PortSpec("gpu-0", "x"),
        ],
        [],
    )
    ports = [("leaf-0/p1", switch[:1]), ("leaf-0/p2", switch[1:]), ("gpu-0/mlx5_0", [hca[0]])]
    board, rates = StateBoard(fabric), CounterRates()
    for t in (datetime(2026, 1, 5, 12, 0, tzinfo=UTC), datetime(2026, 1, 5, 12, 0, 10, tzinfo=UTC)):
        batch = perfquery_batch(ports, t)
        board.observe_poll([batch], rates.observe(batch), {"port_sample": 3}, {}, {})
    exporter = GraywireExporter(board)
    ours, theirs = render(exporter).decode(), generate_latest(exporter).decode()
    drop = ("graywire_scrape_staleness_seconds",)
    got = {k: v for k, v in _parsed(ours).items() if k[0] not in drop}
    assert got == {k: v for k, v in _parsed(theirs).items() if k[0] not in drop}
    tx = (
        "graywire_port_transmit_bytes_total",
        (("node", "leaf-0"), ("port", "leaf-0/p1"), ("source", "perfquery")),
    )
    assert got[tx] == 36298026860928 * 4  # exact: the source's value as it came
    never_read = [k for k in got if ("port", "gpu-0/x") in k[1]]
    assert never_read == [
        ("graywire_port_info", (("node", "gpu-0"), ("port", "gpu-0/x"), ("role", "host")))
    ]  # only its place in the model
    r = run_promtool("check", "metrics", stdin=ours)
    assert r.returncode == 0, r.stdout + r.stderr
