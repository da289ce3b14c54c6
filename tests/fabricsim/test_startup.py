"""Start-up simulation: a split communicator that hangs on one host, as NCCL logs it and as
graywire reads it back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from graywire.detectors.nccl_bootstrap import NcclBootstrapDetector
from graywire.fabricsim.nccl_views import InitLogView
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_split_that_hangs_on_one_host_is_one_stall_named_by_that_host() -> None:
    """Magnitude 2: the world communicator comes up, the split (no commId in its lines) never
    completes on the stuck rank's host; graywire names that host, for the split, once."""
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=16), seed=4, duration_s=1200.0, interval_s=10.0,
                              faults="nccl_bootstrap_stall@200s+700s=2"))  # fmt: skip
    (fault,) = [f for f in sim.faults if f.kind == "nccl_bootstrap_stall"]
    view, det = InitLogView(), NcclBootstrapDetector()
    firing = []
    try:
        for k in range(120):
            st = sim.step()
            now = T0 + timedelta(seconds=10.0 * k)
            batch = view.apply(st.nccl_init_events or [], now, 10.0 * k)
            if batch is not None:
                firing += [f for f in det.observe(batch) if f.status == "firing"]
    finally:
        view.close()
    assert [f.node for f in firing] == [fault.node]
    (f,) = firing
    assert f.entity.split("|")[0].endswith("/split1/color0")
    assert f.evidence["what"].startswith("never logged Init COMPLETE")
    assert f.evidence["ranks"] == list(range(fault.rank - fault.rank % 8, fault.rank - fault.rank % 8 + 8))


def test_a_stall_magnitude_outside_the_three_steps_is_refused() -> None:
    cfg = SimConfig(topology=TopologySpec(hosts=16), seed=4, faults="nccl_bootstrap_stall@200s=3")
    with pytest.raises(ValueError, match=r"magnitude 0 \(never starts\), 1 \(hangs after bootstrap\) or 2"):
        FabricSim(cfg)
