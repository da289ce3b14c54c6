"""Severity and finding kinds: one home each, and every detector speaks only those."""

from __future__ import annotations

import json

import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.detectors.findings import SEVERITIES, SEVERITY_RANK, Kind, Severity
from graywire.detectors.pipeline import default_detectors


def test_severity_is_ordered_and_is_its_text() -> None:
    assert Severity.INFO < Severity.WARNING < Severity.CRITICAL
    assert max([Severity.WARNING, Severity.CRITICAL, Severity.INFO]) is Severity.CRITICAL
    assert Severity.WARNING >= "info" and Severity.WARNING < "critical"
    assert Severity("critical") == "critical" and json.dumps(Severity.CRITICAL) == '"critical"'
    assert SEVERITIES == ("info", "warning", "critical")
    assert [SEVERITY_RANK[s] for s in Severity] == [0, 1, 2]
    with pytest.raises(ValueError):
        _ = Severity.INFO < "fatal"


def test_every_detector_emits_only_named_kinds_and_every_kind_has_a_detector() -> None:
    fabric = Fabric.from_specs({"h": "host", "sw": "leaf"}, [PortSpec("h", "p1"), PortSpec("sw", "p1")], [])
    detectors = default_detectors(fabric, multivariate=True)
    emitted = {k for d in detectors for k in d.kinds}
    assert all(isinstance(k, Kind) for k in emitted), sorted(emitted)
    assert emitted == set(Kind)
