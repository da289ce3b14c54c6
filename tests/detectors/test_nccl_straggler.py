"""Compute stragglers: the late rank found by its short kernels, through the Inspector's format too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.nccl.tail import NcclFileCollector
from graywire.collectors.schemas import NCCL_TIMING, TS, make_batch
from graywire.detectors.findings import Finding
from graywire.detectors.nccl_channel import NcclChannelOutlier
from graywire.detectors.nccl_step import NcclStepTime
from graywire.detectors.nccl_straggler import NcclStraggler, NcclStragglerConfig
from graywire.fabricsim.nccl_writer import InspectorWriter
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

START = 60.0


def rel(f: Finding) -> float:
    return (f.time - EPOCH).total_seconds()


@cache
def simulate(faults: str, seed: int = 0, duration_s: float = 400.0, hosts: int = 16) -> tuple:
    """(faults, findings of the straggler, channel and step detectors) of one run."""
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=hosts), duration_s=duration_s, seed=seed, faults=faults)
    )
    dets = [NcclStraggler(), NcclChannelOutlier(sim.fabric), NcclStepTime()]
    found: list[Finding] = []
    for st in sim.run():
        if st.nccl_timing is not None:
            for d in dets:
                found += d.observe(st.nccl_timing)
    return tuple(sim.faults), tuple(found)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("late", [0.05, 0.1, 0.2])
def test_a_late_rank_is_blamed_on_its_host_within_30_s(late: float, seed: int) -> None:
    faults, found = simulate(f"straggler@{START:g}s+200s={late}:gpu-0006/mlx5_2", seed)
    (fault,) = faults
    firing = [f for f in found if f.status == "firing"]
    assert [(f.kind, f.node) for f in firing] == [("nccl_straggler", "gpu-0006")]
    f = firing[0]
    assert START <= rel(f) <= START + 30
    ev = f.evidence
    assert (ev["rank"], ev["device"], ev["host"]) == (fault.rank, 2, "gpu-0006") and fault.rank == 6 * 8 + 2
    assert ev["side"] == "host" and f.port is None  # compute-side: no NIC, no link
    # Its kernels are short by about the lateness (late / (1 + late) of its peers' time).
    assert ev["windowed_deficit"] == pytest.approx(late / (1 + late), rel=0.35)
    assert ev["last_to_arrive_share"] == 1.0
    assert ev["start_skew_seconds"] == pytest.approx(ev["late_seconds"], rel=0.35)
    assert ev["clocks"].startswith("start skew agrees")
    cleared = [x for x in found if x.status == "cleared"]
    assert [x.entity for x in cleared] == [f.entity] and START + 200 <= rel(cleared[0]) <= START + 240


@pytest.mark.parametrize("seed", [0, 1])
def test_a_job_wide_slowdown_and_benign_events_blame_no_rank(seed: int) -> None:
    _, found = simulate("job_slowdown@60s+300s=0.3,slow_step@200s+10s,checkpoint_burst@100s+60s", seed)
    assert [f.kind for f in found if f.kind == "nccl_straggler"] == []


def test_a_straggler_is_not_a_job_slowdown_nor_a_slow_channel() -> None:
    """Every other rank waits 20% longer, but the collective itself is no slower."""
    _, found = simulate("straggler@60s+300s=0.2:gpu-0003/mlx5_0", 0, 500.0)
    assert {f.kind for f in found} == {"nccl_straggler"}


def test_slower_ranks_are_the_channel_detectors_not_stragglers() -> None:
    _, found = simulate(
        "slow_nic@60s+200s=0.3:gpu-0004/mlx5_1,slow_channel@60s+200s=0.3:gpu-0009/mlx5_5:2", 1
    )
    assert {f.kind for f in found if f.status == "firing"} == {"nccl_channel_slow"}


@pytest.mark.parametrize("verbose", [True, False])
def test_found_through_the_inspector_files(tmp_path: Path, verbose: bool) -> None:
    """fabricsim -> Inspector JSON (verbose with kernel times, or the plain default record) ->
    the file collector -> the detector: the late rank is found either way; only the verbose
    records give start times."""
    sim = FabricSim(
        SimConfig(
            topology=TopologySpec(hosts=8), duration_s=200.0, faults="straggler@50s+300s=0.1:gpu-0002/mlx5_5"
        )
    )
    writer = InspectorWriter(tmp_path, verbose=verbose)
    col = NcclFileCollector(tmp_path, pattern="*/*.log", gpus_per_host=8)
    det = NcclStraggler()
    found: list[Finding] = []
    for st in sim.run():
        if st.nccl_timing is None:
            continue
        writer.write(st.nccl_timing)
        batch = col.collect()
        assert batch is not None
        assert batch.column("start_time").null_count == (0 if verbose else batch.num_rows)
        found += det.observe(batch)
    (f,) = [x for x in found if x.status == "firing"]
    assert (f.node, f.evidence["rank"], f.evidence["device"]) == ("gpu-0002", 2 * 8 + 5, 5)
    assert 50 <= rel(f) <= 80
    if verbose:
        assert f.evidence["clocks"].startswith("start skew agrees")
    else:
        assert f.evidence["start_skew_seconds"] is None
        assert f.evidence["clocks"].startswith("no start times")


# -- hand-made polls ---------------------------------------------------------------------------------
def poll(k: int, durations: list[float], seq: int | None = None, comm: str = "c1") -> pa.RecordBatch:
    """One whole-collective row per rank of one instance of one AllReduce."""
    n = len(durations)
    t = EPOCH + timedelta(seconds=10 * k)
    return make_batch(
        NCCL_TIMING,
        n,
        {
            "time": pa.array([t] * n, TS),
            "job": pa.array(["j"] * n).dictionary_encode(),
            "communicator": pa.array([comm] * n).dictionary_encode(),
            "rank": pa.array(range(n), pa.int32()),
            "nranks": pa.array([n] * n, pa.int32()),
            "host": pa.array([f"h{r // 8}" for r in range(n)]).dictionary_encode(),
            "device": pa.array([r % 8 for r in range(n)], pa.int16()),
            "collective": pa.array(["AllReduce"] * n).dictionary_encode(),
            "seq": pa.array([k if seq is None else seq] * n, pa.int64()),
            "message_bytes": pa.array([2**28] * n, pa.int64()),
            "duration_seconds": pa.array(durations, pa.float64()),
        },
    )


def durations(n: int, late_rank: int | None, rng: np.random.Generator, late: float = 0.1) -> list[float]:
    d = 0.02 * np.exp(rng.normal(0, 0.003, n))
    if late_rank is not None:
        d = d + 0.02 * late  # everyone waits for the late rank...
        d[late_rank] -= 0.02 * late  # ...which waits for no one
    return d.tolist()


def test_needs_a_full_window_and_enough_ranks() -> None:
    rng = np.random.default_rng(0)
    det = NcclStraggler()
    # Three ranks per instance say nothing, however late one of them is.
    assert [det.observe(poll(k, durations(3, 1, rng, 0.5))) for k in range(6)] == [[]] * 6
    det = NcclStraggler()
    out = [det.observe(poll(k, durations(16, 9, rng))) for k in range(3)]
    assert [len(o) for o in out] == [0, 0, 1]  # opens once the 3-poll window is full
    assert out[2][0].entity == "c1|rank 9" and out[2][0].node == "h1"


def test_rows_without_sequence_or_duration_say_nothing() -> None:
    rng = np.random.default_rng(1)
    det = NcclStraggler()
    for k in range(5):
        b = poll(k, durations(16, 4, rng))
        b = b.set_column(b.schema.get_field_index("seq"), "seq", pa.nulls(16, pa.int64()))
        assert det.observe(b) == []
    bad = poll(9, [float("nan")] * 16)
    assert det.observe(bad) == []


def test_a_gap_in_reports_neither_opens_nor_closes() -> None:
    """Polls with no rows for a communicator keep its state: a collector outage is no news."""
    rng = np.random.default_rng(2)
    det = NcclStraggler()
    out: list[Finding] = []
    for k in range(4):
        out += det.observe(poll(k, durations(16, 7, rng)))
    assert [f.status for f in out] == ["firing"]
    for k in range(4, 10):
        assert det.observe(poll(k, durations(16, None, rng), comm="other")) == []
    out = []
    for k in range(10, 14):
        out += det.observe(poll(k, durations(16, None, rng)))
    assert [f.status for f in out] == ["cleared"]


def test_an_ended_job_closes_its_straggler() -> None:
    rng = np.random.default_rng(3)
    det = NcclStraggler()
    out: list[Finding] = []
    for k in range(4):
        out += det.observe(poll(k, durations(16, 3, rng)))
    for k in range(4, 40):
        out += det.observe(poll(k, durations(16, None, rng), comm="next-job"))
    assert [f.status for f in out] == ["firing", "cleared"]
    assert "stopped reporting" in out[1].summary


def test_channel_rows_are_judged_per_rank_and_whole_rows_win() -> None:
    """A rank's channel rows collapse to their median; its whole-collective row, when present,
    is what counts (the Inspector writes both for a verbose record)."""
    rng = np.random.default_rng(4)
    det = NcclStraggler()
    found: list[Finding] = []
    for k in range(4):
        whole = poll(k, durations(16, 5, rng))
        # Channel rows that say the opposite (rank 5 long) are ignored: rank 5 has a whole row.
        ch = poll(k, [0.02 * (1.5 if r == 5 else 1.0) for r in range(16)])
        ch = ch.set_column(ch.schema.get_field_index("channel"), "channel", pa.array([0] * 16, pa.int16()))
        found += det.observe(pa.Table.from_batches([whole, ch]).combine_chunks().to_batches()[0])
    assert [(f.status, f.evidence["rank"]) for f in found] == [("firing", 5)]


def test_inspector_start_time_is_the_collectives_start(real_fixtures: Path) -> None:
    """NVIDIA's verbose example: the whole row starts at coll_start_ts, its channel row at the
    kernel's start (gettimeofday µs)."""
    from graywire.collectors.nccl.inspector import parse_inspector_text

    text = (real_fixtures / "nccl" / "nccl_inspector_readme_coll_perf_verbose_example.json").read_text()
    rows, parser = parse_inspector_text(text, "j")
    b = rows.to_batch()
    assert parser.records == 1
    starts = dict(zip(b.column("channel").to_pylist(), b.column("start_time").to_pylist(), strict=True))
    assert starts[None] == datetime.fromtimestamp(1752867229235059 / 1e6, UTC)
    assert starts[0] == datetime.fromtimestamp(1752867229235181 / 1e6, UTC)
    plain = (real_fixtures / "nccl" / "nccl_inspector_readme_coll_perf_example.json").read_text()
    b = parse_inspector_text(plain, "j")[0].to_batch()
    assert b.column("start_time").to_pylist() == [None]


# -- bounded state ------------------------------------------------------------------------------------
def state_rows(det: NcclStraggler) -> set[int]:
    """Rows of every per-cell array: they must agree with each other."""
    return {det.cells.n, det.windows.hist.shape[0], det.windows.count.size, det.last_seen.size,
            det.hyst.is_open.size, det.hyst.bad_run.size}  # fmt: skip


def test_a_flood_of_new_communicators_leaves_the_state_bounded() -> None:
    """A pusher naming a new communicator in every batch, 360 of them: a batch is a poll, a
    communicator is stale ``expire_polls`` polls after its last and gone at the next compaction
    (every ``expire_polls`` polls), so at most ``2 * expire_polls`` keep rows."""
    rng = np.random.default_rng(10)
    det = NcclStraggler(NcclStragglerConfig(expire_polls=5))
    sizes = []
    for k in range(120):
        for j in range(3):
            det.observe(poll(k, durations(16, None, rng), comm=f"flood-{k}-{j}"))
            sizes.append(len(det.groups.keys))
            assert state_rows(det) == {16 * sizes[-1]}
    assert det.polls == 360 and max(sizes) == 2 * 5
    assert det.over_capacity == 0


def test_a_quiet_communicator_is_forgotten_and_a_live_straggler_survives_renumbering() -> None:
    rng = np.random.default_rng(11)
    det = NcclStraggler(NcclStragglerConfig(expire_polls=4))
    found: list[Finding] = []
    for k in range(3):  # "early" takes the first ids, then goes quiet
        det.observe(poll(k, durations(16, None, rng), comm="early"))
    for k in range(3, 20):
        found += det.observe(poll(k, durations(16, 5, rng), comm="live"))
    assert [g.split("|")[0] for g in det.groups.keys] == ["live"]
    assert state_rows(det) == {16}
    assert [(f.status, f.entity) for f in found] == [("firing", "live|rank 5")]
    for k in range(20, 24):  # the open cell was renumbered by the compaction: it still closes
        found += det.observe(poll(k, durations(16, None, rng), comm="live"))
    assert [(f.status, f.entity) for f in found][1:] == [("cleared", "live|rank 5")]
    assert "stopped reporting" not in found[1].summary
    # A forgotten communicator that comes back starts afresh: a full window before judging.
    assert det.observe(poll(24, durations(16, 3, rng), comm="early")) == []
    assert det.windows.count[det.cells.n - 16 :].tolist() == [1] * 16


def test_the_caps_count_rows_left_out_and_take_whole_groups() -> None:
    rng = np.random.default_rng(12)
    det = NcclStraggler(NcclStragglerConfig(expire_polls=4, max_cells=40))
    both = (
        pa.Table.from_batches([poll(0, durations(16, None, rng), comm=c) for c in ("a", "b", "c")])
        .combine_chunks()
        .to_batches()[0]
    )
    det.observe(both)
    # Two groups of 16 fit; the third would fit only in part, so none of it is taken.
    assert det.cells.n == 32 and det.over_capacity == 16
    assert [g.split("|")[0] for g in det.groups.keys] == ["a", "b", "c"]  # "c" holds no cells
    found: list[Finding] = []
    for k in range(1, 10):  # "a" and "b" end; "c" has a straggler and gets rows once they go
        found += det.observe(poll(k, durations(16, 9, rng), comm="c"))
    assert det.over_capacity == 16 * 5  # polls 0 to 4: "a" and "b" are stale after poll 4
    assert [g.split("|")[0] for g in det.groups.keys] == ["c"] and det.cells.n == 16
    assert [(f.status, f.entity) for f in found] == [("firing", "c|rank 9")]
    det = NcclStraggler(NcclStragglerConfig(max_groups=1))
    det.observe(both)
    assert len(det.groups.keys) == 1 and det.over_capacity == 32


def test_an_open_straggler_that_stops_reporting_clears_once_then_is_forgotten() -> None:
    """Cleared, not kept open: the detector's rule is that an ended job leaves nothing open,
    and a poll without a cell's rows is no news only up to ``expire_polls`` (a gap shorter than
    that neither opens nor closes; see the gap test above). After clearing, the cell's rows go
    with the next compaction, so a pusher's abandoned communicators cost nothing."""
    rng = np.random.default_rng(13)
    det = NcclStraggler(NcclStragglerConfig(expire_polls=4))
    found: list[Finding] = []
    for k in range(4):
        found += det.observe(poll(k, durations(16, 2, rng), comm="ended"))
    for k in range(4, 20):
        found += det.observe(poll(k, durations(16, None, rng), comm="next"))
    assert [(f.status, f.entity) for f in found] == [("firing", "ended|rank 2"), ("cleared", "ended|rank 2")]
    assert found[1].summary == "rank 2 of ended stopped reporting for 4 polls (job ended?): closed"
    assert [g.split("|")[0] for g in det.groups.keys] == ["next"] and det.rank_open == {}
