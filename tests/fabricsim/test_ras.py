"""fabricsim's fault path: a NIC link failing, its rank dying as NCCL RAS reports it, a job ending."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from graywire.collectors.nccl.ras import repair_json
from graywire.collectors.schemas import PHYS_LINK_UP
from graywire.fabricsim.faults import parse_spec
from graywire.fabricsim.ras import IB_RETRY_S, PEER_DEAD_S, read_back
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec


def _sim(faults: str, hosts: int = 16) -> FabricSim:
    return FabricSim(
        SimConfig(topology=TopologySpec(hosts=hosts), duration_s=600.0, job_hosts=8, faults=faults)
    )


def _states(sim: FabricSim, step: object) -> dict[tuple[str, int], str]:
    batch = read_back(step.ras_status, sim.ras_names, step.time)  # type: ignore[attr-defined]
    rows = batch.to_pylist() if batch is not None else []
    return {(r["job"], r["rank"]): r["state"] for r in rows}


def test_a_dead_rank_follows_its_links_failure_as_nccl_and_ras_time_it() -> None:
    sim = _sim("rank_dead@100s:gpu-0003/mlx5_2")
    (fault,) = sim.faults
    assert (fault.node, fault.job, fault.rank, fault.peer) == ("gpu-0003", "job-000", 26, fault.peer)
    seen: dict[float, tuple[str, bool, bool]] = {}
    for step in sim.run():
        t = step.index * sim.cfg.interval_s
        ports = step.port_sample.to_pydict()
        row = ports["port"].index("gpu-0003/mlx5_2")
        up = ports["phys_state"][row] == PHYS_LINK_UP
        in_links = (
            "gpu-0003/mlx5_2"
            in step.links.column("a_port").to_pylist() + step.links.column("b_port").to_pylist()
        )
        timed = step.nccl_timing is not None and "job-000" in step.nccl_timing.column("job").to_pylist()
        seen[t] = (_states(sim, step).get(("job-000", 26), "?"), up and in_links, timed)
    # Up and running before; the link down and the job's timings gone from the failure on.
    assert seen[90.0][:3] == ("running", True, True)
    assert all(not v[1] and not v[2] for t, v in seen.items() if 100 <= t < fault.end_s)
    # RAS: still present during the IB retries, then missing and unresponsive, dead 60 s later.
    gone = 100 + IB_RETRY_S + 1
    assert all(v[0] == "running" for t, v in seen.items() if 100 <= t < 100 + IB_RETRY_S)
    assert {v[0] for t, v in seen.items() if gone <= t < gone + PEER_DEAD_S} == {"unresponsive"}
    assert {v[0] for t, v in seen.items() if gone + PEER_DEAD_S <= t < fault.end_s} == {"dead"}


def test_the_stuck_jobs_other_ranks_stay_running_at_one_frozen_count_and_the_other_job_moves_on() -> None:
    sim = _sim("rank_dead@100s:gpu-0003/mlx5_2")
    per_job: dict[str, list[set[int]]] = {"job-000": [], "job-001": []}
    for step in sim.run():
        for job, text in (step.ras_status or {}).items():
            (comm,) = json.loads(repair_json(text)[0])["communicators"]  # 2.28.9's missing comma
            per_job[job].append({r["collective_counts"]["AllReduce"] for r in comm["ranks"]})
    late = per_job["job-000"][20:]
    assert all(len(c) == 1 for c in late) and len({next(iter(c)) for c in late}) == 1
    other = [next(iter(c)) for c in per_job["job-001"]]
    assert np.all(np.diff(other) > 0)


def test_a_job_end_finalizes_leaves_and_then_ras_is_gone_without_two_bad_views_in_a_row() -> None:
    sim = _sim("job_end@100s:job-001")
    (fault,) = sim.faults
    assert fault.benign and fault.job == "job-001"
    views = []
    for step in sim.run():
        t = step.index * sim.cfg.interval_s
        if t >= 100:
            st = _states(sim, step)
            views.append({s for (j, _), s in st.items() if j == "job-001"})
            assert "job-001" not in ((step.nccl_timing and step.nccl_timing.column("job").to_pylist()) or [])
    assert views[0] == {"finalize"}
    assert "nocomm" in views[1] and not any(views[2:])
    bad = [bool(v & {"unresponsive", "dead"}) for v in views]
    assert not any(a and b for a, b in itertools.pairwise(bad))


def test_fault_path_faults_take_a_job_each_and_stay_out_of_default() -> None:
    sim = _sim("rank_dead,rank_dead", hosts=16)
    assert len({f.job for f in sim.faults}) == 2
    with pytest.raises(ValueError, match="fault-path"):
        _sim("rank_dead,job_end,rank_dead", hosts=16)
    assert not _sim("default").ras_jobs and not any(r.kind == "rank_dead" for r in parse_spec("default"))


CORPUS_RAS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus" / "nccl_ras"


def _shape(text: str) -> list[str]:
    """Each line's indentation and key, values dropped: the printed layout."""
    return [re.sub(r"(: ).*$|^(\s*)-?\d.*$", r"\1\2", ln) for ln in text.splitlines()]


def test_ras_reports_are_printed_as_nccl_2_28_9_prints_them_its_bug_included() -> None:
    """A healthy report has the real 2.28.9 capture's layout line for line (secondary_hash, an
    empty list over two lines, timeouts_count 0); one with a missing rank lacks the comma after
    its nvml_dev, as 2.28.7-2.28.9 print it, and is read through the repair."""
    sim = _sim("rank_dead@100s:gpu-0003/mlx5_2")
    healthy = missing = None
    for step in sim.run():
        text = (step.ras_status or {}).get("job-000")
        if text and '"missing_ranks_count": 0' in text and healthy is None:
            healthy = text
        if text and '"missing_ranks_count": 1' in text:
            missing = text
    assert healthy is not None and missing is not None
    real = set()  # every line shape of the real 2.28.9 reports
    for path in sorted(CORPUS_RAS.glob("*2.28.9*.json")):
        real |= set(_shape(path.read_text()))
    assert set(_shape(healthy)) <= real
    assert set(_shape(missing)) <= real
    json.loads(healthy)
    with pytest.raises(json.JSONDecodeError, match="Expecting ',' delimiter"):
        json.loads(missing)
    assert repair_json(missing)[1]
