"""fabricsim speaks SNMP: one snmpsim ``.snmprec`` recording per switch from a ``port_sample`` poll.

Served by ``snmpsim-command-responder`` (community = file basename = switch name), the
recordings let tests cross the real SNMP protocol and the real collector with the simulator's
faults: a silent 800G -> 400G downgrade shows on the leaf port as ifHighSpeed 400000.

Format: one ``OID|type|value`` line per object, sorted by OID numerically (snmpsim answers
GETNEXT/GETBULK from that order). Types: 2 INTEGER, 4 OCTET STRING, 6 OBJECT IDENTIFIER,
65 Counter32, 66 Gauge32, 67 TimeTicks, 70 Counter64. What a switch would show:

- system group (sysDescr, sysObjectID, sysUpTime, sysName) and ifNumber;
- ifTable with ifIndex = the port number, ifDescr = the port label, ifType ethernetCsmacd,
  ifSpeed (saturated at 2^32-1), ifAdmin/OperStatus, Counter32 octets/unicast packets (the
  64-bit counters modulo 2^32), ifInErrors, ifOutDiscards;
- ifXTable with ifName = the port label, Counter64 HC octets and unicast packets, ifHighSpeed
  in Mb/s (the negotiated speed when up, the configured speed when down), ifAlias = the peer;
- PFC pause frames in one PFC MIB: IEEE8021-PFC-MIB (per port, Counter32, the frames of
  ``ieee_priority``), ARISTA-PFC-MIB or CISCO-PFC-EXT-MIB (per port and priority, Counter64);
- LLDP-MIB (unless ``lldp=False``): the local chassis (subtype macAddress, 6 octets) and
  system name, ``lldpLocPortTable`` with lldpLocPortNum = ifIndex and the port label as an
  interfaceName id, and one ``lldpRemTable`` row per cabled port, indexed (time mark
  ``LLDP_TIME_MARK``, port, lldpRemIndex counting the switch's neighbours from 1). A host NIC
  is as lldpd sends it by default: chassis id the MAC of one of the host's NICs, port id the
  NIC's MAC (subtype macAddress), its netdev as description, the host name as system name; it
  never names the RDMA device (``mlx5_2``), so graywire needs the inventory's ``aliases`` (or
  host agents, for discovery) to know which port it is. A switch neighbour sends its chassis MAC,
  its port name (subtype local, as SONiC does) and its system name. The rows stand for the
  cabling, whatever the port's state.

Counters the batch has as null are left out, as a switch without them would.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PFC_PRIORITIES, PHYS_LINK_UP
from graywire.collectors.snmp import oids as O
from graywire.fabricsim.sim import EPOCH
from graywire.fabricsim.topology import mac_of_guid

PfcMib = Literal["ieee", "arista", "cisco"]
SWITCH_ROLES = ("leaf", "spine", "core")
SYS_OBJECT_ID = "1.3.6.1.4.1.8072.3.2.10"  # NET-SNMP-TC linux: the agent of SONiC/Cumulus switches
ETHERNET_CSMACD = 6
LLDP_MAC = 4  # LldpChassisIdSubtype macAddress
LLDP_PORT_MAC = 3  # LldpPortIdSubtype macAddress
LLDP_IF_NAME = 5  # LldpPortIdSubtype interfaceName
LLDP_PORT_LOCAL = 7  # LldpPortIdSubtype local
#: lldpRemTimeMark: sysUpTime (ticks) when the agent learned its neighbours, 30 s after boot. Real
#: agents key rows by it (LibreNMS's SONiC recording: 134, 2145, 301783, ...), never only by 0.
LLDP_TIME_MARK = 3000
U32 = 2**32

# Type tags of the snmprec format.
INTEGER, OCTETS, OID, COUNTER32, GAUGE32, TIMETICKS, COUNTER64 = "2", "4", "6", "65", "66", "67", "70"
HEX = "4x"  # an OCTET STRING written as hex: binary values such as a MAC


class _Records:
    """Records of many switches, kept columnar until the final sort."""

    def __init__(self) -> None:
        self.lines: list[pa.Array] = []
        self.node: list[np.ndarray] = []
        self.col: list[O.Oid] = []
        self.col_of: list[np.ndarray] = []
        self.sub1: list[np.ndarray] = []
        self.sub2: list[np.ndarray] = []

    def add(
        self,
        col: O.Oid,
        tag: str,
        node: np.ndarray,
        values: pa.Array,
        sub1: np.ndarray,
        sub2: np.ndarray | None = None,
    ) -> None:
        """One column: ``<col>.<sub1>[.<sub2>]|tag|value`` for each non-null value."""
        valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if not valid.any():
            return
        keep = pa.array(valid)
        values = values.filter(keep)
        node, sub1 = node[valid], sub1[valid]
        suffix = pc.cast(pa.array(sub1), pa.string())
        if sub2 is not None:
            sub2 = sub2[valid]
            suffix = pc.binary_join_element_wise(suffix, pc.cast(pa.array(sub2), pa.string()), ".")
        text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
        self.lines.append(pc.binary_join_element_wise(O.oid_text(col), ".", suffix, "|", tag, "|", text, ""))
        self.node.append(node)
        self.col_of.append(np.full(node.size, len(self.col)))
        self.col.append(col)
        self.sub1.append(sub1.astype(np.int64))
        self.sub2.append(np.zeros(node.size, np.int64) if sub2 is None else sub2.astype(np.int64))

    def texts(self, n_nodes: int) -> dict[int, str]:
        """Per node code, its recording text sorted by OID numerically."""
        if not self.lines:
            return {}
        order_of = {c: r for r, c in enumerate(sorted(set(self.col)))}  # numeric: OIDs are int tuples
        rank = np.array([order_of[c] for c in self.col], np.int64)
        node = np.concatenate(self.node)
        col = rank[np.concatenate(self.col_of)]
        order = np.lexsort((np.concatenate(self.sub2), np.concatenate(self.sub1), col, node))
        lines = pa.chunked_array(self.lines).combine_chunks().take(pa.array(order))
        node = node[order]
        bounds = np.searchsorted(node, np.arange(n_nodes + 1))
        out = {}
        for code in np.unique(node):
            chunk = lines.slice(bounds[code], bounds[code + 1] - bounds[code]).to_pylist()
            out[int(code)] = "\n".join(chunk) + "\n"
        return out


def render_snmprec(
    batch: pa.RecordBatch,
    fabric: Fabric,
    *,
    pfc_mib: PfcMib = "ieee",
    ieee_priority: int = 3,
    nodes: Iterable[str] | None = None,
    boot: datetime = EPOCH,
    lldp: bool = True,
) -> dict[str, str]:
    """``{switch name: recording text}`` for the leaf/spine switches in one ``port_sample`` poll."""
    if pfc_mib not in ("ieee", "arista", "cisco"):
        raise ValueError(f"pfc_mib must be ieee, arista or cisco, not {pfc_mib!r}")
    idx = fabric.lookup(batch.column("port"))
    roles = np.where(idx >= 0, fabric.port_role[np.maximum(idx, 0)], "")
    rows = np.isin(roles, SWITCH_ROLES)
    if nodes is not None:
        wanted = [fabric.node_names.index(n) for n in nodes]
        rows &= np.isin(fabric.node_of_port[np.maximum(idx, 0)], wanted)
    sel = np.flatnonzero(rows)
    if sel.size == 0:
        return {}
    b = batch.take(pa.array(sel))
    pidx = idx[sel]
    node = fabric.node_of_port[pidx].astype(np.int64)
    ifindex = _if_index(fabric, pidx, node)
    labels = pc.list_element(pc.split_pattern(fabric.key_array.take(pa.array(pidx)), "/", max_splits=1), 1)
    up = b.column("phys_state").fill_null(0).to_numpy(zero_copy_only=False) == PHYS_LINK_UP
    speed = b.column("speed_bps").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    speed = np.where(up & (speed > 0), speed, fabric.expected_speed_bps[pidx])  # down: configured speed
    peer = fabric.peer[pidx]
    alias = pa.array([fabric.keys[p] if p >= 0 else "" for p in peer.tolist()], type=pa.string())

    rec = _Records()
    # System group and ifNumber: one record per switch.
    nodes_here = np.unique(node)
    t = b.column("time")[0].as_py()
    ticks = int(max(0.0, (t - boot).total_seconds()) * 100) % U32
    counts = np.bincount(node, minlength=len(fabric.node_names))[nodes_here]
    names = pa.array([fabric.node_names[c] for c in nodes_here.tolist()], type=pa.string())
    zero = np.zeros(nodes_here.size, np.int64)
    descr = pc.binary_join_element_wise("graywire fabricsim switch ", names, "")
    rec.add(O.SYS_DESCR, OCTETS, nodes_here, descr, zero)
    rec.add(O.SYS_OBJECT_ID, OID, nodes_here, pa.array([SYS_OBJECT_ID] * nodes_here.size), zero)
    rec.add(O.SYS_UPTIME, TIMETICKS, nodes_here, pa.array(np.full(nodes_here.size, ticks)), zero)
    rec.add(O.SYS_NAME, OCTETS, nodes_here, names, zero)
    rec.add(O.IF_NUMBER, INTEGER, nodes_here, pa.array(counts), zero)

    def u64(name: str) -> pa.Array:
        return b.column(name)

    def mod32(name: str) -> pa.Array:
        col = b.column(name)
        vals = col.fill_null(0).to_numpy(zero_copy_only=False) % np.uint64(U32)
        return pa.array(vals, mask=col.is_null().to_numpy(zero_copy_only=False))

    n = sel.size
    rec.add(O.IF_INDEX, INTEGER, node, pa.array(ifindex), ifindex)
    rec.add(O.IF_DESCR, OCTETS, node, labels, ifindex)
    rec.add(O.IF_TYPE, INTEGER, node, pa.array(np.full(n, ETHERNET_CSMACD)), ifindex)
    rec.add(O.IF_SPEED, GAUGE32, node, pa.array(np.minimum(speed, O.IF_SPEED_MAX)), ifindex)
    rec.add(O.IF_ADMIN_STATUS, INTEGER, node, pa.array(np.full(n, O.OPER_UP)), ifindex)
    rec.add(O.IF_OPER_STATUS, INTEGER, node, pa.array(np.where(up, O.OPER_UP, O.OPER_DOWN)), ifindex)
    for col, name in ((O.IF_IN_OCTETS, "rx_bytes"), (O.IF_IN_UCAST_PKTS, "rx_packets"),
                      (O.IF_IN_ERRORS, "rcv_errors"), (O.IF_OUT_OCTETS, "tx_bytes"),
                      (O.IF_OUT_UCAST_PKTS, "tx_packets"), (O.IF_OUT_DISCARDS, "xmit_discards")):  # fmt: skip
        rec.add(col, COUNTER32, node, mod32(name), ifindex)
    rec.add(O.IF_NAME, OCTETS, node, labels, ifindex)
    for col, name in ((O.IF_HC_IN_OCTETS, "rx_bytes"), (O.IF_HC_IN_UCAST_PKTS, "rx_packets"),
                      (O.IF_HC_OUT_OCTETS, "tx_bytes"), (O.IF_HC_OUT_UCAST_PKTS, "tx_packets")):  # fmt: skip
        rec.add(col, COUNTER64, node, u64(name), ifindex)
    rec.add(O.IF_HIGH_SPEED, GAUGE32, node, pa.array(speed // 1_000_000), ifindex)
    rec.add(O.IF_ALIAS, OCTETS, node, alias, ifindex)
    # PFC: Requests = pause frames the port sent (tx), Indications = received (rx).
    if pfc_mib == "ieee":
        rec.add(O.IEEE_PFC_REQUESTS, COUNTER32, node, mod32(f"pfc{ieee_priority}_tx_pause_frames"), ifindex)
        rec.add(
            O.IEEE_PFC_INDICATIONS, COUNTER32, node, mod32(f"pfc{ieee_priority}_rx_pause_frames"), ifindex
        )
    else:
        req, ind = (
            (O.ARISTA_PFC_REQUESTS, O.ARISTA_PFC_INDICATIONS)
            if pfc_mib == "arista"
            else (O.CISCO_PFC_REQUESTS, O.CISCO_PFC_INDICATIONS)
        )
        for p in PFC_PRIORITIES:
            prio = np.full(n, p)
            rec.add(req, COUNTER64, node, u64(f"pfc{p}_tx_pause_frames"), ifindex, prio)
            rec.add(ind, COUNTER64, node, u64(f"pfc{p}_rx_pause_frames"), ifindex, prio)
    if lldp:
        _lldp(rec, fabric, nodes_here, names, node, ifindex, labels, peer)
    return {fabric.node_names[c]: text for c, text in rec.texts(len(fabric.node_names)).items()}


def _lldp(
    rec: _Records,
    fabric: Fabric,
    nodes_here: np.ndarray,
    names: pa.Array,
    node: np.ndarray,
    ifindex: np.ndarray,
    labels: pa.Array,
    peer: np.ndarray,
) -> None:
    """LLDP-MIB rows: the switches' own identity and ports, and the far end of every cable."""
    zero = np.zeros(nodes_here.size, np.int64)
    macs = _node_macs(fabric)
    rec.add(
        O.LLDP_LOC_CHASSIS_ID_SUBTYPE, INTEGER, nodes_here, pa.array(np.full(nodes_here.size, LLDP_MAC)), zero
    )
    rec.add(O.LLDP_LOC_CHASSIS_ID, HEX, nodes_here, pa.array([macs[c] for c in nodes_here.tolist()]), zero)
    rec.add(O.LLDP_LOC_SYS_NAME, OCTETS, nodes_here, names, zero)
    n = node.size
    rec.add(O.LLDP_LOC_PORT_ID_SUBTYPE, INTEGER, node, pa.array(np.full(n, LLDP_IF_NAME)), ifindex)
    rec.add(O.LLDP_LOC_PORT_ID, OCTETS, node, labels, ifindex)
    rec.add(O.LLDP_LOC_PORT_DESC, OCTETS, node, labels, ifindex)
    cabled = np.flatnonzero(peer >= 0)
    if cabled.size == 0:
        return
    far = peer[cabled]
    far_node = fabric.node_of_port[far]
    on, at = node[cabled], ifindex[cabled]
    # lldpRemIndex: the agent numbers its neighbours as it learns them, here in port order.
    order = np.lexsort((at, on))
    rem_index = np.empty(cabled.size, np.int64)
    starts = np.searchsorted(on[order], on[order], side="left")
    rem_index[order] = np.arange(cabled.size) - starts + 1
    is_host = fabric.port_role[far] == "host"
    for rows, host in ((np.flatnonzero(is_host), True), (np.flatnonzero(~is_host), False)):
        if rows.size == 0:
            continue
        ends = pc.split_pattern(fabric.key_array.take(pa.array(far[rows])), "/", max_splits=1)
        far_name, far_label = pc.list_element(ends, 0), pc.list_element(ends, 1)

        def rem(col: O.Oid, tag: str, values: pa.Array, rows: np.ndarray = rows) -> None:
            rec.add((*col, LLDP_TIME_MARK), tag, on[rows], values, at[rows], rem_index[rows])

        chassis = [macs[c] for c in far_node[rows].tolist()]
        rem(O.LLDP_REM_CHASSIS_ID_SUBTYPE, INTEGER, pa.array(np.full(rows.size, LLDP_MAC)))
        rem(O.LLDP_REM_CHASSIS_ID, HEX, pa.array(chassis))
        if host:  # lldpd's defaults: the port by MAC, its interface name as the description
            nics = [fabric.aliases[i] if fabric.aliases else () for i in far[rows].tolist()]
            rem(O.LLDP_REM_PORT_ID_SUBTYPE, INTEGER, pa.array(np.full(rows.size, LLDP_PORT_MAC)))
            rem(O.LLDP_REM_PORT_ID, HEX, pa.array([_hex(a[1]) if len(a) > 1 else None for a in nics]))
            rem(O.LLDP_REM_PORT_DESC, OCTETS, pa.array([a[0] if a else None for a in nics]))
        else:  # a switch: its port name, locally assigned
            rem(O.LLDP_REM_PORT_ID_SUBTYPE, INTEGER, pa.array(np.full(rows.size, LLDP_PORT_LOCAL)))
            rem(O.LLDP_REM_PORT_ID, OCTETS, far_label)
            rem(O.LLDP_REM_PORT_DESC, OCTETS, far_label)
        rem(O.LLDP_REM_SYS_NAME, OCTETS, far_name)


def _hex(mac: str) -> str:
    return mac.replace(":", "")


def _node_macs(fabric: Fabric) -> dict[int, str]:
    """Each node's chassis MAC (hex, as an snmprec ``4x`` value): a switch's from its node GUID,
    a host's from its first NIC's, as lldpd takes the MAC of one of its interfaces."""
    nodes, first = np.unique(fabric.node_of_port, return_index=True)
    out = {}
    for c, i in zip(nodes.tolist(), first.tolist(), strict=True):
        guid = fabric.guids[i] if fabric.guids else None
        out[c] = _hex(mac_of_guid(guid)) if guid else f"02{c:010x}"  # locally administered
    return out


def _if_index(fabric: Fabric, pidx: np.ndarray, node: np.ndarray) -> np.ndarray:
    """ifIndex = the port number; without port numbers, the port's rank on its switch (1-based)."""
    nums = fabric.port_num[pidx].astype(np.int64) if fabric.port_num is not None else np.zeros(pidx.size)
    if pidx.size and (nums > 0).all():
        return nums
    order = np.lexsort((pidx, node))
    ranks = np.empty(pidx.size, np.int64)
    sorted_nodes = node[order]
    starts = np.searchsorted(sorted_nodes, sorted_nodes, side="left")
    ranks[order] = np.arange(pidx.size) - starts + 1
    return ranks


def write_snmprec(
    batch: pa.RecordBatch,
    fabric: Fabric,
    out_dir: str | Path,
    *,
    pfc_mib: PfcMib = "ieee",
    ieee_priority: int = 3,
    nodes: Iterable[str] | None = None,
    boot: datetime = EPOCH,
    lldp: bool = True,
    mtime: float | None = None,
) -> dict[str, Path]:
    """Write ``<out_dir>/<switch>.snmprec`` for each switch in the poll; returns the paths.

    Each file is written beside its final name and renamed over it, so snmpsim never reads a
    half-written recording. ``mtime`` (unix seconds) is stamped on it before the rename: snmpsim
    re-indexes a recording when its mtime changes, so the file must never show another one.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    texts = render_snmprec(
        batch, fabric, pfc_mib=pfc_mib, ieee_priority=ieee_priority, nodes=nodes, boot=boot, lldp=lldp
    )
    for name, text in texts.items():
        path = out / f"{name}.snmprec"
        tmp = out / f".{name}.snmprec.tmp"
        tmp.write_text(text)
        if mtime is not None:
            os.utime(tmp, (mtime, mtime))
        tmp.replace(path)
        paths[name] = path
    return paths
