"""A host's RDMA ports as sysfs shows them, read under a configurable root.

Reads ``<root>/sys/class/infiniband/<dev>/ports/<n>/{rate,state,phys_state,link_layer,
counters/*,hw_counters/*}`` and, for the netdev of each port (found through
``<dev>/device/net/*``), ``<root>/sys/class/net/<if>/{speed,operstate,carrier_changes}``. The root is
``/`` on a live host, and a directory on tests and fabricsim trees, so the same code reads both.

Formats, as ``drivers/infiniband/core/sysfs.c`` prints them:

- ``rate``: ``"%d%s Gb/sec (%dX%s)"``, e.g. ``400 Gb/sec (4X NDR)``, ``2.5 Gb/sec (1X SDR)``: the total
  over all lanes, and the width.
- ``state``: ``4: ACTIVE``; ``phys_state``: ``5: LinkUp``. The number is the PortInfo code. A line
  whose name contradicts its number is unknown (null), not guessed.
- ``counters/*``: PMA PortCounters in decimal, ``N/A (no PMA)`` without a PMA. The error counters are
  as narrow as the IB PortCounters attribute (symbol_error 16 bits, link_error_recovery 8,
  link_downed 8, port_rcv_errors 16, port_xmit_discards 16, port_xmit_wait 32) and *saturate*; the
  data and packet counters come from PortCountersExtended (64 bits) on every HCA with extended
  counters (mlx4, mlx5). ``port_xmit_data``/``port_rcv_data`` count 4-octet words.
- ``hw_counters/*``: driver counters. The RoCE congestion ones map to canonical columns
  (``np_ecn_marked_roce_packets``, ``np_cnp_sent``, ``rp_cnp_handled``); they exist only on RoCE
  ports, so on an IB port they are null, not 0.

A file that cannot be read or parsed gives null for its value, never 0 and never an exception.
Values with no canonical column stay in :attr:`PortReading.extra` (see :func:`read_ports`).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import pyarrow as pa

from graywire.collectors.base import OUT_OF_RANGE, Skips
from graywire.collectors.ib.counters import SYSFS_COUNTERS, SYSFS_WIDE, iba_counter
from graywire.collectors.keys import port_key
from graywire.collectors.schemas import (
    LOGICAL_ACTIVE,
    LOGICAL_DOWN,
    PHYS_DISABLED,
    PHYS_LINK_UP,
    PORT_COUNTERS,
    PORT_SAMPLE,
    TS,
    fitted_array_counted,
    make_batch,
    with_counter_widths,
)

IB_CLASS = Path("sys/class/infiniband")
NET_CLASS = Path("sys/class/net")


@dataclass(frozen=True, slots=True)
class PmaCounter:
    """A ``counters/`` file: its canonical column, width in bits, and unit scale."""

    column: str
    bits: int
    scale: int = 1


def _pma_counters() -> dict[str, PmaCounter]:
    out = {}
    for fname, name in SYSFS_COUNTERS.items():
        c = iba_counter(name)
        assert c is not None
        out[fname] = PmaCounter(c.column, 64 if fname in SYSFS_WIDE else (c.legacy_bits or 64), c.scale)
    return out


#: ``counters/<file>`` -> canonical column (names and widths in :mod:`graywire.collectors.ib.counters`).
#: Widths below 64 are the PortCounters fields (saturating).
PMA_COUNTERS: dict[str, PmaCounter] = _pma_counters()

#: ``hw_counters/<file>`` -> canonical column (RoCE congestion control, NP = notification point,
#: RP = reaction point).
HW_COUNTERS: dict[str, str] = {
    "np_ecn_marked_roce_packets": "ecn_marked_packets",
    "np_cnp_sent": "cnp_sent",
    "rp_cnp_handled": "cnp_handled",
}
#: hw_counters files that are settings, not counters.
HW_NOT_COUNTERS = frozenset({"lifespan"})

#: ``/sys/class/net/<if>/statistics`` -> canonical column, for netdevs without an RDMA device.
NETDEV_STATISTICS: dict[str, str] = {
    "rx_bytes": "rx_bytes",
    "tx_bytes": "tx_bytes",
    "rx_packets": "rx_packets",
    "tx_packets": "tx_packets",
    "rx_errors": "rcv_errors",
    "rx_crc_errors": "crc_errors",
    "tx_dropped": "xmit_discards",
}

PHYS_STATE_NAMES = {
    1: "sleep",
    2: "polling",
    3: "disabled",
    4: "portconfigurationtraining",
    5: "linkup",
    6: "linkerrorrecovery",
    7: "phytest",
}
LOGICAL_STATE_NAMES = {0: "nop", 1: "down", 2: "init", 3: "armed", 4: "active", 5: "active_defer"}
_SPEED_UNKNOWN_MBPS = 0xFFFFFFFF  # SPEED_UNKNOWN as some kernels print it (u32 -1)

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\s*\(\s*(\d+)X\s*([A-Za-z0-9]*)\s*\)")
_NUM_PARTS = re.compile(r"(\d+)")


@dataclass(frozen=True, slots=True)
class SysfsConfig:
    """Where and what to read.

    ``include_plain_netdevs`` adds physical netdevs that have no RDMA device (management and
    storage NICs are usually such, so they are skipped by default); ``exclude`` is a regular
    expression matched in full against RDMA device names and netdev names (``eno.*|mlx5_8``).
    """

    root: Path = Path("/")
    include_plain_netdevs: bool = False
    exclude: str | None = None


@dataclass(slots=True)
class PortReading:
    """One port as read: state, rate, canonical counters and everything else in ``extra``.

    ``counters`` holds canonical column values in base units (None = the file exists in
    principle but could not be read); ``narrow`` names the columns whose value came from a
    saturating PMA field, with its width. ``extra`` keys are ``counters/<file>`` (PortCounters
    without a canonical column), ``hw_counters/<file>`` (driver counters such as
    ``out_of_sequence``, ``local_ack_timeout_err``), ``net/speed_mbps``, ``net/carrier_changes``
    and ``ethtool/<name>`` (see :mod:`graywire.collectors.host.ethtool`).
    """

    label: str
    device: str | None
    port_num: int | None
    netdev: str | None
    link_layer: str | None = None
    phys_state: int | None = None
    logical_state: int | None = None
    rate_bps: int | None = None
    rate_width: int | None = None
    netdev_speed_bps: int | None = None
    lanes: int | None = None  # from ``ethtool <if>`` (``Lanes:``), where the driver reports it
    fec_mode: int | None = None
    fec_lane_errors: list[int] | None = None
    counters: dict[str, int | float | None] = field(default_factory=dict)
    narrow: dict[str, int] = field(default_factory=dict)
    extra: dict[str, int | None] = field(default_factory=dict)
    #: Values reading this port left out, by reason (a counter past 64 bits, say).
    skipped: Skips = field(default_factory=Counter)

    @property
    def link_up(self) -> bool:
        """False only when the state says the link is down; unknown state keeps the rate."""
        if self.phys_state is not None:
            return self.phys_state == PHYS_LINK_UP
        if self.logical_state is not None:
            return self.logical_state >= 2  # Init, Armed and Active all need a trained link
        return True

    @property
    def ethernet(self) -> bool:
        return (self.link_layer or "").lower() == "ethernet"

    @property
    def any_speed_bps(self) -> int | None:
        """The speed the port reports, up or not.

        On an Ethernet (RoCE) port the netdev's speed is the Ethernet one; ``rate`` is the
        driver's translation into IB speed names, which a kernel older than the NIC gets wrong.
        On an InfiniBand port ``rate`` is the source (IPoIB derives its speed from it).
        """
        if self.ethernet and self.netdev_speed_bps is not None:
            return self.netdev_speed_bps
        return self.rate_bps if self.rate_bps is not None else self.netdev_speed_bps

    @property
    def any_width(self) -> int | None:
        if self.ethernet and self.lanes is not None:
            return self.lanes
        return self.rate_width if self.rate_width is not None else self.lanes

    @property
    def speed_bps(self) -> int | None:
        """Negotiated speed; null when the link is down (a down port says nothing about it)."""
        return self.any_speed_bps if self.link_up else None

    @property
    def width(self) -> int | None:
        return self.any_width if self.link_up else None

    def set_counter(self, column: str, value: int | float | None, bits: int | None = None) -> None:
        """Record a canonical counter; ``bits`` marks a narrow saturating source."""
        self.counters[column] = value
        if bits is not None and bits < 64 and value is not None:
            self.narrow[column] = bits
        else:
            self.narrow.pop(column, None)


# -- file helpers -------------------------------------------------------------------------------


def read_text(path: Path) -> str | None:
    """A sysfs attribute's text, stripped; None when it cannot be read."""
    try:
        return path.read_text(errors="replace").strip()
    except (OSError, ValueError):
        return None


def read_uint(path: Path) -> int | None:
    """A non-negative decimal counter; None for a missing file, ``N/A (no PMA)`` or garbage."""
    text = read_text(path)
    if not text:
        return None
    try:
        value = int(text, 10)
    except ValueError:
        return None
    return value if value >= 0 else None


def _natural(name: str) -> list[int | str]:
    return [int(p) if p.isdigit() else p for p in _NUM_PARTS.split(name)]


def _listdir(path: Path) -> list[str]:
    try:
        return sorted((p.name for p in path.iterdir()), key=_natural)
    except OSError:
        return []


def _is_vf(dev_dir: Path) -> bool:
    """An SR-IOV virtual function: its PCI device has a ``physfn`` link to the parent."""
    return os.path.lexists(dev_dir / "device" / "physfn")


# -- parsers ------------------------------------------------------------------------------------


def parse_rate(text: str | None) -> tuple[int | None, int | None]:
    """``"400 Gb/sec (4X NDR)"`` -> (400e9 bits/s total, 4 lanes); (None, None) if unreadable."""
    if not text:
        return None, None
    m = _RATE.match(text)
    if not m:
        return None, None
    try:
        speed = int(Decimal(m.group(1)) * 10**9)
    except InvalidOperation:
        return None, None
    width = int(m.group(2))
    return (speed or None), (width or None)


def _parse_state(text: str | None, names: dict[int, str]) -> int | None:
    if not text:
        return None
    num, sep, name = text.partition(":")
    key = (name if sep else num).strip().lower().replace(" ", "")
    try:
        code = int(num.strip())
    except ValueError:
        by_name = {v: k for k, v in names.items()}
        return by_name.get(key)
    expected = names.get(code)
    if expected is None:
        return None
    if sep and key and key not in (expected, "<unknown>"):
        return None  # "4: ACTIVE" in phys_state: the line contradicts itself
    return code


def parse_phys_state(text: str | None) -> int | None:
    """``"5: LinkUp"`` -> 5."""
    return _parse_state(text, PHYS_STATE_NAMES)


def parse_logical_state(text: str | None) -> int | None:
    """``"4: ACTIVE"`` -> 4; ACTIVE_DEFER counts as Active, NOP as unknown."""
    code = _parse_state(text, LOGICAL_STATE_NAMES)
    if code == 5:
        return LOGICAL_ACTIVE
    return code or None


def operstate_codes(operstate: str | None) -> tuple[int | None, int | None]:
    """RFC 2863 operstate -> (phys_state, logical_state), as Ethernet sources map onto IB codes."""
    if operstate == "up":
        return PHYS_LINK_UP, LOGICAL_ACTIVE
    if operstate in ("down", "lowerlayerdown"):
        return PHYS_DISABLED, LOGICAL_DOWN
    return None, None


@dataclass(frozen=True, slots=True)
class NetdevInfo:
    name: str
    speed_bps: int | None
    operstate: str | None
    carrier_changes: int | None


def read_netdev(path: Path) -> NetdevInfo:
    """``speed`` (Mb/s; -1, empty or unreadable when down), ``operstate``, ``carrier_changes``."""
    text = read_text(path / "speed")
    speed: int | None = None
    if text:
        try:
            mbps = int(text)
        except ValueError:
            mbps = -1
        if 0 < mbps < _SPEED_UNKNOWN_MBPS:
            speed = mbps * 10**6
    return NetdevInfo(
        name=path.name,
        speed_bps=speed,
        operstate=(read_text(path / "operstate") or None),
        carrier_changes=read_uint(path / "carrier_changes"),
    )


# -- reading a host ---------------------------------------------------------------------------


def _netdev_for_port(dev_dir: Path, port_dir: Path, port_num: int, netdevs: list[str]) -> str | None:
    """The netdev of one RDMA port: the device's only netdev, the one whose ``dev_port`` is
    ``port_num - 1``, or the netdev of the port's first GID (RoCE)."""
    if len(netdevs) == 1:
        return netdevs[0]
    for name in netdevs:
        if read_uint(dev_dir / "device" / "net" / name / "dev_port") == port_num - 1:
            return name
    return read_text(port_dir / "gid_attrs" / "ndevs" / "0") or None


def _read_ib_port(root: Path, dev: str, port_num: int, port_dir: Path, netdev: str | None) -> PortReading:
    r = PortReading(
        label=dev if port_num == 1 else f"{dev}:{port_num}",
        device=dev,
        port_num=port_num,
        netdev=netdev,
        link_layer=read_text(port_dir / "link_layer") or None,
        phys_state=parse_phys_state(read_text(port_dir / "phys_state")),
        logical_state=parse_logical_state(read_text(port_dir / "state")),
    )
    r.rate_bps, r.rate_width = parse_rate(read_text(port_dir / "rate"))
    counters_dir = port_dir / "counters"
    for fname, spec in PMA_COUNTERS.items():
        v = read_uint(counters_dir / fname)
        r.set_counter(spec.column, None if v is None else v * spec.scale, spec.bits)
    for fname in _listdir(counters_dir):
        if fname not in PMA_COUNTERS:
            r.extra[f"counters/{fname}"] = read_uint(counters_dir / fname)
    hw_dir = port_dir / "hw_counters"
    for fname in _listdir(hw_dir):
        if fname in HW_NOT_COUNTERS:
            continue
        v = read_uint(hw_dir / fname)
        if fname in HW_COUNTERS:
            r.set_counter(HW_COUNTERS[fname], v)
        else:
            r.extra[f"hw_counters/{fname}"] = v
    if netdev:
        info = read_netdev(root / NET_CLASS / netdev)
        r.netdev_speed_bps = info.speed_bps
        r.extra["net/speed_mbps"] = None if info.speed_bps is None else info.speed_bps // 10**6
        r.extra["net/carrier_changes"] = info.carrier_changes
        # The netdev's FCS errors: on a RoCE port the receive errors that matter (ethtool's
        # rx_crc_errors_phy, the physical port's own counter, replaces it when present).
        crc = read_uint(root / NET_CLASS / netdev / "statistics" / "rx_crc_errors")
        if crc is not None:
            r.set_counter("crc_errors", crc)
    return r


def _read_plain_netdev(nd_dir: Path) -> PortReading:
    info = read_netdev(nd_dir)
    phys, logical = operstate_codes(info.operstate)
    r = PortReading(
        label=info.name,
        device=None,
        port_num=None,
        netdev=info.name,
        link_layer="Ethernet",
        phys_state=phys,
        logical_state=logical,
        netdev_speed_bps=info.speed_bps,
    )
    for fname, column in NETDEV_STATISTICS.items():
        r.set_counter(column, read_uint(nd_dir / "statistics" / fname))
    r.extra["net/carrier_changes"] = info.carrier_changes
    return r


def read_ports(cfg: SysfsConfig) -> list[PortReading]:
    """Every RDMA port of the host (physical functions only), then plain netdevs if asked.

    Ports come in device order (natural: mlx5_2 before mlx5_10), then port number.
    """
    exclude = re.compile(cfg.exclude) if cfg.exclude else None

    def excluded(name: str | None) -> bool:
        return bool(exclude and name and exclude.fullmatch(name))

    root = Path(cfg.root)
    ib_root = root / IB_CLASS
    out: list[PortReading] = []
    rdma_netdevs: set[str] = set()
    for dev in _listdir(ib_root):
        dev_dir = ib_root / dev
        if _is_vf(dev_dir):
            continue
        netdevs = _listdir(dev_dir / "device" / "net")
        rdma_netdevs.update(netdevs)
        for port in _listdir(dev_dir / "ports"):
            if not port.isdigit():
                continue
            port_dir = dev_dir / "ports" / port
            netdev = _netdev_for_port(dev_dir, port_dir, int(port), netdevs)
            if netdev:
                rdma_netdevs.add(netdev)
            if excluded(dev) or excluded(netdev):
                continue
            out.append(_read_ib_port(root, dev, int(port), port_dir, netdev))
    if cfg.include_plain_netdevs:
        net_root = root / NET_CLASS
        for name in _listdir(net_root):
            nd_dir = net_root / name
            if name in rdma_netdevs or excluded(name) or not os.path.lexists(nd_dir / "device"):
                continue  # RDMA-backed (read above), excluded, or virtual (lo, bridges, bonds, veth)
            if _is_vf(nd_dir):
                continue
            out.append(_read_plain_netdev(nd_dir))
    return out


# -- to a canonical batch ---------------------------------------------------------------------


def readings_to_batch(
    readings: Sequence[PortReading],
    hostname: str,
    time: datetime,
    source: str = "agent",
    skipped: Skips | None = None,
) -> pa.RecordBatch:
    """One ``port_sample`` batch for the host's readings at ``time``.

    A column is declared narrow and saturating (``graywire.counter_bits``) when every value in
    it came from a narrow PMA field of the same width; a column that mixes sources (an Ethernet
    port's 64-bit PHY counter beside an IB port's 8-bit one) is left as 64-bit, which at worst
    makes a saturated counter read as a zero rate. A value its column cannot hold (a counter
    past 64 bits, a width of 300 lanes: a file sysfs would never print) is null and counted
    in ``skipped`` as ``out_of_range``, with what the readings themselves left out.
    """
    if time.tzinfo is None:
        raise ValueError("time must be timezone-aware")
    skips: Skips = Counter()
    for r in readings:
        skips.update(r.skipped)

    def _column(values: Iterable[object], type_: pa.DataType) -> pa.Array:
        arr, nulled = fitted_array_counted(list(values), type_)
        if nulled:
            skips[OUT_OF_RANGE] += nulled
        return arr

    n = len(readings)
    keys = [port_key(hostname, r.label) for r in readings]
    cols: dict[str, pa.Array] = {
        "time": pa.array([time.astimezone(UTC)] * n, type=TS),
        "port": pa.DictionaryArray.from_arrays(
            pa.array(np.arange(n, dtype=np.int32)), pa.array(keys, type=pa.string())
        ),
        "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int8)), pa.array([source])),
        "phys_state": _column((r.phys_state for r in readings), pa.uint8()),
        "logical_state": _column((r.logical_state for r in readings), pa.uint8()),
        "speed_bps": _column((r.speed_bps for r in readings), pa.int64()),
        "width": _column((r.width for r in readings), pa.uint8()),
        "fec_mode": _column((r.fec_mode for r in readings), pa.uint8()),
        "fec_lane_errors": _column((r.fec_lane_errors for r in readings), pa.list_(pa.uint64())),
    }
    present = set().union(*(r.counters for r in readings)) if readings else set()
    bits: dict[str, int] = {}
    for c in PORT_COUNTERS:
        if c not in present:
            continue
        field_type = PORT_SAMPLE.field(c).type
        cols[c] = _column((r.counters.get(c) for r in readings), field_type)
        widths = {r.narrow.get(c, 64) for r in readings if r.counters.get(c) is not None}
        if len(widths) == 1 and (w := next(iter(widths))) < 64:
            bits[c] = w
    schema = with_counter_widths(PORT_SAMPLE, bits, tuple(sorted(bits)))
    if skipped is not None:
        skipped.update(skips)
    return make_batch(schema, n, cols)
