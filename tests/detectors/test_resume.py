"""After a restart, each detector takes back the open incidents of its kinds: a fault repaired
meanwhile clears on the healthy polls that follow, one still there stays open without firing
again, and an entity no source reports any more stays open (unknown is not healthy)."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from graywire.detectors.findings import Finding
from graywire.detectors.pipeline import Pipeline
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig, SimStep
from graywire.fabricsim.topology import TopologySpec

HOST = "gpu-0003/mlx5_2"
#: A fault per resumable kind; each opens within the first run.
FAULTS = {
    "speed_downgrade": f"speed_downgrade@20s+1h:{HOST}",
    "width_downgrade": f"width_downgrade@20s+1h:{HOST}",
    "pfc_storm": f"pfc_storm@20s+1h:{HOST}",
    "ecn_hotspot": f"ecn_hotspot@20s+1h:{HOST}",
    "xmit_wait_hotspot": f"credit_starvation@20s+1h:{HOST}",
    "link_flap": f"link_flap@20s+400s:{HOST}",
    "ber_degradation": f"ber_ramp@20s+600s=100:{HOST}",  # fires at 270 s
    "nccl_channel_slow": f"slow_nic@20s+1h:{HOST}",
}
FIRST_S = 600.0  # every kind has opened, and no fault has ended


def sim(faults: str, start_s: float, duration_s: float) -> FabricSim:
    start = EPOCH + timedelta(seconds=start_s)
    return FabricSim(SimConfig(topology=TopologySpec(hosts=8), duration_s=duration_s, seed=4,
                               faults=faults, start=start))  # fmt: skip


def batches(step: SimStep, without: Collection[str] = ()) -> list[pa.RecordBatch]:
    """A step's records; ``without``: these ports, and the ranks of these hosts, left out."""
    out = []
    for b in (step.port_sample, step.nccl_timing):
        if b is None:
            continue
        if without:
            column = "port" if "port" in b.schema.names else "host"
            keys = pc.cast(b.column(column), pa.string())
            b = b.filter(pc.invert(pc.is_in(keys, value_set=pa.array(sorted(without)))))
        out.append(b)
    return out


def as_incident(f: Finding) -> dict[str, Any]:
    """What the store keeps of a firing finding, as ``IncidentStore.active_incidents`` gives it."""
    return {"kind": f.kind, "entity": f.entity, "status": "open", "severity": f.severity, "node": f.node,
            "port": f.port, "link": f.link, "evidence": dict(f.evidence)}  # fmt: skip


def judge(pipeline: Pipeline, steps: Iterator[SimStep], without: Collection[str] = ()) -> list[Finding]:
    found = []
    for st in steps:
        found += pipeline.process_poll(batches(st, without)).findings
    return found


@pytest.fixture(scope="module", params=sorted(FAULTS))
def left_open(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    """A first process's open incidents of one kind when it stopped, the fault still on."""
    kind = request.param
    first = sim(FAULTS[kind], 0.0, FIRST_S)
    found = judge(Pipeline(first.fabric), first.run())
    is_open: dict[str, Finding] = {}
    for f in found:
        if f.status == "firing":
            is_open[f.entity] = f
        else:
            is_open.pop(f.entity, None)
    incidents = [as_incident(f) for f in is_open.values() if f.kind == kind]
    assert incidents, f"{kind}: the first run opened nothing to resume"
    return kind, incidents


def restarted(kind: str, incidents: list[dict[str, Any]], faults: str) -> tuple[FabricSim, Pipeline]:
    after = sim(faults, FIRST_S, 900.0)
    pipeline = Pipeline(after.fabric)
    assert pipeline.resume(incidents) == []  # every one taken by the detector of its kind
    return after, pipeline


def test_a_fault_repaired_during_the_restart_clears(left_open: tuple[str, list[dict[str, Any]]]) -> None:
    kind, incidents = left_open
    after, pipeline = restarted(kind, incidents, faults="")
    cleared = {f.entity for f in judge(pipeline, after.run()) if f.kind == kind and f.status == "cleared"}
    assert cleared == {i["entity"] for i in incidents}


def test_without_resume_nothing_would_clear(left_open: tuple[str, list[dict[str, Any]]]) -> None:
    kind, incidents = left_open
    after = sim("", FIRST_S, 900.0)
    found = judge(Pipeline(after.fabric), after.run())
    assert not [f for f in found if f.kind == kind and f.entity in {i["entity"] for i in incidents}]


def test_a_fault_still_there_stays_open(left_open: tuple[str, list[dict[str, Any]]]) -> None:
    kind, incidents = left_open
    if kind == "link_flap":
        pytest.skip("a flapping link fires again at each new outage, by design")
    if kind == "ber_degradation":
        pytest.skip("a BER ramp starts over from healthy in a new simulation: not the fault as it stood")
    # The fault as it stood when the first process stopped, on from the restart for an hour.
    faults = FAULTS[kind].replace("@20s+", "@0s+")
    after, pipeline = restarted(kind, incidents, faults)
    mine = {i["entity"] for i in incidents}
    found = [f for f in judge(pipeline, after.run()) if f.kind == kind and f.entity in mine]
    assert found == []  # neither cleared nor fired again: the same incident goes on


def test_an_entity_no_source_reports_again_stays_open(left_open: tuple[str, list[dict[str, Any]]]) -> None:
    """Both ends of each incident's link stop reporting (a rank's host, for NCCL): nothing says
    it is healthy. A rank that stops reporting expires as a job that ended, as it always does."""
    kind, incidents = left_open
    after, pipeline = restarted(kind, incidents, faults="")
    gone = {k for i in incidents for k in (i["port"], *str(i["link"] or "").split("<->")) if k}
    gone |= {i["node"] for i in incidents if i["node"]}
    mine = {i["entity"] for i in incidents}
    found = [f for f in judge(pipeline, after.run(), without=gone) if f.kind == kind and f.entity in mine]
    if kind == "nccl_channel_slow":
        assert all("stopped reporting" in f.summary for f in found if f.status == "cleared")
    else:
        assert [f for f in found if f.status == "cleared"] == []
