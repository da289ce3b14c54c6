"""Checkpoint traffic: bursts on the compute NICs against the storage NICs, from fabricsim's counters."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.detectors.checkpoint import CheckpointTrafficDetector
from graywire.detectors.findings import Finding, Kind
from graywire.detectors.rates import CounterRates
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

Filter = Callable[[FabricSim, pa.RecordBatch, int], pa.RecordBatch]


def run(
    faults: str, storage_nics: int = 2, duration: float = 1500.0, keep: Filter | None = None
) -> list[Finding]:
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=16, storage_nics=storage_nics), duration_s=duration, seed=3,
                  faults=faults)
    )  # fmt: skip
    det = CheckpointTrafficDetector(sim.fabric)
    rates = CounterRates()
    out: list[Finding] = []
    for step in sim.run():
        batch = step.port_sample if keep is None else keep(sim, step.port_sample, step.index)
        out += det.observe(rates.observe(batch))
    return out


def test_periodic_checkpoints_on_the_compute_nics_open_one_finding_with_the_congestion_they_cause() -> None:
    found = run("checkpoint_on_compute@200s+900s=300", duration=2200.0)
    firing = [f for f in found if f.status == "firing"]
    assert len(firing) == 1
    (f,) = firing
    assert f.kind == Kind.CHECKPOINT_ON_COMPUTE and f.node is None and f.evidence["network"] == "compute"
    # Opened by the second burst (200 s + one period), never by the first alone.
    assert 500 <= (f.time - EPOCH).total_seconds() < 560
    ev = f.evidence
    assert ev["period_s"] == 300.0
    assert ev["bursts"][-1]["hosts"] == ev["bursts"][-1]["hosts_judged"] == 16
    # The burst raised PFC pauses and ECN marks on the training fabric well over their baseline.
    assert ev["pfc_pause_share"] > 10 * ev["pfc_pause_share_baseline"]
    assert ev["ecn_marks_per_second"] > 10 * ev["ecn_marks_per_second_baseline"]
    # After the last burst (800-860 s), a quiet spell of three periods closes it.
    assert [g.status for g in found] == ["firing", "cleared"]
    assert (found[1].time - EPOCH).total_seconds() > 860 + 900


def test_checkpoints_on_the_storage_network_page_nobody() -> None:
    bursts = ",".join(f"checkpoint_burst@{200 + 300 * k}s+60s" for k in range(4))
    assert run(bursts) == []


def test_a_storage_checkpoint_after_compute_ones_closes_the_finding() -> None:
    found = run("checkpoint_on_compute@200s+600s=300,checkpoint_burst@1100s+60s")
    assert [f.status for f in found] == ["firing", "cleared"]
    assert "storage NICs" in found[1].summary


def test_without_storage_nics_there_is_nothing_to_tell_apart() -> None:
    # fabricsim's benign burst on a one-fabric cluster: every link at once, by design.
    bursts = ",".join(f"checkpoint_burst@{200 + 300 * k}s+60s" for k in range(4))
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=16), duration_s=60.0, faults=bursts))
    assert not CheckpointTrafficDetector(sim.fabric).active
    assert run(bursts, storage_nics=0) == []


def test_storage_nics_unheard_during_the_bursts_leave_it_unknown() -> None:
    """A burst seen on the compute NICs while the storage NICs' counters are missing is not a
    burst "while the storage NICs stay idle": unknown, so nothing opens."""

    def drop_storage(sim: FabricSim, batch: pa.RecordBatch, k: int) -> pa.RecordBatch:
        if not sim._checkpoint_on_compute(k * sim.cfg.interval_s):
            return batch
        storage = pa.array([p == "storage" for p in sim.fabric.purpose])
        idx = batch.column("port").indices
        return batch.filter(pc.invert(pc.take(storage, idx)))

    assert run("checkpoint_on_compute@200s+1200s=300", keep=drop_storage) == []


def test_one_synchronised_burst_alone_is_not_a_schedule() -> None:
    found = run("checkpoint_on_compute@200s+200s=300")
    assert found == []
    # And it needs several hosts: a burst on a few hosts' compute NICs is not cluster-wide.
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=16, storage_nics=2), duration_s=10.0))
    det = CheckpointTrafficDetector(sim.fabric)
    assert det.cfg.min_hosts >= 3 and int(np.sum(det.eligible)) == 16
