"""The start-up detector on hand-made ``nccl_init`` views: who it blames for a stall, and when not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from graywire.collectors.schemas import NCCL_INIT, TS, make_batch
from graywire.detectors.nccl_bootstrap import NcclBootstrapConfig, NcclBootstrapDetector

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def view(at: float, comm: str, stages: dict[int, str], nranks: int, per_host: int = 8,
         init_s: dict[int, float] | None = None, job: str = "job-1",
         start: float = 0.0, pid0: int = 1000) -> pa.RecordBatch:  # fmt: skip
    """One view of a communicator; rank ``r`` is process ``pid0 + r`` (a restart: another pid0)."""
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
        "pid": pa.array([pid0 + r for r in ranks], pa.int64()),
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
    restart = view(500, "c2", done, 16, init_s=dict.fromkeys(range(16), 1.0), start=450, pid0=5000)
    (cleared,) = det.observe(restart)
    assert (cleared.status, cleared.entity) == ("cleared", "c1|gpu-0000")
    assert det.observe(view(510, "c1", stages, 16)) == []  # superseded: not judged again


def test_every_rank_at_one_step_is_said_once_for_the_communicator() -> None:
    """All started, none further: a shared hang (or logs gone quiet): nobody to blame, so one
    finding for the communicator, naming its hosts, and none per rank or host."""
    det = NcclBootstrapDetector()
    (f,) = det.observe(view(900, "c1", dict.fromkeys(range(16), "start"), 16))
    assert (f.entity, f.node, f.evidence["side"]) == ("c1|*", None, "communicator")
    assert (
        f.evidence["hosts"] == ["gpu-0000", "gpu-0001"]
        and f.evidence["what"] == "all 16 ranks stopped at start"
    )
    assert det.observe(view(910, "c1", dict.fromkeys(range(16), "start"), 16)) == []  # said once


def test_a_split_whose_ranks_on_two_hosts_never_complete_names_those_hosts_once() -> None:
    """NCCL's last init step is a barrier within each node: hosts can complete while others hang
    (changed: "some completed" was once read as logs behind, and nothing was said)."""
    det = NcclBootstrapDetector()
    split = "0xaaaa/split1/color0"
    part = dict.fromkeys(range(16), "complete") | dict.fromkeys(range(8, 16), "connect")
    assert det.observe(view(200, split, part, 16, per_host=4)) == []  # not yet past the timeout
    found = det.observe(view(400, split, part, 16, per_host=4))
    assert [(f.node, f.evidence["ranks"]) for f in found] == [
        ("gpu-0002", [8, 9, 10, 11]),
        ("gpu-0003", [12, 13, 14, 15]),
    ]
    assert found[0].evidence["what"] == "never logged Init COMPLETE (8 ranks did)"
    # Each host's finding names every host the stall holds, so one stall reads as one.
    assert all(f.evidence["stuck_hosts"] == ["gpu-0002", "gpu-0003"] for f in found)
    assert "gpu-0002, 4 ranks (8, 9, 10, 11) (stuck with gpu-0003)" in found[0].summary
    assert det.observe(view(410, split, part, 16, per_host=4)) == []
    # A sibling split completing in the same processes is not a restart: the stall stays open.
    assert det.observe(view(420, "0xaaaa/split2/color0", dict.fromkeys(range(16), "complete"), 16,
                            per_host=4, init_s=dict.fromkeys(range(16), 1.0))) == []  # fmt: skip
    (c1, c2) = det.observe(view(430, split, dict.fromkeys(range(16), "complete"), 16, per_host=4))
    assert {c1.status, c2.status} == {"cleared"}


def test_a_restart_five_times_slower_than_its_previous_attempt_is_slow_without_history() -> None:
    """No fleet history at all: the job's attempt on the same hosts is the measure."""
    det = NcclBootstrapDetector()
    done = dict.fromkeys(range(32), "complete")
    assert det.observe(view(100, "a1", done, 32, init_s=dict.fromkeys(range(32), 5.0), job="D")) == []
    (f,) = det.observe(view(300, "a2", done, 32, init_s=dict.fromkeys(range(32), 25.0), job="D", pid0=9000))
    assert (f.kind, f.status, f.evidence["rule"]) == (
        "nccl_init_slow",
        "firing",
        "previous attempt on the same hosts",
    )
    assert (
        f.evidence["previous_init_s"] == 5.0 and "previous attempt on the same hosts took 5.00 s" in f.summary
    )
    # Twice as long is no finding (slow_factor 2 is the line: not past it).
    det2 = NcclBootstrapDetector()
    det2.observe(view(100, "a1", done, 32, init_s=dict.fromkeys(range(32), 5.0), job="D"))
    assert (
        det2.observe(view(300, "a2", done, 32, init_s=dict.fromkeys(range(32), 9.0), job="D", pid0=9000))
        == []
    )


def test_a_bigger_job_is_judged_by_a_cost_model_not_by_smaller_jobs_times() -> None:
    """History of 16- to 128-rank inits growing with size; a 1,024-rank job's first init of 14 s
    is what the fitted cost predicts (a smaller job's 1-2 s is no measure); one of 80 s is slow."""
    det = NcclBootstrapDetector()
    t = 0.0
    for i, n in enumerate([16, 32, 64, 128, 16, 32, 64, 128]):
        t += 100
        took = 0.1 * n**0.7 * (1.0 + 0.03 * i)
        assert det.observe(view(t, f"h{i}", dict.fromkeys(range(n), "complete"), n,
                                init_s=dict.fromkeys(range(n), took), job=f"j{i}")) == []  # fmt: skip
    big = 1024
    done = dict.fromkeys(range(big), "complete")
    expected = 0.1 * big**0.7
    assert (
        det.observe(view(t + 100, "b1", done, big, init_s=dict.fromkeys(range(big), expected), job="B")) == []
    )
    (f,) = det.observe(
        view(t + 200, "b2", done, big, 16, init_s=dict.fromkeys(range(big), 80.0), job="C", pid0=50000)
    )
    assert f.evidence["rule"] == "fleet cost model across sizes"
    assert 0.6 < f.evidence["cost_exponent"] < 0.8


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


def test_a_slow_init_names_its_hosts() -> None:
    """A slow init is one per job, not a host's fault; its evidence lists the hosts it ran on."""
    det = NcclBootstrapDetector()
    done = dict.fromkeys(range(16), "complete")
    det.observe(view(100, "a1", done, 16, init_s=dict.fromkeys(range(16), 5.0), job="D"))
    (f,) = det.observe(view(300, "a2", done, 16, init_s=dict.fromkeys(range(16), 25.0), job="D", pid0=9000))
    assert f.node is None and f.evidence["hosts"] == ["gpu-0000", "gpu-0001"]
