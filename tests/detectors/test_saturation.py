"""Saturated legacy error counters: a warning on the port, never silence; cleared by a clear."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from graywire.collectors.schemas import PORT_SAMPLE, TS, make_batch, with_counter_widths
from graywire.detectors.pipeline import Pipeline, default_detectors
from graywire.detectors.rates import CounterRates
from graywire.detectors.saturation import CounterSaturationDetector
from graywire.fabricsim.topology import TopologySpec, build_fabric

T0 = datetime(2026, 1, 5, tzinfo=UTC)
HOST = "gpu-0003/mlx5_2"
FABRIC = build_fabric(TopologySpec(hosts=8))
SCHEMA = with_counter_widths(
    PORT_SAMPLE, {"link_downed": 8, "xmit_discards": 16}, saturating=("link_downed", "xmit_discards")
)


def poll(k: int, link_downed: int, xmit_discards: int, rx: int | None = None) -> pa.RecordBatch:
    ports = [HOST, "gpu-0004/mlx5_2"]
    return make_batch(
        SCHEMA,
        2,
        {
            "time": pa.array([T0 + timedelta(seconds=10 * k)] * 2, TS),
            "port": pa.array(ports).dictionary_encode(),
            "source": pa.array(["agent"] * 2).dictionary_encode(),
            "rx_bytes": pa.array([rx if rx is not None else 1000 * k] * 2, pa.uint64()),
            "link_downed": pa.array([link_downed, 0], pa.uint64()),
            "xmit_discards": pa.array([xmit_discards, 3], pa.uint64()),
        },
    )


def run(polls: list[pa.RecordBatch]) -> list:
    rates, det = CounterRates(), CounterSaturationDetector(FABRIC)
    out = []
    for b in polls:
        out += det.observe(rates.observe(b))
    return out


def test_saturated_counters_fire_one_warning_on_the_port_with_their_values() -> None:
    found = run([poll(0, 255, 65535), poll(1, 255, 65535), poll(2, 255, 65535)])
    assert [(f.kind, f.status, f.severity, f.port) for f in found] == [
        ("counter_saturated", "firing", "warning", HOST)
    ]
    ev = found[0].evidence["counters"]
    assert {(c["counter"], c["value"], c["width"]) for c in ev} == {
        ("link_downed", 255, 8),
        ("xmit_discards", 65535, 16),
    }
    assert found[0].node == "gpu-0003" and "255" in found[0].summary


def test_clear_closes_and_a_repeated_snapshot_does_not() -> None:
    polls = [poll(0, 255, 10), poll(1, 255, 10), poll(2, 0, 0)]  # 2: counters cleared
    polls += [poll(3, 0, 0, rx=2000)]  # the source served poll 2's snapshot again: says nothing
    polls += [poll(4, 0, 0)]
    found = run(polls)
    assert [(f.status, (f.time - T0).total_seconds()) for f in found] == [("firing", 0.0), ("cleared", 40.0)]


def test_saturation_detector_runs_in_the_default_pipeline() -> None:
    pipe = Pipeline(FABRIC, default_detectors(FABRIC))
    assert "counter_saturated" in pipe.kinds
    found = pipe.process(poll(0, 255, 0)) + pipe.process(poll(1, 255, 0))
    assert [f.kind for f in found] == ["counter_saturated"]


def test_saturated_xmit_wait_alone_is_info() -> None:
    schema = with_counter_widths(PORT_SAMPLE, {"xmit_wait_ticks": 32}, saturating=("xmit_wait_ticks",))
    b = make_batch(
        schema,
        1,
        {
            "time": pa.array([T0], TS),
            "port": pa.array([HOST]).dictionary_encode(),
            "source": pa.array(["perfquery"]).dictionary_encode(),
            "xmit_wait_ticks": pa.array([2**32 - 1], pa.uint64()),
        },
    )
    (f,) = CounterSaturationDetector(FABRIC).observe(CounterRates().observe(b))
    assert (f.severity, f.evidence["counters"]) == (
        "info",
        [{"counter": "xmit_wait_ticks", "value": 2**32 - 1, "width": 32}],
    )
