"""NCCL_DEBUG wiring -> nccl_transport rows, and the file collector sending them when they change."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from graywire.collectors.nccl import NcclFileCollector
from graywire.collectors.nccl.debug_log import NcclTopology
from graywire.collectors.nccl.tail import TRANSPORT_REFRESH_SCRAPES
from graywire.collectors.nccl.transport import transport_batch
from graywire.collectors.schemas import NCCL_TRANSPORT, record_kind
from tests.collectors.nccl.test_debug_log import MULTINODE
from tests.detectors.test_nccl_transport import ring_log

T = datetime(2026, 3, 1, tzinfo=UTC)


def test_rows_per_rank_from_the_multinode_log() -> None:
    topo = NcclTopology()
    topo.feed(MULTINODE.splitlines())
    batch = transport_batch(topo, "job-7", T)
    assert batch is not None and batch.schema.equals(NCCL_TRANSPORT, check_metadata=True)
    rows = {(r["host"], r["rank"]): r for r in batch.to_pylist()}
    assert set(rows) == {("node-a", 5), ("node-b", 13), ("node-b", 14)}
    a = rows[("node-a", 5)]
    assert (a["communicator"], a["job"], a["nranks"], a["device"], a["network"]) == (
        "0x9a3cc1d0",
        "job-7",
        16,
        5,
        "IB",
    )
    # Three NET connections (all GDRDMA) over two NICs; one P2P hop; channels 3 and 7.
    assert (a["net_transport"], a["net_connections"], a["gdrdma_connections"], a["channels"]) == (
        "NET/IB",
        3,
        3,
        2,
    )
    assert a["port"] == "node-a/mlx5_3"
    b = rows[("node-b", 13)]
    assert (b["net_transport"], b["net_connections"], b["gdrdma_connections"]) == ("NET/IB", 1, 0)
    s = rows[("node-b", 14)]
    assert (s["net_transport"], s["network"], s["port"]) == ("NET/Socket", "Socket", "node-b/eth0")


def test_nothing_described_is_no_batch() -> None:
    topo = NcclTopology()
    topo.feed(["training step 1 loss 2.0"])
    assert transport_batch(topo, "j", T) is None


def test_destroyed_communicators_are_left_out() -> None:
    lines = ring_log(hosts=2)
    lines += [ln.replace("Init COMPLETE", "Destroy COMPLETE") for ln in lines if "Init COMPLETE" in ln]
    topo = NcclTopology()
    topo.feed(lines)
    assert transport_batch(topo, "j", T) is None


def test_collector_sends_the_wiring_when_it_changes_and_as_a_refresh(tmp_path: Path) -> None:
    for job in ("job-1", "job-2"):
        (tmp_path / job).mkdir()
    lines = ring_log(hosts=4, socket=(2,))
    for r in range(4):  # one NCCL_DEBUG_FILE per process, the ring split over two job directories
        own = [ln for ln in lines if ln.startswith(f"node-{r}:")]
        (tmp_path / ("job-1" if r < 2 else "job-2") / f"nccl.node-{r}.{100 + r}").write_text(
            "\n".join(own) + "\n"
        )
    col = NcclFileCollector(tmp_path, "*/*-pid*.log", debug_pattern="*/nccl.*")

    def wiring() -> list:
        res = asyncio.run(col.scrape())
        assert res.ok, res.error
        return [b for b in res.batches if record_kind(b.schema) == "nccl_transport"]

    assert wiring() == []  # its connection lines just arrived: judged once they stop arriving
    (first,) = wiring()
    rows = sorted((r["host"], r["job"], r["net_transport"]) for r in first.to_pylist())
    assert rows == [
        ("node-0", "job-1", "NET/IB"),
        ("node-1", "job-1", "NET/IB"),
        ("node-2", "job-2", "NET/Socket"),
        ("node-3", "job-2", "NET/IB"),
    ]
    assert wiring() == []  # unchanged: not sent again ...
    for _ in range(TRANSPORT_REFRESH_SCRAPES - 2):
        assert wiring() == []
    assert len(wiring()) == 1  # ... until the refresh is due
    with (tmp_path / "job-2" / "nccl.node-3.103").open("a") as fh:
        fh.write("node-3:103:203 [0] NCCL INFO Channel 04/0 : 3[0] -> 0[0] [send] via NET/IB/0/GDRDMA\n")
    assert wiring() == []  # a new connection line: that communicator waits a scrape ...
    (changed,) = wiring()  # ... and is sent once it stands still
    assert {r["host"]: r["channels"] for r in changed.to_pylist()}["node-3"] == 5


def test_collector_without_debug_files_sends_no_wiring(tmp_path: Path) -> None:
    col = NcclFileCollector(tmp_path, "*.log")
    assert col.collect_transport() is None


# -- nccl_layout: what each host's topology probe found ---------------------------------------
LAYOUT_LOG = Path(__file__).resolve().parents[2] / "fixtures" / "nccl" / "topology_mismatch.log"


def test_layout_rows_per_host_from_the_probe_lines() -> None:
    from graywire.collectors.nccl.transport import layout_batch
    from graywire.collectors.schemas import NCCL_LAYOUT

    topo = NcclTopology()
    topo.feed(LAYOUT_LOG.read_text().splitlines(), now=T)
    assert topo.malformed == 1  # the Pattern line with a path type NCCL does not have
    batch = layout_batch(topo, "job-3", T)
    assert batch is not None and batch.schema.equals(NCCL_LAYOUT, check_metadata=True)
    rows = {r["host"]: r for r in batch.to_pylist()}
    good, bad = rows["gpu-0001"], rows["gpu-0002"]
    assert (good["intra_p2p"], good["intra_shm"], bad["intra_p2p"], bad["intra_shm"]) == (2, 0, 0, 2)
    # Each host's own ring graph (the first Pattern line), not the agreed channel count.
    assert (good["graph_channels"], good["graph_type_intra"], good["graph_type_inter"]) == (4, "NVL", "PIX")
    assert (bad["graph_channels"], bad["graph_type_intra"], bad["graph_type_inter"]) == (2, "SYS", "SYS")
    assert (good["graph_cross_nic"], bad["graph_cross_nic"]) == (0, 1)
    assert good["coll_channels"] == bad["coll_channels"] == 2
    assert (good["gdrdma_connections"], bad["gdrdma_connections"]) == (2, 0)
    assert (good["pxn_connections"], bad["pxn_connections"]) == (0, 2)
    assert (good["nvls"], bad["nvls"]) == (True, False)
    assert (good["collnet"], bad["collnet"]) == ("disabled", None)
    assert (good["local_ranks"], good["net_devices"], good["nnodes"], good["started_at"]) == (2, 2, 2, T)


def test_layout_unknown_without_probe_lines() -> None:
    """The user guide's examples carry no Pattern or channel-count lines: those fields stay null."""
    from graywire.collectors.nccl.transport import layout_batch

    topo = NcclTopology()
    topo.feed(MULTINODE.splitlines())
    batch = layout_batch(topo, "job-7", T)
    assert batch is not None
    for r in batch.to_pylist():
        assert r["graph_channels"] is None and r["nvls"] is None and r["coll_channels"] is None


def test_real_logs_parse_with_the_probe_lines(real_fixtures: Path) -> None:
    from graywire.collectors.nccl.transport import layout_batch

    for name in ("nccl_userguide_logging_examples.txt", "superbench_nccl_tests_allreduce.log"):
        topo = NcclTopology()
        topo.feed((real_fixtures / "nccl" / name).read_text().splitlines())
        assert topo.malformed == 0, name
        batch = layout_batch(topo, "j", T)
        live = {(r.communicator, r.host) for r in topo.ranks if r.state != "destroyed"}
        assert (batch.num_rows if batch is not None else 0) == len(live), name


def test_a_communicator_is_judged_only_once_its_init_completed_and_its_lines_stopped() -> None:
    """A 256-rank init writes its channel lines for minutes: a view mid-stream would show ranks
    with fewer channels than their peers only because their lines were not all in yet."""
    from graywire.collectors.nccl.transport import settled_communicators

    comm, n = "0x00000000c0ffee01", 256
    topo = NcclTopology()

    def rank_lines(r: int, what: str) -> list[str]:
        host = f"gpu-{r // 8:03d}"
        head = f"{host}:{1000 + r}:{1000 + r} [{r % 8}] NCCL INFO"
        return [f"{head} ncclCommInitRankConfig comm 0x{r:x}0 rank {r} nranks {n} cudaDev {r % 8} "
                f"nvmlDev {r % 8} busId {r % 8}0000 commId {comm} - {what}"]  # fmt: skip

    def channel_lines(r: int, channels: range) -> list[str]:
        head = f"gpu-{r // 8:03d}:{1000 + r}:{1000 + r} [{r % 8}] NCCL INFO"
        peer = f"{(r + 1) % n}[{(r + 1) % 8}]"
        return [
            f"{head} Channel {c:02d}/0 : {r}[{r % 8}] -> {peer} [send] via NET/IB/{r % 8}/GDRDMA"
            for c in channels
        ]

    last: dict[str, int] = {}
    topo.feed([ln for r in range(n) for ln in rank_lines(r, "Init START")])
    topo.feed([ln for r in range(n) for ln in channel_lines(r, range(8 if r < 100 else 16))])
    assert settled_communicators(topo, last) == (set(), {comm})  # in init, lines arriving
    topo.feed([ln for r in range(100) for ln in channel_lines(r, range(8, 16))])
    assert settled_communicators(topo, last) == (set(), {comm})
    topo.feed([ln for r in range(n) for ln in rank_lines(r, "Init COMPLETE")])
    assert settled_communicators(topo, last) == ({comm}, set())  # complete, and no new line
    wiring = transport_batch(topo, "job", only={comm})
    assert wiring is not None and set(wiring.column("channels").to_pylist()) == {16}
