"""Unknown is not healthy: missing, repeated and jittered samples neither open nor close."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from graywire.collectors.schemas import TS
from graywire.detectors.findings import Finding
from graywire.detectors.pipeline import Pipeline, default_detectors
from graywire.detectors.rates import CounterRates
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

NIC = "gpu-0003/mlx5_2"


def restamp(batch: pa.RecordBatch, shift_s: float) -> pa.RecordBatch:
    """The same counters under a later poll time: a scrape that landed on the old snapshot."""
    t = batch.column("time").cast(pa.int64()).to_numpy() + int(shift_s * 1e6)
    i = batch.schema.get_field_index("time")
    return batch.set_column(i, "time", pa.array(t.astype("datetime64[us]"), TS))


def run(repeat_from: int | None, repeats: int, jitter_s: float = 0.0) -> list[Finding]:
    sim = FabricSim(
        SimConfig(
            topology=TopologySpec(hosts=8), duration_s=600.0, seed=3, faults=f"pfc_storm@60s+200s:{NIC}"
        )
    )
    pipe = Pipeline(sim.fabric, default_detectors(sim.fabric))
    rng = np.random.default_rng(0)
    found: list[Finding] = []
    last, last_k = None, 0
    for k, step in enumerate(sim.run()):
        batch = step.port_sample
        if jitter_s:
            batch = restamp(batch, float(rng.uniform(-jitter_s, jitter_s)))
        if repeat_from is not None and repeat_from <= k < repeat_from + repeats and last is not None:
            batch = restamp(last, 10.0 * (k - last_k))  # the source kept serving one snapshot
        else:
            last, last_k = batch, k
        # The storming NIC itself (its leaf's ports pausing their hosts are the spread).
        found += [f for f in pipe.process(batch) if f.kind == "pfc_storm" and f.port == NIC]
    return found


def test_repeated_snapshots_do_not_close_an_open_storm() -> None:
    base = run(None, 0)
    assert [f.status for f in base] == ["firing", "cleared"]
    # From poll 12 (the storm is open) the source serves one snapshot for 6 polls; the storm is
    # still on underneath. Zero deltas would read as "no pause": unknown instead, so it stays open.
    rep = run(12, 6)
    assert [f.status for f in rep] == ["firing", "cleared"]
    assert rep[0].time == base[0].time
    assert rep[1].time == base[1].time


def test_repeats_after_the_storm_do_not_open_anything_and_jitter_keeps_it_one_incident() -> None:
    rep = run(40, 8)
    assert [f.status for f in rep] == ["firing", "cleared"]
    jittered = run(None, 0, jitter_s=2.0)
    assert [f.status for f in jittered] == ["firing", "cleared"]


def test_a_busy_port_that_goes_idle_reads_zero_once_the_repeat_window_passes() -> None:
    """Counters standing still on a busy port: unknown for a while (a repeated snapshot), then
    a real idle port, so an incident on it can close."""
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=400.0, seed=3, faults="none"))
    rates = CounterRates()
    steps = list(sim.run())
    frozen = steps[5].port_sample
    known = []
    for step in steps[:6]:
        rates.observe(step.port_sample)
    for k in range(1, 20):  # the port stops: the same counters from now on
        out = rates.observe(restamp(frozen, 10.0 * k))
        known.append(out.column("interval_seconds").null_count == 0)
    assert known[:12] == [False] * 12  # within 120 s: a repeat, unknown
    assert all(known[12:])  # then real: rates of zero over the whole gap
    assert out.column("rx_bytes_per_second").to_pylist()[0] == 0.0
