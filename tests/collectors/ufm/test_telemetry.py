"""UFM Telemetry parsers: Prometheus text, CSV and the TFS JSON stream, on real and documented input."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.schemas import COUNTER_BITS_KEY, PORT_SAMPLE, SATURATING_KEY, record_kind
from graywire.collectors.ufm.counters import counter_spec
from graywire.collectors.ufm.ports import PortKeys, SpellingCache
from graywire.collectors.ufm.telemetry import (
    TelemetryParseError,
    parse_csv,
    parse_prometheus,
    parse_tfs_json,
    sniff_format,
)

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
# The example lines of NVIDIA's UFM Telemetry guide ("Prometheus Endpoint Support").
DOC_EXAMPLE = (
    b"# TYPE PortXmitDataExtended counter\n"
    b"# TYPE PortXmitPktsExtended counter\n"
    b'PortXmitDataExtended{source="0x0002c90300f172a0", node_guid="2c90300f172a0", '
    b'port_guid="2c90300f172a2", port_num="2"} 85554128244 1628683905941\n'
    b'PortXmitPktsExtended{source="0x0002c90300f172a0", node_guid="2c90300f172a0", '
    b'port_guid="2c90300f172a2", port_num="2"} 1188251785 1628683905941\n'
)


def rows(batch: pa.RecordBatch) -> dict[str, dict[str, Any]]:
    """Port key -> the row's non-null values."""
    return {r["port"]: {k: v for k, v in r.items() if v is not None} for r in batch.to_pylist()}


def tfs_fabric() -> Fabric:
    """An inventory naming two of the TFS sample's devices, GUIDs spelled unlike the sample."""
    ports = [
        PortSpec("host-a", "mlx5_0", guid="C42A103007AB890", num=1),  # upper case, no 0x, no zeros
        *(PortSpec("sw-1", f"p{n}", guid="0x248A070300EF19A0", num=n) for n in (1, 23, 36)),
    ]
    return Fabric.from_specs({"host-a": "host", "sw-1": "leaf"}, ports, [("host-a/mlx5_0", "sw-1/p1")])


# -- TFS JSON (the real sample) -------------------------------------------------------------------


def test_real_tfs_sample_values_units_and_guids(real_fixtures: Path) -> None:
    payload = (real_fixtures / "ufm" / "tfs_small_telemetry.json").read_bytes()
    batch = parse_tfs_json(payload, PortKeys(tfs_fabric()), SpellingCache())
    assert record_kind(batch.schema) == "port_sample"
    got = rows(batch)
    assert sorted(got) == [
        "0x7cfe900300292356/1",  # not in the inventory: a stable key of its own
        "0xe41d2d030003e3b0/36",
        "host-a/mlx5_0",
        "sw-1/p1",
        "sw-1/p23",
        "sw-1/p36",
    ]
    # Infiniband_MBOut/MBIn count 4-octet words (UFM's definition), whatever the "_u_Gb" suffix says.
    assert got["host-a/mlx5_0"]["tx_bytes"] == 4086720 * 4
    assert got["host-a/mlx5_0"]["rx_bytes"] == 4087008 * 4
    assert got["host-a/mlx5_0"]["tx_packets"] == 14190
    assert got["host-a/mlx5_0"]["rx_packets"] == 14191
    assert got["sw-1/p23"]["tx_bytes"] == 70409952 * 4
    assert got["sw-1/p23"]["link_downed"] == 3
    assert got["sw-1/p1"]["link_downed"] == 1
    assert got["sw-1/p36"]["link_downed"] == 0  # a real zero, not null
    assert got["0xe41d2d030003e3b0/36"]["tx_bytes"] == 10176192 * 4
    assert got["sw-1/p23"]["xmit_wait_ticks"] == 0
    # Counters the stream does not carry stay null.
    assert "phy_received_bits" not in got["sw-1/p23"] and "ecn_marked_packets" not in got["sw-1/p23"]
    # Row timestamps are microseconds since the epoch.
    assert got["sw-1/p23"]["time"] == datetime(2024, 3, 5, 15, 25, 47, 161873, tzinfo=UTC)
    assert got["sw-1/p23"]["source"] == "ufm"
    # Each row's own timestamp is its source time; the sample holds one per row.
    assert got["sw-1/p23"]["source_time"] == got["sw-1/p23"]["time"]
    assert all(r["source_time"] is not None for r in got.values())


def test_prometheus_line_timestamps_are_each_ports_source_time() -> None:
    text = (
        b'PortXmitDataExtended{port_guid="0xa",port_num="1"} 10 1700000000000\n'
        b'PortXmitDataExtended{port_guid="0xb",port_num="1"} 20 1700000009500\n'
        b'PortRcvDataExtended{port_guid="0xb",port_num="1"} 20 1700000009000\n'
        b'PortRcvDataExtended{port_guid="0xc",port_num="1"} 20\n'
    )
    got = rows(parse_prometheus(text, PortKeys(None), SpellingCache(), now=NOW))
    a, b, c = (got[f"0x000000000000000{k}/1"] for k in "abc")
    assert a["source_time"] == datetime.fromtimestamp(1700000000, UTC)
    assert b["source_time"] == datetime.fromtimestamp(1700000009.5, UTC)  # its latest line
    assert c.get("source_time") is None  # no timestamp on its line: the scrape time stands
    assert a["time"] == b["time"] == datetime.fromtimestamp(1700000009.5, UTC)


def test_tfs_unit_suffix_decides_the_data_scale() -> None:
    doc = {
        "timestamp": "2024-03-05 16:26:11",
        "type": "full",
        "values": [
            {"timestamp": 1709652347161873, "node_guid": "0x1", "port_guid": "0x1", "port_num": 1,
             "Infiniband_MBOut_u_MB": 3, "Infiniband_MBIn": 5, "Infiniband_PckOut_u_Packets": 7},
        ],
    }  # fmt: skip
    got = rows(parse_tfs_json(json.dumps(doc).encode(), PortKeys(None)))
    assert got["0x0000000000000001/1"]["tx_bytes"] == 3_000_000  # an explicit byte unit
    assert got["0x0000000000000001/1"]["rx_bytes"] == 20  # no unit: 4-octet words
    assert counter_spec("Infiniband_MBOut_u_Gb").scale == 4  # type: ignore[union-attr]
    assert counter_spec("Infiniband_Normalized_MBOut_f_u_Percent") is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"timestamp": "x", "type": "full", "values": [{"port_guid": "0x1", "port_num', "not JSON"),
        (b'{"timestamp": "x", "type": "full", "values": 3}', "no 'values' list"),
        (b'{"values": [{"port_guid": "zz-not-a-guid", "port_num": 1, "Infiniband_PckIn": 1}]}', "not a GUID"),
        (b"<html><body>502 Bad Gateway</body></html>", "not JSON"),
    ],
)
def test_tfs_garbage_fails_with_a_reason(payload: bytes, message: str) -> None:
    with pytest.raises(TelemetryParseError, match=message):
        parse_tfs_json(payload, PortKeys(None))


# -- Prometheus text ---------------------------------------------------------------------------


def test_documented_prometheus_lines() -> None:
    batch = parse_prometheus(DOC_EXAMPLE, PortKeys(None), SpellingCache(), now=NOW)
    got = rows(batch)
    assert list(got) == ["0x0002c90300f172a2/2"]  # the port GUID names the port, any spelling
    r = got["0x0002c90300f172a2/2"]
    assert r["tx_bytes"] == 85554128244 * 4
    assert r["tx_packets"] == 1188251785
    assert r["time"] == datetime(2021, 8, 11, 12, 11, 45, 941000, tzinfo=UTC)  # the ms timestamp, not NOW
    assert batch.schema.metadata.get(COUNTER_BITS_KEY) is None  # Extended counters are 64-bit


def test_guid_spellings_join_into_one_port_of_the_inventory() -> None:
    fabric = Fabric.from_specs({"h": "host"}, [PortSpec("h", "mlx5_1", guid="0x0002c90300f172a2", num=2)], [])
    text = (
        b'PortXmitPktsExtended{node_guid="2c90300f172a0",port_guid="0x0002C90300F172A2",port_num="2"} 11\n'
        b'PortRcvPktsExtended{node_guid="2c90300f172a0",port_guid="2c90300f172a2",port_num="2"} 22\n'
        b'PortRcvDataExtended{port_guid="0002c90300f172a2",port_num="2"} 33\n'
    )
    keys = PortKeys(fabric)
    batch = parse_prometheus(text, keys, SpellingCache(), now=NOW)
    assert rows(batch) == {
        "h/mlx5_1": {"time": NOW, "port": "h/mlx5_1", "source": "ufm", "tx_packets": 11, "rx_packets": 22,
                     "rx_bytes": 132},
    }  # fmt: skip
    # The batch's dictionary is the fabric's key list (same for every poll).
    assert batch.column("port").dictionary.to_pylist() == fabric.keys


def test_comments_blank_lines_missing_timestamps_nan_inf_and_escaped_labels() -> None:
    text = (
        b"# HELP PortRcvErrorsExtended Total number of packets containing an error\n"
        b"# TYPE PortRcvErrorsExtended counter\n"
        b"\n"
        b'PortRcvErrorsExtended{port_guid="0xa",port_num="1"} 5\n'
        b'PortRcvErrorsExtended{port_guid="0xb",port_num="1",desc="say \\"hi\\" } and {"} 6\n'
        b"# a free comment with a } brace\n"
        b'CableInfo_Temperature{port_guid="0xa",port_num="1"} NaN\n'
        b'CableInfo_Temperature{port_guid="0xb",port_num="1"} +Inf\n'
        b'CableInfo_Temperature{port_guid="0xc",port_num="3"} 41.5\n'
        b'fec_mode_active{port_guid="0xa",port_num="1"} 14\n'
        b"ufm_telemetry_up 1\n"
        b'raw_ber{port_guid="0xa",port_num="1"} 1.5E-09\n'
    )
    got = rows(parse_prometheus(text, PortKeys(None), SpellingCache(), now=NOW))
    a, b, c = "0x000000000000000a/1", "0x000000000000000b/1", "0x000000000000000c/3"
    assert got[a]["rcv_errors"] == 5 and got[a]["fec_mode"] == 14
    assert got[b]["rcv_errors"] == 6  # the escaped quotes and braces in a label value did not break it
    assert "temperature_celsius" not in got[a] and "temperature_celsius" not in got[b]  # NaN, +Inf: null
    assert got[c]["temperature_celsius"] == pytest.approx(41.5)
    assert got[a]["time"] == NOW  # no timestamps: the scrape time
    assert set(got) == {a, b, c}  # the label-less line names no port; raw_ber is not a counter


def test_legacy_counters_are_declared_narrow_and_saturating_and_lose_to_extended() -> None:
    text = (
        b'SymbolErrorCounter{port_guid="0xa",port_num="1"} 65535\n'
        b'SymbolErrorCounter{port_guid="0xb",port_num="1"} 9\n'
        b'SymbolErrorCounterExtended{port_guid="0xb",port_num="1"} 70000\n'
        b'LinkDownedCounter{port_guid="0xa",port_num="1"} 255\n'
        b'PortXmitData{port_guid="0xa",port_num="1"} 10\n'
    )
    batch = parse_prometheus(text, PortKeys(None), SpellingCache(), now=NOW)
    got = rows(batch)
    assert got["0x000000000000000a/1"]["symbol_errors"] == 65535
    assert got["0x000000000000000b/1"]["symbol_errors"] == 70000  # the Extended counter wins
    assert got["0x000000000000000a/1"]["tx_bytes"] == 40
    meta = batch.schema.metadata
    assert json.loads(meta[COUNTER_BITS_KEY]) == {"symbol_errors": 16, "link_downed": 8, "tx_bytes": 32}
    assert json.loads(meta[SATURATING_KEY]) == ["link_downed", "symbol_errors", "tx_bytes"]


def test_phy_counters_and_lanes() -> None:
    lines = [f'phy_raw_errors_lane{n}{{port_guid="0xa",port_num="1"}} {10 + n}' for n in range(4)]
    lines += [
        'phy_received_bits{port_guid="0xa",port_num="1"} 1000000000000',
        'phy_corrected_bits{port_guid="0xa",port_num="1"} 12',
    ]
    lines += [
        'rs_fec_uncorrectable_blocks{port_guid="0xa",port_num="1"} 2',
        'phy_raw_errors_lane1{port_guid="0xb",port_num="1"} 7',
    ]
    got = rows(parse_prometheus(("\n".join(lines) + "\n").encode(), PortKeys(None), now=NOW))
    a = got["0x000000000000000a/1"]
    assert a["fec_lane_errors"] == [10, 11, 12, 13]
    assert (a["phy_received_bits"], a["fec_corrected_bits"], a["fec_uncorrectable_blocks"]) == (10**12, 12, 2)
    assert got["0x000000000000000b/1"]["fec_lane_errors"] == [None, 7, None, None]


def test_label_cache_is_reused_across_polls() -> None:
    keys, cache = PortKeys(None), SpellingCache()
    parse_prometheus(DOC_EXAMPLE, keys, cache)
    assert len(cache.known) == 1
    again = DOC_EXAMPLE.replace(b"85554128244", b"85554128245")
    batch = parse_prometheus(again, keys, cache)
    assert len(cache.known) == 1  # same label block: no new resolution
    assert rows(batch)["0x0002c90300f172a2/2"]["tx_bytes"] == 85554128245 * 4


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "empty"),
        (b"\n\n", "empty"),
        (DOC_EXAMPLE[:-40], "truncated"),  # cut mid-line
        (b"<html>\n<body>502 Bad Gateway</body>\n</html>\n", "not Prometheus text"),
        (b'PortXmitDataExtended{port_guid="0xa",port_num="1"} 12 soon\n', "not Prometheus text"),
        (b'PortXmitDataExtended{port_guid="0xa",port_num="1" 12\n', "not Prometheus text"),
        (b'PortXmitDataExtended{port_guid="not-hex",port_num="1"} 12\n', "not a GUID: 'not-hex'"),
        (b'PortXmitDataExtended{port_guid="0xa",port_num="x"} 12\n', "port_num is not a number"),
    ],
)  # fmt: skip
def test_garbage_and_truncation_fail_the_whole_parse(payload: bytes, message: str) -> None:
    with pytest.raises(TelemetryParseError, match=message):
        parse_prometheus(payload, PortKeys(None), SpellingCache(), now=NOW)


# -- CSV ----------------------------------------------------------------------------------------


CSV = (
    "timestamp,source_id,tag,node_guid,port_guid,port_num,PortXmitDataExtended,PortRcvPktsExtended,"
    "CableInfo.Temperature,fec_mode_active,phy_effective_errors\n"
    "1709652347161873,0x248a070300ef19a0,,0x248a070300ef19a0,0x248a070300ef19a0,23,100,7,45C,14,0\n"
    "1709652347161873,0x0c42a103007ab890,,0x0c42a103007ab890,0x0c42a103007ab890,1,,8,N/A,,3\n"
)


def test_csv_values_units_nulls_and_guids() -> None:
    batch = parse_csv(CSV.encode(), PortKeys(tfs_fabric()), SpellingCache(), now=NOW)
    got = rows(batch)
    assert got["sw-1/p23"]["tx_bytes"] == 400
    assert got["sw-1/p23"]["rx_packets"] == 7
    assert got["sw-1/p23"]["temperature_celsius"] == pytest.approx(45.0)  # "45C"
    assert got["sw-1/p23"]["fec_mode"] == 14
    assert "tx_bytes" not in got["host-a/mlx5_0"]  # empty field: null, not 0
    assert "temperature_celsius" not in got["host-a/mlx5_0"]  # N/A
    assert got["host-a/mlx5_0"]["rx_packets"] == 8
    assert got["host-a/mlx5_0"]["time"] == datetime(2024, 3, 5, 15, 25, 47, 161873, tzinfo=UTC)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (CSV[:-9], "truncated"),
        ("timestamp,foo,bar\n1,2,3\n", "has no port_guid"),
        (
            "timestamp,port_guid,port_num,PortXmitDataExtended\n1,0x1\n",
            "not UFM telemetry CSV",
        ),  # no full row
    ],
)
def test_csv_garbage_fails(payload: str, message: str) -> None:
    with pytest.raises(TelemetryParseError, match=message):
        parse_csv(payload.encode(), PortKeys(None), now=NOW)


def test_sniff_format() -> None:
    assert sniff_format(b"x", "/csv/xcset/low_freq") == "csv"
    assert sniff_format(b"x", "/json") == "json"
    assert sniff_format(b"{}", "/metrics") == "json"
    assert sniff_format(CSV.encode(), "/x") == "csv"
    assert sniff_format(DOC_EXAMPLE, "/metrics") == "prometheus"
    assert sniff_format(b'up{a="1,2"} 1\n', "/") == "prometheus"


def test_batches_carry_the_canonical_schema() -> None:
    batch = parse_prometheus(DOC_EXAMPLE, PortKeys(None), now=NOW)
    assert batch.schema.remove_metadata() == PORT_SAMPLE.remove_metadata()


def test_irregular_whitespace_and_mixed_timestamps() -> None:
    text = (
        b'PortXmitPktsExtended{port_guid="0xa",port_num="1"}\t5\t1628683905941\n'
        b'PortXmitPktsExtended{port_guid="0xb",port_num="1"}  6\n'
        b'PortRcvPktsExtended{port_guid="0xa",port_num="1"} 7 1628683915941 \n'
    )
    batch = parse_prometheus(text, PortKeys(None), now=NOW)
    got = rows(batch)
    assert got["0x000000000000000a/1"]["tx_packets"] == 5
    assert got["0x000000000000000b/1"]["tx_packets"] == 6
    assert got["0x000000000000000a/1"]["rx_packets"] == 7
    latest = datetime(2021, 8, 11, 12, 11, 55, 941000, tzinfo=UTC)
    assert got["0x000000000000000a/1"]["time"] == latest
    trailing = b'PortXmitPktsExtended{port_guid="0xa",port_num="1"} 8 \n'  # a blank before the newline
    again = rows(parse_prometheus(trailing, PortKeys(None), now=NOW))
    assert again["0x000000000000000a/1"]["tx_packets"] == 8 and again["0x000000000000000a/1"]["time"] == NOW


def test_a_page_of_unparsable_lines_fails_fast() -> None:
    text = b"".join(b"line %d of a log file, not metrics\n" % i for i in range(200_000))
    with pytest.raises(TelemetryParseError, match=r"not Prometheus text: 'line \d+ of a log file"):
        parse_prometheus(text, PortKeys(None), now=NOW)


def test_csv_duplicate_port_rows_keep_the_last() -> None:
    dup = (
        CSV + "1709652347161873,0x248a070300ef19a0,,0x248a070300ef19a0,0x248a070300ef19a0,23,500,9,46C,14,0\n"
    )
    got = rows(parse_csv(dup.encode(), PortKeys(None), now=NOW))
    assert got["0x248a070300ef19a0/23"]["tx_bytes"] == 2000
    assert got["0x248a070300ef19a0/23"]["temperature_celsius"] == pytest.approx(46.0)


@pytest.mark.parametrize(
    ("parse", "payload"),
    [
        (parse_prometheus, b"# HELP up 1 when up\n# TYPE up gauge\nup 1\n"),
        (parse_csv, b"timestamp,source_id,tag,node_guid,port_guid,port_num,PortXmitDataExtended\n"),
        (parse_tfs_json, b'{"timestamp": "2024-03-05 16:26:11", "type": "full", "values": []}'),
    ],
)
def test_documents_without_ports_give_an_empty_batch(parse: Any, payload: bytes) -> None:
    batch = parse(payload, PortKeys(None), now=NOW)
    assert batch.num_rows == 0 and record_kind(batch.schema) == "port_sample"


def test_a_bad_line_or_value_is_skipped_and_counted_not_the_scrape() -> None:
    """One garbage value nulls its cell; one line that is not Prometheus text, or names no
    usable port, is left out; the rest of the payload is the batch, and each skip is counted."""
    good = b'PortXmitPktsExtended{port_guid="0xb",port_num="1"} 5\n'
    text = (
        good
        + b'PortXmitDataExtended{port_guid="0xa",port_num="1"} 12abc 1628683905941\n'
        + b'PortRcvPktsExtended{port_guid="0xa",port_num="1"} 7\n'
        + b"this line is no sample\n"
        + b'PortRcvPktsExtended{port_guid="not-hex",port_num="1"} 9\n'
    )
    skipped: Counter[str] = Counter()
    got = rows(parse_prometheus(text, PortKeys(None), SpellingCache(), now=NOW, skipped=skipped))
    assert got["0x000000000000000b/1"]["tx_packets"] == 5
    assert got["0x000000000000000a/1"]["rx_packets"] == 7 and "tx_bytes" not in got["0x000000000000000a/1"]
    assert len(got) == 2
    assert skipped == {"not_a_number": 1, "malformed_line": 1, "bad_port": 1}


def test_csv_short_row_and_garbage_value_are_skipped_and_counted() -> None:
    text = CSV.replace(",100,", ",1x0,") + "1709652347161873,0x1,,0x1,0x1,1,100\n"  # a short row
    skipped: Counter[str] = Counter()
    got = rows(parse_csv(text.encode(), PortKeys(None), now=NOW, skipped=skipped))
    assert "tx_bytes" not in got["0x248a070300ef19a0/23"] and got["0x248a070300ef19a0/23"]["rx_packets"] == 7
    assert len(got) == 2
    assert skipped == {"not_a_number": 1, "malformed_line": 1}
