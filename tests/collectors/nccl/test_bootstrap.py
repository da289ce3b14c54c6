"""NCCL_DEBUG init lines -> each rank's init stage and timings, and the ``nccl_init`` views."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from graywire.collectors.nccl.bootstrap import InitViews
from graywire.collectors.nccl.debug_log import NcclTopology
from graywire.collectors.nccl.tail import NcclFileCollector
from graywire.collectors.schemas import NCCL_INIT

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
T0 = datetime(2026, 1, 5, tzinfo=UTC)


def _lines() -> list[str]:
    return (FIXTURES / "init_two_comms.log").read_text().splitlines()


def test_stages_times_and_timings_per_rank() -> None:
    topo = NcclTopology()
    lines = _lines()
    topo.feed(lines[:5], T0)
    topo.feed(lines[5:], T0 + timedelta(seconds=10))
    by_rank = {r.rank: r for r in topo.ranks}
    assert {r: i.stage for r, i in by_rank.items()} == {0: 4, 1: 2, 2: 2, 3: 1}
    assert {i.communicator for i in by_rank.values()} == {"0x9a3f00c1"}
    assert all(i.started_at == T0 for i in by_rank.values())
    assert by_rank[0].completed_at == T0 + timedelta(seconds=10) and by_rank[1].completed_at is None
    assert by_rank[0].timings["total"] == 1.37 and by_rank[0].timings["connections"] == 0.36
    assert by_rank[3].timings == {"bootstrap": 0.01095}  # Bootstrap timings only, until COMPLETE
    assert topo.last_line_at[("gpu-0002", 6202)] == T0 + timedelta(seconds=10)
    assert topo.malformed == 0


def test_real_init_timings_line_of_the_user_guide(real_fixtures: Path) -> None:
    text = (real_fixtures / "nccl" / "nccl_userguide_logging_examples.txt").read_text()
    real = [ln for ln in text.splitlines() if "node-01:1897505:1897517" in ln]
    assert len(real) == 2  # its Bootstrap timings and Init timings lines
    start = (
        "node-01:1897505:1897517 [0] NCCL INFO [Rank 0] ncclCommInitRankConfig comm 0x5a rank 0 nranks 2 "
        "cudaDev 0 nvmlDev 0 busId 1b000 commId 0x77 - Init START"
    )
    topo = NcclTopology()
    topo.feed([start, *real], T0)
    (info,) = topo.ranks
    assert info.stage == 1  # bootstrap done; the lines in between were not captured
    assert info.timings["total"] == 0.37 and info.timings["kernels"] == 0.28
    assert topo.malformed == 0


def test_an_init_timings_line_of_another_rank_is_counted_not_applied() -> None:
    topo = NcclTopology()
    lines = _lines()
    bad = lines[10].replace("rank 0 nranks 4 total", "rank 1 nranks 4 total")
    topo.feed([lines[1], bad], T0)
    (info,) = topo.ranks
    assert info.timings == {} and topo.malformed == 1


def test_views_list_changed_and_unfinished_communicators() -> None:
    topo = NcclTopology()
    views = InitViews()
    topo.feed(_lines(), T0)
    first = views.batch(topo, "job-7", T0)
    assert first is not None and first.schema.equals(NCCL_INIT)
    assert first.column("rank").to_pylist() == [0, 1, 2, 3]
    assert first.column("stage").cast("string").to_pylist() == [
        "complete",
        "topology",
        "topology",
        "bootstrap",
    ]
    assert first.column("init_seconds").to_pylist() == [1.37, None, None, None]
    # Nothing new, but ranks still initializing: the communicator is listed again (a stall
    # writes nothing and must still be timed).
    again = views.batch(topo, "job-7", T0 + timedelta(seconds=10))
    assert again is not None and again.num_rows == 4
    done = [ln.replace("rank 0 ", "rank {r} ") for ln in _lines()[9:11]]
    for r, (pid, tid, host, dev) in enumerate(
        [
            (5101, 5118, "gpu-0001", 0),
            (5102, 5119, "gpu-0001", 1),
            (6201, 6218, "gpu-0002", 0),
            (6202, 6219, "gpu-0002", 1),
        ]
    ):
        if r == 0:
            continue
        ptr = {1: "0x55d0b0", 2: "0x55e0a0", 3: "0x55e0b0"}[r]
        topo.feed(
            [
                ln.format(r=r)
                .replace("gpu-0001:5101:5118 [0]", f"{host}:{pid}:{tid} [{dev}]")
                .replace("comm 0x55d0a0", f"comm {ptr}")
                .replace("cudaDev 0 nvmlDev 0", f"cudaDev {dev} nvmlDev {dev}")
                for ln in done
            ],
            T0 + timedelta(seconds=20),
        )
    last = views.batch(topo, "job-7", T0 + timedelta(seconds=20))
    assert last is not None and set(last.column("stage").cast("string").to_pylist()) == {"complete"}
    assert views.batch(topo, "job-7", T0 + timedelta(seconds=30)) is None  # complete and unchanged


def test_the_file_collector_stamps_lines_with_its_clock(tmp_path: Path) -> None:
    job = tmp_path / "job-7"
    job.mkdir()
    (job / "nccl.gpu-0001.5101").write_text("\n".join(_lines()[:5]) + "\n")
    now = [T0]
    coll = NcclFileCollector(tmp_path, pattern="*/*-pid*.log", debug_pattern="*/nccl.*", clock=lambda: now[0])
    assert coll.collect() is None
    view = coll.collect_init()
    assert view is not None and view.column("job").cast("string").to_pylist() == ["job-7"] * 4
    assert view.column("started_at").to_pylist() == [T0] * 4
    assert view.column("time").to_pylist() == [T0] * 4
