"""The Inspector's column pass gives what the per-line parser gives, line for line.

The per-line parser is :meth:`InspectorParser.feed_record` on each line's ``json.loads`` (what
``feed_lines`` did before records were read as columns); every comparison here runs it and the
column pass on the same lines and compares the batch, the counters, the problems and the dump
context left behind: on the real README records, on fabricsim's files, on awkward lines and on
records with one value replaced by an arbitrary one.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graywire.collectors.nccl import jsonlines
from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.debug_log import NcclTopology
from graywire.collectors.nccl.inspector import InspectorParser, iter_json_values, parse_inspector_text
from graywire.collectors.nccl.push import parse_push
from graywire.fabricsim.nccl_writer import InspectorWriter
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from tests.conftest import REAL_FIXTURES
from tests.strategies import JSON_VALUES, PROPERTY

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
NCCL = REAL_FIXTURES / "nccl"
needs_fixtures = pytest.mark.skipif(not NCCL.is_dir(), reason=f"real fixtures not found at {NCCL}")


@pytest.fixture(autouse=True)
def columns_at_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The column pass for every buffer, however small: these lines are few."""
    monkeypatch.setattr(jsonlines, "SMALL_BYTES", 0)


def test_small_buffers_go_line_by_line_and_large_ones_as_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonlines, "SMALL_BYTES", 4096)
    line = (
        b'{"header":{"id":"0x1","rank":0},"metadata":{"pid":1},'
        + b'"coll_perf":{"coll":"X","coll_exec_time_us":5}}'
    )
    per_record: list[Any] = []
    feed = InspectorParser.feed_record
    monkeypatch.setattr(InspectorParser, "feed_record", lambda *a: per_record.append(a) or feed(*a))
    small, large = TimingRows(), TimingRows()
    InspectorParser("j").feed_data(b"\n".join([line] * 10), small)
    assert len(per_record) == 10
    InspectorParser("j").feed_data(b"\n".join([line] * 100), large)
    assert len(per_record) == 10 and len(large) == 100
    assert small.to_batch(WHEN).to_pylist() == large.to_batch(WHEN).to_pylist()[:10]


def per_line(
    parser: InspectorParser, lines: list[Any], rows: TimingRows, where: str = "", first: int = 1
) -> None:
    """The per-line path: each line decoded, stripped and given to feed_record."""
    for i, raw in enumerate(lines, first):
        text = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()
        if not text:
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            parser._problem(f"{where}line {i}", f"not JSON ({e.msg} at column {e.colno})")
            continue
        parser.feed_record(rec, rows, f"{where}line {i}")


def outcome(parser: InspectorParser, rows: TimingRows, run: Any) -> tuple[Any, ...]:
    try:
        run()
        error = None
    except Exception as e:  # strict mode: the same error, after the same rows
        error = (type(e).__name__, str(e))
    batch = rows.to_batch(WHEN)
    state = (parser.records, parser.ignored, parser.skipped, parser.dropped, parser.problems)
    context = json.dumps([parser.header, parser.metadata], sort_keys=True, default=repr)
    return error, batch.schema, batch.to_pylist(), state, context, rows.latest_us()


def assert_same(lines: list[Any], pieces: tuple[int, ...] = (), **kw: Any) -> tuple[Any, ...]:
    """Both paths over ``lines`` (fed in ``pieces``, as a tailer hands them out) agree."""
    results = []
    for columns in (False, True):
        parser, rows = InspectorParser("j", **kw), TimingRows()

        def run(parser: InspectorParser = parser, rows: TimingRows = rows, columns: bool = columns) -> None:
            for lo, hi in zip((0, *pieces), (*pieces, len(lines)), strict=True):
                if columns:
                    parser.feed_lines(lines[lo:hi], rows, "f.log ", lo + 1)
                else:
                    per_line(parser, lines[lo:hi], rows, "f.log ", lo + 1)

        results.append(outcome(parser, rows, run))
    old, new = results
    assert new[0] == old[0]
    assert new[1] == old[1]
    assert json.dumps(new[2], default=repr) == json.dumps(old[2], default=repr)
    assert new[3:] == old[3:]
    return new


def readme(name: str) -> dict[str, Any]:
    return json.loads((NCCL / name).read_text())


def records() -> list[dict[str, Any]]:
    if not NCCL.is_dir():
        return [{}]
    return [
        readme("nccl_inspector_readme_coll_perf_example.json"),
        readme("nccl_inspector_readme_coll_perf_verbose_example.json"),
    ]


RECORDS = records()


def compact(rec: Any) -> str:
    return json.dumps(rec, separators=(",", ":"))


def marker(rec: dict[str, Any], dropped: Any = 0) -> dict[str, Any]:
    return {
        "header": rec["header"],
        "metadata": rec["metadata"],
        "dump_stats": {"coll_records": 1, "coll_dropped_since_last_dump": dropped},
    }


@needs_fixtures
def test_readme_records_in_every_layout() -> None:
    plain, verbose = RECORDS
    lines = [
        compact(plain),  # v4.0
        compact(marker(verbose, 3)),  # v4.2: a marker, then whole records
        compact(verbose),
        compact(marker(plain)),  # v4.3: bare records inherit the marker's header and metadata
        compact({"coll_perf": verbose["coll_perf"]}),
        compact({"coll_perf": plain["coll_perf"]}),
        compact({"p2p_perf": {"p2p": "Send"}}),
        compact({"proxy_trace": {}}),
    ]
    _, _, rows, state, _, _ = assert_same(lines)
    assert len(rows) == 1 + 2 + 2 + 1 and state[:4] == (4, 4, 0, 3)
    for kw in (
        {"gpus_per_host": 8},
        {"short_hostnames": True},
        {"whole_rows": False},
        {"channel_rows": False},
    ):
        assert_same(lines, **kw)


@needs_fixtures
def test_resolvers_answer_the_same() -> None:
    topo = NcclTopology()
    topo.feed(
        [
            "example-hostname:438776:438790 [4] NCCL INFO comm 0x55 rank 4 nRanks 8 nNodes 1 localRanks 8 "
            "localRank 4 MNNVL 0",
            "example-hostname:438776:438790 [4] NCCL INFO Channel 00/0 : 4[4] -> 5[5] via P2P/CUMEM",
        ]
    )
    _, verbose = RECORDS
    lines = [compact(verbose), compact(marker(verbose)), compact({"coll_perf": verbose["coll_perf"]})]
    _, _, rows, _, _, _ = assert_same(lines, device_of=topo.device_of, transport_of=topo.transport_of)
    assert [r["device"] for r in rows] == [4] * 4 and [r["transport"] for r in rows] == [None, "P2P"] * 2


def test_fabricsim_files_in_both_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim = FabricSim(
        SimConfig(
            topology=TopologySpec(hosts=4),
            duration_s=40.0,
            seed=5,
            faults="slow_channel@10s+60s=0.4:gpu-0001/mlx5_1:1",
        )
    )
    writers = [
        InspectorWriter(tmp_path / "v43", per_job_dirs=False),
        InspectorWriter(tmp_path / "v40", version="v4.0", per_job_dirs=False),
        InspectorWriter(tmp_path / "plain", verbose=False, per_job_dirs=False),
    ]
    for step in sim.run():
        if step.nccl_timing is not None:
            for w in writers:
                w.write(step.nccl_timing)
    files = sorted(tmp_path.glob("*/*-pid*.log"))
    assert len(files) > 20
    for path in files:
        lines = path.read_bytes().split(b"\n")
        _, _, rows, state, _, _ = assert_same(lines, pieces=(len(lines) // 3,), gpus_per_host=8)
        assert rows and state[2] == 0
    # And the column pass decided every record of these files itself.
    per_record = []
    monkeypatch.setattr(InspectorParser, "feed_record", lambda *a, **k: per_record.append(a))
    InspectorParser("j").feed_data(files[0].read_bytes(), TimingRows())
    assert per_record == []


def test_empty_input() -> None:
    assert assert_same([])[2] == []
    assert assert_same([b""])[2] == []
    assert assert_same(["", "   ", "\t\r"])[2] == []


AWKWARD = [
    '{"coll_perf":{"coll":"AllReduce","coll_exec_time_us":5}}',  # a v4.3 record before its marker
    '{"header":{"id":"0x1","rank":0},"metadata":{"pid":1},"coll_perf":{"coll":"AllReduce",'
    '"coll_exec_time_us":5',  # truncated: the line a job was writing
    "[1, 2]",
    "5",
    '"text"',
    "null",
    "{}",
    '{"hello": 1}',
    '{"dump_stats": {}}',  # a marker without header/metadata
    '{"dump_stats": null, "header": {"id": "0x1", "rank": 0}, "metadata": {}}',
    '{"header": null, "coll_perf": {"coll": "AllReduce", "coll_exec_time_us": 5}}',
    '{"p2p_perf": null}',
    '{"proxy_trace": 7}',
    "{} {}",
    '{"header":{"id":"0x1","rank":0,"rank":1},"metadata":{},"coll_perf":{"coll":"X","coll_exec_time_us":5}}',
    '\ufeff{"header":{"id":"0x1","rank":0},"metadata":{},"coll_perf":{"coll":"X","coll_exec_time_us":5}}',
    '   {"header":{"id":"0x1","rank":0},"metadata":{},"coll_perf":{"coll":"X","coll_exec_time_us":5}}\r',
    "\x0c",
    "\x85",
]
NUMBERS = [
    "-0",
    "-0.0",
    "0",
    "3.0",
    "3.5",
    "1e3",
    "NaN",
    "-NaN",
    "Infinity",
    "-Infinity",
    "Inf",
    "2147483648",
    str(2**53 + 1),
    str(2**63),
    "1" + "0" * 400,
    "1e400",
    '"4"',
    '"0x10"',
    '"nan"',
    "true",
    "[]",
    "{}",
]


@needs_fixtures
@pytest.mark.parametrize(
    "field",
    [
        "rank",
        "n_ranks",
        "pid",
        "dump_timestamp_us",
        "coll_sn",
        "coll_exec_time_us",
        "coll_busbw_gbs",
        "channel_id",
        "kernel_start_ts",
        "kernel_stop_ts",
        "kernel_stop_sn",
        "coll_start_ts",
        "coll_start_sn",
        "coll_dropped",
    ],
)
def test_awkward_numbers(field: str) -> None:
    """Every spelling of a number json reads (or refuses), in every field the parser reads."""
    _, verbose = RECORDS
    lines = [compact(verbose)]
    for number in NUMBERS:
        text = compact(marker(verbose, 0)) + "\n" + compact({"coll_perf": verbose["coll_perf"]})
        key = {"coll_dropped": "coll_dropped_since_last_dump"}.get(field, field)
        text = re.sub(rf'"{key}":[^,}}]+', f'"{key}":{number}', text, count=1)
        lines += text.split("\n")
    assert_same(lines)
    assert_same(lines, gpus_per_host=8, strict=False)


@needs_fixtures
def test_awkward_lines_among_good_ones() -> None:
    plain, verbose = RECORDS
    lines = [
        compact(plain),
        *AWKWARD,
        compact(marker(verbose)),
        *AWKWARD,
        compact({"coll_perf": plain["coll_perf"]}),
    ]
    _, _, rows, state, _, _ = assert_same(lines)
    assert rows and state[2] > 10
    raw = [x.encode() for x in lines] + [b'{"coll_perf":{"coll":"\xff\xfe","coll_exec_time_us":1}}']
    assert_same(raw)
    assert_same(raw, pieces=(3, 7, 20))
    nan = compact(verbose).replace('"coll_busbw_gbs":366.134533', '"coll_busbw_gbs":"nan"')
    assert '"nan"' in nan
    assert_same([nan, compact(verbose).replace(":366.134533", ':"NaN"'), nan + " "])


@needs_fixtures
@pytest.mark.parametrize("at", range(len(AWKWARD)))
def test_strict_mode_raises_at_the_same_line_after_the_same_rows(at: int) -> None:
    plain, verbose = RECORDS
    lines = [
        compact(plain),
        compact(marker(verbose)),
        compact({"coll_perf": plain["coll_perf"]}),
        AWKWARD[at],
        compact(verbose),
    ]
    assert_same(lines, strict=True)


@needs_fixtures
def test_the_dump_context_carries_over_between_reads() -> None:
    plain, verbose = RECORDS
    lines = [
        compact(marker(verbose)),
        *(compact({"coll_perf": verbose["coll_perf"]}) for _ in range(5)),
        compact(marker(plain)) + " ",
        compact({"coll_perf": plain["coll_perf"]}),  # a marker read per line
        '{"dump_stats": {}, "header": {"id": "0x1", "rank": null}, "metadata": {}}',
        compact({"coll_perf": plain["coll_perf"]}),
    ]
    for pieces in ((), (1,), (2, 4), (6,), (7,), (8,), tuple(range(1, len(lines)))):
        assert_same(lines, pieces=pieces)


def old_push(body: bytes, content_type: str, gpus_per_host: int | None) -> Any:
    """parse_push as it parsed bodies line by line."""
    text = body.decode("utf-8")
    parser, rows, seen = InspectorParser("j", gpus_per_host=gpus_per_host, strict=True), TimingRows(), 0
    if content_type == "application/json":
        for line, value in iter_json_values(text):
            seen += 1
            parser.feed_record(value, rows, f"line {line}")
    else:
        for i, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"line {i}: not valid JSON ({e.msg} at column {e.colno})") from None
            seen += 1
            parser.feed_record(value, rows, f"line {i}")
    if not seen:
        raise ValueError("no JSON records in body")
    return rows.to_batch(None if rows.latest_us() is not None else WHEN)


def push_outcome(run: Any) -> Any:
    try:
        return json.dumps(run().to_pylist(), default=repr)
    except ValueError as e:
        return type(e).__name__, str(e)


@needs_fixtures
@pytest.mark.parametrize("content_type", ["application/x-ndjson", "application/json"])
@pytest.mark.parametrize("extra", ["", *AWKWARD, "  {oops}", "[]"])
def test_push_bodies(content_type: str, extra: str) -> None:
    plain, verbose = RECORDS
    body = "\n".join(
        [compact(marker(verbose)), compact({"coll_perf": verbose["coll_perf"]}), extra, compact(plain)]
    ).encode()
    old = push_outcome(lambda: old_push(body, content_type, 8))
    new = push_outcome(lambda: parse_push(body, content_type, job="j", gpus_per_host=8, received=WHEN))
    assert new == old


@needs_fixtures
def test_documents_pretty_printed_or_as_arrays() -> None:
    texts = [
        (NCCL / f).read_text()
        for f in (
            "nccl_inspector_readme_coll_perf_example.json",
            "nccl_inspector_readme_coll_perf_verbose_example.json",
        )
    ]
    for text in (
        texts[0] + texts[1],
        "\n".join(compact(r) for r in RECORDS),
        f"[{texts[0]},{texts[1]}]",
        "\n".join(compact(r) for r in RECORDS) + "\n{oops}",
    ):
        results = []
        for new in (False, True):
            try:
                if new:
                    rows, parser = parse_inspector_text(text, "j")
                else:
                    parser, rows = InspectorParser("j"), TimingRows()
                    for line, value in iter_json_values(text):
                        parser.feed_record(value, rows, f"line {line}")
                results.append((rows.to_batch(WHEN).to_pylist(), parser.records, parser.problems))
            except ValueError as e:
                results.append(str(e))
        assert results[0] == results[1]


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _replace(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, *rest = path
    if isinstance(obj, dict):
        return {k: (_replace(v, tuple(rest), value) if k == head else v) for k, v in obj.items()}
    return [(_replace(v, tuple(rest), value) if i == head else v) for i, v in enumerate(obj)]


@st.composite
def mutated_dump(draw: st.DrawFn) -> list[str]:
    """A v4.3 dump (marker and bare records) and a v4.0 record, one part of one replaced."""
    rec = draw(st.sampled_from(RECORDS))
    lines = [marker(rec), {"coll_perf": rec["coll_perf"]}, rec, {"coll_perf": rec["coll_perf"]}]
    i = draw(st.integers(0, len(lines) - 1))
    paths = _paths(lines[i])
    if paths:
        lines[i] = _replace(lines[i], draw(st.sampled_from(paths)), draw(JSON_VALUES))
    return [json.dumps(x, separators=(",", ":") if draw(st.booleans()) else None) for x in lines]


@needs_fixtures
@PROPERTY
@given(
    mutated_dump(), st.sampled_from([{}, {"gpus_per_host": 8}, {"strict": True}, {"short_hostnames": True}])
)
def test_any_value_anywhere_gives_what_the_per_line_parser_gives(
    lines: list[str], kw: dict[str, Any]
) -> None:
    assert_same(lines, **kw)
    assert_same(lines, pieces=(2,), **kw)
