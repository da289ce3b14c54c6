"""The start-up detector on hand-made ``nccl_init`` views: who it blames for a stall, and when not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from graywire.collectors.schemas import NCCL_INIT, TS, make_batch
from graywire.detectors.nccl_bootstrap import NcclBootstrapConfig, NcclBootstrapDetector

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def view(at: float, comm: str, stages: dict[int, str], nranks: int, per_host: int = 8,
         init_s: dict[int, float] | None = None, job: str = "job-1",
         start: float = 0.0) -> pa.RecordBatch:  # fmt: skip
    ranks = sorted(stages)
    n = len(ranks)
    when = T0 + timedelta(seconds=at)
    present = {
        "time": pa.array([when] * n, TS),
        "job": pa.array([job] * n).dictionary_encode(),
        "communicator": pa.array([comm] * n).dictionary_encode(),
        "rank": pa.array(ranks, pa.int32()),
        "nranks": pa.array([nranks] * n, pa.int32()),
        "host": pa.array([f"gpu-{r // per_host:04d}" for r in ranks]).dictionary_encode(),
        "stage": pa.array([stages[r] for r in ranks]).dictionary_encode().cast(NCCL_INIT.field("stage").type),
        "started_at": pa.array([T0 + timedelta(seconds=start)] * n, TS),
        "last_line_at": pa.array([T0 + timedelta(seconds=start)] * n, TS),
        "init_seconds": pa.array([(init_s or {}).get(r) for r in ranks], pa.float64()),
    }
    return make_batch(NCCL_INIT, n, present)


def test_a_rank_that_never_started_is_named_with_its_host_after_the_timeout() -> None:
    det = NcclBootstrapDetector(NcclBootstrapConfig(stall_timeout_s=300))
    waiting = {r: "start" for r in range(32) if r != 13}
    assert det.observe(view(290, "c1", waiting, 32)) == []  # not yet past the timeout
    (f,) = det.observe(view(310, "c1", waiting, 32))
    assert (f.kind, f.status, f.node) == ("nccl_bootstrap_stall", "firing", "gpu-0001")
    assert f.evidence["ranks"] == [13] and f.evidence["ranks_started"] == 31
    assert f.evidence["what"] == "never logged Init START"
    assert det.observe(view(320, "c1", waiting, 32)) == []  # one finding, not one per poll


def test_a_rank_behind_the_others_is_named_and_a_restart_of_the_job_clears_it() -> None:
    det = NcclBootstrapDetector()
    stages = {r: "topology" for r in range(16)} | {5: "bootstrap"}
    (f,) = det.observe(view(400, "c1", stages, 16))
    assert f.node == "gpu-0000" and f.evidence["ranks"] == [5] and f.evidence["others_reached"] == "topology"
    done = {r: "complete" for r in range(16)}
    (cleared,) = det.observe(view(500, "c2", done, 16, init_s=dict.fromkeys(range(16), 1.0), start=450))
    assert (cleared.status, cleared.entity) == ("cleared", "c1|gpu-0000")
    assert det.observe(view(510, "c1", stages, 16)) == []  # superseded: not judged again


def test_every_rank_at_one_step_or_some_complete_is_not_a_stall() -> None:
    det = NcclBootstrapDetector()
    # All started, none further: a shared hang or logs gone quiet; the lines cannot say which.
    assert det.observe(view(900, "c1", dict.fromkeys(range(16), "start"), 16)) == []
    # Some completed: every rank passed the collective steps; the rest is logs behind.
    part = dict.fromkeys(range(16), "complete") | {3: "start"}
    assert det.observe(view(900, "c2", part, 16)) == []
    assert det.quiet == 1


def test_slow_init_is_judged_against_the_fleets_history_for_the_size() -> None:
    det = NcclBootstrapDetector()
    small, big = 64, 512
    t = 0.0
    for i in range(6):  # history: 64-rank inits of ~1 s
        t += 100
        took = {r: 1.0 + 0.02 * i for r in range(small)}
        assert (
            det.observe(view(t, f"s{i}", dict.fromkeys(range(small), "complete"), small, init_s=took)) == []
        )
    # A 512-rank job's first inits: 3 s is long next to 1 s, but there is no history of its size.
    for i in range(6):
        t += 100
        took = {r: 3.0 + 0.05 * i for r in range(big)}
        done = dict.fromkeys(range(big), "complete")
        assert det.observe(view(t, f"b{i}", done, big, per_host=8, init_s=took, job="big")) == []
    # A 64-rank init of 3 s is slow for its size.
    t += 100
    (f,) = det.observe(
        view(
            t,
            "slow",
            dict.fromkeys(range(small), "complete"),
            small,
            init_s=dict.fromkeys(range(small), 3.0),
            job="j9",
        )
    )
    assert (f.kind, f.status, f.node) == ("nccl_init_slow", "firing", None)
    assert f.evidence["job"] == "j9" and f.evidence["fleet_inits"] == 6
    assert f.evidence["fleet_median_s"] < 1.1
    # Its next init of normal length clears it; the slow one never joined the history.
    t += 100
    (c,) = det.observe(
        view(
            t,
            "ok",
            dict.fromkeys(range(small), "complete"),
            small,
            init_s=dict.fromkeys(range(small), 1.0),
            job="j9",
        )
    )
    assert c.status == "cleared" and len(det.history[6]) == 7


def test_implausible_rows_are_refused_and_counted() -> None:
    det = NcclBootstrapDetector()
    assert det.observe(view(10, "c1", {0: "start", 40: "start"}, 16)) == []
    assert det.rejected_rows == 1
