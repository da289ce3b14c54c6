"""Exporter text (Prometheus exposition format) -> canonical ``port_sample`` and ``link`` records.

Pure: text in, batches out, skips counted. The text is parsed by prometheus_client's own
parser; the families read are those of three exporters sites already run:

- node_exporter's ``infiniband`` collector (``node_infiniband_*{device, port}``: the host's
  ``/sys/class/infiniband`` counters, data already in bytes; ``state_id``,
  ``physical_state_id``, ``rate_bytes_per_second``; RoCE ``hw_counters``), its ``ethtool``
  collector (``node_ethtool_*{device}``: the driver's ``ethtool -S`` statistics, mlx5's PFC,
  FEC and PHY counters among them) and, where on, its ``netclass`` collector
  (``node_network_speed_bytes``, ``node_network_info{operstate}``,
  ``node_network_protocol_type``) for the netdevs ethtool names;
- treydock/infiniband_exporter (``infiniband_{switch,hca}_port_*{guid, port}`` from
  ``perfquery -x``, the names in ``infiniband_{switch,hca}_info``, speeds in
  ``*_rate_bytes_per_second``, cables in ``*_uplink_info``).

Keys are the ones graywire's own collectors give the same ports: a host's RDMA port is
``<node>/<device>`` (``<device>:<port>`` past port 1) and a netdev ``<node>/<netdev>``, as the
host agent names them (a netdev the model lists as a port's alias joins that port, so ethtool's
counters and the RDMA device's land in one row); a GUID-addressed port is the model's port for
(GUID, port number), else what discovery would call it (``<switch>/p<n>``, ``<host>/<device>``),
else ``0x<guid>/<n>``, as the UFM source keys ports. node_exporter's series name no host: the
target's ``node`` does (or ``node_uname_info``'s ``nodename``).

Widths follow where a value came from: node_exporter reads sysfs, whose legacy PortCounters
error fields are 4 to 16 bits and saturate (declared so, as the agent declares them);
infiniband_exporter reads ``perfquery -x``, 64-bit. A counter a source does not export stays
null: unknown, never 0.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from graywire.collectors.base import BAD_PORT, NOT_A_NUMBER, OUT_OF_RANGE, KeyResolver, Skips
from graywire.collectors.discovery import ca_name, switch_name
from graywire.collectors.host.ethtool import EthtoolReading, apply_ethtool
from graywire.collectors.host.sysfs import (
    HW_COUNTERS,
    NETDEV_STATISTICS,
    PMA_COUNTERS,
    PortReading,
    operstate_codes,
)
from graywire.collectors.ib.counters import iba_spec
from graywire.collectors.keys import normalize_guid, port_key
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import (
    LINK,
    PORT_COUNTERS,
    PORT_SAMPLE,
    TS,
    fitted_array_counted,
    make_batch,
    with_counter_widths,
)

SOURCE = "prometheus"

#: ``node_infiniband_<name>`` -> the sysfs ``counters/`` file it is read from (its PMA width).
NODE_IB_COUNTERS: dict[str, str] = {
    "port_data_received_bytes_total": "port_rcv_data",
    "port_data_transmitted_bytes_total": "port_xmit_data",
    "port_packets_received_total": "port_rcv_packets",
    "port_packets_transmitted_total": "port_xmit_packets",
    "symbol_error_total": "symbol_error",
    "link_error_recovery_total": "link_error_recovery",
    "link_downed_total": "link_downed",
    "port_errors_received_total": "port_rcv_errors",
    "port_receive_remote_physical_errors_total": "port_rcv_remote_physical_errors",
    "port_receive_switch_relay_errors_total": "port_rcv_switch_relay_errors",
    "port_discards_transmitted_total": "port_xmit_discards",
    "port_constraint_errors_transmitted_total": "port_xmit_constraint_errors",
    "port_constraint_errors_received_total": "port_rcv_constraint_errors",
    "local_link_integrity_errors_total": "local_link_integrity_errors",
    "excessive_buffer_overrun_errors_total": "excessive_buffer_overrun_errors",
    "vl15_dropped_total": "VL15_dropped",
    "port_transmit_wait_total": "port_xmit_wait",
}
#: ``counters_ext`` 64-bit data counters (hfi1, older mlx4): used where ``counters/`` has none.
NODE_IB_LEGACY: dict[str, str] = {
    "legacy_data_received_bytes_total": "rx_bytes",
    "legacy_data_transmitted_bytes_total": "tx_bytes",
    "legacy_packets_received_total": "rx_packets",
    "legacy_packets_transmitted_total": "tx_packets",
}
#: ``node_infiniband_<name>`` -> the ``hw_counters/`` file (RoCE congestion control).
NODE_IB_HW: dict[str, str] = {
    "np_ecn_marked_roce_packets_received_total": "np_ecn_marked_roce_packets",
    "np_cnp_packets_sent_total": "np_cnp_sent",
    "rp_cnp_packets_handled_total": "rp_cnp_handled",
}
#: node_exporter's own names for the ethtool statistics it pre-declares.
NODE_ETHTOOL_NAMED: dict[str, str] = {
    "received_bytes_total": "rx_bytes",
    "received_dropped_total": "rx_dropped",
    "received_errors_total": "rx_errors",
    "received_packets_total": "rx_packets",
    "transmitted_bytes_total": "tx_bytes",
    "transmitted_errors_total": "tx_errors",
    "transmitted_packets_total": "tx_packets",
}
#: What every other ethtool statistic's HELP says: ``Network interface <statistic>``.
_ETHTOOL_HELP = re.compile(r"^Network interface (\S+)$")
_RECEIVED = re.compile(r"(^|_)received(_|$)")
_TRANSMITTED = re.compile(r"(^|_)transmitted(_|$)")
#: ``infiniband_{switch,hca}_port_<name>`` -> the IBA field perfquery printed.
IBEXP_COUNTERS: dict[str, str] = {
    "transmit_data_bytes_total": "PortXmitData",
    "receive_data_bytes_total": "PortRcvData",
    "transmit_packets_total": "PortXmitPkts",
    "receive_packets_total": "PortRcvPkts",
    "symbol_error_total": "SymbolErrorCounter",
    "link_error_recovery_total": "LinkErrorRecoveryCounter",
    "link_downed_total": "LinkDownedCounter",
    "receive_errors_total": "PortRcvErrors",
    "receive_remote_physical_errors_total": "PortRcvRemotePhysicalErrors",
    "receive_switch_relay_errors_total": "PortRcvSwitchRelayErrors",
    "transmit_discards_total": "PortXmitDiscards",
    "transmit_constraint_errors_total": "PortXmitConstraintErrors",
    "receive_constraint_errors_total": "PortRcvConstraintErrors",
    "local_link_integrity_errors_total": "LocalLinkIntegrityErrors",
    "excessive_buffer_overrun_errors_total": "ExcessiveBufferOverrunErrors",
    "vl15_dropped_total": "VL15Dropped",
    "transmit_wait_total": "PortXmitWait",
}
#: The families read; every other line is left out before parsing (a node_exporter with its
#: default collectors serves thousands of lines about CPUs and filesystems).
READ_PREFIXES = (
    "node_infiniband_",
    "node_ethtool_",
    "node_network_speed_bytes",
    "node_network_info",
    "node_network_protocol_type",
    "node_uname_info",
    "infiniband_switch_",
    "infiniband_hca_",
)
#: ``node_network_protocol_type`` (ARPHRD) of an Ethernet netdev.
_ARPHRD_ETHER = 1
_U64 = 2**64


@dataclass(frozen=True, slots=True)
class Exposition:
    """Every sample of one text exposition, by sample name, and each family's HELP by sample name."""

    samples: Mapping[str, list[tuple[dict[str, str], float]]]
    help: Mapping[str, str]

    @classmethod
    def parse(cls, text: str) -> Exposition:
        """prometheus_client's parser over the lines of the families read: a line of theirs it
        cannot read fails it all, as a Prometheus scrape of the same text would."""
        samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        helps: dict[str, str] = {}
        for family in text_string_to_metric_families(_read_lines(text)):
            for s in family.samples:
                samples[s.name].append((s.labels, s.value))
                helps.setdefault(s.name, family.documentation)
        return cls(samples, helps)

    def with_prefix(self, prefix: str) -> Iterable[tuple[str, list[tuple[dict[str, str], float]]]]:
        return ((name[len(prefix) :], rows) for name, rows in self.samples.items() if name.startswith(prefix))


def _read_lines(text: str) -> str:
    """The lines of the families read, HELP and TYPE included (only ``\\n`` ends a line)."""
    keep = []
    for line in text.split("\n"):
        if line[:1] in (" ", "\t"):  # the text format ignores leading blanks; a paste indents
            line = line.lstrip(" \t")
        if line.startswith("#"):
            words = line.split(None, 3)
            if len(words) >= 3 and words[1] in ("HELP", "TYPE") and words[2].startswith(READ_PREFIXES):
                keep.append(line)
        elif line.startswith(READ_PREFIXES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def _count(value: float, skipped: Skips) -> int | None:
    """A counter value as an integer; NaN, infinities, negatives and 2**64 and past are no counter."""
    if math.isnan(value) or math.isinf(value):
        skipped[NOT_A_NUMBER] += 1
        return None
    if value < 0 or value >= _U64:
        skipped[OUT_OF_RANGE] += 1
        return None
    return int(value)


class _Rows:
    """Port readings by key, in first-seen order; a key read twice (an RDMA device and its
    netdev) is one row."""

    def __init__(self, fabric: Fabric | None) -> None:
        self.fabric = fabric
        self.by_key: dict[str, PortReading] = {}
        self._keys = set(fabric.keys) if fabric is not None else set()

    def canonical(self, key: str) -> str:
        """The model's key for ``key``: itself, or the port it names through an alias."""
        if self.fabric is None or key in self._keys:
            return key
        i = self.fabric.resolve_alias(key)
        return self.fabric.keys[i] if i >= 0 else key

    def known(self, key: str) -> bool:
        """Whether the model has a port ``key`` (always, without a model)."""
        return self.fabric is None or key in self._keys

    def get(self, key: str, make: PortReading) -> PortReading:
        have = self.by_key.get(key)
        if have is None:
            self.by_key[key] = have = make
        return have


# -- node_exporter ---------------------------------------------------------------------------


def node_name(expo: Exposition, node: str | None) -> str | None:
    """The host a node_exporter describes: the target's ``node``, else ``node_uname_info``'s
    ``nodename`` (short form: up to the first dot)."""
    if node:
        return node
    for labels, _ in expo.samples.get("node_uname_info", []):
        name = labels.get("nodename", "").split(".")[0].strip()
        if name and "/" not in name:
            return name
    return None


def _ethtool_stat(name: str, help_text: str | None) -> str:
    """The ``ethtool -S`` name behind ``node_ethtool_<name>``: what its HELP names, else
    node_exporter's own rename undone (``received`` -> ``rx``, ``transmitted`` -> ``tx``)."""
    if name in NODE_ETHTOOL_NAMED:
        return NODE_ETHTOOL_NAMED[name]
    m = _ETHTOOL_HELP.match(help_text or "")
    if m:
        return m.group(1)
    name = _RECEIVED.sub(r"\1rx\2", name)
    return _TRANSMITTED.sub(r"\1tx\2", name)


def _node_exporter(expo: Exposition, node: str, rows: _Rows, skipped: Skips) -> None:
    ib: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for name, samples in expo.with_prefix("node_infiniband_"):
        for labels, value in samples:
            dev, num = labels.get("device"), labels.get("port")
            if dev is not None and num is not None:
                ib[(dev, num)][name] = value
    for (dev, num), values in sorted(ib.items()):
        if not num.isdigit() or not dev or "/" in dev:
            skipped[BAD_PORT] += 1
            continue
        port = int(num)
        label = dev if port == 1 else f"{dev}:{port}"
        key = rows.canonical(port_key(node, label))
        r = rows.get(key, PortReading(label=label, device=dev, port_num=port, netdev=None))
        for metric, fname in NODE_IB_COUNTERS.items():
            if metric in values and (v := _count(values[metric], skipped)) is not None:
                spec = PMA_COUNTERS[fname]  # data counters arrive in bytes already: no scale
                r.set_counter(spec.column, v, spec.bits)
        for metric, column in NODE_IB_LEGACY.items():
            if metric in values and r.counters.get(column) is None:
                r.set_counter(column, _count(values[metric], skipped))
        for metric, fname in NODE_IB_HW.items():
            if metric in values:
                r.set_counter(HW_COUNTERS[fname], _count(values[metric], skipped))
        if "state_id" in values:
            r.logical_state = _state(values["state_id"], 5, skipped)
        if "physical_state_id" in values:
            r.phys_state = _state(values["physical_state_id"], 7, skipped)
        if "rate_bytes_per_second" in values:
            r.rate_bps = _speed(values["rate_bytes_per_second"], skipped)

    stats: dict[str, dict[str, int]] = defaultdict(dict)
    for name, samples in expo.with_prefix("node_ethtool_"):
        if name == "info":
            continue
        stat = _ethtool_stat(name, expo.help.get(f"node_ethtool_{name}"))
        for labels, value in samples:
            dev = labels.get("device")
            if dev and (v := _count(value, skipped)) is not None:
                stats[dev][stat] = v
    netclass = _netclass(expo)
    for dev, dev_stats in sorted(stats.items()):
        if "/" in dev:
            skipped[BAD_PORT] += 1
            continue
        key = rows.canonical(port_key(node, dev))
        info = netclass.get(dev, {})
        ethernet = info.get("protocol_type") == _ARPHRD_ETHER or any(s.endswith("_phy") for s in dev_stats)
        r = rows.get(key, PortReading(label=dev, device=None, port_num=None, netdev=dev))
        r.netdev = dev
        if ethernet:
            r.link_layer = "Ethernet"
        if r.device is None:  # a netdev of its own: its state is the netdev's
            r.phys_state, r.logical_state = operstate_codes(info.get("operstate"))
        speed = info.get("speed_bytes")
        if isinstance(speed, float) and speed > 0:
            r.netdev_speed_bps = _speed(speed, skipped)
        apply_ethtool(r, EthtoolReading(statistics=dev_stats))
        if r.device is None:  # a netdev of its own: the kernel's statistics, as ethtool names them
            for stat, column in NETDEV_STATISTICS.items():
                if stat in dev_stats and r.counters.get(column) is None:
                    r.set_counter(column, dev_stats[stat])


def _netclass(expo: Exposition) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = defaultdict(dict)
    for name, key in (
        ("node_network_speed_bytes", "speed_bytes"),
        ("node_network_protocol_type", "protocol_type"),
    ):
        for labels, value in expo.samples.get(name, []):
            if "device" in labels:
                out[labels["device"]][key] = value
    for labels, _ in expo.samples.get("node_network_info", []):
        if "device" in labels:
            out[labels["device"]]["operstate"] = labels.get("operstate")
    return out


def _state(value: float, top: int, skipped: Skips) -> int | None:
    if value != value or not 0 <= value <= top or value != int(value):
        skipped[OUT_OF_RANGE] += 1
        return None
    return int(value)


def _speed(bytes_per_second: float, skipped: Skips) -> int | None:
    """A speed in bytes/s (both exporters' unit) as bits/s; 0 or less is no speed (link down)."""
    if not math.isfinite(bytes_per_second):
        skipped[NOT_A_NUMBER] += 1
        return None
    if bytes_per_second <= 0:
        return None
    if bytes_per_second * 8 >= 2**63:
        skipped[OUT_OF_RANGE] += 1
        return None
    return round(bytes_per_second * 8)


# -- infiniband_exporter ---------------------------------------------------------------------


def _ibexp_key(
    kind: str, guid: str, num: int, names: Mapping[str, str], rows: _Rows, resolver: KeyResolver
) -> str:
    """The model's port for (GUID, number), else the one discovery would name, else 0x<guid>/<n>."""
    hit = resolver.by_guid_port.get((guid, num)) or resolver.by_guid.get(guid)
    if hit:
        return hit
    name = names.get(guid)
    if name:
        if kind == "switch":
            guess = port_key(switch_name(name, guid), f"p{num}")
        else:
            guess = port_key(*ca_name(name, num, guid))
        guess = rows.canonical(guess)
        if rows.fabric is not None and rows.known(guess):
            return guess
    return resolver.resolve(guid, num)


def _infiniband_exporter(
    expo: Exposition, rows: _Rows, resolver: KeyResolver, skipped: Skips
) -> list[tuple[str, str]]:
    cables: list[tuple[str, str]] = []
    for kind in ("switch", "hca"):
        names: dict[str, str] = {}
        for labels, _ in expo.samples.get(f"infiniband_{kind}_info", []):
            g = _guid(labels.get("guid"))
            if g and labels.get(kind):
                names[g] = labels[kind]
        ports: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
        for name, samples in expo.with_prefix(f"infiniband_{kind}_port_"):
            for labels, value in samples:
                g, num = _guid(labels.get("guid")), labels.get("port", "")
                if g is None or not num.isdigit():
                    skipped[BAD_PORT] += 1
                    continue
                ports[(g, int(num))][name] = value
        hca_rate = {
            g: v
            for labels, v in expo.samples.get("infiniband_hca_rate_bytes_per_second", [])
            if (g := _guid(labels.get("guid")))
        }
        for (g, num), values in sorted(ports.items()):
            key = _ibexp_key(kind, g, num, names, rows, resolver)
            r = rows.get(key, PortReading(label=key, device=None, port_num=num, netdev=None))
            for metric, field in IBEXP_COUNTERS.items():
                if metric in values:
                    spec = iba_spec(field, extended=True)
                    assert spec is not None
                    r.set_counter(spec.column, _count(values[metric], skipped))  # data: bytes already
            rate = values.get("rate_bytes_per_second", hca_rate.get(g) if kind == "hca" else None)
            if rate is not None:
                r.rate_bps = _speed(rate, skipped)
        for labels, _ in expo.samples.get(f"infiniband_{kind}_uplink_info", []):
            g, peer = _guid(labels.get("guid")), _guid(labels.get("uplink_guid"))
            num, peer_num = labels.get("port", ""), labels.get("uplink_port", "")
            if g is None or peer is None or not num.isdigit() or not peer_num.isdigit():
                skipped[BAD_PORT] += 1
                continue
            peer_kind = "switch" if labels.get("uplink_type") == "SW" else "hca"
            peer_names = {peer: labels.get("uplink", "")}
            a = _ibexp_key(kind, g, int(num), names, rows, resolver)
            b = _ibexp_key(peer_kind, peer, int(peer_num), peer_names, rows, resolver)
            if rows.known(a) and rows.known(b):  # a cable the model cannot place says nothing
                cables.append((a, b))
            else:
                skipped[BAD_PORT] += 1
    return cables


def _guid(text: str | None) -> str | None:
    try:
        return normalize_guid(text) if text else None
    except ValueError:
        return None


# -- batches ---------------------------------------------------------------------------------


def parse_exposition(
    text: str,
    *,
    node: str | None = None,
    fabric: Fabric | None = None,
    resolver: KeyResolver | None = None,
    time: datetime | None = None,
    skipped: Skips | None = None,
) -> tuple[pa.RecordBatch, ...]:
    """The ``port_sample`` batch (and the ``link`` view, where infiniband_exporter lists cables)
    of one exporter's text at ``time``; nothing at all when it holds none of the families read.

    ``node`` names the host a node_exporter runs on (else its ``node_uname_info``); without
    either, its ports cannot be keyed and the text is refused.
    """
    skipped = skipped if skipped is not None else Counter()
    time = time or datetime.now(UTC)
    expo = Exposition.parse(text)
    rows = _Rows(fabric)
    resolver = resolver or KeyResolver.from_fabric(fabric)
    if any(n.startswith(("node_infiniband_", "node_ethtool_")) for n in expo.samples):
        host = node_name(expo, node)
        if host is None:
            raise ValueError(
                "node_exporter text names no host: give the target a node, or enable the uname collector"
            )
        _node_exporter(expo, host, rows, skipped)
    cables = _infiniband_exporter(expo, rows, resolver, skipped)
    out: list[pa.RecordBatch] = []
    if rows.by_key:
        out.append(_port_batch(rows.by_key, time, skipped))
    if cables:
        a, b = zip(*sorted(set(cables)), strict=True)
        n = len(a)
        out.append(
            make_batch(
                LINK, n, {"a_port": pa.array(a), "b_port": pa.array(b), "source": pa.array([SOURCE] * n)}
            )
        )
    return tuple(out)


def _port_batch(readings: Mapping[str, PortReading], time: datetime, skipped: Skips) -> pa.RecordBatch:
    """One ``port_sample`` batch, keys sorted (the same dictionary every poll while the ports
    stay the same), widths declared where every value of a column came from one narrow field."""
    keys = sorted(readings)
    rs = [readings[k] for k in keys]
    n = len(rs)

    def column(values: Iterable[object], typ: pa.DataType) -> pa.Array:
        arr, nulled = fitted_array_counted(list(values), typ)
        if nulled:
            skipped[OUT_OF_RANGE] += nulled
        return arr

    cols: dict[str, pa.Array] = {
        "time": pa.array([time.astimezone(UTC)] * n, type=TS),
        "port": pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), pa.array(keys)),
        "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int8)), pa.array([SOURCE])),
        "phys_state": column((r.phys_state for r in rs), pa.uint8()),
        "logical_state": column((r.logical_state for r in rs), pa.uint8()),
        "speed_bps": column((r.speed_bps for r in rs), pa.int64()),
        "width": column((r.width for r in rs), pa.uint8()),
    }
    bits: dict[str, int] = {}
    for c in PORT_COUNTERS:
        if all(r.counters.get(c) is None for r in rs):
            continue
        cols[c] = column((r.counters.get(c) for r in rs), PORT_SAMPLE.field(c).type)
        widths = {r.narrow.get(c, 64) for r in rs if r.counters.get(c) is not None}
        if len(widths) == 1 and (w := next(iter(widths))) < 64:
            bits[c] = w
    if any(r.fec_lane_errors for r in rs):
        cols["fec_lane_errors"] = column((r.fec_lane_errors for r in rs), pa.list_(pa.uint64()))
    return make_batch(with_counter_widths(PORT_SAMPLE, bits, tuple(sorted(bits))), n, cols)
