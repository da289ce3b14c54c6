"""IsolationForest port outliers: found against peers, silent on whole-fabric events, never
trained on what it flagged."""

from __future__ import annotations

import pytest

from graywire.detectors.findings import Finding
from graywire.detectors.multivariate import FEATURE_NAMES, MultivariateConfig, MultivariateOutlier
from graywire.detectors.rates import CounterRates
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec


def run(faults: str, seed: int = 1, duration: float = 1200.0, hosts: int = 32):
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=hosts), duration_s=duration, seed=seed, faults=faults)
    )
    rates, det = CounterRates(), MultivariateOutlier(sim.fabric)
    found: list[Finding] = []
    for step in sim.run():
        found += det.observe(rates.observe(step.port_sample))
    return sim, det, found


def test_a_pfc_storm_nic_stands_out_with_the_features_that_drove_it() -> None:
    _, det, found = run("pfc_storm@500s+400s:gpu-0007/mlx5_3")
    firing = [f for f in found if f.status == "firing"]
    assert [(f.kind, f.node, f.port) for f in firing] == [("port_anomaly", "gpu-0007", "gpu-0007/mlx5_3")]
    f = firing[0]
    assert 500 <= (f.time - firing[0].time.replace(hour=0, minute=0, second=0)).total_seconds() <= 500 + 40
    drivers = {d["feature"] for d in f.evidence["drivers"]}
    assert drivers & {"pause_share", "rx_bytes", "tx_bytes"}
    assert f.evidence["isolation_score"] < f.evidence["threshold"]
    assert [g.status for g in found if g.port == f.port] == ["firing", "cleared"]
    # Never learnt from what it flagged: the NIC's own baseline holds no stormy residual (pause
    # share ~ +0.69). (The hosts its leaf pauses as the storm spreads are not flagged, so the
    # reservoir does hold their rows.)
    nic = det.fabric.keys.index("gpu-0007/mlx5_3")
    assert det.base[nic, FEATURE_NAMES.index("pause_share")] < 0.3


@pytest.mark.parametrize("seed", [0, 3])
def test_healthy_fabric_raises_nothing(seed: int) -> None:
    _, det, found = run("none", seed=seed)
    assert found == []
    assert det.model is not None  # it did train and judge


def test_checkpoint_bursts_and_benign_events_raise_nothing() -> None:
    faults = "checkpoint_burst@400s+2m,counter_reset@700s:gpu-0002,short_retrain@900s:gpu-0004/mlx5_1"
    _, det, found = run(faults)
    assert found == []
    assert det.skipped_polls >= 10  # the burst's polls gave no verdict


def test_nothing_before_the_training_window_is_full() -> None:
    _, det, found = run("pfc_storm@0s+200s:gpu-0007/mlx5_3", duration=200.0)
    cfg = MultivariateConfig()
    assert det.polls <= cfg.train_polls or det.model is not None
    assert found == []  # the storm started inside the training window: it was learned as normal
