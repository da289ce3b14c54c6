"""Job step-time slowdown: a lasting >= 10% shift fires; slow steps, pulses and checkpoints do not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.schemas import NCCL_TIMING, TS, make_batch
from graywire.detectors.findings import Finding
from graywire.detectors.nccl_step import NcclStepTime, NcclStepTimeConfig
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec


@cache
def simulate(
    faults: str, seed: int = 0, duration_s: float = 1800.0, interval_s: float = 10.0
) -> tuple[Finding, ...]:
    topo = TopologySpec(hosts=16)
    cfg = SimConfig(topology=topo, duration_s=duration_s, interval_s=interval_s, seed=seed, faults=faults)
    sim = FabricSim(cfg)
    det = NcclStepTime()
    out: list[Finding] = []
    for st in sim.run():
        if st.nccl_timing is not None:
            out += det.observe(st.nccl_timing)
    return tuple(out)


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


@pytest.mark.parametrize(("mag", "seed"), [(0.1, 0), (0.1, 1), (0.1, 2), (0.2, 0), (0.5, 1)])
def test_lasting_shift_fires_once_with_before_after_and_change_time(mag: float, seed: int) -> None:
    findings = simulate(f"job_slowdown@600s+900s={mag}:job-000", seed)
    firing = [f for f in findings if f.status == "firing"]
    assert len(firing) == 1
    f = firing[0]
    assert (f.kind, f.entity, f.node) == ("nccl_job_slowdown", "job-000", None)
    assert 600 < rel(f) <= 600 + 300  # within one 5-minute window
    ev = f.evidence
    assert ev["shift"] == pytest.approx(mag, abs=0.03)
    assert ev["after_median_seconds"] / ev["before_median_seconds"] == pytest.approx(1 + ev["shift"])
    change = datetime.fromisoformat(ev["change_time"])
    assert abs((change - EPOCH).total_seconds() - 600) <= 60
    assert ev["job"] == "job-000" and ev["collective"] == "AllReduce"
    cleared = [f for f in findings if f.status == "cleared"]
    assert len(cleared) == 1 and 1500 < rel(cleared[0]) <= 1500 + 300


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_job_never_fires(seed: int) -> None:
    assert simulate("none", seed) == ()


def test_checkpoint_burst_and_single_slow_steps_do_not_fire() -> None:
    faults = "checkpoint_burst@600s+120s,slow_step@1000s+10s=1.0:job-000,slow_step@1300s+10s=2.0:job-000"
    assert simulate(faults) == ()


def test_hourly_checkpoints_at_a_one_minute_poll_do_not_fire() -> None:
    """Two slow samples of five would move a five-minute median: the window keeps ten."""
    bursts = ",".join(f"checkpoint_burst@{h * 3600 + 600}s+2m" for h in range(24))
    assert simulate(bursts, 5, 24 * 3600.0, 60.0) == ()
    firing = [
        f
        for f in simulate("job_slowdown@7200s+3600s=0.2:job-000", 5, 4 * 3600.0, 60.0)
        if f.status == "firing"
    ]
    assert len(firing) == 1 and 7200 < rel(firing[0]) <= 7200 + 600


def test_five_percent_shift_is_below_the_rule() -> None:
    assert simulate("job_slowdown@600s+900s=0.05:job-000") == ()


# -- hand-built series -----------------------------------------------------------------------------
T0 = datetime(2026, 2, 1, tzinfo=UTC)


def poll(i: int, step_s: float, job: str = "job-a", interval: float = 10.0) -> pa.RecordBatch:
    n = 16
    return make_batch(
        NCCL_TIMING,
        n,
        {
            "time": pa.array([T0 + timedelta(seconds=interval * i)] * n, type=TS),
            "job": pa.array([job] * n).dictionary_encode(),
            "communicator": pa.array([f"{job}:world"] * n).dictionary_encode(),
            "rank": pa.array(np.arange(n), pa.int32()),
            "collective": pa.array(["AllReduce"] * n).dictionary_encode(),
            "message_bytes": pa.array([2**26] * n, pa.int64()),
            "duration_seconds": pa.array(np.full(n, step_s)),
        },
    )


def test_periodic_pulses_do_not_fire_but_a_step_change_does() -> None:
    det = NcclStepTime()
    out: list[Finding] = []
    for i in range(300):  # every third step 50% slower (gradient sync of a bigger layer, say)
        out += det.observe(poll(i, 0.015 * (1.5 if i % 3 == 0 else 1.0)))
    assert out == []
    for i in range(300, 400):
        out += det.observe(poll(i, 0.015 * 1.12 * (1.5 if i % 3 == 0 else 1.0)))
    assert [f.status for f in out] == ["firing"]
    assert out[0].evidence["shift"] == pytest.approx(0.12, abs=0.01)


def test_two_groups_of_one_job_are_one_incident_and_jobs_are_apart() -> None:
    det = NcclStepTime(NcclStepTimeConfig(recent_s=60, ref_s=300))
    out: list[Finding] = []
    for i in range(200):
        slow = 1.3 if i >= 100 else 1.0
        for job in ("job-a", "job-b"):
            b = poll(i, 0.02 * (slow if job == "job-a" else 1.0), job)
            out += det.observe(b)
            # a second message size of the same job, also slower
            out += det.observe(b.set_column(9, "message_bytes", pa.array([2**20] * 16, pa.int64())))
    assert [(f.status, f.entity) for f in out] == [("firing", "job-a")]


def test_bad_rows_are_ignored() -> None:
    det = NcclStepTime()
    b = poll(0, 0.01)
    i = b.schema.get_field_index("duration_seconds")
    b = b.set_column(i, "duration_seconds", pa.array([float("nan")] * 16))
    assert det.observe(b) == []
    assert det.observe(poll(0, 0.0)) == []


def test_groups_are_bounded_and_quiet_ones_give_their_rows_back() -> None:
    """A flood of communicators cannot grow the state: past max_groups live groups new ones are
    counted and left out; a group quiet for expire_s frees its row for the next."""
    det = NcclStepTime(NcclStepTimeConfig(max_groups=3, expire_s=100.0))
    for i in range(5):
        assert det.observe(poll(i, 0.01, job=f"job-{i}")) == []
    assert det.groups == 3 and det.over_capacity == 2 * 16
    assert det._t.shape[0] <= 64  # the arrays hold live rows, not every group ever seen
    # 200 s later the first three have been quiet past expire_s: their rows go to new groups.
    assert det.observe(poll(30, 0.01, job="job-new")) == []
    assert det.groups == 1 and det.over_capacity == 2 * 16
    assert det.index.keys == ["job-new:world|AllReduce|26"]  # the quiet rows were compacted away


def test_an_open_slowdown_of_a_group_that_goes_quiet_clears_as_stopped() -> None:
    det = NcclStepTime(NcclStepTimeConfig(recent_s=60, ref_s=300, expire_s=600))
    out: list[Finding] = []
    for i in range(100):
        out += det.observe(poll(i, 0.02 * (1.3 if i >= 60 else 1.0)))
    assert [f.status for f in out] == ["firing"]
    out += det.observe(poll(200, 0.02, job="job-b"))  # job-a stopped reporting 1,000 s ago
    assert [(f.status, f.entity) for f in out[1:]] == [("cleared", "job-a")]
    assert "stopped reporting" in out[1].summary
