"""Throughput of the counter -> rate stage at fabric scale (500,000 ports, every counter).

Run: ``python bench/bench_rates.py [n_ports] [polls]``. Prints seconds per ``observe()`` for
the steady state (same dictionary every poll, as collectors send it), a partial poll (a
collector outage drops a tenth of the ports), and the first poll (key mapping built).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from graywire.collectors.schemas import PORT_COUNTERS, PORT_SAMPLE, make_batch
from graywire.detectors.rates import CounterRates


def poll(
    keys: pa.Array, rows: np.ndarray, t: datetime, base: np.ndarray, rng: np.random.Generator
) -> pa.RecordBatch:
    n = len(rows)
    port = pa.DictionaryArray.from_arrays(pa.array(rows.astype(np.int32)), keys)
    cols: dict[str, pa.Array] = {
        "time": pa.array(np.full(n, np.datetime64(t.replace(tzinfo=None), "us"))),
        "port": port,
        "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["ufm"])),
        "speed_bps": pa.array(np.full(n, 400_000_000_000, np.int64)),
    }
    for j, c in enumerate(PORT_COUNTERS):
        if c.endswith("_seconds"):
            cols[c] = pa.array(base[rows, j] * 1e-9)
        else:
            cols[c] = pa.array(base[rows, j].astype(np.uint64))
    base += rng.integers(0, 1_000_000, size=base.shape)
    return make_batch(PORT_SAMPLE, n, cols)


def main(n_ports: int = 500_000, polls: int = 5) -> None:
    rng = np.random.default_rng(0)
    keys = pa.array([f"sw{i // 64}/p{i % 64}" for i in range(n_ports)])
    base = rng.integers(0, 2**40, size=(n_ports, len(PORT_COUNTERS))).astype(np.float64)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    all_rows = np.arange(n_ports)
    stage = CounterRates()

    batch = poll(keys, all_rows, t0, base, rng)
    start = time.perf_counter()
    stage.observe(batch)
    print(f"first poll ({n_ports} ports): {time.perf_counter() - start:.3f} s")

    steady = []
    for k in range(1, polls + 1):
        batch = poll(keys, all_rows, t0 + timedelta(seconds=10 * k), base, rng)
        start = time.perf_counter()
        out = stage.observe(batch)
        steady.append(time.perf_counter() - start)
    print(f"steady poll: median {np.median(steady):.3f} s, max {max(steady):.3f} s")

    rows = np.sort(rng.choice(n_ports, size=n_ports * 9 // 10, replace=False))
    batch = poll(keys, rows, t0 + timedelta(seconds=10 * (polls + 1)), base, rng)
    start = time.perf_counter()
    out = stage.observe(batch)
    print(f"partial poll ({len(rows)} ports): {time.perf_counter() - start:.3f} s")
    print(f"valid rx_bytes rates: {out.column('rx_bytes_per_second').null_count == 0}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
