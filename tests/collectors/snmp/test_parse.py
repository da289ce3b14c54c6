"""Walked tables -> port_sample rows: precedence, widths, state and speed rules, port selection."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa

from graywire.collectors.schemas import COUNTER_BITS_KEY
from graywire.collectors.snmp import SnmpSourceConfig
from graywire.collectors.snmp import oids as O
from graywire.collectors.snmp.parse import PortSelector, build_batch, columns_to_walk
from graywire.collectors.snmp.walk import Tables

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
CFG = SnmpSourceConfig(targets=[{"host": "sw1"}])


def table(**cols: dict[int | tuple[int, ...], object]) -> Tables:
    """Tables keyed by OID constant name in oids.py; instance keys an ifIndex or an index tuple."""
    return {
        getattr(O, name): {(k if isinstance(k, tuple) else (k,)): v for k, v in values.items()}
        for name, values in cols.items()
    }


def batch_of(tables: Tables, cfg: SnmpSourceConfig = CFG) -> pa.RecordBatch:
    return build_batch(tables, "sw1", PortSelector(cfg).ports(tables), NOW, cfg)


def by_port(batch: pa.RecordBatch, col: str) -> dict[str, object]:
    return dict(zip(batch.column("port").to_pylist(), batch.column(col).to_pylist(), strict=True))


def vals(batch: pa.RecordBatch, col: str) -> list[object]:
    """A column's values; ports are Ethernet1..3 in that order in these tests."""
    assert batch.column("port").to_pylist() == ["sw1/Ethernet1", "sw1/Ethernet2", "sw1/Ethernet3"]
    return batch.column(col).to_pylist()


def bits(batch: pa.RecordBatch) -> dict[str, int]:
    return json.loads((batch.schema.metadata or {}).get(COUNTER_BITS_KEY, b"{}"))


BASE = {
    "IF_NAME": {1: b"Ethernet1", 2: b"Ethernet2", 3: b"Ethernet3"},
    "IF_TYPE": {1: 6, 2: 6, 3: 6},
    "IF_OPER_STATUS": {1: 1, 2: 1, 3: 2},
}


def test_hc_counters_win_and_counter32_fallback_is_declared_32_bits() -> None:
    t = table(
        **BASE,
        IF_HC_IN_OCTETS={1: 2**40 + 5},  # Ethernet2 has no HC counter
        IF_IN_OCTETS={1: 5, 2: 123},
        IF_HC_OUT_OCTETS={1: 7, 2: 8, 3: 9},
        IF_OUT_OCTETS={1: 1, 2: 1, 3: 1},
        IF_IN_ERRORS={1: 4},
    )
    b = batch_of(t)
    assert vals(b, "rx_bytes") == [2**40 + 5, 123, None]
    assert vals(b, "tx_bytes") == [7, 8, 9]
    assert vals(b, "rcv_errors") == [4, None, None]
    assert bits(b) == {"rx_bytes": 32, "rcv_errors": 32}  # tx_bytes came from Counter64 only


def test_speed_only_for_ports_that_are_up() -> None:
    t = table(
        **BASE,
        IF_HIGH_SPEED={1: 400_000, 3: 800_000},  # Ethernet3 is down: 800000 is its configured speed
        IF_SPEED={1: 2**32 - 1, 2: 1_000_000_000, 3: 2**32 - 1},  # Ethernet2: no ifHighSpeed
    )
    b = batch_of(t)
    assert vals(b, "speed_bps") == [400 * 10**9, 10**9, None]
    assert vals(b, "phys_state") == [5, 5, 3]
    assert vals(b, "logical_state") == [4, 4, 1]
    assert b.column("width").null_count == 3  # SNMP does not tell lanes
    saturated = batch_of(table(**BASE, IF_SPEED={1: 2**32 - 1}))
    assert by_port(saturated, "speed_bps")["sw1/Ethernet1"] is None  # "see ifHighSpeed", which is absent


def test_oper_status_codes() -> None:
    t = table(
        IF_NAME={i: f"e{i}".encode() for i in range(1, 8)},
        # up, down, testing, unknown, dormant, notPresent, lowerLayerDown
        IF_OPER_STATUS={i: i for i in range(1, 8)},
    )
    b = batch_of(t)
    assert b.column("phys_state").to_pylist() == [5, 3, 7, None, None, 3, 3]
    assert b.column("logical_state").to_pylist() == [4, 1, 1, None, 1, 1, 1]


def test_pfc_direction_priority_and_mib_precedence() -> None:
    t = table(
        **BASE,
        ARISTA_PFC_REQUESTS={(1, 3): 11, (1, 4): 12},
        ARISTA_PFC_INDICATIONS={(1, 3): 21},
        IEEE_PFC_REQUESTS={1: 999, 2: 31},  # per port; Ethernet1 has per-priority data, which wins
        IEEE_PFC_INDICATIONS={2: 41},
        CISCO_PFC_INDICATIONS={(3, 5): 51},
    )
    b = batch_of(t)
    assert vals(b, "pfc3_tx_pause_frames") == [11, 31, None]
    assert vals(b, "pfc3_rx_pause_frames") == [21, 41, None]
    assert vals(b, "pfc4_tx_pause_frames") == [12, None, None]
    assert vals(b, "pfc5_rx_pause_frames") == [None, None, 51]
    assert b.column("pfc0_tx_pause_frames").null_count == 3  # a priority without PFC is null
    assert bits(b) == {"pfc3_tx_pause_frames": 32, "pfc3_rx_pause_frames": 32}  # the IEEE MIB is Counter32

    other_prio = batch_of(t, CFG.model_copy(update={"ieee_pfc_priority": 4}))
    assert by_port(other_prio, "pfc4_tx_pause_frames")["sw1/Ethernet2"] == 31
    no_ieee = batch_of(t, CFG.model_copy(update={"pfc_mibs": ["arista", "cisco"]}))
    assert by_port(no_ieee, "pfc3_tx_pause_frames")["sw1/Ethernet2"] is None


def test_port_selection_by_type_and_name() -> None:
    t = table(
        IF_DESCR={1: b"Ethernet1", 2: b"Management1", 3: b"Port-Channel1", 4: b"Vlan10", 5: b"Ethernet5"},
        IF_NAME={5: b"Ethernet5/1"},  # ifName wins over ifDescr
        IF_TYPE={1: 6, 2: 6, 3: 161, 4: 136, 5: 117},
    )
    assert PortSelector(CFG).ports(t) == [(1, "Ethernet1"), (5, "Ethernet5/1")]
    everything = CFG.model_copy(update={"exclude": None, "if_types": [6, 117, 136, 161]})
    assert [label for _, label in PortSelector(everything).ports(t)] == [
        "Ethernet1", "Management1", "Port-Channel1", "Vlan10", "Ethernet5/1",
    ]  # fmt: skip


def test_columns_walked() -> None:
    cols = columns_to_walk(CFG, need_sys_name=False)
    assert cols == sorted(cols) and O.SYS_NAME not in cols
    assert {O.IF_HIGH_SPEED, O.IF_HC_IN_OCTETS, O.ARISTA_PFC_REQUESTS, O.IEEE_PFC_INDICATIONS} <= set(cols)
    assert O.SYS_NAME in columns_to_walk(CFG, need_sys_name=True)
    no_pfc = CFG.model_copy(update={"pfc_mibs": ["ieee"], "ieee_pfc_priority": None})
    assert not any(
        c[:7] in (O.ARISTA_PFC_ENTRY[:7], O.IEEE_PFC_ENTRY[:7]) for c in columns_to_walk(no_pfc, False)
    )


def test_an_impossible_counter_nulls_its_cell_not_the_switch() -> None:
    """A broken agent's negative or 65-bit counter (or speed) is unknown; the rest of the walk stands."""
    t = table(
        **BASE,
        IF_HC_IN_OCTETS={1: -5, 2: 2**64, 3: 42},
        IF_IN_ERRORS={1: -1, 2: 3},
        IF_HIGH_SPEED={1: -100000, 2: 2**70, 3: 100000},
        ARISTA_PFC_REQUESTS={(1, 3): -7, (2, 3): 9},
    )
    b = batch_of(t, SnmpSourceConfig(targets=[{"host": "sw1"}], pfc_mibs=["arista"]))
    assert vals(b, "rx_bytes") == [None, None, 42]
    assert vals(b, "rcv_errors") == [None, 3, None]
    assert vals(b, "speed_bps") == [None, None, None]  # Ethernet3 is down: no negotiated speed
    assert vals(b, "pfc3_tx_pause_frames") == [None, 9, None]
