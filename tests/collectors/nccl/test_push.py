"""What a job POSTs: Inspector records parsed strictly, a bad body refused whole."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from graywire.collectors.nccl.push import parse_push
from graywire.collectors.schemas import NCCL_TIMING
from tests.collectors.nccl.test_tail import inspector_line

NCCL = Path("nccl")


def test_push_accepts_json_lines_and_json_documents(real_fixtures: Path) -> None:
    line = inspector_line(real_fixtures)
    batch = parse_push((line + "\n\n" + line + "\n").encode(), "application/x-ndjson; charset=utf-8", job="j")
    assert batch.schema == NCCL_TIMING and batch.num_rows == 4
    assert batch.column("job").to_pylist() == ["j"] * 4
    doc = (real_fixtures / NCCL / "nccl_inspector_readme_coll_perf_example.json").read_bytes()
    batch = parse_push(b"[" + doc + b"," + doc + b"]", "application/json")
    assert batch.column("seq").to_pylist() == [1407, 1407]
    empty = parse_push(b'{"p2p_perf": {}, "header": {}, "metadata": {}}', "application/json",
                       received=datetime(2026, 1, 5, tzinfo=UTC))  # fmt: skip
    assert empty.num_rows == 0 and empty.schema == NCCL_TIMING


@pytest.mark.parametrize(
    ("body", "ctype", "message"),
    [
        (b"{}", "text/csv", "unsupported content type 'text/csv'"),
        (b"{}", "", r"unsupported content type '\(none\)'"),
        (b"{}", "application/json; charset=latin-1", "unsupported charset 'latin-1'"),
        (b"\xff\xfe{}", "application/x-ndjson", "body is not UTF-8 text"),
        (b"  \n", "application/x-ndjson", "empty body"),
        (b'{"coll_perf": {}}\n', "application/x-ndjson", "line 1: coll_perf record without header/metadata"),
        (b'{"dump_stats": {}}\n{"coll_perf"', "application/x-ndjson", "line 1: dump_stats marker without"),
        (b"[]", "application/json", "no JSON records in body"),
        (b'{"a": 1}\n{oops}', "application/x-ndjson", "line 1: no coll_perf"),
        (b"{oops}", "application/x-ndjson", r"line 1: not valid JSON \(Expecting property name"),
        (
            b'{"p2p_perf": {}, "header": {}, "metadata": {}} ]',
            "application/json",
            r"line 1 column 48: not valid JSON \(Expecting value\)",
        ),
    ],
)
def test_push_refuses_bad_bodies_whole(body: bytes, ctype: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_push(body, ctype)


def test_push_refuses_a_bad_record_after_good_ones(real_fixtures: Path) -> None:
    good = inspector_line(real_fixtures)
    bad = inspector_line(real_fixtures, coll_exec_time_us=-5)
    with pytest.raises(ValueError, match=r"line 2: coll_perf\.coll_exec_time_us -5 is not a duration"):
        parse_push(f"{good}\n{bad}\n".encode(), "application/jsonl")


def test_push_lines_end_at_newlines_only(real_fixtures: Path) -> None:
    """A JSON string may hold a raw U+2028 or \\x85 (JSON allows both unescaped); the record is
    not cut there, and line numbers in errors are the body's."""
    rec = json.loads(inspector_line(real_fixtures))
    rec["metadata"]["git_rev"] = "rev\u2028with\x85separators"
    line = json.dumps(rec, ensure_ascii=False, separators=(",", ":"))
    batch = parse_push((line + "\n" + line + "\n").encode(), "application/x-ndjson", job="j")
    assert batch.num_rows == 4
    with pytest.raises(ValueError, match="line 2: not valid JSON"):
        parse_push((line + "\n{oops\n").encode(), "application/x-ndjson", job="j")
