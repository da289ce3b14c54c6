"""Counter -> rate stage: wraps, resets, saturation, gaps and scale, with exact numbers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.schemas import PORT_SAMPLE, TS, make_batch, with_counter_widths
from graywire.detectors.rates import SATURATION_BITS, CounterRates, default_max_rate, rates_schema

T0 = datetime(2025, 1, 1, tzinfo=UTC)
G400 = 400_000_000_000


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sample(
    ports: Sequence[str],
    seconds: float,
    schema: pa.Schema = PORT_SAMPLE,
    speed: int | None = G400,
    **counters: Sequence[Any],
) -> pa.RecordBatch:
    """A port_sample batch at ``T0 + seconds`` with the given counters (one value per port)."""
    n = len(ports)
    cols: dict[str, pa.Array] = {
        "time": pa.array([at(seconds)] * n, type=TS),
        "port": pa.array(ports).dictionary_encode(),
        "source": pa.array(["ufm"] * n).dictionary_encode(),
        "speed_bps": pa.array([speed] * n, type=pa.int64()),
    }
    for name, values in counters.items():
        cols[name] = pa.array(values, type=schema.field(name).type)
    return make_batch(schema, n, cols)


def rates(out: pa.RecordBatch, column: str) -> list[float | None]:
    return out.column(f"{column}_per_second").to_pylist()


def test_normal_increments_and_first_sample_is_null() -> None:
    stage = CounterRates()
    first = stage.observe(sample(["a", "b"], 0, rx_bytes=[1_000, 0], rx_packets=[10, 20]))
    assert rates(first, "rx_bytes") == [None, None]
    assert first.column("interval_seconds").to_pylist() == [None, None]
    assert first.column("counter_reset").to_pylist() == [False, False]

    out = stage.observe(sample(["a", "b"], 10, rx_bytes=[6_000, 2_500], rx_packets=[30, 20]))
    assert rates(out, "rx_bytes") == [500.0, 250.0]
    assert rates(out, "rx_packets") == [2.0, 0.0]
    assert out.column("interval_seconds").to_pylist() == [10.0, 10.0]
    assert out.column("counter_reset").to_pylist() == [False, False]
    assert rates(out, "tx_bytes") == [None, None]  # a counter the source lacks stays unknown


def test_output_schema_and_gauges_pass_through() -> None:
    stage = CounterRates(columns=["rx_bytes"])
    batch = sample(["a"], 0, rx_bytes=[1], temperature_celsius=[41.5], width=[4])
    out = stage.observe(batch)
    assert out.schema == rates_schema(["rx_bytes"])
    assert out.schema.names == [
        "time", "port", "source", "phys_state", "logical_state", "speed_bps", "width", "fec_mode",
        "temperature_celsius", "interval_seconds", "counter_reset", "rx_bytes_per_second",
        "saturated_counters",
    ]  # fmt: skip
    assert out.column("port").to_pylist() == ["a"]
    assert out.column("time").to_pylist() == [T0]
    assert out.column("source").to_pylist() == ["ufm"]
    assert out.column("speed_bps").to_pylist() == [G400]
    assert out.column("width").to_pylist() == [4]
    assert out.column("temperature_celsius").to_pylist() == [41.5]


def test_uint64_delta_is_exact_near_the_top_of_the_range() -> None:
    """float64 cannot tell 2**63 + 10 from 2**63 + 1010; the delta must still be exact."""
    stage = CounterRates(columns=["rx_packets"])
    stage.observe(sample(["a"], 0, rx_packets=[2**63 + 10]))
    out = stage.observe(sample(["a"], 10, rx_packets=[2**63 + 1_010]))
    assert rates(out, "rx_packets") == [100.0]


def test_declared_counter32_wrap() -> None:
    schema = with_counter_widths(PORT_SAMPLE, {"rx_packets": 32})
    stage = CounterRates()
    stage.observe(sample(["a"], 0, schema, rx_packets=[2**32 - 100]))
    out = stage.observe(sample(["a"], 10, schema, rx_packets=[400]))
    assert rates(out, "rx_packets") == [50.0]
    assert out.column("counter_reset").to_pylist() == [False]


def test_declared_narrow_and_64_bit_wraps() -> None:
    schema = with_counter_widths(PORT_SAMPLE, {"rcv_errors": 16, "rx_packets": 64})
    stage = CounterRates()
    stage.observe(sample(["a"], 0, schema, rcv_errors=[65_530], rx_packets=[2**64 - 10]))
    out = stage.observe(sample(["a"], 2, schema, rcv_errors=[4], rx_packets=[10]))
    assert rates(out, "rcv_errors") == [5.0]  # (4 + 65536 - 65530) / 2
    assert rates(out, "rx_packets") == [10.0]  # (10 + 2**64 - (2**64 - 10)) / 2


def test_an_undeclared_counter_never_wraps() -> None:
    """Changed: a drop from just under 2**32 was once taken for a 32-bit wrap; without a declared
    width nobody knows the counter is 32-bit, and a driver reload reads exactly so."""
    stage = CounterRates()
    stage.observe(sample(["a"], 0, rx_packets=[2**32 - 1_000]))
    out = stage.observe(sample(["a"], 10, rx_packets=[9_000]))
    assert rates(out, "rx_packets") == [None]
    assert out.column("counter_reset").to_pylist() == [True]


MAGNITUDES = [0, 10, 2**20, 2**31 - 1, 2**31, 3 * 2**30, 2**32 - 1, 2**32, 2**40, 2**63]


@pytest.mark.parametrize("magnitude", MAGNITUDES)
def test_a_driver_reload_at_any_counter_value_gives_no_rate(magnitude: int) -> None:
    """mlx5 after a driver reload: every counter of the NIC starts again near 0 in one sample,
    FEC corrected bits included, whatever value it stood at. No rate comes out of that sample,
    and the next one counts from the new values."""
    stage = CounterRates()
    ports = ["gpu-1/mlx5_0", "gpu-1/mlx5_1"]
    before = dict(
        rx_bytes=[10**14, 10**14],
        rx_packets=[10**11, 10**11],
        phy_received_bits=[10**15, 10**15],
        fec_corrected_bits=[magnitude + 10**6, magnitude + 10**6],
        symbol_errors=[magnitude, magnitude],
    )
    stage.observe(sample(ports, 0, **before))
    # Port 0 reloads; port 1 goes on.
    after = dict(
        rx_bytes=[5_000, 10**14 + 10**11],
        rx_packets=[50, 10**11 + 10**8],
        phy_received_bits=[40_000, 10**15 + 10**12],
        fec_corrected_bits=[3, magnitude + 10**6 + 1_000],
        symbol_errors=[0, magnitude],
    )
    out = stage.observe(sample(ports, 10, **after))
    for col in after:
        assert rates(out, col)[0] is None, col
    assert rates(out, "fec_corrected_bits")[1] == 100.0
    assert out.column("counter_reset").to_pylist() == [True, False]
    out = stage.observe(sample(ports, 20, fec_corrected_bits=[1_003, magnitude + 10**6 + 2_000]))
    assert rates(out, "fec_corrected_bits") == [100.0, 100.0]


def test_a_declared_narrow_counter_wraps_only_near_its_top() -> None:
    """A 32-bit counter standing still at 3e9 that reads 12 later was cleared: it could not have
    crossed 1.3e9 counts in 10 s at its own pace of 0. One moving at 1e8 a second wraps."""
    schema = with_counter_widths(PORT_SAMPLE, {"rcv_errors": 32, "rx_packets": 32})
    stage = CounterRates(columns=["rcv_errors", "rx_packets"])
    stage.observe(sample(["still", "busy"], 0, schema, rcv_errors=[3 * 10**9, 0], rx_packets=[0, 2 * 10**9]))
    stage.observe(sample(["still", "busy"], 10, schema, rcv_errors=[3 * 10**9, 0], rx_packets=[0, 3 * 10**9]))
    out = stage.observe(sample(["still", "busy"], 20, schema, rcv_errors=[12, 0], rx_packets=[0, 2**32 - 2]))
    assert rates(out, "rcv_errors") == [None, 0.0]
    assert out.column("counter_reset").to_pylist() == [True, False]
    out = stage.observe(sample(["still", "busy"], 30, schema, rcv_errors=[14, 0], rx_packets=[0, 10**9 - 2]))
    assert rates(out, "rx_packets") == [0.0, 10**8]
    assert out.column("counter_reset").to_pylist() == [False, False]


def test_a_wrap_beside_a_reset_of_its_port_is_a_reset() -> None:
    """A switch reboot: its 64-bit octets go back, so its 32-bit error counter near the top that
    reads 0 was reset with them, not wrapped."""
    schema = with_counter_widths(PORT_SAMPLE, {"rcv_errors": 32})
    stage = CounterRates(columns=["rx_bytes", "rcv_errors"])
    stage.observe(sample(["a"], 0, schema, rx_bytes=[10**12], rcv_errors=[2**32 - 10]))
    out = stage.observe(sample(["a"], 10, schema, rx_bytes=[10**3], rcv_errors=[0]))
    assert rates(out, "rcv_errors") == [None]
    assert out.column("counter_reset").to_pylist() == [True]


def test_undeclared_drop_from_above_32_bits_is_a_reset() -> None:
    stage = CounterRates()
    stage.observe(sample(["a"], 0, rx_packets=[2**32 + 5]))
    out = stage.observe(sample(["a"], 10, rx_packets=[7]))
    assert rates(out, "rx_packets") == [None]
    assert out.column("counter_reset").to_pylist() == [True]


def test_reset_gives_null_then_the_new_baseline() -> None:
    stage = CounterRates()
    stage.observe(sample(["a", "b"], 0, rx_bytes=[10**15, 1_000], tx_bytes=[10**15, 1_000]))
    out = stage.observe(sample(["a", "b"], 10, rx_bytes=[5, 2_000], tx_bytes=[10**15 + 100, 3_000]))
    assert rates(out, "rx_bytes") == [None, 100.0]
    # Changed: a traffic counter went back, so the port was reset, and its other counters were
    # measured across the reset too: a reset never gives a rate.
    assert rates(out, "tx_bytes") == [None, 200.0]
    assert out.column("counter_reset").to_pylist() == [True, False]

    out = stage.observe(sample(["a", "b"], 20, rx_bytes=[1_005, 3_000], tx_bytes=[10**15 + 200, 4_000]))
    assert rates(out, "rx_bytes") == [100.0, 100.0]
    assert out.column("counter_reset").to_pylist() == [False, False]


def test_implausible_wrap_is_a_reset() -> None:
    """On a 1 Gb/s port (max 1.5625e8 B/s) a 32-bit wrap implying 2.1e8 B/s is a clear."""
    schema = with_counter_widths(PORT_SAMPLE, {"rx_bytes": 32})
    stage = CounterRates()
    stage.observe(sample(["slow", "near_top"], 0, schema, speed=1_000_000_000, rx_bytes=[2**31, 2**32 - 500]))
    out = stage.observe(sample(["slow", "near_top"], 10, schema, speed=1_000_000_000, rx_bytes=[100, 500]))
    assert rates(out, "rx_bytes") == [None, 100.0]
    assert out.column("counter_reset").to_pylist() == [True, False]


def test_implausible_undeclared_wrap_is_a_reset() -> None:
    """pfc frames: (2**32 - 2**31) / 0.1 s = 2.1e10 frames/s > 5e9: a reset, not a wrap."""
    stage = CounterRates()
    stage.observe(sample(["a"], 0, pfc3_rx_pause_frames=[2**31]))
    out = stage.observe(sample(["a"], 0.1, pfc3_rx_pause_frames=[0]))
    assert rates(out, "pfc3_rx_pause_frames") == [None]
    assert out.column("counter_reset").to_pylist() == [True]


def test_absurd_forward_rate_is_null_but_not_a_reset() -> None:
    stage = CounterRates()
    stage.observe(sample(["a"], 0, rx_bytes=[0], rx_packets=[0]))
    # 400G port: max 6.25e10 B/s; a 1e12 B jump in 10 s is 1e11 B/s.
    out = stage.observe(sample(["a"], 10, rx_bytes=[10**12], rx_packets=[10**11]))
    assert rates(out, "rx_bytes") == [None]
    assert rates(out, "rx_packets") == [None]  # 1e10/s > 5e9/s
    assert out.column("counter_reset").to_pylist() == [False]
    out = stage.observe(sample(["a"], 20, rx_bytes=[10**12 + 10], rx_packets=[10**11 + 10]))
    assert rates(out, "rx_bytes") == [1.0]  # the absurd value was still the new baseline


def test_unknown_speed_uses_fallback_and_speed_drop_keeps_old_headroom() -> None:
    stage = CounterRates(columns=["rx_bytes"])
    stage.observe(sample(["a", "b"], 0, speed=None, rx_bytes=[0, 0]))
    out = stage.observe(sample(["a", "b"], 1, speed=None, rx_bytes=[2 * 10**11, 3 * 10**11]))
    assert rates(out, "rx_bytes") == [2e11, None]  # fallback max 2.5e11 B/s

    stage = CounterRates(columns=["rx_bytes"])
    stage.observe(sample(["a"], 0, speed=800_000_000_000, rx_bytes=[0]))
    # Renegotiated to 400G at this poll; 8e10 B/s is over 400G's max but fine for 800G.
    out = stage.observe(sample(["a"], 1, speed=G400, rx_bytes=[8 * 10**10]))
    assert rates(out, "rx_bytes") == [8e10]
    out = stage.observe(sample(["a"], 2, speed=G400, rx_bytes=[16 * 10**10]))
    assert rates(out, "rx_bytes") == [None]  # a whole interval at 400G cannot carry it


def test_max_rates_override() -> None:
    stage = CounterRates(columns=["symbol_errors"], max_rates={"symbol_errors": 100.0})
    stage.observe(sample(["a", "b"], 0, symbol_errors=[0, 0]))
    out = stage.observe(sample(["a", "b"], 10, symbol_errors=[1_000, 1_010]))
    assert rates(out, "symbol_errors") == [100.0, None]
    with pytest.raises(ValueError, match="not converted"):
        CounterRates(columns=["rx_bytes"], max_rates={"tx_bytes": 1.0})


def test_default_max_rates() -> None:
    assert default_max_rate("rx_bytes") == (1.25 / 8, 2.5e11)
    assert default_max_rate("phy_received_bits") == (1.25, 2e12)
    assert default_max_rate("pfc0_tx_pause_frames") == (0.0, 5e9)
    assert default_max_rate("ecn_marked_packets") == (0.0, 5e9)
    assert default_max_rate("pfc0_tx_pause_seconds") == (0.0, 1.05)
    assert default_max_rate("xmit_wait_ticks") == (0.0, 1e12)


def test_saturating_counter() -> None:
    schema = with_counter_widths(PORT_SAMPLE, {"symbol_errors": 16}, saturating=("symbol_errors",))
    stage = CounterRates()
    ports = ["rising", "stuck", "cleared", "dropped"]
    stage.observe(sample(ports, 0, schema, symbol_errors=[65_000, 65_535, 65_535, 65_000]))
    out = stage.observe(sample(ports, 10, schema, symbol_errors=[65_535, 65_535, 3, 10]))
    # rising to the maximum: a lower bound, kept; stuck at it: unknown, not a reset;
    # cleared from the maximum and dropped below it: resets (a saturating counter never wraps)
    assert rates(out, "symbol_errors") == [53.5, None, None, None]
    assert out.column("counter_reset").to_pylist() == [False, False, True, True]

    out = stage.observe(sample(ports, 20, schema, symbol_errors=[65_535, 65_535, 13, 30]))
    assert rates(out, "symbol_errors") == [None, None, 1.0, 2.0]
    assert out.column("counter_reset").to_pylist() == [False, False, False, False]


def test_legacy_name_carrying_a_wide_value_keeps_its_rate() -> None:
    """A value above the declared width is the wide counter under a legacy name (changed: such a
    port used to read its later values as saturation). Its width is learned per port and column."""
    schema = with_counter_widths(
        PORT_SAMPLE, {"link_downed": 8, "tx_bytes": 32}, saturating=("link_downed", "tx_bytes")
    )
    stage = CounterRates()
    ports = ["wide", "narrow"]
    stage.observe(sample(ports, 0, schema, link_downed=[300, 3], tx_bytes=[2**40, 2**32 - 1]))
    out = stage.observe(
        sample(ports, 10, schema, link_downed=[310, 255], tx_bytes=[2**40 + 10_000, 2**32 - 1])
    )
    assert rates(out, "link_downed") == pytest.approx([1.0, 25.2], rel=1e-15)
    assert rates(out, "tx_bytes") == [1000.0, None]  # the narrow port is saturated: unknown rate
    # The wide port at 255 later is not "saturated": a 64-bit counter that dropped was cleared.
    out = stage.observe(
        sample(ports, 20, schema, link_downed=[255, 255], tx_bytes=[2**40 + 20_000, 2**32 - 1])
    )
    assert out.column("counter_reset").to_pylist() == [True, False]
    assert rates(out, "tx_bytes") == [1000.0, None]
    bit = SATURATION_BITS["link_downed"]
    assert [m & bit for m in out.column("saturated_counters").to_pylist()] == [0, bit]


def test_saturated_error_counter_is_flagged_not_silenced() -> None:
    schema = with_counter_widths(PORT_SAMPLE, {"xmit_discards": 16}, saturating=("xmit_discards",))
    stage = CounterRates()
    first = stage.observe(sample(["a", "b"], 0, schema, xmit_discards=[65_535, 12]))
    out = stage.observe(sample(["a", "b"], 10, schema, xmit_discards=[65_535, 12]))
    bit = SATURATION_BITS["xmit_discards"]
    # The rate of a stuck counter is unknown, but the reading itself says "at least 65,535".
    assert rates(out, "xmit_discards") == [None, 0.0]
    assert first.column("saturated_counters").to_pylist() == [bit, 0]
    assert out.column("saturated_counters").to_pylist() == [bit, 0]


def test_repeated_snapshot_is_unknown_and_the_next_sample_spans_the_gap() -> None:
    """A scrape that lands twice on one source snapshot reads every counter unchanged: no rate
    (not a 0 that would look healthy), and the baseline keeps its time so no 2x follows."""
    stage = CounterRates(columns=["rx_bytes", "symbol_errors"])
    stage.observe(sample(["a"], 0, rx_bytes=[1000], symbol_errors=[0]))
    out = stage.observe(sample(["a"], 10, rx_bytes=[2000], symbol_errors=[50]))
    assert rates(out, "symbol_errors") == [5.0]
    out = stage.observe(sample(["a"], 20, rx_bytes=[2000], symbol_errors=[50]))  # the same snapshot
    assert rates(out, "symbol_errors") == [None] and rates(out, "rx_bytes") == [None]
    assert out.column("interval_seconds").to_pylist() == [None]
    out = stage.observe(sample(["a"], 30, rx_bytes=[4000], symbol_errors=[150]))
    assert out.column("interval_seconds").to_pylist() == [20.0]
    assert rates(out, "symbol_errors") == [5.0]  # steady, not 0 then 10


def test_repeated_snapshot_is_told_per_port_wherever_its_rows_sit() -> None:
    """Ports a second batch adds (state indices past the first batch's) and rows in another
    order: each port's repeat is judged on its own counters, in any column order."""
    stage = CounterRates(columns=["symbol_errors", "rx_bytes", "tx_bytes"])
    stage.observe(sample(["a", "b"], 0, rx_bytes=[1, 1], tx_bytes=[1, 1], symbol_errors=[0, 0]))
    ports = ["c", "d", "e"]
    stage.observe(sample(ports, 0, rx_bytes=[1, 1, 1], tx_bytes=[1, 1, 1], symbol_errors=[0, 0, 0]))
    stage.observe(sample(ports, 10, rx_bytes=[9, 9, 9], tx_bytes=[9, 9, 9], symbol_errors=[1, 1, 1]))
    # c: the same snapshot; d: rx still, tx moved; e: traffic still, an error counted.
    out = stage.observe(sample(ports, 20, rx_bytes=[9, 9, 9], tx_bytes=[9, 12, 9], symbol_errors=[1, 1, 2]))
    assert out.column("interval_seconds").to_pylist() == [None, 10.0, 10.0]
    assert rates(out, "symbol_errors") == [None, 0.0, 0.1]
    shuffled = sample(["d", "c", "e"], 30, rx_bytes=[9, 20, 9], tx_bytes=[12, 20, 9], symbol_errors=[1, 1, 2])
    out = stage.observe(shuffled)  # d repeats; c moved over 20 s; e, idle, reads real zeros
    assert out.column("interval_seconds").to_pylist() == [None, 20.0, 10.0]


def test_idle_link_reading_zero_deltas_is_still_measured() -> None:
    stage = CounterRates(columns=["rx_bytes", "symbol_errors"])
    stage.observe(sample(["a"], 0, rx_bytes=[1000], symbol_errors=[0]))
    stage.observe(sample(["a"], 10, rx_bytes=[1000], symbol_errors=[0]))  # no traffic before: a real 0
    out = stage.observe(sample(["a"], 20, rx_bytes=[1000], symbol_errors=[0]))
    assert rates(out, "symbol_errors") == [0.0]


def test_source_time_is_the_interval_when_given() -> None:
    """Scrapes jitter (9 s, 11 s) around a source that samples every 10 s: rates stay steady."""
    stage = CounterRates(columns=["rx_bytes"])
    scrape = [0, 9, 20, 29, 40]
    src = [0, 10, 20, 30, 40]
    got = []
    for k, (t, s_) in enumerate(zip(scrape, src, strict=True)):
        b = sample(["a"], t, rx_bytes=[1000 * s_])
        b = b.set_column(b.schema.get_field_index("source_time"), "source_time",
                         pa.array([T0 + timedelta(seconds=s_)], TS))  # fmt: skip
        out = rates(stage.observe(b), "rx_bytes")
        got += out if k else []
    assert got == [1000.0] * 4


def test_port_missing_from_a_batch_gets_the_rate_over_the_gap() -> None:
    stage = CounterRates()
    stage.observe(sample(["a", "b"], 0, rx_bytes=[0, 0]))
    out = stage.observe(sample(["a"], 10, rx_bytes=[1_000]))
    assert out.column("port").to_pylist() == ["a"]
    assert rates(out, "rx_bytes") == [100.0]
    out = stage.observe(sample(["a", "b"], 20, rx_bytes=[2_000, 4_000]))
    assert rates(out, "rx_bytes") == [100.0, 200.0]
    assert out.column("interval_seconds").to_pylist() == [10.0, 20.0]


def test_new_ports_and_reordered_dictionaries() -> None:
    stage = CounterRates()
    stage.observe(sample(["a"], 0, rx_bytes=[0]))
    out = stage.observe(sample(["c", "b", "a"], 10, rx_bytes=[50, 70, 1_000]))
    assert rates(out, "rx_bytes") == [None, None, 100.0]
    out = stage.observe(sample(["b", "a", "c"], 20, rx_bytes=[170, 2_000, 550]))
    assert rates(out, "rx_bytes") == [10.0, 100.0, 50.0]
    assert stage.keys.to_pylist() == ["a", "c", "b"]


def test_reused_dictionary_with_a_subset_and_a_new_order() -> None:
    """Collectors reuse one dictionary; a poll may carry any subset of its entries, in any order."""
    keys = pa.array(["p0", "p1", "p2", "p3"])

    def batch(codes: list[int], seconds: float, values: list[int]) -> pa.RecordBatch:
        port = pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int32()), keys)
        n = len(codes)
        return make_batch(
            PORT_SAMPLE,
            n,
            {
                "time": pa.array([at(seconds)] * n, type=TS),
                "port": port,
                "source": pa.array(["snmp"] * n).dictionary_encode(),
                "rx_packets": pa.array(values, type=pa.uint64()),
            },
        )

    stage = CounterRates()
    stage.observe(batch([0, 1, 2, 3], 0, [0, 0, 0, 0]))
    out = stage.observe(batch([3, 1], 10, [30, 10]))
    assert rates(out, "rx_packets") == [3.0, 1.0]
    out = stage.observe(batch([2, 0, 3, 1], 20, [200, 400, 130, 20]))
    assert rates(out, "rx_packets") == [10.0, 20.0, 10.0, 1.0]
    assert out.column("interval_seconds").to_pylist() == [20.0, 20.0, 10.0, 10.0]


def test_sliced_batches_respect_offsets() -> None:
    stage = CounterRates(columns=["rx_packets"])
    stage.observe(sample(["x", "a", "b", "c"], 0, rx_packets=[9, 0, None, 0]).slice(1, 3))
    out = stage.observe(sample(["x", "b", "c", "a"], 10, rx_packets=[9, 10, None, 40]).slice(1))
    assert out.column("port").to_pylist() == ["b", "c", "a"]
    assert rates(out, "rx_packets") == [None, None, 4.0]


def test_duplicate_port_in_one_batch_is_rejected() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        CounterRates().observe(sample(["a", "b", "a"], 0, rx_bytes=[1, 2, 3]))


def test_nulls_stay_null() -> None:
    stage = CounterRates(columns=["rx_bytes", "rcv_errors"])
    stage.observe(sample(["a", "b"], 0, rx_bytes=[0, 0], rcv_errors=[None, None]))
    out = stage.observe(sample(["a", "b"], 10, rx_bytes=[None, 100], rcv_errors=[5, None]))
    assert rates(out, "rx_bytes") == [None, 10.0]
    assert rates(out, "rcv_errors") == [None, None]
    # a null sample is stored as unknown: the next rate has no baseline
    out = stage.observe(sample(["a", "b"], 20, rx_bytes=[500, 300], rcv_errors=[7, 1]))
    assert rates(out, "rx_bytes") == [None, 20.0]
    assert rates(out, "rcv_errors") == [0.2, None]
    out = stage.observe(sample(["a", "b"], 30, rx_bytes=[600, 400], rcv_errors=[9, 2]))
    assert rates(out, "rx_bytes") == [10.0, 10.0]
    assert rates(out, "rcv_errors") == [0.2, 0.1]
    assert out.column("counter_reset").to_pylist() == [False, False]


def test_zero_or_negative_interval_gives_null_rates_and_no_reset() -> None:
    stage = CounterRates(columns=["rx_packets"])
    stage.observe(sample(["a"], 10, rx_packets=[100]))
    out = stage.observe(sample(["a"], 10, rx_packets=[200]))
    assert out.column("interval_seconds").to_pylist() == [0.0]
    assert rates(out, "rx_packets") == [None]
    out = stage.observe(sample(["a"], 5, rx_packets=[50]))  # an older sample arriving late
    assert out.column("interval_seconds").to_pylist() == [-5.0]
    assert rates(out, "rx_packets") == [None]
    assert out.column("counter_reset").to_pylist() == [False]
    out = stage.observe(sample(["a"], 15, rx_packets=[150]))
    assert rates(out, "rx_packets") == [10.0]


def test_float_pause_seconds() -> None:
    stage = CounterRates(columns=["pfc3_rx_pause_seconds"])
    ports = ["normal", "absurd", "cleared", "nan"]
    stage.observe(sample(ports, 0, pfc3_rx_pause_seconds=[1.5, 0.0, 100.0, 1.0]))
    out = stage.observe(sample(ports, 10, pfc3_rx_pause_seconds=[4.0, 11.0, 0.25, float("nan")]))
    # 11 s of pause in 10 s is impossible (max 1.05 s/s); a drop is a clear, never a wrap
    assert rates(out, "pfc3_rx_pause_seconds") == [0.25, None, None, None]
    assert out.column("counter_reset").to_pylist() == [False, False, True, False]
    out = stage.observe(sample(ports, 20, pfc3_rx_pause_seconds=[4.0, 21.0, 5.25, 2.0]))
    assert rates(out, "pfc3_rx_pause_seconds") == [0.0, 1.0, 0.5, None]


def test_reset_state_forgets_ports() -> None:
    stage = CounterRates(columns=["rx_bytes"])
    stage.observe(sample(["a"], 0, rx_bytes=[0]))
    stage.reset_state()
    out = stage.observe(sample(["a"], 10, rx_bytes=[1_000]))
    assert rates(out, "rx_bytes") == [None]
    assert len(stage.keys) == 1


def test_half_a_million_ports() -> None:
    """Fabric scale, many counters present; behaviour only (bench/bench_rates.py times it)."""
    n = 500_000
    keys = pa.array([f"leaf{i // 64}/p{i % 64}" for i in range(n)])
    port = pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), keys)
    base = np.arange(n, dtype=np.uint64) * np.uint64(1_000)
    step = np.arange(n, dtype=np.uint64)  # port i moves by i every 10 s
    start = np.datetime64("2025-01-01T00:00:00", "us")

    def poll(seconds: int, value: np.ndarray, rows: np.ndarray) -> pa.RecordBatch:
        cols: dict[str, pa.Array] = {
            "time": pa.array(np.full(len(rows), start + np.timedelta64(seconds, "s"))),
            "port": port.take(pa.array(rows)),
            "source": pa.array(["ufm"] * len(rows)).dictionary_encode(),
            "speed_bps": pa.array(np.full(len(rows), G400, dtype=np.int64)),
        }
        for name in PORT_SAMPLE.names:
            if name.endswith("_seconds"):
                cols[name] = pa.array(value[rows].astype(np.float64) * 1e-9)
            elif name.endswith(("_bytes", "_packets", "_frames")):
                cols[name] = pa.array(value[rows])
        return make_batch(PORT_SAMPLE, len(rows), cols)

    every = np.arange(n)
    stage = CounterRates()
    first = stage.observe(poll(0, base, every))
    assert first.num_rows == n
    assert first.column("rx_bytes_per_second").null_count == n

    out = stage.observe(poll(10, base + step, every))
    got = out.column("rx_bytes_per_second").to_numpy()
    assert got[:4].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3], rel=1e-15)
    assert got[n - 1] == (n - 1) / 10
    assert out.column("pfc0_tx_pause_seconds_per_second").null_count == 0
    assert out.column("pfc0_tx_pause_seconds_per_second")[10].as_py() == pytest.approx(1e-9)
    assert out.column("cnp_sent_per_second").null_count == n
    assert not out.column("counter_reset").to_numpy(zero_copy_only=False).any()

    # a collector outage drops two ports in three; port 6 is cleared
    value = base + 2 * step
    value[6] = 0
    subset = every[::3]
    partial = stage.observe(poll(20, value, subset))
    assert partial.num_rows == len(subset)
    assert partial.column("port")[3].as_py() == "leaf0/p9"
    assert partial.column("rx_bytes_per_second")[3].as_py() == 0.9
    assert partial.column("rx_bytes_per_second")[2].as_py() is None
    assert np.flatnonzero(partial.column("counter_reset").to_numpy(zero_copy_only=False)).tolist() == [2]

    value = base + 3 * step
    value[6] = 5
    last = stage.observe(poll(30, value, every))
    ports_0_1_6 = pa.array([0, 1, 6])
    assert last.column("interval_seconds").take(ports_0_1_6).to_pylist() == [10.0, 20.0, 10.0]
    # port 1 moved 2 over the 20 s gap; port 6 counts from its new baseline
    assert last.column("rx_bytes_per_second").take(ports_0_1_6).to_pylist() == [0.0, 0.1, 0.5]
    assert not last.column("counter_reset").to_numpy(zero_copy_only=False).any()


def test_a_batch_without_counters_passes_gauges_and_keeps_baselines() -> None:
    """UFM REST (state only) and UFM Telemetry (counters only) arrive as two batches a poll."""
    r = CounterRates()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def _dict(values: list[str]) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array(values))

    def batch(t: datetime, **cols: pa.Array) -> pa.RecordBatch:
        base = {"time": pa.array([t], TS), "port": _dict(["a/1"]), "source": _dict(["ufm"])}
        return make_batch(PORT_SAMPLE, 1, base | cols)

    def counters(t: datetime, v: int) -> pa.RecordBatch:
        return batch(t, rx_bytes=pa.array([v], pa.uint64()))

    def state(t: datetime) -> pa.RecordBatch:
        return batch(t, speed_bps=pa.array([400 * 10**9]))

    r.observe(state(t0))
    r.observe(counters(t0, 1000))
    gauges = r.observe(state(t0 + timedelta(seconds=10)))
    assert gauges.column("speed_bps").to_pylist() == [400 * 10**9]
    assert gauges.column("rx_bytes_per_second").to_pylist() == [None]
    out = r.observe(counters(t0 + timedelta(seconds=10), 6000))
    assert out.column("rx_bytes_per_second").to_pylist() == [500.0]
    assert out.column("interval_seconds").to_pylist() == [10.0]
