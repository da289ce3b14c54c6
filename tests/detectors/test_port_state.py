"""One port, whichever sources describe it: UFM REST's state and speed carried into UFM
Telemetry's counter rows, and what is not carried."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from graywire.collectors.schemas import PORT_SAMPLE, TS, make_batch
from graywire.detectors.pipeline import Pipeline
from graywire.detectors.port_state import MAX_AGE_S, PortStateBook, has_counters
from graywire.fabricsim.topology import TopologySpec, build_fabric

FABRIC = build_fabric(TopologySpec(hosts=8))
T0 = datetime(2026, 3, 1, tzinfo=UTC)
A, B, C = "gpu-0001/mlx5_0", "gpu-0002/mlx5_0", "gpu-0003/mlx5_0"
XDR = 800 * 10**9


def rest(t: datetime, ports: list[str], speed: int | None = XDR) -> pa.RecordBatch:
    """UFM REST: state, speed and width, no counter."""
    n = len(ports)
    return make_batch(
        PORT_SAMPLE,
        n,
        {
            "time": pa.array([t] * n, TS),
            "port": pa.array(ports).dictionary_encode(),
            "source": pa.array(["ufm"] * n).dictionary_encode(),
            "phys_state": pa.array([5] * n, pa.uint8()),
            "logical_state": pa.array([4] * n, pa.uint8()),
            "speed_bps": pa.array([speed] * n, pa.int64()),
            "width": pa.array([4] * n, pa.uint8()),
        },
    )


def telemetry(
    t: datetime, ports: list[str], value: int, speed: list[int | None] | None = None
) -> pa.RecordBatch:
    """UFM Telemetry: counters, and no speed unless given."""
    n = len(ports)
    cols = {
        "time": pa.array([t] * n, TS),
        "port": pa.array(ports).dictionary_encode(),
        "source": pa.array(["ufm"] * n).dictionary_encode(),
        "rx_bytes": pa.array([value] * n, pa.uint64()),
        "symbol_errors": pa.array([0] * n, pa.uint64()),
    }
    if speed is not None:
        cols["speed_bps"] = pa.array(speed, pa.int64())
    return make_batch(PORT_SAMPLE, n, cols)


def by_port(batch: pa.RecordBatch) -> dict[str, dict]:
    return {r["port"]: r for r in batch.to_pylist()}


def test_counter_rows_take_the_state_rest_read_and_rest_rows_fold_into_them() -> None:
    book = PortStateBook(FABRIC)
    r, t = rest(T0, [A, B]), telemetry(T0 + timedelta(seconds=2), [A, C], 1000)
    joined_rest, joined_tele = book.join([r, t])
    assert joined_tele is not None
    rows = by_port(joined_tele)
    assert (rows[A]["speed_bps"], rows[A]["width"], rows[A]["phys_state"], rows[A]["logical_state"]) == (
        XDR,
        4,
        5,
        4,
    )
    assert rows[C]["speed_bps"] is None  # REST said nothing of it: unknown, not guessed
    # A's REST row is folded into its counter row; B, with no counters this poll, keeps its own.
    assert joined_rest is not None and by_port(joined_rest).keys() == {B}


def test_a_reading_newer_than_the_counter_sample_is_carried() -> None:
    """UFM Telemetry dates its rows by its own sample (refreshed every 30 s): REST's reading of
    the same poll is newer than the counters, and it is the port's state all the same
    (changed: only older readings were carried, and a UFM fabric showed no speed, state or
    downgrade)."""
    book = PortStateBook(FABRIC)
    r, t = rest(T0 + timedelta(seconds=25), [A]), telemetry(T0, [A], 1000)
    _, joined = book.join([r, t])
    assert joined is not None and by_port(joined)[A]["speed_bps"] == XDR


def test_a_rows_own_value_wins_and_a_stale_reading_is_not_carried() -> None:
    book = PortStateBook(FABRIC)
    book.join([rest(T0, [A, B])])
    later = T0 + timedelta(seconds=MAX_AGE_S + 1)
    (t,) = book.join([telemetry(later, [A, B], 5, speed=[400 * 10**9, None])])
    assert t is not None
    rows = by_port(t)
    assert rows[A]["speed_bps"] == 400 * 10**9  # its own reading
    assert rows[B]["speed_bps"] is None  # the REST reading is over ten minutes old


def test_ports_the_model_does_not_know_pass_as_they_came() -> None:
    book = PortStateBook(FABRIC)
    r = rest(T0, ["0x0002c90300000001/1"])
    t = telemetry(T0, ["0x0002c90300000001/1"], 7)
    joined = book.join([r, t])
    assert joined[0] is r and joined[1] is t


def test_only_a_batch_with_a_counter_value_is_counters() -> None:
    assert not has_counters(rest(T0, [A]))
    assert has_counters(telemetry(T0, [A], 0))


def test_the_pipeline_gives_one_row_a_port_with_rest_speed_and_telemetry_rates() -> None:
    pipe = Pipeline(FABRIC)
    gb = 10**9
    pipe.process_poll([rest(T0, [A, B]), telemetry(T0, [A, B], 0)])
    polled = pipe.process_poll(
        [rest(T0 + timedelta(seconds=10), [A, B]), telemetry(T0 + timedelta(seconds=10), [A, B], 10 * gb)]
    )
    assert polled.port_rates is not None
    rows = polled.port_rates.to_pylist()
    assert sorted(r["port"] for r in rows) == [A, B]
    for row in rows:
        assert row["speed_bps"] == XDR and row["logical_state"] == 4
        assert row["rx_bytes_per_second"] == pytest.approx(gb)


def test_a_bytes_rate_past_the_carried_line_rate_is_not_plausible() -> None:
    """The rates stage's limits read the carried speed: 125 GB/s on a port REST says is 400G
    (50 GB/s, 62.5 GB/s with headroom) is impossible, where without a speed it passed."""
    pipe = Pipeline(FABRIC)
    g400 = 400 * 10**9
    pipe.process_poll([rest(T0, [A], g400), telemetry(T0, [A], 0)])
    polled = pipe.process_poll(
        [
            rest(T0 + timedelta(seconds=10), [A], g400),
            telemetry(T0 + timedelta(seconds=10), [A], 125 * 10**10),
        ]
    )
    assert polled.port_rates is not None
    assert polled.port_rates.to_pylist()[0]["rx_bytes_per_second"] is None
