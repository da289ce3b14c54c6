"""Canonical record schemas and batch construction."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from graywire.collectors.schemas import (
    COUNTER_BITS_KEY,
    LINK,
    NCCL_TIMING,
    PORT_COUNTERS,
    PORT_SAMPLE,
    SATURATING_KEY,
    SCHEMAS,
    TS,
    make_batch,
    record_kind,
    with_counter_widths,
)

T = datetime(2026, 1, 5, 12, tzinfo=UTC)


def port_cols(n: int) -> dict[str, pa.Array]:
    return {
        "time": pa.array([T] * n, type=TS),
        "port": pa.array([f"sw/p{i}" for i in range(n)]).dictionary_encode(),
        "source": pa.array(["snmp"] * n).dictionary_encode(),
    }


def test_port_counter_set() -> None:
    assert len(PORT_COUNTERS) == 27 + 32
    assert len(set(PORT_COUNTERS)) == len(PORT_COUNTERS)
    assert "pfc7_tx_pause_seconds" in PORT_COUNTERS
    assert PORT_SAMPLE.field("rx_bytes").type == pa.uint64()
    assert PORT_SAMPLE.field("pfc3_rx_pause_seconds").type == pa.float64()
    assert PORT_SAMPLE.field("speed_bps").type == pa.int64()
    assert PORT_SAMPLE.field("fec_lane_errors").type == pa.list_(pa.uint64())
    assert PORT_SAMPLE.field("time").type == pa.timestamp("us", tz="UTC")
    assert not PORT_SAMPLE.field("port").nullable
    assert PORT_SAMPLE.field("rx_bytes").nullable


def test_record_kind() -> None:
    assert {k: record_kind(s) for k, s in SCHEMAS.items()} == {
        "port_sample": "port_sample",
        "link": "link",
        "port_capability": "port_capability",
        "nccl_timing": "nccl_timing",
        "nccl_transport": "nccl_transport",
        "nccl_proxy": "nccl_proxy",
        "nccl_rank_state": "nccl_rank_state",
        "gpu_nic_path": "gpu_nic_path",
        "nccl_init": "nccl_init",
        "nccl_layout": "nccl_layout",
    }
    with pytest.raises(ValueError, match=r"no graywire\.record"):
        record_kind(pa.schema([pa.field("x", pa.int8())]))


def test_make_batch_fills_nulls_and_casts() -> None:
    cols = port_cols(3)
    cols["rx_bytes"] = pa.array([1, 2, 3], type=pa.int64())  # cast to uint64
    cols["speed_bps"] = pa.array([400 * 10**9, None, 0])
    b = make_batch(PORT_SAMPLE, 3, cols)
    assert b.schema.equals(PORT_SAMPLE, check_metadata=True)
    assert b.num_rows == 3
    assert b.column("rx_bytes").type == pa.uint64()
    assert b.column("rx_bytes").to_pylist() == [1, 2, 3]
    assert b.column("speed_bps").to_pylist() == [400 * 10**9, None, 0]
    # A counter the source lacks is null, never 0.
    assert b.column("tx_bytes").null_count == 3
    assert b.column("pfc0_rx_pause_seconds").to_pylist() == [None, None, None]
    assert b.column("fec_lane_errors").null_count == 3
    assert b.column("port").to_pylist() == ["sw/p0", "sw/p1", "sw/p2"]


def test_make_batch_rejects_unknown_columns() -> None:
    cols = port_cols(1)
    cols["rx_bytez"] = pa.array([1])
    cols["color"] = pa.array(["red"])
    with pytest.raises(ValueError, match=r"unknown columns for port_sample: \['color', 'rx_bytez'\]"):
        make_batch(PORT_SAMPLE, 1, cols)


@pytest.mark.parametrize("missing", ["time", "port", "source"])
def test_make_batch_requires_non_nullable(missing: str) -> None:
    cols = port_cols(2)
    del cols[missing]
    with pytest.raises(ValueError, match=f"column {missing} is required"):
        make_batch(PORT_SAMPLE, 2, cols)


def test_make_batch_nccl_and_link() -> None:
    b = make_batch(
        NCCL_TIMING,
        2,
        {
            "time": pa.array([T, T], type=TS),
            "job": pa.array(["j1", "j1"]).dictionary_encode(),
            "communicator": pa.array(["c", "c"]).dictionary_encode(),
            "rank": pa.array([0, 1], type=pa.int32()),
            "collective": pa.array(["AllReduce"] * 2)
            .dictionary_encode()
            .cast(pa.dictionary(pa.int8(), pa.string())),
            "duration_seconds": pa.array([0.01, 0.02]),
        },
    )
    assert b.column("channel").to_pylist() == [None, None]  # whole-collective rows
    assert b.column("duration_seconds").to_pylist() == [0.01, 0.02]
    with pytest.raises(ValueError, match="column job is required"):
        make_batch(NCCL_TIMING, 1, {"time": pa.array([T], type=TS)})
    link = make_batch(
        LINK, 1, {"a_port": pa.array(["a/1"]), "b_port": pa.array(["b/1"]), "source": pa.array(["x"])}
    )
    assert link.to_pylist() == [{"a_port": "a/1", "b_port": "b/1", "source": "x"}]


def test_with_counter_widths_metadata() -> None:
    s = with_counter_widths(PORT_SAMPLE, {"rcv_errors": 16, "rx_packets": 32}, ("rcv_errors",))
    assert json.loads(s.metadata[COUNTER_BITS_KEY]) == {"rcv_errors": 16, "rx_packets": 32}
    assert json.loads(s.metadata[SATURATING_KEY]) == ["rcv_errors"]
    assert record_kind(s) == "port_sample"
    assert PORT_SAMPLE.metadata.get(COUNTER_BITS_KEY) is None  # the original is untouched
    plain = with_counter_widths(PORT_SAMPLE, {})
    assert COUNTER_BITS_KEY not in plain.metadata
    assert SATURATING_KEY not in plain.metadata
    b = make_batch(s, 1, port_cols(1))
    assert json.loads(b.schema.metadata[COUNTER_BITS_KEY])["rx_packets"] == 32
