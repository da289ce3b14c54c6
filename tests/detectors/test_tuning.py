"""Detector settings from the service's configuration (``detectors:``)."""

from __future__ import annotations

import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.detectors.nccl_bootstrap import NcclBootstrapDetector
from graywire.detectors.pipeline import default_detectors
from graywire.detectors.tuning import CONFIGS, check, config


def fabric() -> Fabric:
    return Fabric.from_specs({"h1": "host", "leaf": "leaf"}, [PortSpec("h1", "nic0"), PortSpec("leaf", "p1")],
                             [("h1/nic0", "leaf/p1")])  # fmt: skip


def test_every_detector_of_the_default_list_can_be_tuned_by_its_name() -> None:
    names = {d.name for d in default_detectors(fabric(), multivariate=True)} - {"job_pulses"}
    assert names == set(CONFIGS)


def test_overrides_reach_the_detectors_and_nested_settings_keep_their_other_defaults() -> None:
    tuning = {"nccl_bootstrap": {"stall_timeout_s": 60}, "ber": {"hysteresis": {"open_after": 3}}}
    check(tuning)
    dets = {d.name: d for d in default_detectors(fabric(), tuning=tuning)}
    boot = dets["nccl_bootstrap"]
    assert isinstance(boot, NcclBootstrapDetector) and boot.cfg.stall_timeout_s == 60.0
    assert boot.cfg.stall_factor == CONFIGS["nccl_bootstrap"]().stall_factor
    default = CONFIGS["ber"]().hysteresis
    assert dets["ber"].cfg.hysteresis.open_after == 3  # type: ignore[attr-defined]
    assert dets["ber"].cfg.hysteresis.close_after == default.close_after  # type: ignore[attr-defined]
    assert config("link_flap", tuning) == CONFIGS["link_flap"]()  # untouched: the defaults


@pytest.mark.parametrize(
    ("tuning", "message"),
    [
        ({"nccl_bootstrapp": {}}, "detectors.nccl_bootstrapp: no such detector; known: ber,"),
        (
            {"nccl_bootstrap": {"stall_timeout": 60}},
            "detectors.nccl_bootstrap.stall_timeout: no such setting",
        ),
        (
            {"nccl_bootstrap": {"stall_timeout_s": "5m"}},
            "stall_timeout_s: '5m' is not a number like its default",
        ),
        ({"nccl_bootstrap": {"min_history": 2.5}}, "min_history: 2.5 is not a whole number"),
        ({"ber": {"hysteresis": 3}}, "detectors.ber.hysteresis: expected a mapping of settings"),
        ({"ber": []}, "detectors.ber: expected a mapping of settings"),
    ],
)
def test_a_typo_or_a_wrong_type_is_refused_with_its_path(tuning: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check(tuning)
