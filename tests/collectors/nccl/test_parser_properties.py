"""Property tests of the NCCL parsers, seeded from the real fixtures: whatever the input, a
parser raises only its documented error or gives rows that build a valid batch.

Inputs are the real records and logs with one part replaced by an arbitrary value (huge and
negative integers, floats, strings with control characters, nested containers, nulls) or with
arbitrary text spliced into a line. Bounded so the suite stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.debug_log import NcclTopology
from graywire.collectors.nccl.inspector import RecordError, parse_inspector_text
from graywire.collectors.nccl.nccl_tests import parse_nccl_tests
from graywire.collectors.nccl.profiler import parse_profiler_trace
from graywire.collectors.nccl.proxy import ProxyRows
from graywire.collectors.nccl.push import parse_push
from tests.conftest import REAL_FIXTURES
from tests.strategies import JSON_VALUES, PROPERTY, spliced

NCCL = REAL_FIXTURES / "nccl"
pytestmark = pytest.mark.skipif(
    not NCCL.is_dir(),
    reason=f"real fixtures not found at {NCCL} (../shared/fixtures/real beside the repository)",
)


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


def _records() -> list[Any]:
    if not NCCL.is_dir():
        return [{}]
    names = (
        "nccl_inspector_readme_coll_perf_example.json",
        "nccl_inspector_readme_coll_perf_verbose_example.json",
    )
    return [json.loads((NCCL / f).read_text()) for f in names]


RECORDS = _records()


@st.composite
def mutated_record(draw: st.DrawFn) -> Any:
    rec = draw(st.sampled_from(RECORDS))
    paths = _paths(rec)
    path = draw(st.sampled_from(paths)) if paths else ()
    return _replace(rec, path, draw(JSON_VALUES))


@PROPERTY
@given(mutated_record())
def test_inspector_records_give_a_batch_or_a_documented_error(rec: Any) -> None:
    good = json.dumps(RECORDS[0])
    text = good + "\n" + json.dumps(rec) + "\n"
    rows, parser = parse_inspector_text(text, "j")
    batch = rows.to_batch()
    assert parser.records >= 1 and batch.num_rows >= 1  # the good record survives
    try:
        parse_inspector_text(json.dumps(rec), "j", strict=True)[0].to_batch()
    except RecordError as e:
        assert len(str(e)) < 300


@PROPERTY
@given(mutated_record())
def test_a_push_is_a_batch_or_a_value_error(rec: Any) -> None:
    try:
        batch = parse_push(json.dumps(rec).encode(), "application/x-ndjson", job="j")
    except ValueError:
        return
    assert batch.num_rows >= 0


@pytest.mark.parametrize(
    "name", ["superbench_nccl_tests_allreduce.log", "superbench_nccl_tests_alltoall.log"]
)
def test_nccl_tests_output_with_junk_spliced_in(name: str) -> None:
    text = (NCCL / name).read_text()

    @PROPERTY
    @given(spliced(text))
    def check(mutated: str) -> None:
        parser = parse_nccl_tests(mutated)
        rows = TimingRows()
        parser.timing_rows(rows, job="j")
        rows.to_batch()
        parser.table()

    check()


def test_debug_log_lines_with_junk_spliced_in() -> None:
    text = (NCCL / "nccl_userguide_logging_examples.txt").read_text()

    @PROPERTY
    @given(spliced(text))
    def check(mutated: str) -> None:
        topo = NcclTopology()
        topo.feed(mutated.splitlines())
        topo.ranks_table()
        topo.links_table()

    check()


def test_profiler_trace_with_junk_spliced_in() -> None:
    text = (NCCL / "nccl_profiler_example_readme_trace.txt").read_text()

    @PROPERTY
    @given(spliced(text))
    def check(mutated: str) -> None:
        parser = parse_profiler_trace(mutated)
        rows = TimingRows()
        parser.timing_rows(rows, job="j")
        rows.to_batch()
        proxy = ProxyRows()
        parser.proxy_rows(proxy, job="j")
        proxy.to_batch()
        parser.kernel_table()
        parser.proxy_op_table()
        parser.proxy_step_table()

    check()


def test_the_fixtures_themselves_parse(real_fixtures: Path) -> None:
    """The seeds are real: unmutated, each gives rows."""
    rows, parser = parse_inspector_text("\n".join(json.dumps(r) for r in RECORDS), "j")
    assert parser.records == 2 and rows.to_batch().num_rows >= 2
