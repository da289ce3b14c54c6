"""Uplink balance: a polarized leaf against its job's peer leaves, judged within the job's pulses."""

from __future__ import annotations

from graywire.detectors.findings import Finding, Kind
from graywire.detectors.pipeline import Pipeline
from graywire.detectors.uplink_balance import JobPulses, UplinkBalanceDetector
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

LEAF = "leaf-r3-001"


def run(
    faults: str, nccl_until: float | None = None, duration: float = 900.0
) -> tuple[FabricSim, list[Finding]]:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=64), duration_s=duration, seed=2, faults=faults))
    pulses = JobPulses(sim.fabric)
    pipe = Pipeline(sim.fabric, [pulses, UplinkBalanceDetector(sim.fabric, pulses)])
    out: list[Finding] = []
    for step in sim.run():
        out += pipe.process(step.port_sample)
        t = step.index * sim.cfg.interval_s
        if step.nccl_timing is not None and (nccl_until is None or t < nccl_until):
            out += pipe.process(step.nccl_timing)
    return sim, out


def test_a_polarized_leaf_is_named_with_its_hot_uplinks_and_the_share_they_carry() -> None:
    sim, found = run(f"ecmp_polarization@100s+600s=0.25:{LEAF}")
    (fault,) = sim.faults
    firing = [f for f in found if f.status == "firing"]
    assert [f.entity for f in firing] == [LEAF]
    (f,) = firing
    assert f.kind == Kind.UPLINK_IMBALANCE and f.node == LEAF
    ev = f.evidence
    assert set(ev["hot_uplinks"]) == set(fault.extra["hot_uplinks"]) and f.port in ev["hot_uplinks"]
    assert ev["hot_share"] > 0.9 and ev["even_share"] == len(ev["hot_uplinks"]) / ev["uplinks_reporting"]
    assert ev["peak_ratio"] > 3 * ev["peer_median_peak_ratio"]
    # The job behind the leaf and its step period, from the NCCL timings (8 steps a 10 s poll).
    assert ev["job"] == "job-000" or ev["job"] == "job-001"
    assert abs(ev["step_period_s"] - 1.25) < 0.01
    # Persistent: 6 judged polls after the fault starts; it closes once the hashing is even again.
    assert 150 <= (f.time - sim.cfg.start).total_seconds() <= 170
    assert [g.status for g in found] == ["firing", "cleared"]


def test_evenly_spreading_leaves_and_a_fabric_wide_burst_blame_none() -> None:
    _, found = run("checkpoint_burst@300s+2m")
    assert found == []


def test_without_nccl_timings_there_are_no_pulses_to_judge_within() -> None:
    _, found = run(f"ecmp_polarization@100s+600s=0.25:{LEAF}", nccl_until=0.0)
    assert found == []


def test_polls_without_collectives_neither_open_nor_close() -> None:
    # The job stops running collectives at 400 s while the leaf stays polarized: the finding
    # opened during pulses stays open (idle gaps say nothing) instead of clearing.
    _, found = run(f"ecmp_polarization@100s+800s=0.25:{LEAF}", nccl_until=400.0)
    assert [f.status for f in found] == ["firing"]
