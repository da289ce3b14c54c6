"""graywire's NCCL parsers over every real capture of tests/fixtures/corpus/{nccl_debug,nccl_tests,
torch_watchdog} (each folder's SOURCES.md says where a file came from).

The expected values are read off the captures (counted in the text, or copied from it). Where a
parser misreads a capture, the test states what the capture says and is a strict xfail whose
reason names the misreading.
"""

# ruff: noqa: E501  (captured lines and reasons keep their real width)
from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pytest

from graywire.collectors.nccl.debug_log import NcclTopology
from graywire.collectors.nccl.flight_recorder import parse_watchdog_lines
from graywire.collectors.nccl.nccl_tests import NccltestsParser, parse_nccl_tests
from graywire.collectors.nccl.ras import RankStateRows
from graywire.collectors.nccl.tail import NcclFileCollector
from tests.collectors.corpus.conftest import captures, ids

T0 = datetime(2026, 1, 5, tzinfo=UTC)

# What a reader counts in a capture whatever a launcher put before the line: an NCCL line holds
# ``host:pid:tid [dev] NCCL INFO|WARN`` (WARN optionally behind ``file.cc:line``).
_ANY_NCCL = re.compile(r"(?:^|[\s>:\]])[A-Za-z0-9][\w.-]*:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?:INFO|WARN)\b")
_ANY_LINK = re.compile(
    r"\[(?P<dev>\d+)\] NCCL INFO Channel \d+(?:/\d+)? : \d+\[[0-9a-f]+\] -> \d+\[[0-9a-f]+\](?: \[(?:send|receive)\])? via "
)

MPIRUN_TAG = "mpirun's `[1,0]<stdout>:` tag before every line is not recognized as a launcher prefix"


def _params(paths: list[Path], table: dict, test: str) -> list:
    """One param per capture, a strict xfail where the capture's entry names a misreading for ``test``."""
    out = []
    for p in paths:
        reason = table[p.name].xfail.get(test) if p.name in table else None
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(p, marks=marks, id=p.name))
    return out


def _entry(table: dict, path: Path):
    if path.name not in table:
        pytest.fail(f"{path.name} has no expected values in {__name__}")
    return table[path.name]


# -- NCCL_DEBUG logs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Debug:
    comm_ids: frozenset[str]  # the commIds the Init lines carry
    ranks: tuple[tuple[str, int, int, int, str], ...]  # (host, rank, nranks, cudaDev, last state), sorted
    transports: dict[str, int]  # connection lines per transport
    warnings: int  # NCCL WARN lines
    init_totals: tuple[float, ...]  # the `Init timings` totals, sorted
    xfail: dict[str, str] = field(default_factory=dict)


def _ranks(host: str, nranks: int, state: str, *rank_dev: tuple[int, int]) -> tuple:
    return tuple((host, r, nranks, d, state) for r, d in rank_dev)


DEBUG: dict[str, Debug] = {
    "h200_nccl_2.28.9_init_split.log": Debug(
        frozenset({"0xe2ec79cb66a9d5ea"}),
        _ranks("vm", 1, "destroyed", (0, 0), (0, 0), (0, 0)),
        {},
        0,
        (0.02, 0.03, 0.48),
    ),
    "h200_nccl_2.28.9_stderr_with_torch.log": Debug(
        frozenset({"0x4e38039353e14170"}),
        _ranks("vm", 1, "destroyed", (0, 0), (0, 0), (0, 0)),
        {},
        0,
        (0.01, 0.02, 0.33),
    ),
    "training_on_eks_2.27.3_p4d_libfabric_gdrdma_commsplit_4nodes.log": Debug(
        frozenset({"0xb079519ed44b724"}),  # the split's Init lines carry no commId
        _ranks("llama-3-8b-node-0-0", 4, "complete", (0, 0), (0, 0)),
        {"NET/Libfabric": 24},
        0,
        (2.79, 8.31),
    ),
    "aws_do_eks_2.12.7_mpirun_prefix_efa_2nodes.log": Debug(
        frozenset(),  # NCCL 2.12 prints `comm 0x… rank 1 nranks 2 cudaDev 0 busId f5000 - Init COMPLETE`
        (
            ("test-nccl-efa-worker-0", 0, 2, 0, "destroyed"),
            ("test-nccl-efa-worker-1", 1, 2, 0, "destroyed"),
        ),
        {"NET/AWS Libfabric": 8},
        0,
        (),
    ),
    "nccl_tests_issue287_2.25.1_rtx5090_comminitall_shm_warn_cuda_failure.log": Debug(
        frozenset({"0x726fb0d348b9154b"}),
        _ranks("GENOA-06", 2, "complete", (0, 0), (1, 1)),
        {"SHM": 4},
        5,
        (0.29, 0.29),
    ),
    "nccl_tests_issue311_2.23.4_ibext_sharp_pxn_4nodes_collnet_fallback.log": Debug(
        frozenset({"0x70fba02a8d314739"}),
        (
            ("gpu34", 0, 8, 0, "destroyed"),
            ("gpu34", 1, 8, 1, "destroyed"),
            ("gpu36", 2, 8, 0, "destroyed"),
            ("gpu36", 3, 8, 1, "destroyed"),
            ("gpu40", 4, 8, 0, "destroyed"),
            ("gpu40", 5, 8, 1, "destroyed"),
            ("gpu41", 6, 8, 0, "destroyed"),
            ("gpu41", 7, 8, 1, "destroyed"),
        ),
        {"NET/IB": 58, "P2P": 24},  # the SHARP plugin's NET/IBext_v8 is IB,
        8,
        (0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 0.87, 0.87),
    ),
    "nccl_tests_issue331_2.22.3_two_threads_one_process_old_init_timings.log": Debug(
        frozenset({"0xf6bfaf5466e2b71f"}),
        _ranks("lrdn2296", 2, "destroyed", (0, 0), (1, 1)),
        {"P2P": 16},
        0,
        (0.06, 0.06),
    ),
}
DEBUG_CAPTURES = captures("nccl_debug")


def _topology(path: Path) -> NcclTopology:
    topo = NcclTopology()
    topo.feed(path.read_text().splitlines())
    return topo


def test_every_nccl_debug_capture_has_expected_values() -> None:
    assert set(ids(DEBUG_CAPTURES)) == set(DEBUG)


@pytest.mark.parametrize("path", _params(DEBUG_CAPTURES, DEBUG, "lines"))
def test_debug_every_nccl_line_is_read(path: Path) -> None:
    lines = path.read_text().splitlines()
    nccl = sum(1 for ln in lines if _ANY_NCCL.search(ln))
    topo = _topology(path)
    assert (topo.nccl_lines, topo.other_lines) == (nccl, len(lines) - nccl)


@pytest.mark.parametrize("path", _params(DEBUG_CAPTURES, DEBUG, "ranks"))
def test_debug_init_lines_give_ranks_and_comm_ids(path: Path) -> None:
    want = _entry(DEBUG, path)
    topo = _topology(path)
    rows = topo.ranks_table().to_pylist()
    got = sorted((r["host"], r["rank"], r["nranks"], r["device"], r["state"]) for r in rows)
    assert got == sorted(want.ranks)
    named = {r["communicator"] for r in rows if r["communicator"].startswith("0x")}
    assert {c for c in named if "/split" not in c} == want.comm_ids


@pytest.mark.parametrize("path", _params(DEBUG_CAPTURES, DEBUG, "timings"))
def test_debug_init_timings(path: Path) -> None:
    want = _entry(DEBUG, path)
    assert path.read_text().count("NCCL INFO Init timings") == len(want.init_totals)
    topo = _topology(path)
    totals = sorted(r.timings["total"] for r in topo.ranks if "total" in r.timings)
    assert (totals, topo.malformed) == (sorted(want.init_totals), 0)


@pytest.mark.parametrize("path", _params(DEBUG_CAPTURES, DEBUG, "links"))
def test_debug_connection_lines_give_links(path: Path) -> None:
    want = _entry(DEBUG, path)
    in_text = sum(1 for ln in path.read_text().splitlines() if _ANY_LINK.search(ln))
    assert in_text == sum(want.transports.values())
    topo = _topology(path)
    assert Counter(lk.transport for lk in topo.links) == Counter(want.transports)


@pytest.mark.parametrize("path", _params(DEBUG_CAPTURES, DEBUG, "warnings"))
def test_debug_warn_lines_are_kept(path: Path) -> None:
    want = _entry(DEBUG, path)
    assert path.read_text().count(" NCCL WARN ") == want.warnings
    assert len(_topology(path).warnings) == want.warnings


@pytest.mark.parametrize("path", _params(DEBUG_CAPTURES, DEBUG, "collector"))
def test_debug_capture_read_from_a_job_directory(path: Path, tmp_path: Path) -> None:
    """The directory tailer and the init views: a job's NCCL_DEBUG_FILE, read whole."""
    want = _entry(DEBUG, path)
    (tmp_path / "job-7").mkdir()
    shutil.copy(path, tmp_path / "job-7" / f"nccl.{path.stem}")
    collector = NcclFileCollector(tmp_path, debug_pattern="*/nccl.*", clock=lambda: T0)
    assert collector.collect() is None  # no Inspector file, only the debug log
    assert collector.topology is not None
    nccl = sum(1 for ln in path.read_text().splitlines() if _ANY_NCCL.search(ln))
    assert collector.topology.nccl_lines == nccl
    batch = collector.collect_init()
    live = sorted((h, r, "complete") for h, r, _, _, s in want.ranks if s == "complete")
    if not live:  # every communicator was destroyed: the views leave them out
        assert batch is None
        return
    assert batch is not None
    rows = zip(
        batch.column("host").cast("string").to_pylist(),
        batch.column("rank").to_pylist(),
        batch.column("stage").cast("string").to_pylist(),
        strict=True,
    )
    assert sorted(rows) == live
    assert set(batch.column("job").cast("string").to_pylist()) == {"job-7"}


IBEXT = "nccl_tests_issue311_2.23.4_ibext_sharp_pxn_4nodes_collnet_fallback.log"
SPLIT = "training_on_eks_2.27.3_p4d_libfabric_gdrdma_commsplit_4nodes.log"


def _capture(name: str) -> Path:
    (path,) = captures("nccl_debug", name)
    return path


def test_ibext_pxn_links_name_their_proxy_rank() -> None:
    """`via NET/IBext_v8/5(2)/GDRDMA`: NIC 5 of rank 2's process (PXN), 11 such lines in the log."""
    topo = _topology(_capture(IBEXT))
    pxn = Counter(
        (lk.host, lk.nic, lk.proxy_rank, lk.gdrdma) for lk in topo.links if lk.proxy_rank is not None
    )
    assert pxn == {("gpu36", 5, 2, True): 3, ("gpu41", 1, 6, True): 3, ("gpu40", 0, 4, True): 5}


def test_ibext_links_of_runtime_connect_threads_join_the_communicator() -> None:
    """Connection lines come after Init COMPLETE from threads that printed no Init line."""
    topo = _topology(_capture(IBEXT))
    assert {lk.communicator for lk in topo.links} == {"0x70fba02a8d314739"}
    first = topo.links[0]
    assert (first.host, first.pid, first.rank, first.from_rank, first.to_rank, first.direction) == (
        "gpu34",
        34088,
        0,
        7,
        0,
        "receive",
    )


def test_ibext_collnet_fallback_of_the_ranks_that_warned() -> None:
    """`transport.cc:384 NCCL WARN Cannot initialize CollNet` on the init threads of ranks 0, 2, 4 and 6."""
    topo = _topology(_capture(IBEXT))
    assert {r.rank: r.collnet for r in topo.ranks} == {
        0: "fallback",
        1: None,
        2: "fallback",
        3: None,
        4: "fallback",
        5: None,
        6: "fallback",
        7: None,
    }
    assert {r.coll_channels for r in topo.ranks} == {3}


def test_ibext_links_resolve_their_hca() -> None:
    topo = _topology(_capture(IBEXT))
    net = [lk for lk in topo.links if lk.transport.startswith("NET/")]
    first = net[0]  # gpu34:34088 `7[1] -> 0[0] [receive] via NET/IBext_v8/1/GDRDMA`
    assert (first.nic, first.nic_name, first.port) == (1, "mlx5_0", "gpu34/mlx5_0")
    assert all(lk.nic_name is not None for lk in net)


def test_ibext_plugin_is_not_a_fallback_from_ib() -> None:
    assert _topology(_capture(IBEXT)).transport_issues(expected_net="IB") == []


def test_split_communicator_of_a_training_job() -> None:
    topo = _topology(_capture(SPLIT))
    by_comm = {r.communicator: r for r in topo.ranks}
    # The split's Init lines carry no commId: it is named by its parent's, its split count and colour,
    # the same on every rank of the split (`parent 0x556d504b7460 splitCount 1 color 2003953581`).
    name = "0xb079519ed44b724/split1/color2003953581"
    assert set(by_comm) == {"0xb079519ed44b724", name}
    assert topo.process_groups() == {("llama-3-8b-node-0-0", 188): "0xb079519ed44b724"}
    split = by_comm[name]
    assert (split.rank, split.nranks, split.nnodes, split.local_ranks, split.state) == (
        0,
        4,
        4,
        1,
        "complete",
    )
    assert (split.timings["total"], split.timings["rest"]) == (2.79, 2.75)
    assert by_comm["0xb079519ed44b724"].timings["bootstrap"] == 8.13
    assert topo.network == {("llama-3-8b-node-0-0", 188): "Libfabric"}
    assert {(lk.nic, lk.gdrdma) for lk in topo.links} == {(0, True)}


@pytest.mark.parametrize(
    "name",
    [
        "nccl_tests_issue287_2.25.1_rtx5090_comminitall_shm_warn_cuda_failure.log",
        "nccl_tests_issue331_2.22.3_two_threads_one_process_old_init_timings.log",
    ],
)
def test_links_of_one_process_with_two_ranks_belong_to_the_rank_of_their_device(name: str) -> None:
    path = _capture(name)
    devices = [int(m["dev"]) for ln in path.read_text().splitlines() if (m := _ANY_LINK.search(ln))]
    assert [lk.rank for lk in _topology(path).links] == devices  # ranks 0 and 1 on devices 0 and 1


# -- nccl-tests outputs -------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclTestsCase:
    hosts: dict[str, int]  # `# Rank` lines per host
    rows: int
    sizes: tuple[int, int]  # first and last row
    last_busbw: tuple[float, float]  # out-of-place, in-place
    redops: frozenset[str]
    avg_busbw: float | None
    check_column: str
    collective: str  # what the collector makes of the file (its test name, else its file name)
    skipped: int = 0
    xfail: dict[str, str] = field(default_factory=dict)


MPIRUN_TABLE = "mpirun's `[1,0]<stdout>:` tag before every line hides the rank list, header, rows and footer"
TESTS: dict[str, NcclTestsCase] = {
    "aws_efa_eks_2.9.9_mpirun_prefix_16ranks_error_column.log": NcclTestsCase(
        {"nccl-tests-efa-16-worker-0": 8, "nccl-tests-efa-16-worker-1": 8},
        30,
        (8, 4294967296),
        (43.81, 43.72),
        frozenset({"sum"}),
        11.2432,
        "error",
        "unknown",  # neither the output nor the file name says all_reduce_perf
    ),
    "gcp_a3mega_h100_16ranks_all_reduce.log": NcclTestsCase(
        {"ztan-mig-235z": 8, "ztan-mig-gq73": 8},
        31,
        (8, 8589934592),
        (338.82, 337.35),
        frozenset({"sum"}),
        70.742,
        "#wrong",
        "AllReduce",
    ),
    "gcp_gke_h200_all_gather_nccl_version_in_header.log": NcclTestsCase(
        {"nccl-test-host-1": 8, "nccl-test-host-2": 8},
        24,
        (1024, 8589934592),
        (325.52, 332.16),
        frozenset({"none"}),
        121.902,
        "#wrong",
        "AllGather",
    ),
    "skypilot_gke_h200_all_gather_ray_and_mpirun_prefix.log": NcclTestsCase(
        {"nc-d87e1263-head": 8, "nc-d87e1263-worker1": 8},
        24,
        (1024, 8589934592),
        (325.72, 332.58),
        frozenset({"none"}),
        122.073,
        "#wrong",
        "AllGather",
    ),
    "nccl_tests_issue287_all_reduce_rtx5090_single_gpu_busbw_zero_overflowing_algbw.log": NcclTestsCase(
        {"GENOA-06": 1},
        25,
        (8, 134217728),
        (0.0, 0.0),
        frozenset({"sum"}),
        0.0,
        "#wrong",
        "AllReduce",
    ),
    "nccl_tests_issue331_2.22.3_sendrecv_nthread2_inplace_na.log": NcclTestsCase(
        {"lrdn2296": 2},
        29,
        (8, 2147483648),
        (71.74, 72.88),
        frozenset({"sum"}),
        24.3607,
        "#wrong",
        "SendRecv",
    ),
    "nccl_tests_issue355_2.17.6_alltoall_16ranks_cuda_failure_mid_row.log": NcclTestsCase(
        {"node0": 8, "node1": 8},
        0,
        (0, 0),
        (0.0, 0.0),
        frozenset(),
        None,
        "#wrong",
        "AllToAll",
        skipped=1,
    ),
}
TESTS_CAPTURES = captures("nccl_tests")


def _parsed(path: Path) -> NccltestsParser:
    return parse_nccl_tests(path.read_text())


def test_every_nccl_tests_capture_has_expected_values() -> None:
    assert set(ids(TESTS_CAPTURES)) == set(TESTS)


@pytest.mark.parametrize("path", _params(TESTS_CAPTURES, TESTS, "header"))
def test_nccl_tests_rank_list_and_header(path: Path) -> None:
    want = _entry(TESTS, path)
    parsed = _parsed(path)
    assert Counter(r["host"] for r in parsed.summary.ranks) == want.hosts
    assert [r["rank"] for r in parsed.summary.ranks] == list(range(sum(want.hosts.values())))
    assert parsed.summary.check_column == want.check_column


@pytest.mark.parametrize("path", _params(TESTS_CAPTURES, TESTS, "rows"))
def test_nccl_tests_rows(path: Path) -> None:
    want = _entry(TESTS, path)
    parsed = _parsed(path)
    rows = parsed.rows
    assert (len(rows), parsed.skipped) == (want.rows, want.skipped)
    if not rows:
        return
    assert (rows[0]["size"], rows[-1]["size"]) == want.sizes
    assert (rows[-1]["oop_busbw_gbs"], rows[-1]["ip_busbw_gbs"]) == want.last_busbw
    assert {r["redop"] for r in rows} == want.redops
    assert all(r["size"] == 2 * prev["size"] for prev, r in pairwise(rows))  # `-f 2`


@pytest.mark.parametrize("path", _params(TESTS_CAPTURES, TESTS, "footer"))
def test_nccl_tests_footer(path: Path) -> None:
    want = _entry(TESTS, path)
    summary = _parsed(path).summary
    assert summary.avg_bus_bandwidth_gbs == want.avg_busbw
    complete = want.avg_busbw is not None
    assert (summary.out_of_bounds, summary.out_of_bounds_ok) == ((0, True) if complete else (None, None))


@pytest.mark.parametrize("path", _params(TESTS_CAPTURES, TESTS, "collector"))
def test_nccl_tests_capture_read_from_a_directory(path: Path, tmp_path: Path) -> None:
    want = _entry(TESTS, path)
    shutil.copy(path, tmp_path / path.name)
    batch = NcclFileCollector(tmp_path, format="nccl_tests", job="job-7").collect()
    if want.rows == 0:
        assert batch is None
        return
    assert batch is not None and batch.num_rows == want.rows
    assert set(batch.column("collective").cast("string").to_pylist()) == {want.collective}
    assert set(batch.column("nranks").to_pylist()) == {sum(want.hosts.values())}
    assert batch.column("message_bytes").to_pylist()[-1] == want.sizes[1]


def test_nccl_tests_single_gpu_and_sendrecv_quirks() -> None:
    one_gpu = _parsed(captures("nccl_tests", "nccl_tests_issue287_*")[0])
    assert one_gpu.rows[-1]["ip_algbw_gbs"] == 1777718.25  # wider than its column
    assert {r["oop_busbw_gbs"] for r in one_gpu.rows} == {0.0}
    sendrecv = _parsed(captures("nccl_tests", "nccl_tests_issue331_*")[0])
    assert {r["ip_check"] for r in sendrecv.rows} == {None}  # in-place `#wrong` is N/A
    assert {r["oop_check"] for r in sendrecv.rows} == {0.0}
    assert sendrecv.summary.params["nThread"] == "2"
    assert {r["pid"] for r in sendrecv.summary.ranks} == {4063850}


def test_nccl_tests_2_17_header_and_a_row_cut_by_a_cuda_failure() -> None:
    parsed = _parsed(captures("nccl_tests", "nccl_tests_issue355_*")[0])
    assert (parsed.summary.test, parsed.collective) == ("alltoall_perf", "AllToAll")
    assert parsed.summary.params["step"] == "0(bytes)"
    assert parsed.problems == ["line 27: 16 fields do not fit the header"]


# -- PyTorch watchdog lines ---------------------------------------------------------------------


@dataclass(frozen=True)
class Watchdog:
    #: One per rank and timed-out work (however many lines repeat it): (rank, op, SeqNum, ran for ms).
    timeouts: tuple[tuple[int, str, int, int], ...]
    #: The process group each of them names on its own line (None where the line names none).
    groups: tuple[str | None, ...] | None = None
    xfail: dict[str, str] = field(default_factory=dict)


WATCHDOG: dict[str, Watchdog] = {
    "h200_torch_2.11_timeout_stderr.log": Watchdog(((0, "allreduce", 2, 5062),), ("pg:0(default_pg)",)),
    "basicsr_issue737_pg_id_guid_default_pg_3ranks.log": Watchdog(
        ((1, "allreduce", 808, 600020), (0, "allreduce", 808, 600030), (2, "allreduce", 808, 600061)),
    ),
    "instructlab_pr520_terminate_what_1ms_timeout.log": Watchdog(
        ((3, "allreduce", 1, 90),), ("pg:0(default_pg)",)
    ),
    "llamafactory_issue6269_torch_pg1_reduce_scatter_base.log": Watchdog(
        (
            (0, "_reduce_scatter_base", 7753, 600061),
            (4, "_reduce_scatter_base", 7753, 600099),
            (3, "_reduce_scatter_base", 7753, 600089),
        ),
    ),
    "llamafactory_issue7396_viewer_line_numbers_pg1.log": Watchdog(
        ((0, "allreduce", 1580, 600060), (4, "allreduce", 1580, 600067)),
    ),
    "milabench_pr269_terminal_wrapped_lines_stderr_prefix.log": Watchdog(
        (
            (14, "reduce", 2070, 600034),
            (12, "reduce", 2070, 600036),
            (11, "reduce", 2070, 600036),
            (15, "reduce", 2070, 600040),
        ),
    ),
    "nccl_issue1409_indented_pg0_default_pg_broadcast_vs_allreduce.log": Watchdog(
        ((7, "broadcast", 80078, 600026), (3, "allreduce", 80078, 600013)),
    ),
    "nccl_issue1610_collector_timestamp_prefix_group_rank_alltoall_base.log": Watchdog(
        ((13, "alltoall_base", 216, 600045), (15, "allreduce", 57, 600045)),
        ("pg:11", "pg:11"),
    ),
    "pytorch_issue118369_old_format_no_numel_tqdm_prefix.log": Watchdog(
        (
            (0, "allreduce", 96120, 25624887),
            (0, "allreduce", 96117, 25625613),
            (0, "allreduce", 96125, 25625593),
            (7, "allreduce", 64088, 25625251),
        ),
    ),
    "pytorch_pr117682_coalesced_numel_uint64_max.log": Watchdog(
        ((1, "coalesced", 2, 10000),),
    ),
    "vllm_issue2734_ray_worker_prefix_color_code_remnants.log": Watchdog(
        ((4, "allreduce", 20518, 1800270),),
    ),
}
WATCHDOG_CAPTURES = captures("torch_watchdog")


def _watchdog_rows(path: Path) -> list[tuple]:
    rows = RankStateRows()
    parse_watchdog_lines(path.read_text().splitlines(), "job-7", rows, host="gpu-1")
    assert rows.skipped == 0
    return rows.rows


def test_every_watchdog_capture_has_expected_values() -> None:
    assert set(ids(WATCHDOG_CAPTURES)) == set(WATCHDOG)


@pytest.mark.parametrize("path", _params(WATCHDOG_CAPTURES, WATCHDOG, "timeouts"))
def test_watchdog_timeouts_give_rank_op_and_seq(path: Path) -> None:
    want = _entry(WATCHDOG, path)
    assert path.read_text().count("Watchdog caught collective operation timeout") >= len(want.timeouts)
    rows = _watchdog_rows(path)
    assert [(r[2], r[8], r[9]) for r in rows] == [t[:3] for t in want.timeouts]
    assert {(r[0], r[4], r[7], r[10]) for r in rows} == {("job-7", "gpu-1", "timeout", "watchdog")}


@pytest.mark.parametrize("path", _params(WATCHDOG_CAPTURES, WATCHDOG, "duration"))
def test_watchdog_timeouts_keep_how_long_the_collective_ran(path: Path) -> None:
    want = _entry(WATCHDOG, path)
    rows = _watchdog_rows(path)
    assert [r[11].split(",")[0] for r in rows] == [
        f"ran for {t[3]} ms before timing out" for t in want.timeouts
    ]


GROUPED = [p for p in WATCHDOG_CAPTURES if p.name in WATCHDOG and WATCHDOG[p.name].groups is not None]


@pytest.mark.parametrize("path", _params(GROUPED, WATCHDOG, "group"))
def test_watchdog_timeouts_name_the_process_group_their_line_names(path: Path) -> None:
    rows = _watchdog_rows(path)
    assert [r[1] for r in rows] == list(WATCHDOG[path.name].groups or ())
