"""The sources' cumulative counters on /metrics: real counters for rate(), as the source said them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.schemas import PORT_COUNTERS, PORT_SAMPLE, make_batch
from graywire.service.metrics.exporter import GraywireExporter
from graywire.service.metrics.exposition import render
from graywire.service.metrics.ports import RAW_COUNTERS
from graywire.service.state.fabric import StateBoard, TargetStatus
from tests.scrape import run_promtool, scrape


def _fabric() -> Fabric:
    return Fabric.from_specs(
        {"h": "host", "sw": "leaf"}, [PortSpec("h", "p1"), PortSpec("h", "p2"), PortSpec("sw", "p1")], []
    )


def _sample(source: str, ports: list[str], **counters: list[int | None]) -> pa.RecordBatch:
    n = len(ports)
    cols: dict[str, pa.Array] = {
        "time": pa.array([datetime(2025, 1, 1, tzinfo=UTC)] * n),
        "port": pa.array(ports).dictionary_encode(),
        "source": pa.array([source] * n).dictionary_encode(),
        **{c: pa.array(v, type=pa.uint64()) for c, v in counters.items()},
    }
    return make_batch(PORT_SAMPLE, n, cols)


def _poll(board: StateBoard, *batches: pa.RecordBatch) -> None:
    board.observe_poll(batches, None, {}, {}, {})


def _series(board: StateBoard) -> tuple[dict[str, str], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """(family type by sample name, value by (sample name, sorted labels)) of a render."""
    text = render(GraywireExporter(board)).decode()
    types, values = {}, {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            types[s.name] = fam.type
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return types, values


def _labels(port: str, source: str = "agent", **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"node": port.split("/")[0], "port": port, "source": source, **extra}.items()))


def test_every_counter_of_the_record_has_a_prometheus_name() -> None:
    assert sorted(c.column for c in RAW_COUNTERS) == sorted(PORT_COUNTERS)
    keyed = {(c.metric, c.extra) for c in RAW_COUNTERS}
    assert len(keyed) == len(RAW_COUNTERS)  # no two columns land on one series


def test_counters_are_the_source_values_resets_pass_through_and_missing_stays_missing() -> None:
    board = StateBoard(_fabric())
    _poll(board, _sample("agent", ["h/p1", "h/p2"], rx_bytes=[4000, None], symbol_errors=[7, 0]))
    types, v = _series(board)
    assert types["graywire_port_receive_bytes_total"] == "counter"
    assert v[("graywire_port_receive_bytes_total", _labels("h/p1"))] == 4000
    # p2's source has no rx_bytes: absent, never 0; a counter no row carries has no family.
    assert ("graywire_port_receive_bytes_total", _labels("h/p2")) not in v
    assert v[("graywire_port_symbol_errors_total", _labels("h/p2"))] == 0
    assert "graywire_port_transmit_bytes_total" not in types
    assert not any(name.startswith("graywire_port_pfc_pause") for name in types)
    # The counter was cleared: the lower value goes out as it came (Prometheus sees a reset).
    _poll(board, _sample("agent", ["h/p1", "h/p2"], rx_bytes=[100, None], symbol_errors=[9, 1]))
    _, v = _series(board)
    assert v[("graywire_port_receive_bytes_total", _labels("h/p1"))] == 100
    assert v[("graywire_port_symbol_errors_total", _labels("h/p1"))] == 9


def test_a_port_the_source_stops_reporting_loses_its_series() -> None:
    board = StateBoard(_fabric())
    _poll(board, _sample("agent", ["h/p1", "h/p2"], rx_bytes=[1, 2]))
    _poll(board, _sample("agent", ["h/p1"], rx_bytes=[5]))
    _, v = _series(board)
    assert v[("graywire_port_receive_bytes_total", _labels("h/p1"))] == 5
    assert ("graywire_port_receive_bytes_total", _labels("h/p2")) not in v


def test_two_sources_of_one_port_are_two_series() -> None:
    board = StateBoard(_fabric())
    _poll(
        board, _sample("agent", ["h/p1"], rx_bytes=[10]), _sample("ufm", ["h/p1", "sw/p1"], rx_bytes=[20, 30])
    )
    # A poll where only the agent answered keeps UFM's last values (its target would be stale).
    _poll(board, _sample("agent", ["h/p1"], rx_bytes=[11]))
    _, v = _series(board)
    assert v[("graywire_port_receive_bytes_total", _labels("h/p1", "agent"))] == 11
    assert v[("graywire_port_receive_bytes_total", _labels("h/p1", "ufm"))] == 20
    assert v[("graywire_port_receive_bytes_total", _labels("sw/p1", "ufm"))] == 30


def test_stale_ports_counters_are_left_out() -> None:
    board = StateBoard(_fabric())
    _poll(board, _sample("ufm", ["h/p1", "sw/p1"], rx_bytes=[20, 30]))
    board.set_targets([TargetStatus("ufm", "u", ok=False)], np.array([False, False, True]))
    _, v = _series(board)
    assert ("graywire_port_receive_bytes_total", _labels("h/p1", "ufm")) in v
    assert ("graywire_port_receive_bytes_total", _labels("sw/p1", "ufm")) not in v


def test_pfc_counters_carry_direction_and_priority_and_wide_values_survive() -> None:
    board = StateBoard(_fabric())
    big = 2**63 + 12345
    _poll(board, _sample("snmp", ["sw/p1"], pfc3_rx_pause_frames=[42], tx_bytes=[big]))
    _, v = _series(board)
    key = ("graywire_port_pfc_pause_frames_total", _labels("sw/p1", "snmp", direction="rx", priority="3"))
    assert v[key] == 42
    assert v[("graywire_port_transmit_bytes_total", _labels("sw/p1", "snmp"))] == float(big)
    r = run_promtool("check", "metrics", stdin=render(GraywireExporter(board)).decode())
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


@pytest.mark.parametrize(("per_port", "raw"), [(True, False), (False, True)])
def test_raw_counters_are_optional(per_port: bool, raw: bool) -> None:
    board = StateBoard(_fabric(), per_port=per_port, raw_counters=raw)
    _poll(board, _sample("agent", ["h/p1"], rx_bytes=[10]))
    types, _ = _series(board)
    assert not any(name.startswith("graywire_port_") and name.endswith("_total") for name in types)


def test_a_service_scrape_exports_the_counters_the_rates_come_from(tmp_path: Path) -> None:
    text = scrape(tmp_path, polls=2)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    rx = fams["graywire_port_receive_bytes"]
    assert rx.type == "counter"
    got = {s.labels["port"]: s for s in rx.samples}
    s = got["gpu-0001/mlx5_5"]
    assert s.name == "graywire_port_receive_bytes_total"
    assert s.labels == {"node": "gpu-0001", "port": "gpu-0001/mlx5_5", "source": "fabricsim"}
    assert s.value > 0
    assert "# TYPE graywire_port_receive_bytes_total counter\n" in text
