"""merge_port_samples: one row per port from the REST and telemetry batches of one poll."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.schemas import (
    COUNTER_BITS_KEY,
    LINK,
    PORT_SAMPLE,
    TS,
    make_batch,
    with_counter_widths,
)
from graywire.collectors.ufm import merge_port_samples

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
DICT = pa.array(["h/mlx5_0", "h/mlx5_1", "sw/p1"])


def batch(
    ports: list[int], cols: dict[str, list], t: datetime = T0, schema: pa.Schema = PORT_SAMPLE
) -> pa.RecordBatch:
    n = len(ports)
    base = {
        "time": pa.array([t] * n, type=TS),
        "port": pa.DictionaryArray.from_arrays(pa.array(np.array(ports, np.int32)), DICT),
        "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["ufm"])),
    }
    return make_batch(schema, n, base | {k: pa.array(v) for k, v in cols.items()})


def test_first_non_null_wins_and_ports_are_unioned() -> None:
    rest = batch([0, 1], {"speed_bps": [800 * 10**9, None], "phys_state": [5, 2]})
    narrow = with_counter_widths(PORT_SAMPLE, {"symbol_errors": 16}, ("symbol_errors",))
    tel = batch([1, 2, 0], {"tx_bytes": [10, 20, 30], "phys_state": [4, 4, 4], "symbol_errors": [1, 2, 3]},
                t=datetime(2026, 1, 5, 12, 0, 1, tzinfo=UTC), schema=narrow)  # fmt: skip
    merged = merge_port_samples([rest, tel])
    got = {r["port"]: r for r in merged.to_pylist()}
    assert set(got) == {"h/mlx5_0", "h/mlx5_1", "sw/p1"}
    assert got["h/mlx5_0"]["speed_bps"] == 800 * 10**9 and got["h/mlx5_0"]["tx_bytes"] == 30
    assert got["h/mlx5_0"]["phys_state"] == 5  # REST came first
    assert got["sw/p1"]["phys_state"] == 4 and got["sw/p1"]["speed_bps"] is None
    assert {r["time"] for r in got.values()} == {datetime(2026, 1, 5, 12, 0, 1, tzinfo=UTC)}
    assert json.loads(merged.schema.metadata[COUNTER_BITS_KEY]) == {"symbol_errors": 16}
    assert merged.column("port").dictionary.equals(DICT)  # the first batch's dictionary is kept


def test_merge_rejects_other_records() -> None:
    with pytest.raises(ValueError, match="not link"):
        merge_port_samples([pa.RecordBatch.from_pylist([], schema=LINK)])
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_port_samples([])
