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
    # Every other kind is the drain engine's own, raised from the verdicts.
    assert set(Kind) - emitted == {Kind.SWITCH_FAILURE, Kind.DRAIN_CIRCUIT_BREAKER}


def test_every_kind_has_its_phase_and_only_link_and_port_kinds_are_fabric() -> None:
    """A kind without a phase would vanish from a job's view; a job kind filed under fabric
    would show as the fabric under every job on its host."""
    from graywire.detectors.findings import JOB_PHASES, PHASE, Phase

    assert set(PHASE) == set(Kind), sorted(set(Kind) ^ set(PHASE))
    assert set(JOB_PHASES) | {Phase.FABRIC} == set(Phase) and len(JOB_PHASES) == 4
    fabric = {k for k, p in PHASE.items() if p is Phase.FABRIC}
    # The fabric's kinds are about a port or a cable: none of them is a job's NCCL finding.
    assert fabric and not {k for k in fabric if k.startswith("nccl_")}
    assert (PHASE[Kind.NCCL_BOOTSTRAP_STALL], PHASE[Kind.NCCL_RANK_DEAD]) == (
        Phase.START_UP,
        Phase.FAULT_PATH,
    )
