"""Unknown is not healthy: missing, repeated and jittered samples neither open nor close."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from collectors.schemas import TS
from detectors.findings import Finding
from detectors.pipeline import Pipeline, default_detectors
from fabricsim.sim import FabricSim, SimConfig
from fabricsim.topology import TopologySpec

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
        found += [f for f in pipe.process(batch) if f.kind == "pfc_storm"]
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
