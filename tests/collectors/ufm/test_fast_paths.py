"""The UFM Telemetry parsers' fast paths against their general ones, on generated payloads.

Each fast path has a general path it falls back to, which is the straightforward parse: label
blocks hashed line by line, each line's brace searched, line tails read again by the CSV
reader, label blocks searched label by label, CSV cells read as text for the exact number
parser, every poll's spellings looked up in the cache as if new, port keys resolved one by one
(:class:`KeyResolver`). The payloads are UFM-like with
the awkward parts mixed in (families missing ports, reordered or repeated, spellings, odd
tails and values, junk lines), and both paths must give the same batch, skips or error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graywire.collectors.base import KeyResolver
from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.ufm import ports
from graywire.collectors.ufm import telemetry as T
from graywire.collectors.ufm.ports import BAD, PortKeys, SpellingCache
from tests.collectors.ufm.test_parse_golden import NOW, _outcome
from tests.strategies import PROPERTY


@contextmanager
def general_paths() -> Iterator[None]:
    """Every fast path off: what the parsers did before them."""
    heads = T._heads
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(ports, "same_strings", lambda a, b: False))
        for name, value in (
            ("same_strings", lambda a, b: False),
            ("_tail_views", lambda tails, width: None),
            ("_MAX_RUNS", -1),
            ("_heads", lambda batches, guess: heads(batches, False)),
            ("_csv_type", lambda column: pa.string()),
            ("_UFM_LABELS", "^\x00(?P<node>)(?P<port>)(?P<num>)$"),  # matches no label block
        ):
            stack.enter_context(mock.patch.object(T, name, value))
        yield


def _fabric() -> Fabric:
    ports = [
        *(PortSpec("h1", f"mlx5_{i}", guid=f"0x00000000000a{i:04x}", num=1) for i in range(3)),
        *(PortSpec("sw", f"p{n}", guid="0xb0000", num=n) for n in range(1, 4)),
    ]
    return Fabric.from_specs({"h1": "host", "sw": "leaf"}, ports, [])


def _parse(parse: Callable[..., pa.RecordBatch], payloads: list[bytes], fabric: bool) -> list[dict[str, Any]]:
    keys, cache = PortKeys(_fabric() if fabric else None), SpellingCache()
    out = []
    for p in payloads:
        skipped: Counter[str] = Counter()
        try:
            out.append({**_outcome(parse(p, keys, cache, now=NOW, skipped=skipped)), "skipped": skipped})
        except T.TelemetryParseError as e:
            out.append({"error": str(e), "skipped": skipped})
    return out


def _same_both_ways(parse: Callable[..., pa.RecordBatch], payloads: list[bytes], fabric: bool) -> None:
    fast = _parse(parse, payloads, fabric)
    with general_paths():
        general = _parse(parse, payloads, fabric)
    assert fast == general


# -- generated payloads ---------------------------------------------------------------------------

GUIDS = [0xA0000, 0xA0001, 0xA0002, 0xB0000, 0xC0FFEE]
NAMES = ["PortXmitDataExtended", "PortRcvPktsExtended", "SymbolErrorCounter", "phy_raw_errors_lane1",
         "CableInfo_Temperature", "raw_ber", "fec_mode_active", "PortXmitPkts"]  # fmt: skip
VALUES = ["0", "7", "123456789012", "18446744073709551615", "18446744073709551616", "41.5", "3E-9", "NaN",
          "+Inf", "-3", "12abc", "007", "1e3"]  # fmt: skip
TAILS = [
    "",
    " 1767571240000",
    " 1767571240123",
    " 1767571240",
    " -5",
    " 1²",
    " soon",
    "  ",
    " 17675712400001",
]


def _spell(guid: int, style: int) -> str:
    return [f"{guid:x}", f"0x{guid:016x}", f"0X{guid:X}", f" {guid:x} ", "nothex"][style]


@st.composite
def prometheus(draw: st.DrawFn) -> bytes:
    ports = draw(st.lists(st.tuples(st.sampled_from(GUIDS), st.integers(0, 3)), min_size=1, max_size=6))
    ufm = draw(st.booleans())  # UFM's own label layout, else a mix of spellings and orders
    lines = []
    for name in draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5)):
        order = draw(st.permutations(range(len(ports))))
        order = order[: draw(st.integers(max(1, len(order) - 2), len(order)))]
        tail = draw(st.sampled_from(TAILS[:2])) if ufm else None
        lines.append(f"# HELP {name} {name}\n# TYPE {name} counter\n")
        for i in order:
            guid, num = ports[i]
            if ufm:
                labels = (
                    f'source="0x{guid:016x}", node_guid="{guid:x}", port_guid="{guid:x}", port_num="{num}"'
                )
            else:
                style = draw(st.integers(0, 4))
                labels = draw(st.sampled_from([
                    f'port_guid="{_spell(guid, style)}",port_num="{num}"',
                    f'port_num="{num}", node_guid="{_spell(guid, style)}"',
                    f'{{port_guid="{_spell(guid, style)}"',
                    f'port_guid="{_spell(guid, style)}",desc="a }} b"',
                ]))  # fmt: skip
            t = tail if tail is not None else draw(st.sampled_from(TAILS))
            lines.append(f"{name}{{{labels}}} {draw(st.sampled_from(VALUES))}{t}\n")
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["junk line\n", "up 1\n", "\n"])))
    return "".join(lines).encode()


@PROPERTY
@given(st.lists(prometheus(), min_size=1, max_size=3), st.booleans())
def test_prometheus_fast_paths_give_what_the_general_ones_give(payloads: list[bytes], fabric: bool) -> None:
    _same_both_ways(T.parse_prometheus, payloads, fabric)


@st.composite
def csv(draw: st.DrawFn) -> bytes:
    names = draw(
        st.lists(st.sampled_from([*NAMES, "CableInfo.Temperature"]), min_size=1, max_size=4, unique=True)
    )
    rows = []
    for _ in range(draw(st.integers(0, 6))):
        guid = draw(st.sampled_from(GUIDS))
        cells = [draw(st.sampled_from(["", *VALUES[:6]] if draw(st.booleans()) else VALUES)) for _ in names]
        ts = draw(st.sampled_from(["1709652347161873", "", "1709652347", "-1", "x"]))
        rows.append(
            ",".join([ts, _spell(guid, draw(st.integers(0, 4))), str(draw(st.integers(0, 3))), *cells])
        )
    return (
        "timestamp,port_guid,port_num," + ",".join(names) + "\n" + "".join(r + "\n" for r in rows)
    ).encode()


@PROPERTY
@given(st.lists(csv(), min_size=1, max_size=3), st.booleans())
def test_csv_fast_path_gives_what_the_text_path_gives(payloads: list[bytes], fabric: bool) -> None:
    _same_both_ways(T.parse_csv, payloads, fabric)


def test_a_brace_where_the_line_before_had_its_first_is_not_taken_for_it() -> None:
    """The second line's byte at the first line's name length is "{", but its own name is shorter."""
    text = (
        b'PortXmitPktsExtended{port_guid="0xa",port_num="1"} 5\n'
        b'PortRcvPktsExtended{{port_guid="0xb",port_num="1"} 6\n'
    )
    _same_both_ways(T.parse_prometheus, [text], False)
    got = {r["port"]: r for r in T.parse_prometheus(text, PortKeys(None), now=NOW).to_pylist()}
    assert got["0x000000000000000b/1"]["rx_packets"] == 6


# -- port keys --------------------------------------------------------------------------------------


@PROPERTY
@given(
    st.lists(
        st.tuples(st.sampled_from([*GUIDS, 0xB0001]), st.integers(0, 4), st.integers(0, 5)),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
def test_resolve_ids_names_ports_as_key_resolver_does(
    pairs: list[tuple[int, int, int]], fabric: bool
) -> None:
    inventory = _fabric() if fabric else None
    keys, resolver = PortKeys(inventory), KeyResolver.from_fabric(inventory)
    guids = [None if style == 5 else "" if style == 4 else _spell(g, style) for g, style, _ in pairs]
    nums = [n if n else None for _, _, n in pairs]
    ids = keys.resolve_ids(guids, nums, lenient=True)
    for guid, num, i in zip(guids, nums, ids.tolist(), strict=True):
        if guid is None or guid == "":
            assert i == -1
        elif guid == "nothex":
            assert i == BAD
        else:
            assert keys.keys[i] == resolver.resolve(guid, num)


def test_resolve_ids_appends_unknown_ports_in_order_of_first_sight() -> None:
    keys = PortKeys(_fabric())
    ids = keys.resolve_ids(["0xd2", "0xd1", "0xd2", "0xa0001", "0xd1"], [1, 2, 1, 1, None])
    assert ids.tolist() == [6, 7, 6, 1, 8]
    assert keys.keys[6:] == ["0x00000000000000d2/1", "0x00000000000000d1/2", "0x00000000000000d1/1"]


def test_a_fabric_guid_that_is_none_fails_the_key_table() -> None:
    bad = Fabric.from_specs({"h": "host"}, [PortSpec("h", "mlx5_0", guid="  ", num=1)], [])
    with pytest.raises(ValueError, match="not a GUID"):
        PortKeys(bad)
