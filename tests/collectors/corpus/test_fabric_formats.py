"""graywire's fabric-side parsers over every real capture in the corpus (SOURCES.md per folder).

Formats: ``ibnetdiscover`` (topology file and ``-p`` ports report), ``perfquery`` (``-x``, ``-E``),
snmpsim recordings of switches (IF-MIB, PFC MIBs, LLDP-MIB), UFM REST ``/resources/links`` and
``/resources/ports``, and UFM Telemetry (TFS JSON). Every capture has a row of expected values below,
read off the capture itself; a capture a parser misreads today is marked ``xfail(strict=True)`` with
what it gets wrong, and asserts what it should read.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from graywire.collectors.ib.ibnetdiscover import UNREADABLE, IbnetdiscoverResult, parse_ibnetdiscover
from graywire.collectors.ib.perfquery import parse_perfquery, perfquery_batch
from graywire.collectors.schemas import COUNTER_BITS_KEY
from graywire.collectors.ufm.ports import PortKeys
from graywire.collectors.ufm.rest import parse_links, parse_ports
from graywire.collectors.ufm.telemetry import TelemetryParseError, parse_tfs_json, sniff_format
from tests.collectors.corpus.conftest import CORPUS, captures, ids

G = 10**9
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
#: snmpsim recordings are not kept here: the public ones (LibreNMS's) are GPL-3.0; the five real
#: ones beside the repository (../shared/fixtures/real/snmp) are tested in tests/collectors/snmp.
FORMATS = ("ufm_rest_ports", "ufm_rest_links", "ufm_telemetry", "perfquery", "ibnetdiscover")


def _params(paths: list[Path], xfail: dict[str, str]) -> list:
    """One parameter per capture; those in ``xfail`` carry a strict xfail with the reason."""
    return [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=xfail[p.name])) if p.name in xfail else p
        for p in paths
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_capture_has_a_sources_row(fmt: str) -> None:
    sources = (CORPUS / fmt / "SOURCES.md").read_text()
    for path in captures(fmt):
        assert f"`{path.name}`" in sources, f"{fmt}/{path.name} has no row in SOURCES.md"
        assert path.stat().st_size < 200_000, path.name


# -- ibnetdiscover -----------------------------------------------------------------------------

IBNET = captures("ibnetdiscover")

#: (type, GUID, port) of a port line -> (width, speed name, speed_bps, peer (type, GUID, port, lid)).
Sample = dict[tuple[str, str, int], tuple[int | None, str | None, int | None, tuple[str, str, int, int]]]

#: file -> ports read, formats, skipped lines by reason, Counter of (width, speed), samples.
IBNET_EXPECTED: dict[str, dict[str, Any]] = {
    "ufm_sdk_r_ufm_lab_topology_fdr10_fdr_edr_hdr.txt": {
        "ports": 32,
        "formats": {"topology"},
        "skipped": {},
        "speeds": {(4, "FDR"): 24, (4, "EDR"): 4, (4, "FDR10"): 2, (4, "HDR"): 2},
        "types": {"SW": 19, "CA": 13},
        "samples": {
            ("SW", "0xb8599f0300fc6de4", 3): (4, "FDR", 56 * G, ("SW", "0x0002c903007b78b0", 1, 19)),
            # The SX6036's loopback cables: both ends on one switch.
            ("SW", "0x0002c903007b78b0", 25): (4, "FDR10", 40 * G, ("SW", "0x0002c903007b78b0", 26, 19)),
            ("SW", "0x0002c903007b78b0", 28): (4, "FDR", 56 * G, ("SW", "0x0002c903007b78b0", 29, 19)),
            # A CA port line names its port GUID; the switch's peer is the node GUID.
            ("CA", "0xec0d9a03007d7d0b", 1): (4, "EDR", 100 * G, ("SW", "0xb8599f0300fc6de4", 24, 13)),
            ("CA", "0xb8599f0300fc6dec", 1): (4, "HDR", 200 * G, ("SW", "0xb8599f0300fc6de4", 41, 13)),
        },
    },
    "ufm_sdk_selene_compute_hdr_excerpt.txt": {
        "ports": 1427,
        "formats": {"topology"},
        "skipped": {},
        "speeds": {(4, "HDR"): 1427},
        "types": {"SW": 1427},
        "samples": {
            ("SW", "0x1c34da0300728866", 1): (4, "HDR", 200 * G, ("CA", "0x1c34da0300608820", 1, 837)),
            ("SW", "0x1c34da0300728866", 39): (4, "HDR", 200 * G, ("SW", "0x1c34da030060a40c", 39, 102)),
        },
    },
    "ufm_sdk_selene_storage_edr_hdr_excerpt.txt": {
        "ports": 1787,
        "formats": {"topology"},
        "skipped": {},
        "speeds": {(4, "EDR"): 240, (4, "HDR"): 1547},
        "types": {"SW": 1787},
        "samples": {
            ("SW", "0x0c42a103009d6eb6", 1): (4, "EDR", 100 * G, ("CA", "0x0c42a10300595394", 1, 1351)),
        },
    },
    # The correct reading of the PuTTY log: 355 switch port lines and 125 CA port lines.
    "ufm_sdk_ndt_director_putty_crlf_no_tabs_hdr_excerpt.txt": {
        "ports": 480,
        "formats": {"topology"},
        "skipped": {},
        "speeds": {(4, "HDR"): 479, (4, "EDR"): 1},
        "types": {"SW": 355, "CA": 125},
        "samples": {
            # An MCS8500 line card (director leaf) to an MQM8700 port 28.
            ("SW", "0x0c42a1030095b978", 1): (4, "HDR", 200 * G, ("SW", "0x0c42a10300cf2b68", 28, 193)),
            ("CA", "0x043f720300b23c1c", 1): (4, "HDR", 200 * G, ("SW", "0x0c42a10300a9b026", 16, 3894)),
        },
    },
    # GUIDs redacted by the author: no line names a port, so none is read and none invented; the
    # prompt, the Switch line, the 5 port lines and "...omitted" are counted, never raised on.
    "charlie0129_blog_qm9700_2x_ndr_split_redacted_guids.txt": {
        "ports": 0,
        "formats": set(),
        "skipped": {UNREADABLE: 8},
        "speeds": {},
        "types": {},
        "samples": {},
    },
    "rdma_core_man_topology_example_voltaire_sdr_1x.txt": {
        "ports": 14,
        "formats": {"topology"},
        "skipped": {},
        "speeds": {(4, "SDR"): 12, (1, "SDR"): 2},
        "types": {"SW": 9, "CA": 5},
        "samples": {
            # A 1x link between the two switches: 2.5 Gb/s, degraded width.
            ("SW", "0x0008f10400410015", 1): (1, "SDR", round(2.5 * G), ("SW", "0x005442ba00003080", 10, 6)),
            ("CA", "0x0008f1040396055a", 2): (4, "SDR", 10 * G, ("SW", "0x005442ba00003080", 8, 6)),
            ("CA", "0x0008f10403960559", 1): (1, "SDR", round(2.5 * G), ("SW", "0x005442ba00003080", 12, 6)),
        },
    },
}

IBNET_XFAIL: dict[str, str] = {}


def _ib(path: Path) -> IbnetdiscoverResult:
    return parse_ibnetdiscover(path.read_bytes().decode())


@pytest.mark.parametrize("path", _params(IBNET, IBNET_XFAIL), ids=ids(IBNET))
def test_ibnetdiscover(path: Path) -> None:
    exp = IBNET_EXPECTED[path.name]
    r = _ib(path)
    assert dict(r.skipped) == exp["skipped"]
    assert len(r.ports) == exp["ports"]
    assert r.formats == exp["formats"]
    assert Counter((p.width, p.speed) for p in r.ports) == exp["speeds"]
    assert Counter(p.end.type for p in r.ports) == exp["types"]
    by_end = {(p.end.type, p.end.guid, p.end.num): p for p in r.ports}
    for key, (width, speed, bps, peer) in exp["samples"].items():
        port = by_end[key]
        assert (port.width, port.speed, port.speed_bps) == (width, speed, bps), key
        assert port.peer is not None
        assert (port.peer.type, port.peer.guid, port.peer.num, port.peer.lid) == peer, key
    # A topology port line is a cabled port: each names its peer.
    assert all(p.peer is not None for p in r.ports)


def test_ibnetdiscover_putty_log_ca_lines_still_parse() -> None:
    """What the tab-less capture gives today: its CA blocks, read right (CRLF line ends too)."""
    r = _ib(CORPUS / "ibnetdiscover" / "ufm_sdk_ndt_director_putty_crlf_no_tabs_hdr_excerpt.txt")
    cas = [p for p in r.ports if p.end.type == "CA"]
    assert len(cas) == 125
    first = cas[0]
    assert (first.end.guid, first.end.lid, first.end.description) == (
        "0x043f720300b23c1c",
        4052,
        "SAT111092710037 ibp213s0f0",
    )
    assert first.peer is not None and first.peer.description == "MF0;sat11-0101-0927-20ib0:MQM8700/U1"
    assert first.speed_bps == 200 * G
    # Hosts the SM has not given a LID yet keep LID 65535.
    assert sum(p.end.lid == 65535 for p in cas) > 0


# -- perfquery ---------------------------------------------------------------------------------

PERFQUERY = captures("perfquery")

#: file -> blocks (kind, lid, port, number of numeric fields), a few raw fields, canonical columns.
PERFQUERY_EXPECTED: dict[str, dict[str, Any]] = {
    "infiniband_exporter_perfquery_x_hdr_switch_port_xmit_discards.out": {
        "blocks": [("extended", 2052, 1, 25)],
        "fields": {
            "PortXmitDiscards": 20046,
            "LinkDownedCounter": 1,
            "PortXmitWait": 41864608,
            "CounterSelect2": 0,
        },
        "columns": {
            "tx_bytes": 178791657177235 * 4,
            "rx_bytes": 178762341961629 * 4,
            "tx_packets": 393094651266,
            "rx_packets": 387654829341,
            "xmit_discards": 20046,
            "link_downed": 1,
            "rcv_switch_relay_errors": 7,
            "xmit_wait_ticks": 41864608,
            "symbol_errors": 0,
        },
    },
    "infiniband_exporter_perfquery_x_edr_hca_capmask2_zero.out": {
        "blocks": [("extended", 133, 1, 25)],
        "fields": {"PortMulticastRcvPkts": 3732373137, "CounterSelect": 0},
        "columns": {
            "tx_bytes": 37108676853855 * 4,
            "rx_bytes": 37225401952885 * 4,
            "rx_packets": 100583719365,
            "xmit_discards": 0,
            "xmit_wait_ticks": 0,
        },
    },
    "infiniband_exporter_perfquery_E_rcv_error_details_hdr_switch.out": {
        "blocks": [("rcv_error_details", 2052, 1, 8)],
        "fields": {"PortLocalPhysicalErrors": 0, "PortMalformedPktErrors": 0, "PortLoopingErrors": 0},
        "columns": {},  # PortRcvErrorDetails has no canonical column
    },
    # The root prompt line "# perfquery -x 10 1" is a '#' line too: an "other" block with no fields.
    "infiniband_diags_issue16_rhel75_perfquery_x_with_prompt.txt": {
        "blocks": [("other", None, None, 0), ("extended", 10, 1, 25)],
        "fields": {"QP1Dropped": 0, "VL15Dropped": 0},
        "columns": {
            "tx_bytes": 0,
            "rx_bytes": 0,
            "vl15_dropped": 0,
            "xmit_wait_ticks": 0,
            "symbol_errors": 0,
        },
    },
    # The wrapped "0x0000000)" line is no field; the header above it still opens the block.
    "netdata_issue2620_perfquery_e_x_email_wrapped_header.txt": {
        "blocks": [("extended", 21, 1, 22)],
        "fields": {"PortMulticastXmitPkts": 40, "ExcessiveBufferOverrunErrors": 0},
        "columns": {
            "tx_bytes": 13672645927 * 4,
            "rx_bytes": 2341975277576 * 4,
            "tx_packets": 1352112415,
            "rx_packets": 2467501178,
            "rcv_errors": 0,
            "xmit_wait_ticks": None,  # cut before PortXmitWait: unknown, not 0
        },
    },
}


@pytest.mark.parametrize("path", PERFQUERY, ids=ids(PERFQUERY))
def test_perfquery(path: Path) -> None:
    exp = PERFQUERY_EXPECTED[path.name]
    blocks = parse_perfquery(path.read_text())
    assert [(b.kind, b.lid, b.port, len(b.values)) for b in blocks] == exp["blocks"]
    fields = {k: v for b in blocks for k, v in b.values.items()}
    assert {k: fields[k] for k in exp["fields"]} == exp["fields"]
    batch = perfquery_batch([("sw/1", blocks)], NOW)
    row = batch.to_pylist()[0]
    assert row["port"] == "sw/1" and row["source"] == "perfquery"
    for col, value in exp["columns"].items():
        assert row.get(col) == value, col
    # PortCountersExtended values are 64 bits wide: no column declared narrow.
    assert COUNTER_BITS_KEY not in (batch.schema.metadata or {})


# -- UFM REST ----------------------------------------------------------------------------------

PORTS = captures("ufm_rest_ports")
#: file -> (GUID of the port's switch where the excerpt ends before its own, then per port key:
#: phys_state, logical_state, speed_bps, width, enabled_speed_bps).
PORTS_EXPECTED: dict[str, tuple[str | None, dict[str, tuple[Any, ...]]]] = {
    # A port that is not up: speed and width JSON null, enabled/supported speeds empty lists. It
    # is on sw-ufm-ndr03, 0x900a840300ac8c40 in the v6.20.0 links example beside this folder.
    "ufm_rest_api_guide_v6.22.1_get_all_ports_ndr_switch_polling_null_speed_excerpt.json": (
        "900a840300ac8c40",
        {"0x900a840300ac8c40/52": (2, 1, None, None, None)},
    ),
}


def first_object(text: str) -> dict[str, Any]:
    """The first JSON object of a published example as it stands; one that the copy cuts off
    is closed after its last complete member (an excerpt: nothing after the cut is invented)."""
    start = text.index("{")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError:
        obj, _ = json.JSONDecoder().raw_decode(text[start:].rstrip().rstrip(",") + "}")
    return obj


@pytest.mark.parametrize("path", PORTS, ids=ids(PORTS))
def test_ufm_rest_ports(path: Path) -> None:
    guid, exp = PORTS_EXPECTED[path.name]
    text = path.read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # an excerpt: the list and the object are not closed
    port = first_object(text)
    if guid is not None:
        assert "guid" not in port  # the copy ends before it; the test names the switch's
        port["guid"] = guid
    batch, caps = parse_ports([port], PortKeys(None), NOW)
    rows = {r["port"]: r for r in batch.to_pylist()}
    cap = {r["port"]: r for r in caps.to_pylist()}
    for key, (phys, logical, bps, width, enabled) in exp.items():
        assert (rows[key]["phys_state"], rows[key]["logical_state"]) == (phys, logical)
        # A port that is not up has no speed: null (unknown), never 0.
        assert (rows[key]["speed_bps"], rows[key]["width"]) == (bps, width)
        assert cap[key]["enabled_speed_bps"] == enabled


LINKS = captures("ufm_rest_links")

#: file -> (a_port, b_port) of the first link, its width as published.
LINKS_EXPECTED: dict[str, tuple[tuple[str, str], str]] = {
    # A loopback cable: both ends on one switch; the name lists them the other way round.
    "ufm_rest_api_guide_v6.11.1_get_all_links_ib_4x_loopback_cable.json": (
        ("0x0002c903007b78b0/29", "0x0002c903007b78b0/28"),
        "IB_4x",
    ),
    # Keyed by port number (5), not by the port label dname "1/3/1".
    "ufm_rest_api_guide_v6.20.0_get_all_links_ndr_port_labels.json": (
        ("0x900a840300ac8c40/5", "0x9c0591030085abc0/5"),
        "4x",
    ),
    # A host end keyed by its system GUID and "HCA-1/2" (dname), port number "2", GUIDs without 0x.
    "ufm_rest_api_guide_v6.11.1_get_links_of_system_hca_dname_excerpt.json": (
        ("0x248a070300f88fe0/20", "0xb8599f03000a77d0/2"),
        "IB_4x",
    ),
}


@pytest.mark.parametrize("path", LINKS, ids=ids(LINKS))
def test_ufm_rest_links(path: Path) -> None:
    (a, b), width = LINKS_EXPECTED[path.name]
    text = path.read_text()
    # As published the examples are not JSON ("}, ] ..."): take the first link object as it stands.
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    link = first_object(text)
    assert link["width"] == width
    table = parse_links([link], PortKeys(None))
    assert table.to_pylist() == [{"a_port": a, "b_port": b, "source": "ufm"}]


# -- UFM Telemetry -----------------------------------------------------------------------------

TELEMETRY = captures("ufm_telemetry")

#: file -> sniffed form, port key of each row, source time of the first row.
TELEMETRY_EXPECTED: dict[str, tuple[str, list[str], datetime]] = {
    "ufm_sdk_tfs_readme_single_record_meta_fields_switchib.json": (
        "json",
        ["0xe41d2d030003e450/10"],
        datetime(2022, 2, 9, 12, 52, 15, 311315, tzinfo=UTC),  # "1644411135311315" µs, a string
    ),
}
TELEMETRY_XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("path", TELEMETRY, ids=ids(TELEMETRY))
def test_ufm_telemetry_sniffed_form(path: Path) -> None:
    form, _, _ = TELEMETRY_EXPECTED[path.name]
    assert sniff_format(path.read_bytes()) == form


@pytest.mark.parametrize("path", _params(TELEMETRY, TELEMETRY_XFAIL), ids=ids(TELEMETRY))
def test_ufm_telemetry(path: Path) -> None:
    _, keys, source_time = TELEMETRY_EXPECTED[path.name]
    try:
        batch = parse_tfs_json(path.read_bytes(), PortKeys(None))
    except TelemetryParseError as e:
        pytest.fail(f"refused: {e}")
    rows = batch.to_pylist()
    assert [r["port"] for r in rows] == keys
    assert rows[0]["source_time"] == source_time
    # UFM Telemetry carries counters, never a link speed or width.
    assert all(r["speed_bps"] is None and r["width"] is None for r in rows)
