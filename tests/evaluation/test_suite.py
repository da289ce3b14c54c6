"""The evaluation suite: the detectors against the static-rule baseline on the same simulations."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from graywire.detectors.ber_thresholds import ThresholdTable
from graywire.evaluation import suite as suite_module
from graywire.evaluation.suite import (
    BENIGN,
    BENIGN_AT,
    MAGNITUDES,
    VARIANTS,
    Scenario,
    evaluate,
    quirk_scenarios,
    run_scenario,
    suite,
)
from graywire.fabricsim.faults import BENIGN_KINDS, FAULT_KINDS


@pytest.fixture(scope="module")
def table(real_fixtures: Path) -> ThresholdTable:
    return ThresholdTable.load(real_fixtures / "ufm" / "pdr_Field_BER_Thresholds.csv")


def test_suite_covers_every_fault_type_sizes_seeds_and_a_long_soak() -> None:
    full = suite()
    kinds = {re.split(r"[@+=:]", item)[0] for sc in full for item in sc.faults.split(",")}
    assert set(FAULT_KINDS) <= kinds
    assert set(BENIGN_KINDS) <= kinds
    assert {sc.hosts for sc in full} == {32, 64, 256, 1024, 4096}
    assert {sc.seed for sc in full if sc.name.startswith("mix")} == {0, 1, 2}
    (soak,) = [sc for sc in full if sc.name.startswith("soak") and sc.variant == "rich"]
    assert soak.duration_s >= 72 * 3600 and soak.hosts * 32 >= 1000
    assert all(len(m) >= 1 for m in MAGNITUDES.values())
    # Every other source mix replays the mixed runs and a soak of its own.
    for v in VARIANTS[1:]:
        mine = [sc for sc in full if sc.variant == v.name]
        assert sum(sc.name.startswith("mix") for sc in mine) == 9
        assert sum(sc.name.startswith("soak") for sc in mine) == 1
    quirks = [sc for sc in full if sc.phase == "quirks"]
    assert {sc.name for sc in quirks} >= {"quirks-reload-ramp-s0", "quirks-reload-s0"}
    assert {sc.group for sc in quirks} == {"host_ethtool+inspector_verbose/quirks"}
    assert {sc.variant for sc in suite(variants=("ufm_default+inspector_default",))} == {
        "ufm_default+inspector_default"
    }
    with pytest.raises(ValueError, match="unknown variant 'x'"):
        suite(variants=("x",))


def test_driver_reloads_at_every_counter_band_open_nothing_and_a_90s_ramp_is_found_within_60s() -> None:
    """The quirks pair on a RoCE fabric read by host agents: reloads below 2^31, between 2^31
    and 2^32 (a reset that looks like a wrap) and above 2^32; then the same with a BER ramp."""
    pair = {sc.name: sc for sc in quirk_scenarios(seeds=1)}
    alone, _ = run_scenario(pair["quirks-reload-s0"], None)
    assert alone.false_findings + alone.benign_alarms == 0, alone.false_examples
    ramp, _ = run_scenario(pair["quirks-reload-ramp-s0"], None)
    ber = ramp.by_fault["ber_ramp"]
    assert (ber.total, ber.detected) == (1, 1) and ber.delays_s[0] <= 60.0
    assert ramp.false_findings + ramp.benign_alarms == 0, ramp.false_examples


def test_one_mixed_scenario_detectors_beat_the_baseline(table: ThresholdTable) -> None:
    items = [f"{kind}@{60 + 60 * i}s+1200s" for i, kind in enumerate(MAGNITUDES)]
    benign = BENIGN.format(**BENIGN_AT)
    sc = Scenario("t", 64, 1, 2400.0, 10.0, ",".join(items) + "," + benign)
    ours, base = run_scenario(sc, table)
    assert ours.recall == 1.0
    assert (ours.false_findings, ours.benign_alarms) == (0, 0)
    assert ours.precision == 1.0
    # Every NCCL fault type is covered and localized, the slow path on its leaf.
    for kind in ("slow_channel", "slow_nic", "straggler", "nccl_slow_path", "job_slowdown",
                 "nccl_transport_fallback", "nccl_gdrdma_missing"):  # fmt: skip
        s = ours.by_fault[kind]
        assert (s.total, s.detected, s.localized) == (1, 1, 1), kind
    # The static rules page on benign events (the retrain, the checkpoint burst) and on noise.
    assert base.benign_alarms > 0
    assert base.by_fault["job_slowdown"].covered and base.by_fault["nccl_transport_fallback"].covered
    # It pages on noise too, and has no rule for a rank that arrives late.
    assert base.false_findings > 0
    assert base.precision is not None and base.precision < 0.8
    assert base.by_fault["straggler"].detected == 0


def test_evaluate_reports_the_documented_shape(table: ThresholdTable) -> None:
    sc = Scenario("soak-tiny", 8, 2, 1800.0, 30.0, "checkpoint_burst@600s+2m")
    ticks: list[int] = []
    r = evaluate([sc], table, ticks.append)
    assert sum(ticks) == sc.polls
    assert set(r) >= {"overall", "by_fault", "baseline", "soak", "false_per_1000_port_hours", "scenarios"}
    assert set(r["overall"]) == {"precision", "recall", "f1"}
    assert set(r["baseline"]["overall"]) == {"precision", "recall", "f1"}
    assert r["soak"]["false_findings"] == 0
    assert r["soak"]["port_hours"] == pytest.approx(256 * 0.5)
    assert r["baseline"]["soak"]["false_findings"] > 0  # ECN/pause rules fire on the checkpoint


def test_the_inspector_default_view_reads_back_what_the_plugin_writes(
    table: ThresholdTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the Inspector's default records (no channels, no start times) a straggler and a
    job-wide slowdown are still found; faults only per-channel timing shows are not
    observable there, and say so instead of counting as misses."""
    runs: list[tuple[Any, Any]] = []

    def run_and_keep(*args: Any) -> tuple[Any, Any]:  # the one simulation, kept for its scores
        runs.append(run_scenario(*args))
        return runs[-1]

    monkeypatch.setattr(suite_module, "run_scenario", run_and_keep)
    sc = Scenario(
        "t",
        16,
        1,
        900.0,
        10.0,
        "straggler@60s+400s=0.1,slow_channel@60s+400s=0.5",
        "ufm_default+inspector_default",
    )
    r = evaluate([sc], table)
    ((ours, _),) = runs
    assert ours.by_fault["straggler"].detected == 1
    assert not ours.by_fault["slow_channel"].covered
    assert (ours.false_findings, ours.benign_alarms) == (0, 0)
    assert r["variants"]["ufm_default+inspector_default"]["not_observable"] == [
        "ecn_hotspot", "nccl_slow_path", "pfc_storm", "slow_channel", "slow_nic"
    ]  # fmt: skip
    assert "slow_channel" not in r["variants"]["ufm_default+inspector_default"]["by_fault"]
