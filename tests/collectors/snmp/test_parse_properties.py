"""Property tests of the SNMP parsers, seeded from the real switch recordings: whatever value an
agent sends for one object, the batch is built with every port (a bad counter nulls its cell,
counted), and a walk raises only :class:`SnmpError` or gives tables.

The recordings are read as the walk would hand them over (``OID|type|value`` lines: integers as
int, strings as bytes), without an agent, so the examples stay fast.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyasn1.type import univ

from graywire.collectors.base import OUT_OF_RANGE
from graywire.collectors.schemas import PORT_SAMPLE
from graywire.collectors.snmp import oids as O
from graywire.collectors.snmp.config import SnmpSourceConfig
from graywire.collectors.snmp.parse import PortSelector, build_batch, columns_to_walk
from graywire.collectors.snmp.walk import SnmpError, Tables, Value, walk_columns
from tests.collectors.snmp.conftest import REAL, pysnmp_response
from tests.conftest import REAL_FIXTURES
from tests.strategies import PROPERTY

SNMP = REAL_FIXTURES / "snmp"
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
CFG = SnmpSourceConfig(
    targets=[{"host": "h", "name": "sw"}], pfc_mibs=["arista", "cisco", "ieee"], ieee_pfc_priority=3
)
COLUMNS = columns_to_walk(CFG, need_sys_name=True)
_INTS = {"2", "65", "66", "67", "70"}

pytestmark = pytest.mark.skipif(
    not SNMP.is_dir(),
    reason=f"real fixtures not found at {SNMP} (../shared/fixtures/real beside the repository)",
)


def records(name: str) -> list[tuple[tuple[int, ...], Value]]:
    """The recording's objects under the walked columns, in OID order, as the walk decodes them."""
    out = []
    for line in (SNMP / f"{name}.snmprec").read_text(errors="replace").splitlines():
        oid, typ, value = [*line.split("|", 2), "", ""][:3]
        o = tuple(int(x) for x in oid.split("."))
        if not any(o[: len(c)] == c for c in COLUMNS):
            continue
        v: Value = int(value) if typ in _INTS else bytes.fromhex(value) if typ == "4x" else value.encode()
        out.append((o, v))
    return sorted(out)


def tables_of(recs: list[tuple[tuple[int, ...], Value]]) -> Tables:
    t: Tables = {c: {} for c in COLUMNS}
    for o, v in recs:
        for c in COLUMNS:
            if o[: len(c)] == c:
                t[c][o[len(c) :]] = v
    return t


RECORDINGS = {k: records(v) for k, v in REAL.items()} if SNMP.is_dir() else {}
#: What a walk can hand over for an object: any integer (a broken agent's counter), any bytes.
values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**64, 2**63, -1, 10**30]),
    st.binary(max_size=40),
    st.none(),
)


@pytest.mark.parametrize("switch", list(REAL))
def test_one_object_saying_anything_nulls_at_most_its_cell(switch: str) -> None:
    recs = RECORDINGS[switch]
    n = len(PortSelector(CFG).ports(tables_of(recs)))
    assert n > 0  # the seed is real: unmutated, it has ports

    @PROPERTY
    @given(st.integers(0, len(recs) - 1), values)
    def check(i: int, value: Value) -> None:
        mutated = list(recs)
        mutated[i] = (mutated[i][0], value)
        tables = tables_of(mutated)
        ports = PortSelector(CFG).ports(tables)
        skipped: Counter[str] = Counter()
        batch = build_batch(tables, "sw", ports, NOW, CFG, skipped=skipped)
        assert batch.schema.remove_metadata() == PORT_SAMPLE.remove_metadata()
        assert abs(batch.num_rows - n) <= 1  # a changed ifName/ifType may add or drop its port
        assert set(skipped) <= {OUT_OF_RANGE}

    check()


def _varbind(o: tuple[int, ...], v: Value) -> tuple[Any, Any]:
    if isinstance(v, int):
        return o, univ.Integer(v)
    if isinstance(v, bytes):
        return o, univ.OctetString(v)
    return o, univ.Null("")


@pytest.mark.parametrize("switch", ["nxos", "arista"])
def test_a_walk_of_a_lying_agent_is_tables_or_an_snmp_error(switch: str) -> None:
    """An agent serving the recording with one value swapped and, in one answer, one OID
    replaced (going back, leaving the column, repeating): tables or SnmpError, never a loop."""
    recs = RECORDINGS[switch]
    keys = [o for o, _ in recs]
    oids = st.lists(st.integers(0, 2**32), min_size=1, max_size=14).map(lambda o: (1, 3, *o))

    @PROPERTY
    @given(
        st.integers(0, len(recs) - 1),
        values,
        st.integers(0, 40),
        oids | st.just(recs[0][0]),
        st.integers(1, 30),
    )
    def check(i: int, value: Value, lie_at: int, oid: tuple[int, ...], cut: int) -> None:
        served = list(recs)
        served[i] = (served[i][0], value)
        calls = [0]

        async def bulk(req: list[tuple[int, ...]], reps: int) -> Any:
            cols = []
            for start in req:  # each column resumes after its cursor, truncated like a real agent
                at = bisect.bisect_right(keys, tuple(start))
                cols.append(
                    [_varbind(*vb) for vb in served[at : at + min(reps, cut)]]
                    or [(tuple(start), univ.Null(""))]
                )
            rows = [c[k] for k in range(max(len(c) for c in cols)) for c in cols if k < len(c)]
            if calls[0] == lie_at:
                rows[0] = _varbind(oid, rows[0][1] if isinstance(rows[0][1], univ.Integer) else 0)
            calls[0] += 1
            return pysnmp_response(rows)

        try:
            tables = asyncio.run(walk_columns(bulk, COLUMNS, max_repetitions=25, max_varbinds=200))
        except SnmpError:
            return
        ports = PortSelector(CFG).ports(tables)
        assert build_batch(tables, "sw", ports, NOW, CFG).num_rows == len(ports)

    check()


def test_a_65_bit_counter_is_counted_where_it_is_nulled() -> None:
    """Nulled, not failed (as since the SNMP hardening), and now also counted."""
    t = tables_of(RECORDINGS["nxos"])
    ports = PortSelector(CFG).ports(t)
    first = (ports[0][0],)
    t[O.IF_HC_IN_OCTETS][first] = 2**64
    t[O.IF_IN_OCTETS].pop(first, None)  # no Counter32 twin to fall back on
    skipped: Counter[str] = Counter()
    rows = build_batch(t, "sw", ports, NOW, CFG, skipped=skipped).to_pylist()
    assert rows[0]["rx_bytes"] is None and rows[1]["rx_bytes"] is not None
    assert skipped == {OUT_OF_RANGE: 1}


def test_a_counter32_past_32_bits_is_nulled_and_counted() -> None:
    """No Counter32 holds 2^32: the 32-bit fallback cell is unknown, not a 33-bit count."""
    t = tables_of(RECORDINGS["arista"])  # no ifXTable: octets come from the Counter32 ifTable
    ports = PortSelector(CFG).ports(t)
    first = (ports[0][0],)
    t[O.IF_IN_OCTETS][first] = 2**32
    skipped: Counter[str] = Counter()
    rows = build_batch(t, "sw", ports, NOW, CFG, skipped=skipped).to_pylist()
    assert rows[0]["rx_bytes"] is None and rows[1]["rx_bytes"] is not None
    assert skipped == {OUT_OF_RANGE: 1}
