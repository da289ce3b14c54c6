"""The UFM Telemetry parsers against outputs recorded from the straightforward implementation.

Each case is a sequence of payloads parsed with one port-key table and one label cache (so the
first parse resolves every port and the later ones come from the cache); for each parse the
recorded output is the whole batch (columns, types, schema metadata, the port dictionary), the
skip counters, or the error message. The payloads are the real TFS sample and its CSV and
Prometheus forms, a simulated fabric as a UFM serves it, and awkward variants: bad lines,
GUID spellings, duplicate samples, missing port numbers, shifted or reordered families, odd
values, empty and truncated payloads.

A change that alters any output fails here; when the change is meant, rewrite the record with
``python -m tests.collectors.ufm.test_parse_golden`` and review its diff.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.schemas import PORT_SAMPLE
from graywire.collectors.ufm.ports import PortKeys, SpellingCache
from graywire.collectors.ufm.telemetry import TelemetryParseError, parse_csv, parse_prometheus, parse_tfs_json
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.fabricsim.ufm_server import FakeUfm
from tests.collectors.ufm.conftest import make_sim
from tests.conftest import REAL_FIXTURES

RECORD = Path(__file__).with_name("parse_golden.json")
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PARSERS: dict[str, Callable[..., pa.RecordBatch]] = {
    "prometheus": parse_prometheus,
    "csv": parse_csv,
    "json": parse_tfs_json,
}


# -- fabrics --------------------------------------------------------------------------------------


def _tfs_fabric() -> Fabric:
    ports = [
        PortSpec("host-a", "mlx5_0", guid="C42A103007AB890", num=1),
        *(PortSpec("sw-1", f"p{n}", guid="0x248A070300EF19A0", num=n) for n in (1, 23, 36)),
    ]
    return Fabric.from_specs({"host-a": "host", "sw-1": "leaf"}, ports, [("host-a/mlx5_0", "sw-1/p1")])


def _small_fabric() -> Fabric:
    """Four HCA ports with their own GUIDs and a switch whose ports share one GUID."""
    ports = [
        *(PortSpec("h1", f"mlx5_{i}", guid=f"0x00000000000a{i:04x}", num=1) for i in range(4)),
        *(PortSpec("sw", f"p{n}", guid="0x00000000000b0000", num=n) for n in range(1, 5)),
    ]
    return Fabric.from_specs({"h1": "host", "sw": "leaf"}, ports, [])


FABRICS: dict[str, Callable[[], Fabric | None]] = {
    "none": lambda: None,
    "tfs": _tfs_fabric,
    "small": _small_fabric,
    "sim": lambda: build_fabric(TopologySpec(hosts=2)),
    "fake": lambda: make_sim().fabric,
}


# -- payloads -------------------------------------------------------------------------------------

COUNTERS = (
    "PortXmitDataExtended",
    "PortRcvDataExtended",
    "PortXmitPktsExtended",
    "SymbolErrorCounterExtended",
    "SymbolErrorCounter",
    "LinkDownedCounter",
    "PortXmitWait",
    "phy_received_bits",
    "phy_corrected_bits",
    "phy_symbol_errors",
    "phy_raw_errors_lane0",
    "phy_raw_errors_lane2",
    "rs_fec_corrected_blocks",
    "raw_ber",
    "fec_mode_active",
    "CableInfo_Temperature",
    "not_a_ufm_counter",
)


def _value(name: str, port: int, poll: int) -> str:
    if name == "raw_ber":
        return f"{1 + port % 7}E-0{9 - poll % 2}"
    if name == "CableInfo_Temperature":
        return f"{40 + port % 9}.5" if port % 5 else "41"
    if name == "fec_mode_active":
        return str(14 - port % 2)
    if name in ("SymbolErrorCounter", "LinkDownedCounter"):
        return str((port * 37 + poll) % 300)
    return str((port + 1) * 1_000_003 * (7 + COUNTERS.index(name)) + poll * 977)


def _sim_guids(fabric: Fabric) -> list[tuple[str, int]]:
    nums = fabric.port_num if fabric.port_num is not None else np.ones(fabric.n_ports, np.int16)
    return [(int(g, 16) if g else 0, int(n) or 1) for g, n in zip(fabric.guids, nums.tolist(), strict=True)]


def _labels(guid: int, num: int, style: int = 0) -> str:
    if style == 0:  # UFM's layout: each GUID spelled differently
        return f'source="0x{guid:016x}", node_guid="{guid:x}", port_guid="{guid:x}", port_num="{num}"'
    if style == 1:  # other order, upper case, colons, no blanks
        h = f"{guid:016X}"
        colons = ":".join(h[i : i + 4] for i in range(0, 16, 4))
        return f'port_num="{num}",port_guid="{colons}",node_guid="0X{h}"'
    return f'port_guid=" 0x{guid:x} " , port_num = "{num}", desc="a }} brace, and \\"quotes\\""'


def prometheus(
    fabric: Fabric,
    *,
    poll: int = 0,
    order: str = "families",
    drop: int = 0,
    reverse: tuple[str, ...] = (),
    style: Callable[[int, str], int] = lambda port, name: 0,
    ts: Callable[[int, str], str] = lambda port, name: " 1767571240000",
    extra: str = "",
) -> bytes:
    """A UFM scrape of ``fabric``: families in order with their HELP/TYPE lines (``order``
    "families") or every port's samples together ("ports"); ``drop`` leaves every ``drop``-th
    port out of the families after the first, ``reverse`` lists families written in reverse."""
    guids = _sim_guids(fabric)
    n = len(guids)

    def line(name: str, p: int) -> str:
        g, num = guids[p]
        return f"{name}{{{_labels(g, num, style(p, name))}}} {_value(name, p, poll)}{ts(p, name)}\n"

    out: list[str] = []
    if order == "ports":
        out += [line(name, p) for p in range(n) for name in COUNTERS]
    else:
        for k, name in enumerate(COUNTERS):
            out.append(f"# HELP {name} {name}\n# TYPE {name} counter\n")
            ports = [p for p in range(n) if not (drop and k and p % drop == k % drop)]
            out += [line(name, p) for p in (ports[::-1] if name in reverse else ports)]
    return ("".join(out) + extra).encode()


def csv(
    fabric: Fabric,
    *,
    poll: int = 0,
    rows: Callable[[int], list[int]] = lambda n: list(range(n)),
    cell: Callable[[int, str, str], str] = lambda port, name, value: value,
    guid: Callable[[int, int], str] = lambda port, g: f"0x{g:016x}",
    ts: str = "1709652347161873",
    extra: str = "",
) -> bytes:
    """UFM Telemetry CSV of ``fabric``: one row per port (in ``rows`` order), one column a counter."""
    guids = _sim_guids(fabric)
    names = [c.replace("CableInfo_Temperature", "CableInfo.Temperature") for c in COUNTERS]
    head = ",".join(["timestamp", "source_id", "tag", "node_guid", "port_guid", "port_num", *names])
    body = []
    for p in rows(len(guids)):
        g, num = guids[p]
        vals = [cell(p, nm, _value(c, p, poll)) for nm, c in zip(names, COUNTERS, strict=True)]
        body.append(",".join([ts, f"0x{g:016x}", "", f"{g:x}", guid(p, g), str(num), *vals]))
    return (head + "\n" + "\n".join(body) + "\n" + extra).encode()


def _real(form: str) -> bytes:
    from tests.collectors.ufm.test_parse_properties import CSV, DOC, PROM

    return {"json": json.dumps(DOC), "csv": CSV, "prometheus": PROM}[form].encode()


def _fake_ufm(form: str, polls: int = 2) -> list[bytes]:
    fake = FakeUfm(make_sim())
    out = []
    for _ in range(polls):
        out.append({"prometheus": fake.prometheus, "csv": fake.csv, "json": fake.tfs_json}[form]())
        fake.advance()
    return out


SIM = FABRICS["sim"]()
SMALL = _small_fabric()
CELLS = [
    "",
    "N/A",
    "nan",
    "45C",
    " 12 ",
    "+5",
    "-3",
    "1e3",
    "18446744073709551616",
    "inf",
    "1²",
    "0x10",
    "007",
    "18446744073709551615",
    "1.5",
    "null",
    "-",
    "NaN",
    "2.5e19",
]


def _cases() -> dict[str, tuple[str, str, list[bytes]]]:
    """name -> (format, fabric, payloads parsed in turn with one key table and one cache)."""
    P, C = "prometheus", "csv"
    return {
        # the real TFS sample and its CSV and Prometheus forms, with and without an inventory
        **{
            f"real-{form}-{fab}": (form, fab, [_real(form)] * 2)
            for form in (P, C, "json")
            for fab in ("none", "tfs")
        },
        # a simulated fabric as the fake UFM serves it, two polls
        **{f"fake-ufm-{form}": (form, "fake", _fake_ufm(form)) for form in (P, C, "json")},
        "fake-ufm-prometheus-no-inventory": (P, "none", _fake_ufm(P)),
        # Prometheus layouts
        "prom-families": (P, "sim", [prometheus(SIM), prometheus(SIM, poll=1), prometheus(SIM, poll=2)]),
        "prom-unknown-guids": (P, "small", [prometheus(SIM), prometheus(SMALL, poll=1)]),
        "prom-missing-ports": (P, "sim", [prometheus(SIM, drop=5), prometheus(SIM, drop=3, poll=1)]),
        "prom-reordered": (P, "sim", [prometheus(SIM, reverse=("PortRcvDataExtended", "raw_ber"))]),
        "prom-by-port": (P, "sim", [prometheus(SIM, order="ports"), prometheus(SIM, poll=1)]),
        "prom-spellings": (
            P,
            "small",
            [
                prometheus(SMALL, style=lambda p, n: (p + len(n)) % 3),
                prometheus(SMALL, style=lambda p, n: 1, poll=1),
                prometheus(SMALL, poll=2),
            ],
        ),
        "prom-timestamps": (
            P,
            "sim",
            [
                prometheus(SIM, ts=lambda p, n: "" if p % 4 == 0 else f" {1767571240000 + p * 10 + len(n)}"),
                prometheus(SIM, ts=lambda p, n: "\t1767571250000" if p % 3 else " 1767571250"),
                prometheus(SIM, ts=lambda p, n: ""),
            ],
        ),
        "prom-duplicates": (
            P,
            "small",
            [
                prometheus(SMALL) + prometheus(SMALL, poll=1, ts=lambda p, n: " 1767571245000"),
                prometheus(SMALL, poll=3) + prometheus(SMALL, poll=1, ts=lambda p, n: " 1767571200000"),
            ],
        ),
        "prom-bad-lines": (
            P,
            "small",
            [
                prometheus(
                    SMALL,
                    extra=(
                        "this is no sample\n"
                        'PortXmitDataExtended{port_guid="0xzz",port_num="1"} 5\n'
                        'PortXmitDataExtended{port_guid="0xa0000",port_num="x"} 5\n'
                        'PortXmitDataExtended{port_guid="0xa0000",port_num="70000"} 5\n'
                        'PortXmitDataExtended{port_guid="0xa0001",port_num="0"} 6\n'
                        'PortXmitDataExtended{node_guid="0xa0002"} 7\n'
                        'PortXmitDataExtended{port_guid="",node_guid="b0000",port_num="3"} 8\n'
                        'PortXmitDataExtended{port_guid="0xa0003",port_num="1"} 12abc 1767571240000\n'
                        'PortXmitDataExtended{port_guid="0xa0003",port_num="1" 9\n'
                        'PortRcvDataExtended{port_guid="0xa0003",port_num="1"} 9 soon\n'
                        'PortRcvDataExtended{port_guid="0xa0003",port_num="1"} 99 1²\n'
                        "# a comment with a } brace\n"
                        "ufm_up 1\n"
                        "\n"
                    ),
                )
            ],
        ),
        "prom-values": (
            P,
            "small",
            [
                "".join(
                    f'{name}{{port_guid="0x{0xA0000 + i:x}",port_num="1"}} {v}\n'
                    for i, v in enumerate([*CELLS, "NaN", "+Inf", "-Inf", "1.0", "4e9"])
                    if v.strip() and " " not in v
                    for name in (
                        "PortXmitPktsExtended",
                        "CableInfo_Temperature",
                        "LinkDownedCounter",
                        "phy_raw_errors_lane1",
                    )
                ).encode()
            ],
        ),
        "prom-only-comments": (P, "none", [b"# HELP up 1 when up\n# TYPE up gauge\nup 1\n"]),
        "prom-empty": (P, "none", [b"", b"\n \n"]),
        "prom-truncated": (P, "sim", [prometheus(SIM)[:-17], prometheus(SIM)]),
        "prom-garbage": (P, "none", [b"<html>\n<body>502 Bad Gateway</body>\n</html>\n"]),
        "prom-all-bad-ports": (P, "none", [b'PortXmitDataExtended{port_guid="nope",port_num="1"} 1\n']),
        "prom-crlf": (P, "small", [prometheus(SMALL).replace(b"\n", b"\r\n")]),
        # CSV
        "csv-fabric": (C, "sim", [csv(SIM), csv(SIM, poll=1)]),
        "csv-shuffled-duplicates": (
            C,
            "sim",
            [
                csv(SIM, rows=lambda n: [*range(n - 1, -1, -2), *range(0, n, 3)]),
                csv(SIM, rows=lambda n: [*range(n), *range(5)], poll=1),
            ],
        ),
        "csv-unknown-guids": (C, "small", [csv(SIM), csv(SMALL, poll=1)]),
        "csv-spellings": (
            C,
            "small",
            [
                csv(
                    SMALL,
                    guid=lambda p, g: [
                        f"{g:X}",
                        f" 0x{g:x} ",
                        f"0X{g:016X}",
                        f"{g:016x}"[:4] + ":" + f"{g:016x}"[4:8] + ":" + f"{g:016x}"[8:],
                        "0xnothex",
                        "",
                    ][p % 6],
                ),
            ],
        ),
        "csv-values": (
            C,
            "small",
            [
                csv(SMALL, cell=lambda p, n, v: CELLS[(p * 7 + len(n)) % len(CELLS)]),
                csv(SMALL, cell=lambda p, n, v: CELLS[(p * 3 + len(n)) % len(CELLS)]),
            ],
        ),
        "csv-timestamps": (
            C,
            "small",
            [csv(SMALL, ts=t) for t in ("1709652347", "1709652347161", "1709652347161873000", "", "x1")],
        ),
        "csv-short-and-long-rows": (
            C,
            "small",
            [csv(SMALL, extra="1,0x1,,0x1,0x1,1,5\n1,0x2,,0x2,0x2,1," + ",".join(["3"] * 30) + "\n")],
        ),
        "csv-stray-quote": (
            C,
            "small",
            [csv(SMALL, guid=lambda p, g: f'"0x{g:x}' if p == 2 else f"0x{g:x}")],
        ),
        "csv-quoted": (
            C,
            "small",
            [csv(SMALL, guid=lambda p, g: f'"0x{g:x}"', cell=lambda p, n, v: f'"{v}"')],
        ),
        "csv-crlf": (C, "small", [csv(SMALL).replace(b"\n", b"\r\n")]),
        "csv-no-port-num": (
            C,
            "small",
            [b"timestamp,port_guid,PortXmitDataExtended\n1,0xa0000,5\n1,0xb0000,6\n"],
        ),
        "csv-node-guid-only": (
            C,
            "small",
            [b"node_guid,port_num,PortRcvPktsExtended\n0xb0000,2,5\n0xa0001,,6\n"],
        ),
        "csv-header-only": (
            C,
            "none",
            [b"timestamp,source_id,tag,node_guid,port_guid,port_num,PortXmitDataExtended\n"],
        ),
        "csv-empty": (C, "none", [b"", b"\n"]),
        "csv-truncated": (C, "small", [csv(SMALL)[:-5]]),
        "csv-no-guid-column": (C, "none", [b"timestamp,foo\n1,2\n"]),
        "csv-garbage": (C, "none", [b"<html>\n<body>502, Bad Gateway</body>\n</html>\n"]),
        "csv-all-bad-ports": (C, "none", [b"port_guid,port_num,PortXmitDataExtended\nnope,1,5\n"]),
    }


# -- recording ------------------------------------------------------------------------------------


def _jsonable(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def _outcome(batch: pa.RecordBatch) -> dict[str, Any]:
    meta = {k.decode(): v.decode() for k, v in (batch.schema.metadata or {}).items()}
    fields = [f"{f.name}: {f.type}" for f in batch.schema]
    return {
        "fields": "port_sample" if fields == [f"{f.name}: {f.type}" for f in PORT_SAMPLE] else fields,
        "metadata": meta,
        "dictionary": batch.column("port").dictionary.to_pylist(),
        "columns": {  # all-null columns are left out (the fields list names them)
            name: _jsonable(col.to_pylist())
            for name, col in zip(batch.schema.names, batch.columns, strict=True)
            if col.null_count < len(col)
        },
    }


def run_case(form: str, fabric: str, payloads: list[bytes]) -> list[dict[str, Any]]:
    keys, cache = PortKeys(FABRICS[fabric]()), SpellingCache()
    out = []
    for payload in payloads:
        skipped: Counter[str] = Counter()
        try:
            batch = PARSERS[form](payload, keys, cache, now=NOW, skipped=skipped)
        except TelemetryParseError as e:
            out.append({"error": str(e), "skipped": dict(sorted(skipped.items()))})
            continue
        out.append({**_outcome(batch), "skipped": dict(sorted(skipped.items()))})
    return out


def _needs_fixtures() -> None:
    if not (REAL_FIXTURES / "ufm").is_dir():
        pytest.skip(f"real fixtures not found at {REAL_FIXTURES}")


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    _needs_fixtures()
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def cases() -> dict[str, tuple[str, str, list[bytes]]]:
    _needs_fixtures()
    return _cases()


def test_every_case_is_recorded(record: dict[str, Any], cases: dict[str, Any]) -> None:
    assert sorted(record) == sorted(cases)


@pytest.mark.parametrize("name", sorted(json.loads(RECORD.read_text())) if RECORD.exists() else [])
def test_parse_matches_the_record(name: str, record: dict[str, Any], cases: dict[str, Any]) -> None:
    got = json.loads(json.dumps(run_case(*cases[name])))  # as recorded: lists, ISO times
    want = record[name]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.keys() == w.keys(), f"payload {i}"
        for k in w:
            assert g[k] == w[k], f"payload {i}: {k}"


if __name__ == "__main__":
    cases = _cases()
    lines = [
        f"{json.dumps(name)}: {json.dumps(run_case(*c), sort_keys=True)}" for name, c in sorted(cases.items())
    ]
    RECORD.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {len(cases)} cases to {RECORD}")
