"""graywire's parsers of the NCCL fault-path formats over every real capture in the corpus.

Formats: NCCL RAS reports (``nccl_ras``), PyTorch Flight Recorder dumps (``flight_recorder``),
NCCL Inspector output (``nccl_inspector``) and example profiler plugin traces (``nccl_profiler``).
Each capture has a row in its format's table below saying what a correct reading gives (the
ranks and hosts named, the sequence numbers, the bandwidths...); a capture without a row fails
``KeyError``, so a new capture cannot go unchecked. Where graywire misreads a real capture the
case is ``xfail(strict=True)`` with the correct expectation and the reason; see each folder's
SOURCES.md for where every file comes from.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from graywire.collectors.nccl.common import GBPS_TO_BPS, TimingRows
from graywire.collectors.nccl.flight_recorder import load_dump, parse_dump
from graywire.collectors.nccl.inspector import parse_inspector_prom, parse_inspector_text
from graywire.collectors.nccl.profiler import parse_profiler_trace
from graywire.collectors.nccl.proxy import ProxyRows
from graywire.collectors.nccl.ras import RankStateRows, parse_monitor, parse_status
from tests.collectors.corpus.conftest import captures, ids


def _params(paths: list[Path], xfails: dict[str, str]) -> list[Any]:
    """One case per capture; the ones graywire misreads are strict xfails with their reason."""
    return [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=xfails[p.name]))
        if p.name in xfails
        else p
        for p in paths
    ]


# -- NCCL RAS ----------------------------------------------------------------------------------------

RAS = captures("nccl_ras")

#: NCCL 2.28.7–2.28.9 print a missing rank as ``"nvml_dev": N`` newline ``"status": {`` with no
#: comma between them (src/ras/client_support.cc, jsonWriteMissingRank; fixed in 2.29.2).
_MISSING_COMMA = re.compile(r'("nvml_dev": -?\d+)\n(\s*"status": \{)')
#: The captures of NCCL 2.28.7-2.28.9 with a missing rank, printed without one comma.
MISSING_COMMA = (
    "ray_nccl_2.28.9_dead_rank_missing_comma.json",
    "nccl_2.28.9_source_built_guide_sample_missing_rank.json",
)
RAS_XFAIL: dict[str, str] = {}

_GUIDE_COMM = "0xae94423cfbb2ef4a"
_GUIDE_ROWS = [
    (_GUIDE_COMM, 0, 2, "172.16.64.245", 1524344, 0, "running", None, 0, None),
    (_GUIDE_COMM, 1, 2, "172.16.64.245", 1524345, 1, "unresponsive", None, None, None),
]
_THREE = ("0x4e0104c2022fa2f9", "0xbeebea5449e0a7e7", "0xd0d47b5885b3b54b")
_DEAD_PEER = [(None, None, None, "172.16.64.245", 1524345, 1, "dead", None, None, None)]

#: Per capture: (communicator, rank, nranks, host, pid, device, state, collective, seq, detail),
#: one tuple per nccl_rank_state row, sorted. A healthy text report names no rank: no rows.
RAS_ROWS: dict[str, list[tuple[Any, ...]]] = {
    "h200_nccl_2.28.9_status.txt": [],
    "h200_nccl_2.28.9_status.json": [
        (c, 0, 1, "192.0.2.2", 652, 0, "running", None, 0, None)
        for c in ("0x3788d92b9b8f81e2", "0x4e38039353e14170", "0xff2aecde29750a68")
    ],
    "nccl_2.26.2_issue1730_healthy_256_ranks.txt": [],
    "nccl_2.26.2_issue1911_mismatch_allgather.txt": [
        ("0xfa93daea854b060b", None, None, None, None, None, "running", "AllGather", 640, "30 ranks"),
        ("0xfa93daea854b060b", None, None, None, None, None, "running", "AllGather", 641, "2 ranks"),
        ("0xfa93daea854b060b", 12, None, "10.137.190.124", 323032, 4, "running", "AllGather", 641, None),
        ("0xfa93daea854b060b", 13, None, "10.137.190.124", 323033, 5, "running", "AllGather", 641, None),
    ],
    "nccl_2.27.3_issue1762_incomplete_outlier_node.txt": [
        (None, None, None, "10.4.109.13", 60004, 0, "unresponsive", None, None, None),
        ("0xb3398875b8b2a063", 1, None, "10.4.109.13", 60004, 0, "unresponsive", None, None, None),
    ],
    "ray_nccl_2.28.9_dead_rank_missing_comma.json": [
        ("0xa1349768e9517ed7", 0, 2, "10.0.77.184", 10018, 0, "running", None, 4, None),
        ("0xa1349768e9517ed7", 1, 2, "10.0.77.184", 10017, 1, "unresponsive", None, None, None),
    ],
    "ray_nccl_2.28.9_three_comms_one_behind.json": [
        (_THREE[0], 0, 2, "10.0.77.184", 10205, 2, "running", None, 10, None),
        (_THREE[0], 1, 2, "10.0.77.184", 10207, 3, "running", None, 3, None),
        (_THREE[1], 0, 2, "10.0.77.184", 10206, 0, "running", None, 10, None),
        (_THREE[1], 1, 2, "10.0.77.184", 10204, 1, "running", None, 10, None),
        (_THREE[2], 0, 4, "10.0.77.184", 10206, 0, "running", None, 1, None),
        (_THREE[2], 1, 4, "10.0.77.184", 10204, 1, "running", None, 1, None),
        (_THREE[2], 2, 4, "10.0.77.184", 10205, 2, "running", None, 1, None),
        (_THREE[2], 3, 4, "10.0.77.184", 10207, 3, "running", None, 1, None),
    ],
    "ray_nccl_2.28.9_a10g_4_hosts_allreduce_mismatch.json": [
        ("0xf31e5874c3f25459", 0, 4, "10.0.69.85", 6299, 0, "running", None, 101, None),
        ("0xf31e5874c3f25459", 1, 4, "10.0.109.86", 6247, 0, "running", None, 100, None),
        ("0xf31e5874c3f25459", 2, 4, "10.0.120.166", 6283, 0, "running", None, 101, None),
        ("0xf31e5874c3f25459", 3, 4, "10.0.92.51", 6261, 0, "running", None, 101, None),
    ],
    "nccl_userguide_2.29.1_status_missing_rank.json": _GUIDE_ROWS,
    "nccl_2.28.9_source_built_guide_sample_missing_rank.json": _GUIDE_ROWS,
    "nccl_userguide_2.29_monitor_peer_dead.txt": _DEAD_PEER,
    "nccl_userguide_2.29_monitor_peer_dead.json": _DEAD_PEER,
}


def report_of(session: str) -> str:
    """The report of a captured client session, as ``query_status`` hands it to the parser: the
    server's one-line answers to ``CLIENT PROTOCOL``, ``TIMEOUT`` and ``SET FORMAT`` are read
    off the socket before ``STATUS``. A bare ``ncclras`` report has none and is kept whole."""
    lines = session.split("\n")
    while lines and (lines[0].startswith("SERVER PROTOCOL ") or lines[0] == "OK"):
        lines.pop(0)
    return "\n".join(lines)


def _ras_rows(path: Path) -> RankStateRows:
    rows = RankStateRows()
    text = path.read_text()
    if "monitor" in path.name:
        parse_monitor(text, "job", rows)
    else:
        parse_status(report_of(text), "job", rows)
    return rows


def _table(rows: RankStateRows) -> list[tuple[Any, ...]]:
    return sorted(
        ((r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[11]) for r in rows.rows), key=repr
    )


@pytest.mark.parametrize("path", _params(RAS, RAS_XFAIL), ids=ids(RAS))
def test_ras_capture_rows(path: Path) -> None:
    rows = _ras_rows(path)
    assert _table(rows) == sorted(RAS_ROWS[path.name], key=repr)
    assert rows.skipped == 0, rows.problems
    assert {r[10] for r in rows.rows} <= {"ras" if "monitor" not in path.name else "ras_monitor"}


_BUGGY = [p for p in RAS if p.name in MISSING_COMMA]


@pytest.mark.parametrize("path", _BUGGY, ids=ids(_BUGGY))
def test_ras_2_28_missing_comma_is_the_only_defect(path: Path) -> None:
    """The 2.28.7–2.28.9 documents are JSON but for one comma per missing rank: the decoder stops
    exactly there, and inserting it (the repair a tolerant reader needs) gives the right rows."""
    text = path.read_text()
    with pytest.raises(json.JSONDecodeError) as err:
        json.loads(text)
    assert text[err.value.pos :].startswith('"status": {') and err.value.msg == "Expecting ',' delimiter"
    assert text[: err.value.pos].rstrip().endswith('"nvml_dev": 1')
    repaired, n = _MISSING_COMMA.subn(r"\1,\n\2", text)
    assert n == json.loads(repaired)["communicators"][0]["missing_ranks_count"] == 1
    rows = RankStateRows()
    parse_status(repaired, "job", rows)
    assert _table(rows) == sorted(RAS_ROWS[path.name], key=repr)


def test_ras_fixed_release_prints_the_same_report_with_the_comma() -> None:
    """The built 2.28.9 file differs from the guide's 2.29.1 sample only by that comma and the version."""
    folder = RAS[0].parent
    built = (folder / "nccl_2.28.9_source_built_guide_sample_missing_rank.json").read_text()
    guide = (folder / "nccl_userguide_2.29.1_status_missing_rank.json").read_text()
    assert _MISSING_COMMA.sub(r"\1,\n\2", built).replace('"2.28.9"', '"2.29.1"') == guide


# -- PyTorch Flight Recorder -------------------------------------------------------------------------

FR = captures("flight_recorder")


def _ns(dt: datetime) -> int:
    return (int(dt.replace(microsecond=0).timestamp()) * 1_000_000 + dt.microsecond) * 1000


#: When each dump was written (the watchdog's "dumping nccl trace" line of
#: torch_watchdog/h200_torch_2.11_timeout_stderr.log; any time after the healthy run's last entry).
FR_DUMPED_AT = {
    "h200_torch_2.11_timeout_rank_0": _ns(datetime(2026, 12, 4, 18, 38, 31, 959008, tzinfo=UTC)),
    "h200_torch_2.11_healthy_rank_0": _ns(datetime(2026, 12, 4, 18, 38, 4, tzinfo=UTC)),
}
#: Per dump: its version, entry count, and (communicator, state, collective, seq, detail) per row.
#: ``None``: not a dump file (graywire must refuse it).
FR_ROWS: dict[str, tuple[str, int, list[tuple[Any, ...]]] | None] = {
    "h200_torch_2.11_timeout_rank_0": (
        "2.10",
        2,
        [("pg:0(default_pg)", "timeout", "all_reduce", 2, "nccl:all_reduce scheduled for over 5000 ms")],
    ),
    "h200_torch_2.11_healthy_rank_0": (
        "2.10",
        24,
        [
            ("pg:0(default_pg)", "running", None, 22, None),
            ("pg:1(undefined)", "running", None, 1, None),
            ("pg:2(default_pg:split:1)", "running", None, 1, None),
        ],
    ),
    "pytorch_tutorials_fr_unpickled_rendering_v2.5.txt": None,
    # The analyzers' reports (fr_trace, torchfrtrace), which an operator may point the source at.
    "pytorch_tutorials_torchcomms_fr_trace_cli_missing_rank_1.txt": None,
    "pytorch_tutorials_torchcomms_fr_trace_cli_j_side_by_side.txt": None,
    "pytorch_tutorials_prototype_torchfrtrace_output_crash_py.txt": None,
}
#: Per dump: the size of every process group it names (each group of these one-rank jobs is ``[0]``).
FR_NRANKS = {
    "h200_torch_2.11_timeout_rank_0": {"pg:0": 1},
    "h200_torch_2.11_healthy_rank_0": dict.fromkeys(("pg:0", "pg:1", "pg:2"), 1),
}
FR_NRANKS_XFAIL: dict[str, str] = {}
_DUMPS = [p for p in FR if FR_ROWS[p.name] is not None]


def _fr_rows(path: Path) -> RankStateRows:
    rows = RankStateRows()
    at = FR_DUMPED_AT[path.name]
    parse_dump(path.read_bytes(), "job", rows, rank=0, host="vm", dumped_at_ns=at)
    return rows


@pytest.mark.parametrize("path", FR, ids=ids(FR))
def test_flight_recorder_capture_rows(path: Path) -> None:
    expected = FR_ROWS[path.name]
    if expected is None:
        with pytest.raises(ValueError, match=r"not a Flight Recorder (JSON dump|pickle)"):
            load_dump(path.read_bytes())
        return
    version, n_entries, table = expected
    doc = load_dump(path.read_bytes())
    assert (doc["version"], len(doc["entries"]), doc["comm_lib_version"]) == (version, n_entries, "2.28.9")
    rows = _fr_rows(path)
    assert rows.skipped == 0, rows.problems
    got = sorted((r[1], r[7], r[8], r[9], r[11]) for r in rows.rows)
    assert got == sorted(table)
    assert {(r[2], r[4], r[10]) for r in rows.rows} == {(0, "vm", "flight_recorder")}


@pytest.mark.parametrize("path", _params(_DUMPS, FR_NRANKS_XFAIL), ids=ids(_DUMPS))
def test_flight_recorder_group_sizes(path: Path) -> None:
    sizes = {r[1].split("(")[0]: r[3] for r in _fr_rows(path).rows}
    assert sizes == FR_NRANKS[path.name]


# -- NCCL Inspector ----------------------------------------------------------------------------------

INSPECTOR = captures("nccl_inspector")
_GB = GBPS_TO_BPS

#: JSON captures: per row (communicator, rank, nranks, host, collective, seq, message_bytes,
#: channel, duration_seconds, bus_bandwidth_bps, start_us, observed_us).
INSPECTOR_ROWS: dict[str, list[tuple[Any, ...]]] = {
    "nccl_2.28_inspector_readme_v4.0_coll_perf.json": [
        ("0x7f8c496ae9f661", 2, 8, "example-hostname", "AllReduce", 1407, 17179869184, None, 0.061974,
         485.119099 * _GB, None, 1748030377748202),
    ],
    "rccl_docs_inspector_v4.0_coll_perf_comm_name.json": [
        ("0x7f8c496ae9f661", 2, 8, "example-hostname", "AllReduce", 1407, 17179869184, None, 0.061974,
         485.119099 * _GB, None, 1748030377748202),
    ],
    "nccl_2.28_inspector_readme_v4.0_verbose_reducescatter.json": [
        ("0xe62dedaa97644a", 4, 8, "example-hostname", "ReduceScatter", 1231, 2147483648, None, 0.041057,
         366.134533 * _GB, 1752867229235059, 1752867229275811),
        # the channel's own time (40630 µs); bandwidth scaled to it: busbw x exec / channel time
        ("0xe62dedaa97644a", 4, 8, "example-hostname", "ReduceScatter", 1231, 2147483648, 0, 0.04063,
         366.134533 * _GB * 41057 / 40630, 1752867229235181, 1752867229275811),
    ],
    "nccl_2.28_inspector_exporter_readme_reducescatter_32_ranks.json": [
        ("0x9e7a479f95a66c", 31, 32, "example-hostname", "ReduceScatter", 129, 65536, None, 0.00011,
         18.469236 * _GB, None, 1749490229087081),
    ],
    "datadog_agent_inspector_socket_record_3_nodes.jsonl": [
        ("0xad56c683b0c4ef", 1, 3, "nanogpt-nccl-test-worker-0", "AllReduce", 8995, 2360832, None, 0.005663,
         0.555850 * _GB, None, 1772585717263338),
    ],
}  # fmt: skip

#: Prometheus captures: per series (host, device, communicator, collective, p2p, algo_proto,
#: message_bytes_min, message_bytes_max, duration_seconds, bus_bandwidth_bps).
INSPECTOR_PROM: dict[str, list[tuple[Any, ...]]] = {
    "nccl_2.30_inspector_readme_v5.1_metrics.prom": [
        ("nvl72004-T01", 0, "DP Group 0", "AllReduce", False, "Ring_ll", 4 << 30, 5 << 30, 9498.47e-6,
         678.263 * _GB),
        ("nvl72004-T01", 0, "DP Group 0", "Send", True, None, 512 << 20, 513 << 20, 1154.87e-6, 464.9 * _GB),
    ],
    "rccl_docs_inspector_v5.1_metrics.prom": [
        ("node001", 0, "DP Group 0", "AllReduce", False, "Ring_ll", 4 << 30, 5 << 30, None, 678.263 * _GB),
        ("node001", 0, "DP Group 0", "Send", True, None, 512 << 20, 513 << 20, None, 464.9 * _GB),
    ],
}  # fmt: skip

_ROW_COLS = (
    "communicator", "rank", "nranks", "host", "collective", "seq", "message_bytes", "channel",
    "duration_seconds", "bus_bandwidth_bps", "start_us", "observed_us",
)  # fmt: skip
_PROM_COLS = (
    "host", "device", "communicator", "collective", "p2p", "algo_proto", "message_bytes_min",
    "message_bytes_max", "duration_seconds", "bus_bandwidth_bps",
)  # fmt: skip


def _approx(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for v in r) for r in rows]


@pytest.mark.parametrize("path", INSPECTOR, ids=ids(INSPECTOR))
def test_inspector_capture_rows(path: Path) -> None:
    text = path.read_text()
    if path.suffix == ".prom":
        table = parse_inspector_prom(text, "job")
        got = [tuple(r[c] for c in _PROM_COLS) for r in table.to_pylist()]
        assert sorted(got, key=repr) == _approx(sorted(INSPECTOR_PROM[path.name], key=repr))
        assert set(table.column("job").to_pylist()) == {"job"}  # slurm_job_id "unknown": the configured job
        return
    rows, parser = parse_inspector_text(text, "job", strict=True)
    expected = INSPECTOR_ROWS[path.name]
    assert (parser.records, parser.skipped, parser.ignored) == (1, 0, 0)
    cols = rows.columns()
    got = [tuple(cols[c][i].as_py() for c in _ROW_COLS) for i in range(len(rows))]
    assert got == _approx(expected)
    assert set(cols["device"].to_pylist()) == {None}  # no GPU index in the record and no resolver


# -- NCCL example profiler plugin --------------------------------------------------------------------

PROFILER = captures("nccl_profiler")

#: Per trace: its collectives (collective, seq, comm_hash, rank, count, datatype, algorithm,
#: protocol, nchannels); its KernelCh events (channel, GPU ns from start to stop, None where
#: the stop clock is 0); its ProxyOps (direction, channel, peer, steps, trans_size) and, where the
#: trace has them, their phases; the number of ProxyStep states; and the nccl_timing rows
#: (channel, duration_seconds, message_bytes).
PROFILER_EXPECTED: dict[str, dict[str, Any]] = {
    "nccl_2.25_example_readme_v2_proxy_states_trace.txt": {
        "colls": [("AllReduce", 0, 673864846479792718, 1, 32768, "ncclFloat32", "RING", "LL", 2)],
        "kernels": [],
        "ops": [("recv", 0, 0, 14, 229376), ("send", 0, 2, 14, 229376)],
        "steps": 28,
        "timing": [],
    },
    "nccl_2.28_example_readme_v5_trace.txt": {
        "colls": [("AllReduce", 0, 1493613951195738943, 0, 262144, "ncclFloat32", "RING", "SIMPLE", 2)],
        "kernels": [(0, 1756135989732831232 - 1756135989724672000)],
        "ops": [("recv", 0, 1, 4, 524288)] * 2 + [("send", 0, 1, 4, 524288)] * 2,
        "phases": ["schedule", "progress", "schedule", "progress"],
        "steps": 14,
        "timing": [(0, 0.008159232, 262144 * 4)],
    },
    "nvidia_nccl_issue1765_v4_intranode_allreduce_no_kernelch.txt": {
        "colls": [("AllReduce", 0, 6479621443159067765, 0, 2097152, "ncclFloat32", "RING", "LL128", 24)],
        "kernels": [],
        "ops": [],
        "steps": 0,
        "timing": [],
    },
    "nvidia_nccl_pr1973_v5_kernelch_stop_zero.txt": {
        "colls": [("AllReduce", 0, 17093776592125785438, 0, 33554432, "ncclFloat32", "RING", "SIMPLE", 24)],
        "kernels": [(0, 1767766829235279872 - 1767766829233827840), (1, None)],
        "ops": [],
        "steps": 0,
        "timing": [(0, 0.001452032, 33554432 * 4)],
    },
    "rccl_rocm_systems_pr4888_kernelch_before_fix.txt": {
        "colls": [], "kernels": [(1, None)], "ops": [], "steps": 0, "timing": [],
    },
    "rccl_rocm_systems_pr4888_kernelch_after_fix.txt": {
        "colls": [], "kernels": [(1, 198127254178031 - 198127254153647)], "ops": [], "steps": 0, "timing": [],
    },
}  # fmt: skip
PROFILER_XFAIL = {
    "nccl_2.25_example_readme_v2_proxy_states_trace.txt": (
        "profiler API v2 (example plugin of NCCL 2.23-2.26): its ProxyOps are single 'Recv'/'Send' "
        "events (cat PROXY, per-state POSTED/RECEIVED/TRANSMITTED/DONE args) and the COLL says "
        "'nMaxChannels': graywire reads no ProxyOp (the 28 steps get no channel or peer) and "
        "nchannels None"
    ),
}


@pytest.mark.parametrize("path", _params(PROFILER, PROFILER_XFAIL), ids=ids(PROFILER))
def test_profiler_capture_events(path: Path) -> None:
    expected = PROFILER_EXPECTED[path.name]
    trace = parse_profiler_trace(path.read_text())
    assert trace.skipped == 0, trace.problems
    colls = [
        tuple(c[k] for k in ("collective", "seq", "comm_hash", "rank", "count", "datatype", "algorithm",
                             "protocol", "nchannels"))
        for c in trace.colls
    ]  # fmt: skip
    assert colls == expected["colls"]
    kernels = [
        (k["channel"], k["stop_gpu_ns"] - k["start_gpu_ns"] if k["stop_gpu_ns"] else None)
        for k in trace.kernels
    ]
    assert kernels == expected["kernels"]
    ops = [(o["direction"], o["channel"], o["peer"], o["steps"], o["trans_size"]) for o in trace.proxy_ops]
    assert ops == expected["ops"]
    if "phases" in expected:
        assert [o["phase"] for o in trace.proxy_ops] == expected["phases"]
    assert len(trace.proxy_steps) == expected["steps"]
    assert all(s["channel"] is not None for s in trace.proxy_steps)
    rows = TimingRows()
    trace.timing_rows(rows, job="job")
    cols = rows.columns()
    timing = [
        tuple(cols[c][i].as_py() for c in ("channel", "duration_seconds", "message_bytes"))
        for i in range(len(rows))
    ]
    assert timing == _approx(expected["timing"])
    if timing:  # the communicator is named as the Inspector names it: 0x + the CommHash in hex
        assert set(cols["communicator"].to_pylist()) == {f"0x{expected['colls'][0][2]:x}"}


def test_profiler_v5_readme_proxy_rows() -> None:
    """The README's v5 trace: one nccl_proxy row per Progress op, recv waits summed over its 4 steps."""
    (path,) = captures("nccl_profiler", "nccl_2.28_example_readme_v5_trace.txt")
    trace = parse_profiler_trace(path.read_text())
    rows = ProxyRows()
    assert trace.proxy_rows(rows, job="job", host="node") == 2
    cols = rows.columns()
    got = {
        cols["direction"][i].as_py(): (
            cols["channel"][i].as_py(),
            cols["peer"][i].as_py(),
            cols["bytes"][i].as_py(),
        )
        for i in range(len(rows))
    }
    assert got == {"recv": (0, 1, 524288), "send": (0, 1, 524288)}
    recv = cols["direction"].to_pylist().index("recv")
    # RecvWait of steps 0-3: (119807.691986-119707.677979) + ... as the README prints them, in µs
    waits = [(119807.691986, 119707.677979), (119844.401001, 119733.647980), (120038.847992, 119753.023987),
             (120062.944977, 119772.510986)]  # fmt: skip
    assert cols["recv_wait_seconds"][recv].as_py() == pytest.approx(sum(a - b for a, b in waits) / 1e6)
    assert cols["duration_seconds"][recv].as_py() == pytest.approx((120165.356995 - 119686.300995) / 1e6)
