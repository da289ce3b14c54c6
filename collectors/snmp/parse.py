"""Walked IF-MIB and PFC tables -> one canonical ``port_sample`` batch for one switch.

Mapping (see docs/records.md): port key ``<switch>/<ifName>`` (ifDescr when the switch has no
ifXTable); ifOperStatus up -> physical 5 / logical 4, down -> 3 / 1; ``speed_bps`` only for a port
that is up, because ifHighSpeed of a down port is its configured speed, not a negotiated one;
64-bit (HC) counters preferred over their Counter32 twins, and any column filled from a Counter32
declared 32 bits wide in the batch metadata so the rates stage can tell a wrap from a reset.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from graywire.collectors.base import OUT_OF_RANGE, Skips
from graywire.collectors.keys import port_key
from graywire.collectors.schemas import (
    LOGICAL_ACTIVE,
    LOGICAL_DOWN,
    PFC_PRIORITIES,
    PHYS_DISABLED,
    PHYS_LINK_UP,
    PORT_SAMPLE,
    TS,
    make_batch,
    with_counter_widths,
)
from graywire.collectors.snmp import oids as O
from graywire.collectors.snmp.config import SnmpSourceConfig
from graywire.collectors.snmp.walk import Tables, Value

PHYS_PHY_TEST = 7

#: ifOperStatus -> (phys_state, logical_state); None = unknown.
OPER_STATE: dict[int, tuple[int | None, int | None]] = {
    O.OPER_UP: (PHYS_LINK_UP, LOGICAL_ACTIVE),
    O.OPER_DOWN: (PHYS_DISABLED, LOGICAL_DOWN),
    O.OPER_TESTING: (PHYS_PHY_TEST, LOGICAL_DOWN),
    O.OPER_UNKNOWN: (None, None),
    O.OPER_DORMANT: (None, LOGICAL_DOWN),
    O.OPER_NOT_PRESENT: (PHYS_DISABLED, LOGICAL_DOWN),
    O.OPER_LOWER_DOWN: (PHYS_DISABLED, LOGICAL_DOWN),
}

#: canonical counter <- (64-bit column, Counter32 fallback column or None)
COUNTERS: dict[str, tuple[O.Oid | None, O.Oid | None]] = {
    "rx_bytes": (O.IF_HC_IN_OCTETS, O.IF_IN_OCTETS),
    "tx_bytes": (O.IF_HC_OUT_OCTETS, O.IF_OUT_OCTETS),
    "rx_packets": (O.IF_HC_IN_UCAST_PKTS, O.IF_IN_UCAST_PKTS),
    "tx_packets": (O.IF_HC_OUT_UCAST_PKTS, O.IF_OUT_UCAST_PKTS),
    "rcv_errors": (None, O.IF_IN_ERRORS),
    "xmit_discards": (None, O.IF_OUT_DISCARDS),
}

#: (pause frames the port sent, received) per PFC MIB; Arista and Cisco index (ifIndex, priority).
PFC_COLUMNS = {
    "arista": (O.ARISTA_PFC_REQUESTS, O.ARISTA_PFC_INDICATIONS),
    "cisco": (O.CISCO_PFC_REQUESTS, O.CISCO_PFC_INDICATIONS),
    "ieee": (O.IEEE_PFC_REQUESTS, O.IEEE_PFC_INDICATIONS),
}


def columns_to_walk(cfg: SnmpSourceConfig, need_sys_name: bool) -> list[O.Oid]:
    cols: list[O.Oid] = [O.SYS_NAME] if need_sys_name else []
    cols += [O.IF_DESCR, O.IF_TYPE, O.IF_SPEED, O.IF_OPER_STATUS, O.IF_NAME, O.IF_HIGH_SPEED]
    for hc, c32 in COUNTERS.values():
        cols += [c for c in (hc, c32) if c is not None]
    for mib in cfg.pfc_mibs:
        if mib != "ieee" or cfg.ieee_pfc_priority is not None:
            cols += PFC_COLUMNS[mib]
    return sorted(set(cols))


def _text(value: Value) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip() or None
    return None


def _int(value: Value) -> int | None:
    return value if isinstance(value, int) else None


def _counter(value: Value, skipped: Skips | None = None, bits: int = 64) -> int | None:
    """A counter value, or None for one no counter of ``bits`` can hold (a negative or a
    65-bit number from a broken agent): that cell is unknown (counted as ``out_of_range`` in
    ``skipped``), the rest of the switch is not."""
    v = _int(value)
    if v is not None and 0 <= v < 1 << bits:
        return v
    if value is not None and skipped is not None:
        skipped[OUT_OF_RANGE] += 1
    return None


def _gauge(value: Value) -> int:
    """A speed gauge, 0 (unknown) when missing or absurd."""
    v = _int(value)
    return v if v is not None and 0 <= v < 2**53 else 0


def sys_name(tables: Tables) -> str | None:
    return _text(tables.get(O.SYS_NAME, {}).get((0,)))


class PortSelector:
    """Which interfaces are fabric ports: physical ifType, label include/exclude regexes."""

    def __init__(self, cfg: SnmpSourceConfig) -> None:
        self.if_types = frozenset(cfg.if_types)
        self.include = re.compile(cfg.include) if cfg.include else None
        self.exclude = re.compile(cfg.exclude) if cfg.exclude else None

    def ports(self, tables: Tables) -> list[tuple[int, str]]:
        """(ifIndex, label) of the ports to report, in ifIndex order, one per label."""
        names, descrs = tables.get(O.IF_NAME, {}), tables.get(O.IF_DESCR, {})
        types = tables.get(O.IF_TYPE, {})
        rows = (names, descrs, types, tables.get(O.IF_OPER_STATUS, {}))
        indices = sorted({s[0] for col in rows for s in col if len(s) == 1})
        out: list[tuple[int, str]] = []
        seen: set[str] = set()
        for i in indices:
            label = _text(names.get((i,))) or _text(descrs.get((i,)))
            if label is None or label in seen:
                continue
            t = _int(types.get((i,)))
            if t is not None and t not in self.if_types:
                continue
            if self.include is not None and not self.include.search(label):
                continue
            if self.exclude is not None and self.exclude.search(label):
                continue
            seen.add(label)
            out.append((i, label))
        return out


def _u64(values: Iterable[int | None]) -> pa.Array:
    return pa.array(list(values), type=pa.uint64())


def build_batch(
    tables: Tables,
    switch: str,
    ports: list[tuple[int, str]],
    now: datetime,
    cfg: SnmpSourceConfig,
    port_dict: pa.Array | None = None,
    skipped: Skips | None = None,
) -> pa.RecordBatch:
    """The ``port_sample`` batch of one poll of one switch.

    ``port_dict`` is the previous poll's port dictionary; it is reused when the ports are the
    same, so detectors that cache lookups by dictionary keep their cache. Counter cells no
    counter can hold are null and counted in ``skipped``.
    """
    n = len(ports)
    idx = [(i,) for i, _ in ports]
    keys = [port_key(switch, label) for _, label in ports]
    if port_dict is None or port_dict.to_pylist() != keys:
        port_dict = pa.array(keys, type=pa.string())
    oper = tables.get(O.IF_OPER_STATUS, {})
    states = [OPER_STATE.get(_int(oper.get(k)) or O.OPER_UNKNOWN, (None, None)) for k in idx]
    up = np.array([s[0] == PHYS_LINK_UP for s in states], dtype=bool)
    # ifHighSpeed (Mb/s) when the port is up; ifSpeed (bit/s) only when it is not saturated.
    high = np.array([_gauge(tables.get(O.IF_HIGH_SPEED, {}).get(k)) for k in idx], dtype=np.int64)
    low = np.array([_gauge(tables.get(O.IF_SPEED, {}).get(k)) for k in idx], dtype=np.int64)
    low = np.where(low >= O.IF_SPEED_MAX, 0, low)
    speed = np.where(high > 0, high * 1_000_000, low)
    cols: dict[str, pa.Array] = {
        "time": pa.array(np.full(n, np.datetime64(now.astimezone(UTC).replace(tzinfo=None), "us")), type=TS),
        "port": pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), port_dict),
        "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int8)), pa.array(["snmp"])),
        "phys_state": pa.array([s[0] for s in states], type=pa.uint8()),
        "logical_state": pa.array([s[1] for s in states], type=pa.uint8()),
        "speed_bps": pa.array(speed, mask=~(up & (speed > 0))),
    }
    bits: dict[str, int] = {}
    for name, (hc, c32) in COUNTERS.items():
        wide = tables.get(hc, {}) if hc else {}
        narrow = tables.get(c32, {}) if c32 else {}
        vals = [_counter(wide.get(k), skipped) for k in idx]
        narrow_used = False
        for j, v in enumerate(vals):
            if v is None:
                v32 = _counter(narrow.get(idx[j]), skipped, 32)
                if v32 is not None:
                    vals[j], narrow_used = v32, True
        cols[name] = _u64(vals)
        if narrow_used:
            bits[name] = 32
    _pfc(tables, idx, cfg, cols, bits, skipped)
    schema = with_counter_widths(PORT_SAMPLE, bits) if bits else PORT_SAMPLE
    return make_batch(schema, n, cols)


def _pfc(
    tables: Tables,
    idx: list[O.Oid],
    cfg: SnmpSourceConfig,
    cols: dict[str, pa.Array],
    bits: dict[str, int],
    skipped: Skips | None = None,
) -> None:
    """PFC pause frames per priority: Requests = sent (tx), Indications = received (rx)."""
    per_prio = [PFC_COLUMNS[m] for m in ("arista", "cisco") if m in cfg.pfc_mibs]
    ieee_prio = cfg.ieee_pfc_priority if "ieee" in cfg.pfc_mibs else None
    for p in PFC_PRIORITIES:
        for d, direction in enumerate(("tx", "rx")):
            vals: list[int | None] = []
            ieee_used = False
            for k in idx:
                v = None
                for mib in per_prio:
                    v = _counter(tables.get(mib[d], {}).get((*k, p)), skipped)
                    if v is not None:
                        break
                if v is None and p == ieee_prio:
                    v = _counter(tables.get(PFC_COLUMNS["ieee"][d], {}).get(k), skipped, 32)
                    ieee_used = ieee_used or v is not None
                vals.append(v)
            if any(v is not None for v in vals):
                name = f"pfc{p}_{direction}_pause_frames"
                cols[name] = _u64(vals)
                if ieee_used:
                    bits[name] = 32
