"""The profiler trace's column pass gives what the per-event parser gives.

Every comparison feeds the same lines, in the same pieces, to :class:`ProfilerParser` (the
column pass, falling back to events when it must) and to :class:`EventParser` (the per-event
parser it replaced), asks both for timing and proxy rows after each read as the file collector
does, and compares every table, every row and the counts: on the README trace, the plugin-format
dumps, fabricsim's traces, awkward lines and any junk spliced into any line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graywire.collectors.nccl import jsonlines
from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.profiler import ProfilerParser
from graywire.collectors.nccl.profiler_events import EventParser
from graywire.collectors.nccl.proxy import ProxyRows
from graywire.fabricsim.profiler_writer import ProfilerWriter
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec
from tests.conftest import REAL_FIXTURES
from tests.strategies import JUNK, PROPERTY

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
README = REAL_FIXTURES / "nccl" / "nccl_profiler_example_readme_trace.txt"
DUMPS = sorted((Path(__file__).parent / "profiler_dumps").glob("*.json"))
needs_fixtures = pytest.mark.skipif(not README.is_file(), reason=f"real fixtures not found at {README}")


def _plain(value: Any) -> Any:
    """A JSON copy, taken now (the per-event parser's dicts change as it reads on)."""
    return json.loads(
        json.dumps(value, default=lambda v: sorted(map(repr, v)) if isinstance(v, set) else repr(v))
    )


def run(parser: Any, lines: list[Any], pieces: tuple[int, ...], host: str | None) -> Any:
    timing, proxy, start, seen = TimingRows(), ProxyRows(), 0, []
    try:
        for lo, hi in zip((0, *pieces), (*pieces, len(lines)), strict=True):
            parser.feed(lines[lo:hi])
            start = parser.timing_rows(
                timing, job="j", host=host, device=3, observed_us=1_700_000_000_000_000, start=start
            )
            added = parser.proxy_rows(
                proxy,
                job="j",
                host=host,
                observed_us=1_700_000_000_000_000,
                device_of=lambda h, pid, rank: pid % 7,
                port_of=lambda h, pid, r, ch, peer, d: f"{h}/{ch}/{peer}/{d}",
            )
            seen.append(_plain((start, added, parser.skipped, parser.problems)))
            tables = ("kernel_table", "proxy_op_table", "proxy_step_table", "net_table")
            seen.append(_plain([getattr(parser, t)().to_pylist() for t in tables]))
            entities = ("colls", "kernels", "proxy_ops", "proxy_steps", "net_events")
            seen.append(_plain([getattr(parser, a) for a in entities]))
        seen.append(_plain((timing.to_batch(WHEN).to_pylist(), proxy.to_batch(WHEN).to_pylist())))
    except Exception as e:  # both must fail alike
        seen.append((type(e).__name__, str(e)))
    return seen


def assert_same(
    lines: list[Any], pieces: tuple[int, ...] = (), host: str | None = "gpu-0001"
) -> ProfilerParser:
    parser = ProfilerParser()
    assert run(parser, lines, pieces, host) == run(EventParser(), lines, pieces, host)
    return parser


@pytest.fixture(autouse=True)
def columns_at_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The column pass for every trace, however small: these are."""
    monkeypatch.setattr(jsonlines, "SMALL_BYTES", 0)


def test_a_trace_whose_first_read_is_small_is_read_event_by_event(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = dump_lines(DUMPS[0])
    size = len("\n".join(lines))
    monkeypatch.setattr(jsonlines, "SMALL_BYTES", size)
    parser = assert_same(lines[:10], pieces=(5,))
    assert not parser.columnar
    parser = ProfilerParser()
    parser.feed(lines + lines[1:])  # big enough
    assert parser.columnar


def dump_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@needs_fixtures
def test_the_readme_trace_and_the_plugin_format_dumps_stay_columns() -> None:
    for path in (README, *DUMPS):
        lines = dump_lines(path)
        for pieces in ((), (9,), (len(lines) // 2, len(lines) - 1), tuple(range(1, len(lines), 7))):
            assert assert_same(lines, pieces).columnar
        assert assert_same([x.encode() for x in lines], host=None).columnar


def test_fabricsim_traces_read_as_a_collector_reads_them(tmp_path: Path) -> None:
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=4), duration_s=30.0, seed=7))
    writer = ProfilerWriter(tmp_path, steps_written=3)
    polls = 0
    for step in sim.run():
        if step.nccl_proxy is not None:
            writer.write(step.nccl_proxy)
            polls += 1
    writer.close()
    files = sorted(tmp_path.glob("*/*.json"))
    assert polls > 2 and files
    for path in files[:8]:
        lines = dump_lines(path)
        assert assert_same(lines, pieces=(len(lines) // 3, 2 * len(lines) // 3)).columnar


@needs_fixtures
@pytest.mark.parametrize(
    "change",
    [
        "cut",  # a dump cut mid-line: the last line is half an event
        "no closing",
        "two objects on a line",
        "nested collectives",
        "overlapping progress ops",
        "overlapping steps",
        "an end without its begin",
        "ends reordered",
        "string ids",
        "bool ids",
        "fractional ids",
        "huge hash",
        "negative hash",
        "float clocks",
        "-NaN",
        "Inf",
        "NaN and Infinity",
        "negative zero",
        "null everywhere",
        "blank and junk lines",
    ],
)
def test_awkward_traces(change: str) -> None:
    lines = dump_lines(DUMPS[0])
    if change == "cut":
        lines[-3] = lines[-3][:40]
        lines = lines[:-2]
    elif change == "no closing":
        lines = lines[:-1]
    elif change == "two objects on a line":
        lines[10] = lines[10] + " " + lines[11]
    elif change == "nested collectives":
        lines.insert(6, lines[5])
    elif change == "overlapping progress ops":
        lines.insert(10, lines[9])
    elif change == "overlapping steps":
        lines.insert(11, lines[10].replace('"id": 0', '"id": 9'))
    elif change == "an end without its begin":
        del lines[9]
    elif change == "ends reordered":
        lines[12], lines[13] = lines[13], lines[12]
    elif change == "string ids":
        lines = [x.replace('"id": 1,', '"id": "1",') for x in lines]
    elif change == "bool ids":
        lines = [x.replace('"id": 1,', '"id": true,') for x in lines]
    elif change == "fractional ids":
        lines = [x.replace('"id": 1,', '"id": 1.5,') for x in lines]
    elif change == "huge hash":
        lines = [x.replace("9210617411243260523", str(2**64 + 5)) for x in lines]
    elif change == "negative hash":
        lines = [x.replace("9210617411243260523", "-5") for x in lines]
    elif change == "float clocks":
        lines = [x.replace('"StartGpuClk": 1756200000000000000', '"StartGpuClk": 1.7562e18') for x in lines]
    elif change == "-NaN":
        lines = [x.replace('"ts": 1130.500000', '"ts": -NaN') for x in lines]
    elif change == "Inf":
        lines = [
            x.replace('"ts": 1130.500000', '"ts": Inf').replace('"ts": 1170.500000', '"ts": -Inf')
            for x in lines
        ]
    elif change == "NaN and Infinity":
        lines = [
            x.replace('"ts": 1130.500000', '"ts": NaN').replace('"ts": 1170.500000', '"ts": Infinity')
            for x in lines
        ]
    elif change == "negative zero":
        lines = [
            x.replace('"ts": 1130.500000', '"ts": -0').replace('"ts": 1170.500000', '"ts": -0.0')
            for x in lines
        ]
    elif change == "null everywhere":
        lines = [x.replace(": 0,", ": null,") for x in lines]
    elif change == "blank and junk lines":
        lines[3:3] = ["", "   ", "junk", "{", "[", "{}", "{},", "[1, 2],", '"text",', "5,", "\ufeff{}"]
    for pieces in ((), (12,), (5, 11, 20)):
        assert_same(lines, pieces)


def test_empty_input() -> None:
    assert assert_same([]).columnar
    assert assert_same(["[", "{}]"]).columnar


def test_a_read_the_columns_cannot_follow_hands_over_what_they_hold() -> None:
    lines = dump_lines(DUMPS[0])
    nested = [*lines[:6], lines[5], *lines[6:]]  # a second COLL begins inside the first
    parser = assert_same(nested, pieces=(20,))
    assert not parser.columnar
    assert assert_same(lines, pieces=(20,)).columnar


@needs_fixtures
@PROPERTY
@given(st.data())
def test_junk_anywhere_gives_what_the_per_event_parser_gives(data: st.DataObject) -> None:
    lines = dump_lines(data.draw(st.sampled_from([README, *DUMPS])))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        at = data.draw(st.integers(0, len(lines[i])))
        lines[i] = lines[i][:at] + data.draw(JUNK) + lines[i][at + data.draw(st.integers(0, 12)) :]
    cut = data.draw(st.integers(1, len(lines)))
    assert_same(lines, pieces=(cut,) if cut < len(lines) else ())
