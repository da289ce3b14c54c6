"""Property tests of the UFM parsers, seeded from the real TFS telemetry sample: whatever one
value or one line says, a parser raises only its documented error (TelemetryParseError for
telemetry, ValueError for REST) or gives a valid batch, and says what it skipped.

The sample's records are also written out as the CSV and Prometheus forms (same GUIDs, counter
names and values), since no real capture of those is on record. Plus one regression test per
bug the properties found, with the minimal input.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graywire.collectors.base import SKIP_REASONS
from graywire.collectors.schemas import PORT_SAMPLE
from graywire.collectors.ufm.ports import PortKeys, SpellingCache
from graywire.collectors.ufm.rest import parse_ports, width_lanes
from graywire.collectors.ufm.telemetry import TelemetryParseError, parse_csv, parse_prometheus, parse_tfs_json
from tests.conftest import REAL_FIXTURES
from tests.strategies import JSON_VALUES, PROPERTY, spliced

UFM = REAL_FIXTURES / "ufm"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
IDS = ("timestamp", "source_id", "node_guid", "port_guid", "port_num")

pytestmark = pytest.mark.skipif(
    not UFM.is_dir(),
    reason=f"real fixtures not found at {UFM} (../shared/fixtures/real beside the repository)",
)


def _doc() -> dict[str, Any]:
    path = UFM / "tfs_small_telemetry.json"
    return json.loads(path.read_text()) if path.exists() else {"values": [{"port_guid": "0x1"}]}


DOC = _doc()
RECORDS: list[dict[str, Any]] = DOC["values"]
COLUMNS = list(dict.fromkeys(k for r in RECORDS for k in r))
CSV = ",".join(COLUMNS) + "\n" + "".join(",".join(str(r.get(c, "")) for c in COLUMNS) + "\n" for r in RECORDS)
PROM = "".join(
    f'{c}{{port_guid="{r["port_guid"]}",node_guid="{r["node_guid"]}",port_num="{r["port_num"]}"}} '
    f"{r[c]} {r['timestamp'] // 1000}\n"
    for r in RECORDS
    for c in COLUMNS
    if c not in IDS and c in r
)
#: REST /resources/ports records for the sample's ports (UFM's field names, see rest.py).
PORTS = [
    {
        "guid": r["port_guid"],
        "number": r["port_num"],
        "name": f"{r['port_guid'][2:]}_{r['port_num']}",
        "physical_state": "Link Up",
        "logical_state": "Active",
        "active_speed": "NDR",
        "active_width": "4x",
        "enabled_speed": ["HDR", "NDR"],
        "enabled_width": ["1x", "4x"],
        "supported_speed": ["NDR"],
        "supported_width": ["4x"],
    }
    for r in RECORDS
]


@st.composite
def mutated(draw: st.DrawFn, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with one field of one record replaced by an arbitrary JSON value."""
    i = draw(st.integers(0, len(records) - 1))
    key = draw(st.sampled_from(sorted(records[i])))
    out = [dict(r) for r in records]
    out[i][key] = draw(JSON_VALUES)
    return out


def _valid(batch: pa.RecordBatch, skipped: Counter[str]) -> None:
    assert batch.schema.remove_metadata() == PORT_SAMPLE.remove_metadata()
    assert set(skipped) <= SKIP_REASONS


def test_the_seeds_parse() -> None:
    """Unmutated, each form gives every port of the real sample."""
    n = len({(r["port_guid"], r["port_num"]) for r in RECORDS})
    assert n >= 5
    for parse, payload in ((parse_tfs_json, json.dumps(DOC)), (parse_csv, CSV), (parse_prometheus, PROM)):
        skipped: Counter[str] = Counter()
        assert parse(payload.encode(), PortKeys(None), now=NOW, skipped=skipped).num_rows == n
        assert not skipped
    assert parse_ports(PORTS, PortKeys(None), NOW)[0].num_rows == n


@PROPERTY
@given(mutated(RECORDS))
def test_tfs_records_give_a_batch_or_a_telemetry_error(records: list[dict[str, Any]]) -> None:
    skipped: Counter[str] = Counter()
    try:
        batch = parse_tfs_json(
            json.dumps({**DOC, "values": records}).encode(), PortKeys(None), now=NOW, skipped=skipped
        )
    except TelemetryParseError as e:
        assert len(str(e)) < 400
        return
    _valid(batch, skipped)


@pytest.mark.parametrize("form", ["csv", "prometheus"])
def test_text_forms_with_junk_spliced_in(form: str) -> None:
    text, parse = (CSV, parse_csv) if form == "csv" else (PROM, parse_prometheus)

    @PROPERTY
    @given(spliced(text))
    def check(mutated_text: str) -> None:
        skipped: Counter[str] = Counter()
        try:
            batch = parse(mutated_text.encode(), PortKeys(None), SpellingCache(), now=NOW, skipped=skipped)
        except TelemetryParseError:
            return
        _valid(batch, skipped)
        assert batch.num_rows >= len(RECORDS) - 2  # one bad line costs at most its port (or one more)

    check()


@PROPERTY
@given(mutated(PORTS))
def test_rest_ports_give_a_batch_or_a_value_error(ports: list[dict[str, Any]]) -> None:
    skipped: Counter[str] = Counter()
    try:
        batch, caps = parse_ports(json.loads(json.dumps(ports)), PortKeys(None), NOW, skipped=skipped)
    except ValueError:
        return
    _valid(batch, skipped)
    assert batch.num_rows >= len(PORTS) - 1 and caps.num_rows == batch.num_rows


# -- regressions: the minimal inputs the properties found ---------------------------------------

LINE = 'PortRcvPktsExtended{{port_guid="0xa",port_num="{num}"}} {value}{ts}\n'
OK = 'PortXmitPktsExtended{port_guid="0xb",port_num="1"} 5\n'


def prom(value: str = "7", num: str = "1", ts: str = "") -> bytes:
    return (OK + LINE.format(value=value, num=num, ts=ts)).encode()


def parsed(payload: bytes, parse: Any = parse_prometheus) -> tuple[dict[str, dict[str, Any]], Counter[str]]:
    skipped: Counter[str] = Counter()
    batch = parse(payload, PortKeys(None), SpellingCache(), now=NOW, skipped=skipped)
    return {r["port"]: r for r in batch.to_pylist()}, skipped


@pytest.mark.parametrize(
    ("value", "reason"), [("18446744073709551616", "out_of_range"), ("1²", "not_a_number")]
)
def test_a_value_no_uint64_cast_reads_nulls_its_cell(value: str, reason: str) -> None:
    """Was ArrowInvalid from the uint64 cast: ``utf8_is_digit`` passed 20 nines and "²"."""
    rows, skipped = parsed(prom(value))
    assert (
        rows["0x000000000000000a/1"]["rx_packets"] is None and rows["0x000000000000000b/1"]["tx_packets"] == 5
    )
    assert skipped == {reason: 1}
    csv = f"port_guid,port_num,PortRcvPktsExtended\n0xa,1,{value}\n0xb,1,3\n".encode()
    rows, skipped = parsed(csv, parse_csv)
    assert (
        rows["0x000000000000000a/1"]["rx_packets"] is None and rows["0x000000000000000b/1"]["rx_packets"] == 3
    )
    assert skipped == {reason: 1}


def test_a_superscript_port_number_skips_its_line() -> None:
    """Was IndexError: the bad port number was looked for with the check that had let it through."""
    rows, skipped = parsed(prom(num="²"))
    assert list(rows) == ["0x000000000000000b/1"] and skipped == {"bad_port": 1}


@pytest.mark.parametrize("ts", [" 1²", " 99999999999999999999"])
def test_a_timestamp_past_int64_or_in_superscript_skips_its_line(ts: str) -> None:
    """Was ArrowInvalid from the int64 cast of the timestamp."""
    rows, skipped = parsed(prom(ts=ts))
    assert list(rows) == ["0x000000000000000b/1"] and skipped == {"malformed_line": 1}


def test_tfs_integer_past_64_bits_nulls_its_cell() -> None:
    """Was OverflowError out of Arrow's conversion of the records."""
    doc = {
        "values": [
            {"port_guid": "0xa", "port_num": 1, "Infiniband_PckIn": 2**70},
            {"port_guid": "0xb", "port_num": 1, "Infiniband_PckIn": 4},
        ]
    }
    rows, skipped = parsed(json.dumps(doc).encode(), parse_tfs_json)
    assert (
        rows["0x000000000000000a/1"]["rx_packets"] is None and rows["0x000000000000000b/1"]["rx_packets"] == 4
    )
    assert skipped == {"out_of_range": 1}


def test_tfs_string_among_integers_nulls_its_cell_not_the_document() -> None:
    """Was a failed scrape ("inconsistent TFS records") for one value."""
    doc = {
        "values": [
            {"port_guid": "0xa", "port_num": 1, "Infiniband_PckIn": "n/a?"},
            {"port_guid": "0xb", "port_num": 1, "Infiniband_PckIn": 4},
        ]
    }
    rows, skipped = parsed(json.dumps(doc).encode(), parse_tfs_json)
    assert (
        rows["0x000000000000000a/1"]["rx_packets"] is None and rows["0x000000000000000b/1"]["rx_packets"] == 4
    )
    assert skipped == {"not_a_number": 1}


def test_tfs_nested_past_the_decoder_is_a_telemetry_error() -> None:
    """Was RecursionError out of json.loads."""
    skipped: Counter[str] = Counter()
    with pytest.raises(TelemetryParseError, match="nested deeper"):
        parse_tfs_json(b"[" * 100_000, PortKeys(None), skipped=skipped)
    assert skipped == {"too_deep": 1}


@pytest.mark.parametrize("width", ["300x", "²x", 10**30, "0x"])
def test_an_absurd_rest_width_nulls_speed_and_width(width: Any) -> None:
    """Was ArrowInvalid (300 in uint8), ValueError (int("²")) or OverflowError (10**30 lanes)."""
    assert width_lanes(width) is None
    batch, _ = parse_ports(
        [{**PORTS[0], "active_width": width, "enabled_width": [width]}], PortKeys(None), NOW
    )
    row = batch.to_pylist()[0]
    assert row["width"] is None and row["speed_bps"] is None


def test_a_rest_port_number_of_infinity_skips_that_port() -> None:
    """Was OverflowError: ``int(float("inf"))`` (JSON's 1e400)."""
    skipped: Counter[str] = Counter()
    ports = json.loads(json.dumps([{**PORTS[0], "number": 1e400}, PORTS[1]]))
    batch, _ = parse_ports(ports, PortKeys(None), NOW, skipped=skipped)
    assert batch.num_rows == 1 and skipped == {"bad_port": 1}


def test_a_stray_quote_in_csv_costs_its_row_only() -> None:
    """Was every later row lost: Arrow ends an open quote only at its block's end."""
    csv = b'port_guid,port_num,PortRcvPktsExtended\n0xa,1,1\n"0xb,1,2\n0xc,1,3\n0xd,1,4\n'
    rows, skipped = parsed(csv, parse_csv)
    assert sorted(rows) == ["0x000000000000000a/1", "0x000000000000000c/1", "0x000000000000000d/1"]
    assert skipped == {"bad_port": 1}  # '"0xb' is no GUID


def test_a_csv_header_with_a_stray_control_character_is_read_as_arrow_reads_it() -> None:
    """Was ArrowKeyError: the header was stripped (of a form feed) before Arrow saw it unstripped."""
    rows, skipped = parsed(b"\x0ctimestamp,port_guid,port_num,PortRcvPktsExtended\n1,0xa,1,5\n", parse_csv)
    assert rows["0x000000000000000a/1"]["rx_packets"] == 5 and not skipped
