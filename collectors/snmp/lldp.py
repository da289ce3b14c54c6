"""LLDP over SNMP: a switch's LLDP-MIB neighbours -> the cables at its ports (``link`` records).

Objects walked (LLDP-MIB, IEEE 802.1AB-2005, ``1.0.8802.1.1.2``): ``lldpLocPortTable``
(``lldpLocPortIdSubtype``, ``lldpLocPortId``, ``lldpLocPortDesc``, index ``lldpLocPortNum``);
``lldpRemTable`` (``lldpRemChassisIdSubtype``/``lldpRemChassisId``, ``lldpRemPortIdSubtype``/
``lldpRemPortId``, ``lldpRemPortDesc``, ``lldpRemSysName``, index ``lldpRemTimeMark``,
``lldpRemLocalPortNum``, ``lldpRemIndex``); ``lldpRemManAddrIfSubtype`` for the neighbour's
management address, which that table carries in its index. Beside them the IF-MIB columns that
name and size the switch's ports (ifName, ifDescr, ifType, ifOperStatus, ifSpeed, ifHighSpeed).

**Local ports.** The MIB guarantees little: ``LldpPortNumber`` "has no mandatory relationship
to an InterfaceIndex"; it equals ``dot1dBasePort`` on an 802.1D/Q bridge and ``ifIndex``
otherwise. Agents differ in practice (SONiC numbers LLDP ports by ifIndex although its
BRIDGE-MIB numbers base ports from 0), so a ``lldpRemLocalPortNum`` is mapped, in this order:

1. through ``lldpLocPortTable``: the row's ``lldpLocPortId`` (then ``lldpLocPortDesc``) equal to
   an interface's ifName (then ifDescr), which holds whatever the numbering;
2. else the interface whose ifIndex is that number.

A port no step maps is skipped and counted (``bad_port``); a neighbour on an interface the
source does not report (a management port, a LAG: ``if_types``/``include``/``exclude``) is left
out like that interface.

**Remote ports.** A cable's far end is keyed ``<lldpRemSysName>/<lldpRemPortId>`` as reported:
a host NIC running lldpd shows the host name and the interface name (port id subtype
interfaceName) or its MAC (macAddress, lldpd's default); a switch its name and port. A neighbour
without a usable system name is keyed by its chassis id instead. Ids are rendered by subtype:
macAddress as ``aa:bb:cc:dd:ee:ff`` (from 6 octets, or from the text some agents send, such as
SONiC's), networkAddress as the IPv4/IPv6 address after its IANA family octet, every other
subtype (interfaceName, interfaceAlias, local, chassis/portComponent, agentCircuitId) as text,
or as colon hex when it is not printable. A row without a chassis id or port id, or with an
index that is not (time mark, port, index), is skipped and counted (``malformed_line``); a
neighbour listed twice (under two time marks) is kept once, the latest.

Parsing is pure (tables in, batches out) and never raises; :func:`walk_lldp` fetches.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from graywire.collectors.base import BAD_PORT, MALFORMED_LINE, Skips
from graywire.collectors.keys import port_key
from graywire.collectors.schemas import LINK, make_batch
from graywire.collectors.snmp import oids as O
from graywire.collectors.snmp.config import SnmpSourceConfig, SnmpTarget
from graywire.collectors.snmp.parse import PortSelector, sys_name
from graywire.collectors.snmp.walk import SnmpError, SnmpSession, Tables, Value, auth_data, walk_columns

SOURCE = "lldp"

#: LldpChassisIdSubtype (LLDP-MIB).
CHASSIS_COMPONENT, CHASSIS_IF_ALIAS, CHASSIS_PORT_COMPONENT, CHASSIS_MAC = 1, 2, 3, 4
CHASSIS_NETWORK_ADDRESS, CHASSIS_IF_NAME, CHASSIS_LOCAL = 5, 6, 7
#: LldpPortIdSubtype (LLDP-MIB).
PORT_IF_ALIAS, PORT_COMPONENT, PORT_MAC, PORT_NETWORK_ADDRESS = 1, 2, 3, 4
PORT_IF_NAME, PORT_CIRCUIT_ID, PORT_LOCAL = 5, 6, 7

#: IANA Address Family Numbers: the first octet of a networkAddress id, and lldpRemManAddrSubtype.
AF_IPV4, AF_IPV6 = 1, 2

#: LLDP-MIB columns walked beside IF-MIB's.
LLDP_COLUMNS: tuple[O.Oid, ...] = (
    O.LLDP_LOC_PORT_ID_SUBTYPE,
    O.LLDP_LOC_PORT_ID,
    O.LLDP_LOC_PORT_DESC,
    O.LLDP_REM_CHASSIS_ID_SUBTYPE,
    O.LLDP_REM_CHASSIS_ID,
    O.LLDP_REM_PORT_ID_SUBTYPE,
    O.LLDP_REM_PORT_ID,
    O.LLDP_REM_PORT_DESC,
    O.LLDP_REM_SYS_NAME,
    O.LLDP_REM_MAN_ADDR_IF_SUBTYPE,
)
#: IF-MIB columns that name, select and size the ports.
IF_COLUMNS: tuple[O.Oid, ...] = (
    O.IF_DESCR,
    O.IF_TYPE,
    O.IF_SPEED,
    O.IF_OPER_STATUS,
    O.IF_NAME,
    O.IF_HIGH_SPEED,
)

#: One LLDP neighbour of one switch port, as the switch reports it.
LLDP_NEIGHBOR = pa.schema(
    [
        pa.field("switch", pa.string(), nullable=False),
        pa.field("local_port", pa.string(), nullable=False),  # port key <switch>/<ifName>
        pa.field("lldp_port_num", pa.int64(), nullable=False),  # lldpRemLocalPortNum
        pa.field("chassis_id_subtype", pa.uint8()),  # LldpChassisIdSubtype, null if absent/absurd
        pa.field("chassis_id", pa.string(), nullable=False),
        pa.field("port_id_subtype", pa.uint8()),  # LldpPortIdSubtype
        pa.field("port_id", pa.string(), nullable=False),
        pa.field("port_desc", pa.string()),
        pa.field("sys_name", pa.string()),
        pa.field("mgmt_address", pa.string()),  # first IPv4/IPv6 management address
        pa.field("remote_port", pa.string(), nullable=False),  # the link's b_port
    ],
    metadata={"graywire.view": "lldp_neighbor"},
)

#: One interface of one switch, as IF-MIB reports it: what a fabric model needs of a switch port.
SWITCH_INTERFACE = pa.schema(
    [
        pa.field("switch", pa.string(), nullable=False),
        pa.field("port", pa.string(), nullable=False),  # port key <switch>/<ifName>
        pa.field("if_index", pa.int64(), nullable=False),
        pa.field("if_descr", pa.string()),
        #: ifHighSpeed (else an unsaturated ifSpeed) in bit/s: the negotiated speed when up, the
        #: configured one when down; null when the switch reports neither.
        pa.field("speed_bps", pa.int64()),
        pa.field("oper_up", pa.bool_()),  # ifOperStatus up(1); null when not reported
    ],
    metadata={"graywire.view": "switch_interface"},
)

_MAC_TEXT = re.compile(
    r"^(?:[0-9a-f]{2}([:-])(?:[0-9a-f]{2}\1){4}[0-9a-f]{2}|[0-9a-f]{4}\.[0-9a-f]{4}\.[0-9a-f]{4}|[0-9a-f]{12})$",
    re.IGNORECASE,
)


def _hex(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def _printable(raw: bytes) -> str | None:
    """The value as text when it is printable UTF-8 (NUL padding dropped), else None."""
    try:
        text = raw.rstrip(b"\x00").decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    return text if text and text.isprintable() else None


def _mac(raw: bytes) -> str | None:
    if len(raw) == 6:
        return _hex(raw)
    text = _printable(raw)
    if text is None or not _MAC_TEXT.match(text):
        return None
    digits = re.sub(r"[^0-9a-fA-F]", "", text).lower()
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def _ip(family: int, raw: bytes) -> str | None:
    if (family, len(raw)) == (AF_IPV4, 4):
        return str(ipaddress.IPv4Address(raw))
    if (family, len(raw)) == (AF_IPV6, 16):
        return str(ipaddress.IPv6Address(raw))
    return None


def render_id(subtype: int | None, raw: Value, mac: int, network: int) -> str | None:
    """A chassis or port id as text, by its subtype (``mac``/``network``: which subtype numbers
    mean macAddress and networkAddress in this id's enumeration); None when empty or not octets."""
    if not isinstance(raw, bytes) or not raw.strip(b"\x00 "):
        return None
    if subtype == mac:
        found = _mac(raw)
        if found is not None:
            return found
    elif subtype == network and len(raw) > 1:
        found = _ip(raw[0], raw[1:])
        if found is not None:
            return found
    text = _printable(raw)
    return text if text is not None else _hex(raw)


def _int(value: Value) -> int | None:
    return value if isinstance(value, int) else None


def _text(value: Value) -> str | None:
    return _printable(value) if isinstance(value, bytes) else None


def _subtype(value: Value) -> int | None:
    v = _int(value)
    return v if v is not None and 1 <= v <= 7 else None


def _node_name(name: str | None) -> str | None:
    """A usable node name for a port key: no '/' (the key's separator), no blanks."""
    if name is None or "/" in name or any(c.isspace() for c in name):
        return None
    return name


def has_lldp(tables: Tables) -> bool:
    """Whether the agent answered any LLDP-MIB column (an agent without the MIB answers none)."""
    return any(tables.get(c) for c in LLDP_COLUMNS)


def _local_port_map(tables: Tables) -> dict[int, int]:
    """lldpLocPortNum -> ifIndex, by the order in the module docstring (unmapped: absent)."""
    by_name: dict[str, int] = {}
    known: set[int] = set()
    for col in (O.IF_NAME, O.IF_DESCR):  # ifName wins over ifDescr for a text both carry
        for sub, value in tables.get(col, {}).items():
            text = _text(value)
            if len(sub) == 1:
                known.add(sub[0])
                if text is not None:
                    by_name.setdefault(text, sub[0])
    out: dict[int, int] = {}
    loc_id, loc_desc = tables.get(O.LLDP_LOC_PORT_ID, {}), tables.get(O.LLDP_LOC_PORT_DESC, {})
    nums = {s[0] for col in (loc_id, loc_desc) for s in col if len(s) == 1}
    nums |= {s[1] for s in tables.get(O.LLDP_REM_PORT_ID, {}) if len(s) == 3}
    for num in nums:
        for col in (loc_id, loc_desc):
            text = _text(col.get((num,)))
            if text is not None and text in by_name:
                out[num] = by_name[text]
                break
        else:
            if num in known:
                out[num] = num
    return out


def _mgmt_addresses(tables: Tables) -> dict[tuple[int, int, int], str]:
    """(time mark, local port, index) -> the neighbour's first IPv4/IPv6 management address."""
    out: dict[tuple[int, int, int], str] = {}
    for sub in sorted(tables.get(O.LLDP_REM_MAN_ADDR_IF_SUBTYPE, {})):
        if len(sub) < 5 or sub[4] != len(sub) - 5 or not all(0 <= b < 256 for b in sub[5:]):
            continue
        addr = _ip(sub[3], bytes(sub[5:]))
        if addr is not None:
            out.setdefault((sub[0], sub[1], sub[2]), addr)
    return out


@dataclass(frozen=True, slots=True)
class SwitchLldp:
    """What one switch's LLDP and IF-MIB tables say: its cables, neighbours and interfaces."""

    switch: str
    links: pa.RecordBatch  # LINK: a_port = this switch's port, b_port = the neighbour's, source "lldp"
    neighbors: pa.RecordBatch  # LLDP_NEIGHBOR, one row per link
    interfaces: pa.RecordBatch  # SWITCH_INTERFACE, the selected ports
    #: Whether the agent has LLDP-MIB at all: without it no links is no news, not "no cables".
    has_lldp: bool


def parse_lldp(
    tables: Tables, switch: str, ports: Sequence[tuple[int, str]], skipped: Skips | None = None
) -> SwitchLldp:
    """One switch's walked tables -> its LLDP links, neighbours and interfaces; never raises.

    ``ports`` are the (ifIndex, label) pairs the source reports (``PortSelector.ports``).
    """
    skips: Skips = skipped if skipped is not None else Counter()
    local, labels = _local_port_map(tables), dict(ports)
    chassis_sub = tables.get(O.LLDP_REM_CHASSIS_ID_SUBTYPE, {})
    chassis = tables.get(O.LLDP_REM_CHASSIS_ID, {})
    port_sub = tables.get(O.LLDP_REM_PORT_ID_SUBTYPE, {})
    port_ids = tables.get(O.LLDP_REM_PORT_ID, {})
    descs, names = tables.get(O.LLDP_REM_PORT_DESC, {}), tables.get(O.LLDP_REM_SYS_NAME, {})
    mgmt = _mgmt_addresses(tables)
    rows: dict[tuple[str, str], tuple[int, dict[str, object]]] = {}
    suffixes = {s for col in (chassis, port_ids, chassis_sub, port_sub, names, descs) for s in col}
    for sub in sorted(suffixes):
        if len(sub) != 3:
            skips[MALFORMED_LINE] += 1
            continue
        mark, num, _ = sub
        cs, ps = _subtype(chassis_sub.get(sub)), _subtype(port_sub.get(sub))
        chassis_id = render_id(cs, chassis.get(sub), CHASSIS_MAC, CHASSIS_NETWORK_ADDRESS)
        port_id = render_id(ps, port_ids.get(sub), PORT_MAC, PORT_NETWORK_ADDRESS)
        if chassis_id is None or port_id is None:
            skips[MALFORMED_LINE] += 1
            continue
        if num not in local:
            skips[BAD_PORT] += 1  # a port number no IF-MIB interface answers to
            continue
        label = labels.get(local[num])
        if label is None:
            continue  # an interface the source does not report (management, LAG)
        sys_name = _text(names.get(sub))
        node = _node_name(sys_name) or _node_name(chassis_id)
        if node is None:
            skips[MALFORMED_LINE] += 1
            continue
        a_port, b_port = port_key(switch, label), port_key(node, port_id)
        previous = rows.get((a_port, b_port))
        if previous is not None and previous[0] > mark:
            continue  # the same neighbour under an older time mark
        rows[(a_port, b_port)] = (mark, {
            "switch": switch, "local_port": a_port, "lldp_port_num": num,
            "chassis_id_subtype": cs, "chassis_id": chassis_id, "port_id_subtype": ps,
            "port_id": port_id, "port_desc": _text(descs.get(sub)), "sys_name": sys_name,
            "mgmt_address": mgmt.get(sub), "remote_port": b_port,
        })  # fmt: skip
    found = sorted((r for _, r in rows.values()), key=lambda r: (r["lldp_port_num"], r["remote_port"]))
    neighbors = pa.RecordBatch.from_pylist(found, schema=LLDP_NEIGHBOR)
    links = make_batch(LINK, len(found), {
        "a_port": neighbors.column("local_port"), "b_port": neighbors.column("remote_port"),
        "source": pa.array([SOURCE] * len(found), pa.string()),
    })  # fmt: skip
    return SwitchLldp(switch, links, neighbors, interface_facts(tables, switch, ports), has_lldp(tables))


def interface_facts(tables: Tables, switch: str, ports: Sequence[tuple[int, str]]) -> pa.RecordBatch:
    """The selected interfaces' names, ifIndex, speed (configured when down) and state."""
    idx = [(i,) for i, _ in ports]
    high = tables.get(O.IF_HIGH_SPEED, {})
    low = tables.get(O.IF_SPEED, {})
    oper = tables.get(O.IF_OPER_STATUS, {})
    descr = tables.get(O.IF_DESCR, {})

    def gauge(col: Mapping[O.Oid, Value], k: O.Oid) -> int:
        v = _int(col.get(k))
        return v if v is not None and 0 <= v < 2**53 else 0

    h = np.array([gauge(high, k) for k in idx], dtype=np.int64)
    lo = np.array([gauge(low, k) for k in idx], dtype=np.int64)
    lo = np.where(lo >= O.IF_SPEED_MAX, 0, lo)
    speed = np.where(h > 0, h * 1_000_000, lo)
    states = [_int(oper.get(k)) for k in idx]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([switch] * len(idx), pa.string()),
            pa.array([port_key(switch, label) for _, label in ports], pa.string()),
            pa.array([i for i, _ in ports], pa.int64()),
            pa.array([_text(descr.get(k)) for k in idx], pa.string()),
            pa.array(speed, mask=speed <= 0),
            pa.array([None if s is None else s == O.OPER_UP for s in states], pa.bool_()),
        ],
        schema=SWITCH_INTERFACE,
    )


def lldp_columns(need_sys_name: bool) -> list[O.Oid]:
    """Every column a discovery walk needs, sorted (sysName when the target names no switch)."""
    return sorted({*IF_COLUMNS, *LLDP_COLUMNS, *((O.SYS_NAME,) if need_sys_name else ())})


@dataclass(frozen=True, slots=True)
class LldpDiscovery:
    """The LLDP view of a source's switches: what a discovery of the fabric's cables starts from."""

    #: LINK, source "lldp": every cable once (a switch-to-switch cable both ends report is one row;
    #: a_port is the end whose key sorts first then).
    links: pa.Table
    neighbors: pa.Table  # LLDP_NEIGHBOR of every switch
    interfaces: pa.Table  # SWITCH_INTERFACE of every switch
    switches: tuple[SwitchLldp, ...]
    #: target -> reason, for switches that could not be walked (the others are still used).
    errors: dict[str, str] = field(default_factory=dict)
    #: Rows and values the parse left out, by reason (``malformed_line``, ``bad_port``).
    skipped: dict[str, int] = field(default_factory=dict)
    #: Targets whose agent has no LLDP-MIB (no LLDP-MIB object answered).
    without_lldp: tuple[str, ...] = ()


def merge_links(batches: Iterable[pa.RecordBatch]) -> pa.Table:
    """One row per cable: two switches reporting each other give one link, not two."""
    seen: set[tuple[str, str]] = set()
    a_ports: list[str] = []
    b_ports: list[str] = []
    for batch in batches:
        for a, b in zip(batch.column("a_port").to_pylist(), batch.column("b_port").to_pylist(), strict=True):
            pair = (a, b) if a <= b else (b, a)
            if pair not in seen:
                seen.add(pair)
                a_ports.append(pair[0])
                b_ports.append(pair[1])
    n = len(a_ports)
    cols = {"a_port": pa.array(a_ports, pa.string()), "b_port": pa.array(b_ports, pa.string()),
            "source": pa.array([SOURCE] * n, pa.string())}  # fmt: skip
    return pa.Table.from_batches([make_batch(LINK, n, cols)])


async def walk_lldp_async(cfg: SnmpSourceConfig) -> LldpDiscovery:
    """Walk LLDP-MIB and IF-MIB on every target of an SNMP source (its credentials, limits and
    port selection), at most ``max_concurrency`` at once, each within ``timeout_s``."""
    session = SnmpSession(cfg.max_concurrency)
    selector = PortSelector(cfg)

    async def one(target: SnmpTarget) -> tuple[str, SwitchLldp | str, Skips]:
        where = f"{target.host}:{target.port}"
        label = f"{target.name}@{where}" if target.name else where
        skips: Skips = Counter()
        try:
            auth = auth_data(cfg, target)
            async with (
                session.semaphore(),
                asyncio.timeout(cfg.timeout_s),
                session.open(target.host, target.port, auth, target.context, cfg.request_timeout_s) as agent,
            ):
                tables = await walk_columns(
                    agent.bulk, lldp_columns(target.name is None),
                    max_repetitions=cfg.max_repetitions, max_varbinds=cfg.max_varbinds,
                )  # fmt: skip
        except TimeoutError:
            return label, f"no complete answer within {cfg.timeout_s:g} s", skips
        except SnmpError as e:
            return label, f"SNMP: {e}", skips
        except Exception as e:  # a dead or garbled switch is that switch's error, not the walk's
            return label, f"{type(e).__name__}: {e}", skips
        switch = target.name or sys_name(tables)
        if not switch or "/" in switch or switch != switch.strip():
            return label, f"switch has no usable sysName ({switch!r}); set 'name' for it", skips
        try:
            view = await asyncio.to_thread(parse_lldp, tables, switch, selector.ports(tables), skips)
        except Exception as e:  # parse_lldp does not raise; this keeps the promise if it ever did
            return label, f"{type(e).__name__}: {e}", skips
        return label, view, skips

    try:
        results = await asyncio.gather(*(one(t) for t in cfg.targets))
    finally:
        session.close()
    views = [v for _, v, _ in results if isinstance(v, SwitchLldp)]
    skipped: Skips = Counter()
    for _, _, s in results:
        skipped.update(s)
    return LldpDiscovery(
        links=merge_links(v.links for v in views),
        neighbors=pa.Table.from_batches([v.neighbors for v in views], schema=LLDP_NEIGHBOR),
        interfaces=pa.Table.from_batches([v.interfaces for v in views], schema=SWITCH_INTERFACE),
        switches=tuple(views),
        errors={t: v for t, v, _ in results if isinstance(v, str)},
        skipped=dict(skipped),
        without_lldp=tuple(t for t, v, _ in results if isinstance(v, SwitchLldp) and not v.has_lldp),
    )


def walk_lldp(cfg: SnmpSourceConfig) -> LldpDiscovery:
    """:func:`walk_lldp_async` for callers without an event loop (the CLI)."""
    return asyncio.run(walk_lldp_async(cfg))
