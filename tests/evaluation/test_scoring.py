"""Scoring findings against ground truth, with hand-built findings and truth."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from graywire.evaluation.scoring import score
from graywire.fabricsim.faults import FAULT_KINDS

START = datetime.fromisoformat("2026-01-05T00:00:00+00:00")


def finding(
    kind: str,
    t: float,
    *,
    node: str | None = None,
    port: str | None = None,
    link: str | None = None,
    status: str = "firing",
) -> SimpleNamespace:
    return SimpleNamespace(
        kind=kind,
        status=status,
        time=START + timedelta(seconds=t),
        node=node,
        port=port,
        link=link,
        entity=port or link or node or "?",
    )


def truth(*faults: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "interval_s": 10.0,
        "duration_s": 3600.0,
        "start": START.isoformat(),
        "ports": 100,
        "faults": list(faults),
    }


SPEED = {
    "id": "f000",
    "kind": "speed_downgrade",
    "start_s": 100.0,
    "end_s": 400.0,
    "magnitude": 0.5,
    "port": "gpu-0001/mlx5_2",
    "peer": "leaf-r2-000/p2",
    "node": "gpu-0001",
    "benign": False,
}
RESET = {
    "id": "f001",
    "kind": "counter_reset",
    "start_s": 1000.0,
    "end_s": 1100.0,
    "node": "gpu-0005",
    "benign": True,
}
STORM = {
    "id": "f002",
    "kind": "pfc_storm",
    "start_s": 2000.0,
    "end_s": 2300.0,
    "port": "gpu-0003/mlx5_0",
    "peer": "leaf-r0-000/p4",
    "node": "gpu-0003",
    "benign": False,
}
CKPT = {
    "id": "f003",
    "kind": "checkpoint_burst",
    "start_s": 3000.0,
    "end_s": 3100.0,
    "node": "*",
    "benign": True,
}


def test_true_positive_with_delay() -> None:
    r = score(
        [finding("speed_downgrade", 130, port="gpu-0001/mlx5_2", node="gpu-0001")],
        truth(SPEED),
        ["speed_downgrade"],
    )
    assert (r.true_findings, r.false_findings, r.benign_alarms) == (1, 0, 0)
    s = r.by_fault["speed_downgrade"]
    assert (s.total, s.detected, s.localized, s.with_candidates, s.delays_s) == (1, 1, 1, 1, [30.0])
    assert r.precision == 1.0 and r.recall == 1.0 and r.f1 == 1.0
    d = r.as_dict()
    assert d["by_fault"]["speed_downgrade"] == {
        "faults": 1,
        "covered": True,
        "detected": 1,
        "recall": 1.0,
        "localization_top1": 1.0,
        "delay_median_s": 30.0,
        "delay_p95_s": 30.0,
        "delay_median_polls": 3.0,
        "delay_p95_polls": 3.0,
    }
    assert d["false_per_1000_port_hours"] == 0.0
    assert d["false_examples"] == []


@pytest.mark.parametrize(
    "where",
    [
        {"port": "leaf-r2-000/p2", "node": "leaf-r2-000"},  # the other end of the link
        {"link": "gpu-0001/mlx5_2<->leaf-r2-000/p2"},  # the link itself
        {"node": "gpu-0001"},  # the host
    ],
)
def test_places_that_count(where: dict[str, str]) -> None:
    r = score([finding("speed_downgrade", 200, **where)], truth(SPEED), ["speed_downgrade"])
    assert r.true_findings == 1
    assert r.by_fault["speed_downgrade"].detected == 1


def test_finding_at_wrong_place_is_false_and_not_detection() -> None:
    r = score(
        [finding("speed_downgrade", 130, port="gpu-0002/mlx5_2", node="gpu-0002")],
        truth(SPEED),
        ["speed_downgrade"],
    )
    assert (r.true_findings, r.false_findings, r.benign_alarms) == (0, 1, 0)
    s = r.by_fault["speed_downgrade"]
    assert (s.detected, s.with_candidates, s.localized) == (0, 1, 0)
    assert r.precision == 0.0 and r.recall == 0.0 and r.f1 is None
    d = r.as_dict()
    assert d["false_examples"] == [
        {
            "kind": "speed_downgrade",
            "entity": "gpu-0002/mlx5_2",
            "time": "2026-01-05T00:02:10+00:00",
            "why": "false",
        }
    ]
    assert d["false_per_1000_port_hours"] == 10.0  # 1 false in 100 ports x 1 h
    assert d["by_fault"]["speed_downgrade"]["localization_top1"] == 0.0


def test_localization_uses_first_finding_in_window() -> None:
    findings = [
        finding("speed_downgrade", 110, port="gpu-0007/mlx5_0"),  # first, elsewhere
        finding("speed_downgrade", 150, port="gpu-0001/mlx5_2"),  # later, right place
    ]
    r = score(findings, truth(SPEED), ["speed_downgrade"])
    s = r.by_fault["speed_downgrade"]
    assert (s.detected, s.localized, s.with_candidates, s.delays_s) == (1, 0, 1, [50.0])
    assert (r.true_findings, r.false_findings) == (1, 1)
    assert r.precision == 0.5


def test_a_finding_at_another_fault_of_the_kind_does_not_count_against_localization() -> None:
    """Two hosts degrade at once: the first finding is at the other one, which is its own fault's
    finding, not a wrong place for this one; a finding at neither still is."""
    other = {**SPEED, "id": "f009", "port": "gpu-0002/mlx5_1", "peer": "leaf-r1-000/p3", "node": "gpu-0002"}
    findings = [
        finding("speed_downgrade", 110, port="gpu-0002/mlx5_1"),
        finding("speed_downgrade", 120, port="gpu-0001/mlx5_2"),
    ]
    s = score(findings, truth(SPEED, other), ["speed_downgrade"]).by_fault["speed_downgrade"]
    assert (s.detected, s.localized, s.with_candidates) == (2, 2, 2)
    stray = [finding("speed_downgrade", 105, port="gpu-0007/mlx5_0"), *findings]
    s = score(stray, truth(SPEED, other), ["speed_downgrade"]).by_fault["speed_downgrade"]
    assert (s.detected, s.localized, s.with_candidates) == (2, 0, 2)


def test_timing_window_and_grace() -> None:
    # Grace: max(60 s, 6 polls) = 60 s after the end; a true finding may lead by one poll.
    findings = [
        finding("speed_downgrade", 92, port="gpu-0001/mlx5_2"),  # 8 s early: true, not a detection
        finding("speed_downgrade", 460, port="gpu-0001/mlx5_2"),  # end + 60: still in
        finding("speed_downgrade", 461, port="gpu-0001/mlx5_2"),  # end + 61: out
        finding("speed_downgrade", 130, port="gpu-0001/mlx5_2", status="cleared"),  # ignored
    ]
    r = score(findings, truth(SPEED), ["speed_downgrade"])
    assert (r.true_findings, r.false_findings, r.benign_alarms) == (2, 1, 0)
    assert r.by_fault["speed_downgrade"].delays_s == [360.0]
    r = score(findings[:1], truth(SPEED), ["speed_downgrade"], grace_s=0)
    assert r.by_fault["speed_downgrade"].detected == 0
    assert r.true_findings == 1


def test_finding_kind_must_name_the_fault_to_detect_it() -> None:
    r = score(
        [finding("width_downgrade", 130, port="gpu-0001/mlx5_2")],
        truth(SPEED),
        ["speed_downgrade", "width_downgrade"],
    )
    assert r.by_fault["speed_downgrade"].detected == 0
    assert r.by_fault["speed_downgrade"].with_candidates == 0
    assert r.true_findings == 1  # but it points at a real fault's place while it is active


def test_benign_alarms() -> None:
    findings = [
        finding("speed_downgrade", 1050, node="gpu-0005", port="gpu-0005/mlx5_1"),  # during a counter reset
        finding("nccl_channel_slow", 3050, node="gpu-0100"),  # during a checkpoint: anywhere
        finding("speed_downgrade", 1500, node="gpu-0005"),  # long after the reset: plain false
    ]
    r = score(findings, truth(SPEED, RESET, CKPT), ["speed_downgrade", "nccl_channel_slow"])
    assert (r.true_findings, r.false_findings, r.benign_alarms) == (0, 1, 2)
    assert [e["why"] for e in r.as_dict()["false_examples"]] == ["benign", "benign", "false"]
    assert r.as_dict()["false_per_1000_port_hours"] == 30.0
    assert r.precision == 0.0


def test_counter_wrap_stays_benign_to_the_end() -> None:
    wrap = {"id": "f004", "kind": "counter_wrap", "start_s": 500.0, "end_s": 600.0, "port": "gpu-0009/mlx5_3",
            "peer": "leaf-r3-000/p10", "node": "gpu-0009", "benign": True}  # fmt: skip
    r = score([finding("pfc_storm", 3500, port="gpu-0009/mlx5_3")], truth(wrap), ["pfc_storm"])
    assert (r.true_findings, r.false_findings, r.benign_alarms) == (0, 0, 1)


def test_uncovered_kinds() -> None:
    r = score(
        [finding("speed_downgrade", 130, port="gpu-0001/mlx5_2")], truth(SPEED, STORM), ["speed_downgrade"]
    )
    d = r.as_dict()
    assert d["by_fault"]["pfc_storm"] == {"faults": 1, "covered": False}
    assert d["by_fault"]["ber_ramp"] == {"faults": 0, "covered": False}
    assert d["by_fault"]["speed_downgrade"]["covered"] is True
    assert set(d["by_fault"]) == set(FAULT_KINDS)
    assert r.recall == 1.0  # uncovered faults do not count against recall
    assert d["overall"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert score([], truth(STORM), ["speed_downgrade"]).recall is None


def test_slow_channel_and_slow_nic_share_a_finding_kind() -> None:
    slow = {"id": "f005", "kind": "slow_nic", "start_s": 100.0, "end_s": 300.0, "port": "gpu-0002/mlx5_4",
            "node": "gpu-0002", "job": "job-000", "rank": 20, "benign": False}  # fmt: skip
    r = score([finding("nccl_channel_slow", 140, node="gpu-0002")], truth(slow), ["nccl_channel_slow"])
    assert r.by_fault["slow_nic"].covered and r.by_fault["slow_channel"].covered
    assert r.by_fault["slow_nic"].detected == 1
    assert r.by_fault["slow_nic"].delays_s == [40.0]


def test_delay_percentiles_over_several_faults() -> None:
    faults = [
        dict(SPEED, id=f"f{i:03d}", port=f"gpu-000{i}/mlx5_0", peer=None, node=f"gpu-000{i}")
        for i in range(4)
    ]
    findings = [
        finding("speed_downgrade", 100 + d, port=f"gpu-000{i}/mlx5_0") for i, d in enumerate([10, 20, 40, 80])
    ]
    d = score(findings, truth(*faults), ["speed_downgrade"]).as_dict()["by_fault"]["speed_downgrade"]
    assert d["detected"] == 4
    assert d["delay_median_s"] == 30.0
    assert d["delay_p95_s"] == 80.0
    assert d["delay_p95_polls"] == 8.0


def test_empty_inputs() -> None:
    r = score([], truth(), [])
    assert r.precision is None and r.recall is None and r.f1 is None
    assert r.as_dict()["findings"] == {"true": 0, "false": 0, "benign_alarms": 0}
