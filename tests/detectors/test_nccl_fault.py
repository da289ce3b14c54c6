"""The fault-path detector on RAS views, Flight Recorder and watchdog rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from graywire.collectors.nccl.ras import RankStateRows
from graywire.detectors.nccl_fault import NcclFaultDetector
from graywire.fabricsim.topology import TopologySpec, build_fabric

T0 = datetime(2026, 1, 5, tzinfo=UTC)
FABRIC = build_fabric(TopologySpec(hosts=4))  # GPU g's NIC is on rail g


def view(t: float, ranks: list[tuple[int, str, int, str, int | None]], source: str = "ras") -> object:
    """A RAS view of job j1: (rank, host, gpu, state, collectives launched) per rank."""
    rows = RankStateRows()
    for rank, host, gpu, state, seq in ranks:
        rows.add(
            job="j1",
            communicator="0xab",
            rank=rank,
            nranks=len(ranks),
            host=host,
            device=gpu,
            pid=100 + rank,
            state=state,
            seq=seq,
            source=source,
        )
    return rows.to_batch(T0 + timedelta(seconds=t))


def healthy(seq: int) -> list[tuple[int, str, int, str, int | None]]:
    return [(r, f"gpu-000{r // 2}", r % 2, "running", seq) for r in range(4)]


def firing(found: list) -> list[tuple[str, str | None, str | None]]:
    return [(f.kind, f.node, f.port) for f in found if f.status == "firing"]


def test_unresponsive_needs_two_views_then_dead_supersedes_it() -> None:
    det = NcclFaultDetector(FABRIC)
    bad = healthy(10)
    bad[3] = (3, "gpu-0001", 1, "unresponsive", None)
    assert det.observe(view(0, healthy(9))) == [] and det.observe(view(10, bad)) == []
    found = det.observe(view(20, bad))
    assert firing(found) == [("nccl_rank_unresponsive", "gpu-0001", "gpu-0001/mlx5_1")]
    assert "rank 3 of job j1 on gpu-0001 GPU 1" in found[0].summary
    bad[3] = (3, "gpu-0001", 1, "dead", None)
    found = det.observe(view(80, bad))
    assert [(f.kind, f.status) for f in found] == [
        ("nccl_rank_unresponsive", "cleared"),
        ("nccl_rank_dead", "firing"),
    ]
    assert found[1].severity == "critical" and found[1].evidence["rank"] == 3
    assert det.observe(view(90, bad)) == []  # open once
    back = det.observe(view(400, healthy(0)))  # the job restarted on that GPU
    assert [(f.kind, f.status) for f in back] == [("nccl_rank_dead", "cleared")]


def test_a_job_ending_normally_raises_nothing() -> None:
    det = NcclFaultDetector(FABRIC)
    det.observe(view(0, healthy(50)))
    ending = [(r, h, g, "finalize" if r % 2 else "nocomm", None) for r, h, g, _, _ in healthy(50)]
    for t in (10, 20, 30):
        assert det.observe(view(t, ending)) == []


def test_counts_that_differ_but_move_are_racing_ranks_and_counts_that_stay_are_stuck() -> None:
    det = NcclFaultDetector(FABRIC)
    racing = healthy(0)
    for k in range(6):  # rank 0 one behind, but everyone advances
        racing = [(r, h, g, s, 10 * k + (0 if r == 0 else 1)) for r, h, g, s, _ in racing]
        assert det.observe(view(20 * k, racing)) == []
    found = []
    for k in range(6, 12):  # now nobody moves
        found += det.observe(view(20 * k, racing))
    (f,) = found
    assert f.kind == "nccl_collective_stuck" and f.node == "gpu-0000" and f.evidence["behind"][0]["rank"] == 0
    assert (f.time - T0).total_seconds() >= 20 * 5 + 60  # unchanged since the view at 100 s
    moving = [(r, h, g, s, 100) for r, h, g, s, _ in racing]
    assert [x.status for x in det.observe(view(300, moving))] == ["cleared"]


def test_a_watchdog_timeout_names_the_rank_that_never_joined() -> None:
    det = NcclFaultDetector(FABRIC)
    rows = RankStateRows()
    for rank in (0, 1, 2):
        rows.add(
            job="j1",
            communicator="pg:0",
            rank=rank,
            host=f"gpu-000{rank}",
            state="timeout",
            seq=7,
            collective="allreduce",
            source="flight_recorder",
        )
    rows.add(
        job="j1",
        communicator="pg:0",
        rank=3,
        host="gpu-0003",
        state="running",
        seq=6,
        source="flight_recorder",
    )
    (f,) = det.observe(rows.to_batch(T0))
    assert f.kind == "nccl_collective_stuck" and f.node == "gpu-0003" and f.evidence["seq"] == 7
    assert "ranks that never joined it: rank 3" in f.summary


def test_a_rank_in_two_communicators_is_one_view_of_it_not_two() -> None:
    """RAS lists a process once per communicator it belongs to: one report is still one view."""
    det = NcclFaultDetector(FABRIC)
    rows = RankStateRows()
    for comm in ("0xab", "0xcd"):
        for rank in range(4):
            state = "unresponsive" if rank == 3 else "running"
            rows.add(job="j1", communicator=comm, rank=rank, nranks=4, host=f"gpu-000{rank // 2}",
                     device=rank % 2, pid=100 + rank, state=state, seq=None, source="ras")  # fmt: skip
    assert det.observe(view(0, healthy(9))) == []
    assert det.observe(rows.to_batch(T0 + timedelta(seconds=10))) == []  # one view, not two
    found = det.observe(rows.to_batch(T0 + timedelta(seconds=20)))
    assert firing(found) == [("nccl_rank_unresponsive", "gpu-0001", "gpu-0001/mlx5_1")]


def test_a_rank_without_a_fabric_model_names_no_nic() -> None:
    """The NIC comes from the inventory's rails, never from the GPU's number."""
    det = NcclFaultDetector()
    bad = healthy(10)
    bad[3] = (3, "gpu-0001", 1, "dead", None)
    assert firing(det.observe(view(0, bad))) == [("nccl_rank_dead", "gpu-0001", None)]


def test_a_rank_reported_without_its_host_clears_when_it_runs_again() -> None:
    """A Flight Recorder or RAS row may lack host or GPU: it is keyed by communicator and rank,
    and a later row of that rank running clears it by the same key."""

    def hostless(state: str) -> object:
        rows = RankStateRows()
        rows.add(job="j1", communicator="0xab", rank=5, nranks=8, host=None, device=None, pid=None,
                 state=state, seq=None, source="ras")  # fmt: skip
        return rows.to_batch(T0 + timedelta(seconds=10 if state == "dead" else 400))

    det = NcclFaultDetector(FABRIC)
    assert [f.status for f in det.observe(hostless("dead"))] == ["firing"]
    assert [(f.kind, f.status) for f in det.observe(hostless("running"))] == [("nccl_rank_dead", "cleared")]
