"""What graywire's collectors make of the simulator's ports when real sources report them.

The simulator's ``port_sample`` batch is rich: 64-bit counters, corrected bits and PHY bits on
every port, one exact poll time. Real sources are not (docs/records.md, "Source names"). A
:class:`PortView` takes one poll's rich batch, renders it in one real source mix's wire format,
and parses it back with the collector's own parser, so an evaluation crosses the parsers and
sees what a deployment would. Each returns the batches as the sources deliver them, split as
they split a port (UFM REST has the state and speed, UFM Telemetry the counters and no speed),
for the pipeline to join:

- ``rich``: the batch as is.
- ``ufm_default``: UFM REST (state, speed, width) and, apart, UFM Telemetry's default counter
  set as Prometheus text: Extended PM counters, symbol errors, RS-FEC block and symbol counts,
  no speed, no PHY corrected or received bits, no per-lane counters (ARCHITECTURE: a default
  set often lacks them).
- ``perfquery_legacy``: ``perfquery`` PortCounters blocks, legacy names and widths (error
  counters saturate at 4 to 16 bits, data at 32); the hosts' HCAs fill the legacy data fields
  with their 64-bit values (a wide value under a legacy name, as sysfs does on mlx5). perfquery
  has no state: state, speed and width come from the SMP PortInfo a tool such as ``smpquery``
  reads (passed through from the simulator).
- ``host_ethtool``: host NICs as the host agent reads them, sysfs PMA counters at their widths
  plus mlx5 ``ethtool -S`` / ``--show-fec`` / ``ethtool <if>`` text (``*_phy`` counters), parsed by
  the agent's parsers; switch ports through ``ufm_default``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import ClassVar, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.host.ethtool import (
    EthtoolReading,
    apply_ethtool,
    parse_fec,
    parse_settings,
    parse_statistics,
)
from graywire.collectors.host.sysfs import HW_COUNTERS, PMA_COUNTERS, PortReading, readings_to_batch
from graywire.collectors.ib.counters import IBA_COUNTERS
from graywire.collectors.ib.perfquery import parse_perfquery, perfquery_batch
from graywire.collectors.keys import split_port_key
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PHYS_LINK_UP, PORT_SAMPLE, make_batch
from graywire.collectors.ufm.ports import PortKeys, SpellingCache
from graywire.collectors.ufm.rest import parse_links, parse_ports
from graywire.collectors.ufm.telemetry import parse_prometheus
from graywire.fabricsim.hostfs import HostTreeWriter
from graywire.fabricsim.topology import nic_netdev
from graywire.fabricsim.ufm_server import FakeUfm, _Ports, links_json, prometheus_text

#: UFM Telemetry's default counters: canonical column -> (metric name, divisor to device units).
UFM_DEFAULT: dict[str, tuple[str, int]] = {
    "tx_bytes": ("PortXmitDataExtended", 4),
    "rx_bytes": ("PortRcvDataExtended", 4),
    "tx_packets": ("PortXmitPktsExtended", 1),
    "rx_packets": ("PortRcvPktsExtended", 1),
    "symbol_errors": ("SymbolErrorCounterExtended", 1),
    "link_downed": ("LinkDownedCounterExtended", 1),
    "link_recovery": ("LinkErrorRecoveryCounterExtended", 1),
    "rcv_errors": ("PortRcvErrorsExtended", 1),
    "xmit_discards": ("PortXmitDiscardsExtended", 1),
    "xmit_wait_ticks": ("PortXmitWaitExtended", 1),
    "fec_corrected_blocks": ("PortFECCorrectableBlockCounter", 1),
    "fec_uncorrectable_blocks": ("PortFECUncorrectableBlockCounter", 1),
    "fec_corrected_symbols": ("PortFECCorrectedSymbolCounter", 1),
    "fec_mode": ("fec_mode_active", 1),
}
_GAUGES = ("phys_state", "logical_state", "speed_bps", "width", "fec_mode", "temperature_celsius")


class PortView(Protocol):
    name: str

    def apply(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]: ...


def _time_of(batch: pa.RecordBatch) -> datetime:
    return batch.column("time")[0].as_py()


def _gauges(batch: pa.RecordBatch, source: str) -> pa.RecordBatch:
    n = batch.num_rows
    cols = {g: batch.column(g) for g in _GAUGES}
    cols |= {"time": batch.column("time"), "port": batch.column("port")}
    cols["source"] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array([source]))
    return make_batch(PORT_SAMPLE, n, cols)


def _saturate(value: int, bits: int | None) -> int:
    return value if bits is None or bits >= 64 else min(value, 2**bits - 1)


@dataclass
class RichView:
    fabric: Fabric
    name: str = "rich"

    def apply(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        return [batch] if batch.num_rows else []


class _Snapshot(FakeUfm):
    """FakeUfm's renderers over one given batch, without a simulation or an app behind it."""

    def __init__(self, fabric: Fabric) -> None:  # no server, no simulation: only the renderers
        self.fabric = fabric
        self._ports = _Ports(fabric)
        self.step = SimpleNamespace(port_sample=None, time=None, links=None)  # type: ignore[assignment]


@dataclass
class UfmDefaultView:
    fabric: Fabric
    name: str = "ufm_default"
    #: InfiniBand telemetry has no PFC pause or ECN counters (RoCE NIC counters).
    blind_to: ClassVar[frozenset[str]] = frozenset({"pfc_storm", "ecn_hotspot"})
    _keys: PortKeys = field(init=False)
    _cache: SpellingCache = field(init=False)
    _snap: _Snapshot = field(init=False)

    def __post_init__(self) -> None:
        self._keys = PortKeys(self.fabric)
        self._cache = SpellingCache()
        self._snap = _Snapshot(self.fabric)

    def apply(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """UFM REST's ports and UFM Telemetry's counters: two batches, as the two endpoints give."""
        if batch.num_rows == 0:
            return []
        now = _time_of(batch)
        self._snap.step = SimpleNamespace(port_sample=batch, time=now, links=None)  # type: ignore[assignment]
        rest, _ = parse_ports(self._snap.ports_json(), self._keys, now)
        labels = self._snap._ports.labels.take(pa.array(self._snap._rows()))
        metrics = [(name, self._snap._values(col, div)) for col, (name, div) in UFM_DEFAULT.items()]
        temp = pc.round(batch.column("temperature_celsius").cast(pa.float64()), 1)
        metrics.append(("CableInfo_Temperature", temp))
        text = prometheus_text(metrics, labels, self._snap.time_us // 1000, help_text=False)
        tele = parse_prometheus(text, self._keys, self._cache, now=now)
        return [rest, tele]


#: Legacy PortCounters fields in perfquery's print order.
_LEGACY_FIELDS = (
    "SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
    "PortRcvRemotePhysicalErrors", "PortRcvSwitchRelayErrors", "PortXmitDiscards",
    "PortXmitConstraintErrors", "PortRcvConstraintErrors", "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors", "VL15Dropped", "PortXmitData", "PortRcvData", "PortXmitPkts",
    "PortRcvPkts", "PortXmitWait",
)  # fmt: skip
_WIDE_ON_HOSTS = frozenset({"PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts"})


@dataclass
class PerfqueryLegacyView:
    fabric: Fabric
    name: str = "perfquery_legacy"
    #: Legacy PortCounters: no FEC counters (a pre-FEC BER rise is invisible until errors pass
    #: FEC), no PFC or ECN.
    blind_to: ClassVar[frozenset[str]] = frozenset({"pfc_storm", "ecn_hotspot", "ber_ramp"})

    def render(self, batch: pa.RecordBatch) -> tuple[str, list[str]]:
        """perfquery text for every port of the batch (one block each) and the blocks' port keys."""
        f = self.fabric
        idx = f.lookup(batch.column("port"))
        cols = {
            c.column: batch.column(c.column).to_pylist()
            for c in IBA_COUNTERS.values()
            if c.column in batch.schema.names
        }
        nums = f.port_num if f.port_num is not None else np.ones(f.n_ports, np.int16)
        out: list[str] = []
        keys: list[str] = []
        for row, i in enumerate(idx.tolist()):
            if i < 0:
                continue
            lid, num = int(f.node_of_port[i]) + 1, int(nums[i]) or 1
            head = f"# Port counters: Lid {lid} port {num} (CapMask: 0x1400)"
            lines = [head, f"PortSelect:{'.' * 22}{num}"]
            for name in _LEGACY_FIELDS:
                c = IBA_COUNTERS[name]
                v = cols.get(c.column, [None] * batch.num_rows)[row]
                if v is None:
                    v = 0  # PortCounters always carries every field; a counter the device lacks reads 0
                v = int(v) // c.scale
                wide = name in _WIDE_ON_HOSTS and bool(f.host_port[i])
                shown = v if wide else _saturate(v, c.legacy_bits)
                lines.append(f"{name}:{'.' * max(1, 32 - len(name))}{shown}")
            out.append("\n".join(lines))
            keys.append(f.keys[i])
        return "\n".join(out) + "\n", keys

    def apply(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """perfquery's counters, and apart the state an SMP query (``smpquery portinfo``) reads."""
        if batch.num_rows == 0:
            return []
        text, keys = self.render(batch)
        blocks = parse_perfquery(text)
        counters = perfquery_batch(list(zip(keys, ([b] for b in blocks), strict=True)), _time_of(batch))
        return [counters, _gauges(batch, "perfquery")]


@dataclass
class HostEthtoolView:
    fabric: Fabric
    name: str = "host_ethtool"
    _switches: UfmDefaultView = field(init=False)

    def __post_init__(self) -> None:
        self._switches = UfmDefaultView(self.fabric)

    def readings(self, batch: pa.RecordBatch) -> tuple[list[PortReading], list[str]]:
        """The agent's readings of the batch's host ports: sysfs values as the kernel shows them
        (PMA error counters saturated at their widths), then the ethtool text parsed in."""
        f = self.fabric
        idx = f.lookup(batch.column("port"))
        names = [n for n in batch.schema.names if n != "port"]
        cols = {n: batch.column(n).to_pylist() for n in names}
        out: list[PortReading] = []
        keys: list[str] = []
        for row, i in enumerate(idx.tolist()):
            if i < 0 or not f.host_port[i]:
                continue
            v = {n: cols[n][row] for n in names}
            _, label = split_port_key(f.keys[i])
            dev, _num = HostTreeWriter.device_of(label)
            netdev = nic_netdev(dev)
            up = v["phys_state"] == PHYS_LINK_UP and v["speed_bps"] is not None
            speed = int(v["speed_bps"]) if up else int(f.expected_speed_bps[i])
            width = int(v["width"] or f.expected_width[i] or 4) if up else int(f.expected_width[i] or 4)
            state = (v["phys_state"], v["logical_state"])
            r = PortReading(label, dev, 1, netdev, "Ethernet", *state, speed, width)
            for spec in PMA_COUNTERS.values():
                value = v.get(spec.column)
                if value is not None:
                    raw = _saturate(int(value) // spec.scale, spec.bits)
                    r.set_counter(spec.column, raw * spec.scale, spec.bits)
            for hw, column in HW_COUNTERS.items():
                if v.get(column) is not None:
                    r.set_counter(column, int(v[column]))
                    r.extra[f"hw_counters/{hw}"] = int(v[column])
            stats = HostTreeWriter._statistics_text(v)
            settings = HostTreeWriter._settings_text(netdev, up, speed, width)
            apply_ethtool(
                r,
                EthtoolReading(
                    statistics=parse_statistics(stats),
                    fec=parse_fec(HostTreeWriter._fec_text(netdev, v)),
                    settings=parse_settings(settings),
                ),
            )
            r.label = f.keys[i]
            out.append(r)
            keys.append(f.keys[i])
        return out, keys

    def apply(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """The host agents' batch, and the switches' ports as UFM gives them."""
        if batch.num_rows == 0:
            return []
        readings, keys = self.readings(batch)
        parts: list[pa.RecordBatch] = []
        if readings:
            hosts = readings_to_batch(readings, "h", _time_of(batch))
            port = pa.DictionaryArray.from_arrays(hosts.column("port").indices, pa.array(keys, pa.string()))
            parts.append(hosts.set_column(hosts.schema.get_field_index("port"), "port", port))
        sw = self.fabric.lookup(batch.column("port"))
        switch_rows = np.flatnonzero((sw >= 0) & ~self.fabric.host_port[np.maximum(sw, 0)])
        if switch_rows.size:
            parts += self._switches.apply(batch.take(pa.array(switch_rows)))
        return parts


@dataclass
class UfmLinksView:
    """The simulator's cables as UFM REST's ``/resources/links`` lists them, read back by the
    collector's parser (GUIDs and port numbers resolved through the inventory)."""

    fabric: Fabric
    name: str = "ufm_links"
    _keys: PortKeys = field(init=False)
    _ports: _Ports = field(init=False)

    def __post_init__(self) -> None:
        self._keys = PortKeys(self.fabric)
        self._ports = _Ports(self.fabric)

    def apply(self, links: pa.RecordBatch) -> pa.RecordBatch:
        width = self.fabric.expected_width.astype(np.uint64)
        table = parse_links(links_json(self.fabric, self._ports, links, width), self._keys).combine_chunks()
        return (
            table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=table.schema)
        )


PORT_VIEWS: dict[str, Callable[[Fabric], PortView]] = {
    "rich": RichView,
    "ufm_default": UfmDefaultView,
    "perfquery_legacy": PerfqueryLegacyView,
    "host_ethtool": HostEthtoolView,
}
